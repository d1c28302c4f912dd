"""The cache library: what the harness home holds, and removing what is no longer wanted (the ``harness cache du``
and ``harness cache prune`` subcommand, :mod:`harness.commands.cache`, is a thin layer over it; the runner removes a
finished cell's products through it).

The home is divided into *kinds*, each with what rebuilding it costs:

================  ==========================================  =========================================
kind              where                                       rebuilt by
================  ==========================================  =========================================
``init``          ``products/init/<key>``                     the next run of the cell (seconds to minutes)
``cpt``           ``products/cpt/<key>``                      the next run of the cell (CPT again)
``corpus``        ``products/corpus/<key>``                   the next CPT on its world (tokenizing again)
``tagger``        ``products/tasks/tagger/<key>``             fine-tuning again (only records, mostly)
``tagger-test``   ``products/tasks/tagger-test/<key>``        scoring again
``<other>``       ``products/<other>/<key>``                  whatever built it
``methods/<m>``   ``cache/methods/<m>/`` (fastText models ...)  training again (minutes each)
``mappings``      ``cache/mappings/``                         the overlap rules (seconds)
``boards``        ``cache/boards/``                           the boards' intervals and tests, again (seconds)
``world``         ``worlds/<name>-v<N>/``                     ``harness world build`` (minutes)
``downloads``     ``downloads/``                              fetching the registry packages again
``build-envs``    ``build-envs/``                             the world build's environments
``tracking``      ``mlflow.db``, ``mlartifacts/``, ``mlruns/`` never removed: the runs' results
``leaderboards``  ``leaderboards/``                           never removed: published boards
================  ==========================================  =========================================

``prune`` removes whole products (a folder with its ``_DONE.json``, a fastText model with its ``.json``), never
the tracking store, the runs' artifacts or the published leaderboards, never a folder that a build is writing
right now (``.tmp-*``, ``*.work``, ``*.launch`` younger than a day), and never a product or world that a process is
reading (it holds a lease on it, :func:`harness.core.cache.lease`: a CPT on its corpus, a cell on its initialized
model, a run on its world); ``--force`` removes those too. Without ``--kind`` it removes the cached
products (``init``, ``cpt``, the CPT ``corpus``, the taggers, method caches, mappings, the boards' memo); the world, its downloads and build
environments go only when named. A finished MLflow run does not need any of them: a later evaluation rebuilds
what it needs, with the same numbers. The runner itself removes a cell's init and CPT products once the cell's run
finished (:func:`cell_products`, :func:`remove`; ``harness run --keep-products`` keeps them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from harness.core.cache import DONE, LEASE, claim, cpt_product_key, lease_file
from harness.core.errors import ConfigError
from harness.core.hashing import hash_obj
from harness.core.locks import lock_file
from harness.core.record import TAG, Kind, tag

PROTECTED = ("tracking", "leaderboards")
# what ``prune`` takes without ``--kind``: everything a run rebuilds by itself
HEAVY = ("world", "downloads", "build-envs")
BUSY_S = 24 * 3600  # an unfinished build younger than this may still be running
MODEL_SUFFIXES = (".npz", ".bin")  # a cached fastText model: compact, or as fastText wrote it
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass
class Item:
    kind: str
    path: Path  # a folder, or the main file of a group (the others are ``extra``)
    bytes: int
    created: float
    world: str = "-"
    extra: tuple[Path, ...] = ()
    busy: bool = False  # an unfinished build, perhaps still running
    finished: bool = False  # a product of a cell whose MLflow run finished (its results are logged)


def tree_size(path: Path) -> int:
    """Bytes of a file or of every file below a folder (links not followed, hard links counted once)."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    seen: set[tuple[int, int]] = set()
    total = 0
    for p in path.rglob("*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        if p.is_symlink() or not p.is_file() or (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_size
    return total


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``2w``, ``90s`` (or plain seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(text))
    if not m:
        raise ConfigError(f"--older-than: {text!r} is not an age such as 7d, 12h, 30m or 2w")
    return float(m.group(1)) * UNITS[m.group(2) or "s"]


def _marker(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / DONE).read_text())
    except (OSError, ValueError):
        return {}


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def world_names(home: Path) -> dict[str, str]:
    """World hash (the hash of its manifest, as products record it) -> world name, for the built worlds."""
    out: dict[str, str] = {}
    for d in sorted((home / "worlds").glob("*")) if (home / "worlds").is_dir() else []:
        try:
            manifest = json.loads((d / "manifest.json").read_text())
        except (OSError, ValueError):
            continue
        out[hash_obj(manifest)] = str(manifest.get("name") or re.sub(r"-v\d+$", "", d.name))
    return out


def cell_runs(home: Path) -> dict[str, dict[str, str]]:
    """Cell key -> {"world", "profile", "status"} of the cell runs in the home's default tracking store (read
    read-only); a cell with several runs is FINISHED when one of them is."""
    import sqlite3

    db = home / "mlflow.db"
    if not db.is_file():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = con.execute(
                "SELECT a.value, b.key, b.value, r.status FROM tags a JOIN tags b ON a.run_uuid = b.run_uuid "
                "JOIN runs r ON r.run_uuid = a.run_uuid WHERE a.key = ? AND b.key IN (?, ?, ?)",
                (tag("cell"), tag("world"), tag("profile"), tag("kind"))).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return {}
    runs: dict[tuple[str, str], dict[str, str]] = {}
    for cell, key, value, status in rows:
        r = runs.setdefault((str(cell), str(status)), {"status": str(status)})
        r[key[len(TAG):]] = str(value)
    out: dict[str, dict[str, str]] = {}
    for (cell, _), r in runs.items():
        if r.get("kind") != Kind.CELL:
            continue
        if cell not in out or r["status"] == "FINISHED":
            out[cell] = r
    return out


def product_item(p: Path, kind: str, hashes: dict[str, str] | None = None, now: float | None = None) -> Item:
    """The item of one product folder (or file) under ``products/``."""
    now = time.time() if now is None else now
    info = _marker(p) if p.is_dir() else {}
    unfinished = p.name.startswith(".tmp-") or p.name.endswith((".work", ".launch")) or not info
    created = float(info.get("created") or _mtime(p))
    world = info.get("world") or (info.get("inputs") or {}).get("world") or "-"
    if not isinstance(world, str):
        world = "-"
    world = (hashes or {}).get(world, world)
    return Item(kind, p, tree_size(p), created, world, busy=unfinished and now - _mtime(p) < BUSY_S,
                extra=_beside(p))


def _beside(p: Path) -> tuple[Path, ...]:
    """The lock and lease files of a product or world (:mod:`harness.core.locks`, :func:`lease_file`): they go
    with it."""
    return tuple(f for f in (lock_file(p), lease_file(p)) if f.is_file())


def _product_items(home: Path, kind_dir: Path, kind: str, hashes: dict[str, str]) -> Iterator[Item]:
    now = time.time()
    for p in sorted(kind_dir.iterdir()):
        if kind == "tasks" or not p.is_dir() and not p.is_file() or p.name.endswith((".lock", LEASE)):
            continue  # a product's lock and lease files go with the product
        yield product_item(p, kind, hashes, now)


def cell_products(home: Path, init_key: str, cpt_key: str | None) -> list[Item]:
    """The init and CPT products of one cell that are in the home and complete (the CPT product with what a
    distributed CPT left beside it): what the runner removes with :func:`remove`, as ``prune --finished`` does,
    once the cell's run finished."""
    products = Path(home) / "products"
    out = []
    for kind, key in (("init", init_key), ("cpt", cpt_key)):
        if key is None or not (products / kind / key).is_dir():
            continue
        item = product_item(products / kind / key, kind)
        if item.busy or not _marker(item.path):
            continue
        launch = item.path.with_name(item.path.name + ".launch")
        if launch.is_dir():
            item.extra = (*item.extra, launch)
            item.bytes += tree_size(launch)
        out.append(item)
    return out


def scan(home: Path) -> list[Item]:
    """Every item in the home, by kind."""
    home = Path(home)
    hashes = world_names(home)
    items: list[Item] = []
    products = home / "products"
    if products.is_dir():
        for kind_dir in sorted(p for p in products.iterdir() if p.is_dir()):
            if kind_dir.name == "tasks":
                for sub in sorted(p for p in kind_dir.iterdir() if p.is_dir()):
                    items.extend(_product_items(home, sub, sub.name, hashes))
            else:
                items.extend(_product_items(home, kind_dir, kind_dir.name, hashes))
        # a tagger's model key is "<cell key>:<step>"; the cell's MLflow runs name its world and status
        cells = cell_runs(home)
        for i in items:
            if i.kind == "tagger":
                cell = cells.get(str((_marker(i.path).get("inputs") or {}).get("model") or "").split(":")[0], {})
                i.finished = cell.get("status") == "FINISHED"
                if i.world == "-":
                    i.world = cell.get("world", "-")
        # a CPT product's folder is the hash of its init product's key, its settings and seed; the cell's key is
        # the hash of the init product's inputs, the profile and the CPT settings
        inits = {i.path.name: i for i in items if i.kind == "init"}
        profiles = sorted({c.get("profile", "") for c in cells.values()} - {""})
        for i in items:
            if i.kind != "cpt":
                continue
            info = _marker(i.path)
            settings = {k: v for k, v in (info.get("settings") or {}).items() if k != "devices"}
            for key, init in inits.items():
                if cpt_product_key(key, settings, info.get("seed")) != i.path.name:
                    continue
                if i.world == "-":
                    i.world = init.world
                inputs = _marker(init.path).get("inputs") or {}
                for profile in profiles:
                    cell = cells.get(hash_obj({**inputs, "profile": profile, "cpt": settings}), {})
                    if cell.get("status") == "FINISHED":
                        i.finished = init.finished = True
                break
        # tagger-test scores belong to the world of their tagger
        by_key = {i.path.name: i for i in items if i.kind == "tagger"}
        for i in items:
            if i.kind == "tagger-test":
                tagger = by_key.get(str((_marker(i.path).get("inputs") or {}).get("tagger")))
                if tagger is not None:
                    i.finished = tagger.finished
                    if i.world == "-":
                        i.world = tagger.world
    methods = home / "cache" / "methods"
    if methods.is_dir():
        for mdir in sorted(p for p in methods.iterdir() if p.is_dir()):
            items.extend(_method_items(mdir))
    for name, kind in (("cache/mappings", "mappings"), ("cache/boards", "boards"), ("downloads", "downloads"),
                       ("build-envs", "build-envs")):
        d = home / name
        if d.is_dir():
            for p in sorted(d.iterdir()):
                items.append(Item(kind, p, tree_size(p), _mtime(p)))
    if (home / "worlds").is_dir():
        for p in sorted((home / "worlds").iterdir()):
            if p.name.endswith((".lock", LEASE)):
                continue  # a world's build lock and its lease go with the world
            items.append(Item("world", p, tree_size(p), _mtime(p), re.sub(r"-v\d+$", "", p.name),
                              extra=_beside(p)))
    for name in ("mlflow.db", "mlflow.db-journal", "mlflow.db-wal", "mlflow.db-shm", ".mlflow.db.runs.lock",
                 "mlartifacts", "mlruns"):  # (a journal holds the pages a killed writer's rollback restores)
        p = home / name
        if p.exists():
            items.append(Item("tracking", p, tree_size(p), _mtime(p)))
    if (home / "leaderboards").exists():
        for p in sorted((home / "leaderboards").iterdir()):
            items.append(Item("leaderboards", p, tree_size(p), _mtime(p), p.name))
    known = {"products", "cache", "downloads", "build-envs", "worlds", "mlflow.db", "mlflow.db-wal", "mlflow.db-shm",
             "mlflow.db-journal", ".mlflow.db.runs.lock", "mlartifacts", "mlruns", "leaderboards"}
    for p in sorted(home.iterdir()) if home.is_dir() else []:
        if p.name not in known:
            items.append(Item("other", p, tree_size(p), _mtime(p)))
    if (home / "cache").is_dir():
        for p in sorted((home / "cache").iterdir()):
            if p.name not in ("methods", "mappings", "boards"):
                items.append(Item("other", p, tree_size(p), _mtime(p)))
    return items


def _method_items(mdir: Path) -> Iterator[Item]:
    """A method's cache: each fastText model (``.npz`` or ``.bin``, with its ``.json``) is one item; any other
    entry is one item."""
    kind = f"methods/{mdir.name}"
    now = time.time()
    entries = sorted(mdir.iterdir())
    names = {e.name for e in entries}
    for entry in entries:
        if entry.name.endswith(".lock") and entry.name[: -len(".lock")] in names:
            continue  # the lock of a cached file (harness.core.locks) goes with it
        if entry.is_dir() and entry.name == "fasttext":
            files = sorted(entry.iterdir())
            groups: dict[str, list[Path]] = {}
            for f in files:
                stem = f.name.lstrip(".").split(".")[0]
                groups.setdefault(stem, []).append(f)
            for group in groups.values():
                # the model file: its compact form (.npz) or a full .bin cached before
                main = next((f for f in group if f.suffix in MODEL_SUFFIXES and not f.name.startswith(".")),
                            group[0])
                busy = main.name.startswith(".") or main.suffix not in MODEL_SUFFIXES
                created = min(_mtime(f) for f in group)
                yield Item(kind, main, sum(tree_size(f) for f in group), created,
                           extra=tuple(f for f in group if f != main), busy=busy and now - created < BUSY_S)
        else:
            lock = lock_file(entry)
            yield Item(kind, entry, tree_size(entry), _mtime(entry), extra=(lock,) if lock.name in names else ())


def summarize(items: Iterable[Item], by_world: bool = True) -> list[dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for i in items:
        key = (i.kind, i.world if by_world else "")
        r = rows.setdefault(key, {"kind": i.kind, "world": key[1], "items": 0, "bytes": 0})
        r["items"] += 1
        r["bytes"] += i.bytes
    return sorted(rows.values(), key=lambda r: (-r["bytes"], r["kind"], r["world"]))


def kind_matches(kind: str, wanted: list[str]) -> bool:
    return any(kind == w or (w == "methods" and kind.startswith("methods/")) or
               (w == "tagger" and kind == "tagger-test") for w in wanted)


def select(items: list[Item], kinds: list[str] | None, world: str | None, older_than_s: float | None,
           now: float | None = None, finished: bool = False) -> list[Item]:
    """The items ``prune`` would remove (never tracking or leaderboards, never a build in progress; with
    ``finished`` only the init, CPT and tagger products of cells whose MLflow run finished)."""
    now = time.time() if now is None else now
    out = []
    for i in items:
        if i.kind in PROTECTED or i.busy or (finished and not i.finished):
            continue
        if kinds:
            if not kind_matches(i.kind, kinds):
                continue
        elif i.kind in HEAVY or i.kind == "other":
            continue
        if world and i.world != world:
            continue
        if older_than_s is not None and now - i.created < older_than_s:
            continue
        out.append(i)
    return out


def leased(i: Item, home: Path) -> bool:
    """Whether the item is a product or a world, which its readers lease (:func:`harness.core.cache.lease`)."""
    home = Path(home).resolve()
    path = i.path.resolve()
    return i.path.is_dir() and not i.path.is_symlink() and (
        path.is_relative_to(home / "products") or path.parent == home / "worlds")


def in_use(i: Item, home: Path) -> bool:
    """Whether a process holds a lease on the item (it is reading it); nothing is created to tell."""
    if not leased(i, home) or fcntl is None:
        return False
    try:
        fd = os.open(lease_file(i.path), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def remove(items: Iterable[Item], home: Path, force: bool = False, skipped: list[Item] | None = None) -> int:
    """Remove the items (inside ``home`` only); returns the bytes freed. A product or world that another process
    leases (reads) is left in place and added to ``skipped``, unless ``force``; this process's own leases on the
    items are dropped (it is done with them)."""
    home = Path(home).resolve()
    freed = 0
    for i in items:
        for p in (i.path, *i.extra):
            if not p.resolve().is_relative_to(home) or p.resolve() == home:
                raise ConfigError(f"refusing to remove {p}: it is not inside the harness home {home}")
        held = None
        if leased(i, home):
            # its lease's exclusive lock, held while it is removed: a reader that comes meanwhile waits, then
            # finds it gone
            held = claim(i.path)
            if held is None and not force:
                if skipped is not None:
                    skipped.append(i)
                continue
        try:
            extra = (*i.extra, lease_file(i.path)) if held is not None else i.extra
            for p in dict.fromkeys((i.path, *extra)):
                if p.is_dir() and not p.is_symlink():
                    # out of the way in one rename first, so a reader never finds it half removed
                    gone = p.with_name(f".tmp-removed-{p.name}-{uuid.uuid4().hex[:8]}")
                    os.replace(p, gone)
                    shutil.rmtree(gone)
                elif p.exists() or p.is_symlink():
                    p.unlink()
        finally:
            if held is not None:
                os.close(held)
        freed += i.bytes
    return freed


def known_kinds(items: Iterable[Item]) -> list[str]:
    return sorted({i.kind for i in items} | {"init", "cpt", "corpus", "tagger", "tagger-test", "methods", "mappings", "boards",
                                             "world", "downloads", "build-envs"})


# -- CLI --------------------------------------------------------------------------------------------------------
