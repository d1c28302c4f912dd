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
``tracking``      ``mlflow.db``, ``mlartifacts/``, ``mlruns/``,  never removed: the runs' results
                  any SQLite file (and its companions)
``leaderboards``  ``leaderboards/``                           never removed: published boards
``other``         anything else in the home                   never removed: not a product of the harness
================  ==========================================  =========================================

``prune`` removes only what the harness made as a product: whole products (a folder with its ``_DONE.json``, a
fastText model with its ``.json``, a method's cached file, with their lock and lease files), never the tracking
store, the runs' artifacts or the published leaderboards, never an SQLite file whatever its name (known by its
header ``SQLite format 3\0``, in the home, in ``cache/`` and anywhere in the caches' entries; its ``-journal``,
``-wal`` and ``-shm`` files and a ``.<name>.runs.lock`` beside it are the store's too), never what it does not
know (kind ``other``: a user's files, the runs' status files).

Every product, in ``products/``, ``worlds/`` and the method caches alike (``cache/methods/<m>/products/<kind>/<key>``
included), has one build lock (``<product>.lock``, :mod:`harness.core.locks`, held while it is built) and one lease
(``<product>.lease``, :func:`harness.core.cache.lease`, held while a process reads it). ``prune`` never removes a
product whose lock a process holds, nor an unfinished build (``.tmp-*``, ``*.work``, ``*.launch``, a file being
written) whose builder holds its lock or that changed within a day; it removes a product holding both its lock and
its lease exclusively, so that no build or reader starts on it meanwhile. It never removes a product or world that
a process is reading (a CPT its corpus, a cell its initialized model, OMP and CLP their helper model, a run its
world) unless ``--force``. Without ``--kind`` it removes the cached products (``init``, ``cpt``, the CPT
``corpus``, the taggers, method caches, mappings, the boards' memo); the world, its downloads and build
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

from harness.core.cache import DONE, LEASE, building, claim, cpt_product_key, lease_file, release_lease
from harness.core.errors import ConfigError
from harness.core.hashing import hash_obj
from harness.core.locks import held, lock_file, try_lock
from harness.core.record import TAG, Kind, tag

PROTECTED = ("tracking", "leaderboards")
NEVER = (*PROTECTED, "other")  # never pruned: the runs' results, and what the harness did not make as a product
# what ``prune`` takes without ``--kind``: everything a run rebuilds by itself
HEAVY = ("world", "downloads", "build-envs")
BUSY_S = 24 * 3600  # an unfinished build younger than this may still be running
MODEL_SUFFIXES = (".npz", ".bin")  # a cached fastText model: compact, or as fastText wrote it
SQLITE_HEADER = b"SQLite format 3\0"  # the first 16 bytes of every SQLite database file
SQLITE_COMPANIONS = ("-journal", "-wal", "-shm")  # a database's rollback journal, write-ahead log, its index
RUNS_LOCK = ".runs.lock"  # .<store>.runs.lock: the tracking store's lock (harness.core.tracking)
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
    guard: Path | None = None  # the path whose lock and lease guard the item, when not ``path`` (a fastText model)
    why: str = ""  # why ``remove`` left it: "in use", "being built", "an SQLite store"
    unfinished: bool = False  # a build not completed (a product without its done marker, a build's work folder)

    @property
    def anchor(self) -> Path:
        return self.guard or self.path


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
    for unit in ("B", "KB", "MB"):
        if abs(n) < 1024:
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
    for d in sorted((home / "worlds").glob("*")):  # (none when there is no such folder)
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
                "SELECT a.run_uuid, a.value, b.key, b.value, r.status FROM tags a "
                "JOIN tags b ON a.run_uuid = b.run_uuid JOIN runs r ON r.run_uuid = a.run_uuid "
                "WHERE a.key = ? AND b.key IN (?, ?, ?)",
                (tag("cell"), tag("world"), tag("profile"), tag("kind"))).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return {}
    runs: dict[str, tuple[str, dict[str, str]]] = {}  # run -> (its cell, its status and tags)
    for run, cell, key, value, status in rows:
        runs.setdefault(str(run), (str(cell), {"status": str(status)}))[1][key[len(TAG):]] = str(value)
    out: dict[str, dict[str, str]] = {}
    for cell, r in runs.values():
        if r.get("kind") != Kind.CELL:  # a task run of the cell, which carries the cell's key too
            continue
        if cell not in out or r["status"] == "FINISHED":
            out[cell] = r
    return out


def product_item(p: Path, kind: str, hashes: dict[str, str] | None = None, now: float | None = None) -> Item:
    """The item of one product folder (or file) under ``products/``."""
    now = time.time() if now is None else now
    info = _marker(p)  # (a file has none)
    unfinished = p.name.startswith(".tmp-") or p.name.endswith((".work", ".launch")) or not info
    created = float(info.get("created") or _mtime(p))
    world = info.get("world") or (info.get("inputs") or {}).get("world") or "-"
    if not isinstance(world, str):
        world = "-"
    world = (hashes or {}).get(world, world)
    return Item(kind, p, tree_size(p), created, world, busy=unfinished and _busy(p, now), extra=_beside(p),
                unfinished=unfinished)


def _busy(p: Path, now: float) -> bool:
    """Whether the unfinished build at ``p`` may be running: its builder holds its lock
    (:func:`harness.core.cache.building`), whatever its age, or something in it changed within :data:`BUSY_S` (a
    builder that takes no lock)."""
    return held(p) or building(p) or now - _newest(p) < BUSY_S


def _newest(path: Path) -> float:
    """The latest mtime of ``path`` and of everything below it."""
    newest = _mtime(path)
    if path.is_dir() and not path.is_symlink():
        for q in path.rglob("*"):
            newest = max(newest, _mtime(q))
    return newest


def _beside(p: Path) -> tuple[Path, ...]:
    """The lock and lease files of a product or world (:mod:`harness.core.locks`, :func:`lease_file`): they go
    with it."""
    return tuple(f for f in (lock_file(p), lease_file(p)) if f.is_file())


def _product_items(kind_dir: Path, kind: str, hashes: dict[str, str]) -> Iterator[Item]:
    for p in sorted(kind_dir.iterdir()):
        if not p.is_dir() and not p.is_file() or p.name.endswith((".lock", LEASE)):
            continue  # a product's lock and lease files go with the product
        yield product_item(p, kind, hashes)


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
        if item.unfinished:  # (a busy build is one)
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
    items = _products(home, hashes)
    methods = home / "cache" / "methods"
    if methods.is_dir():
        for mdir in sorted(p for p in methods.iterdir() if p.is_dir()):
            items.extend(_method_items(mdir, hashes))
    for name, kind in (("cache/mappings", "mappings"), ("cache/boards", "boards"), ("downloads", "downloads"),
                       ("build-envs", "build-envs")):
        d = home / name
        if d.is_dir():
            for p in sorted(d.iterdir()):
                items.append(Item(kind, p, tree_size(p), _mtime(p)))
    if (home / "worlds").is_dir():
        now = time.time()
        for p in sorted((home / "worlds").iterdir()):
            if p.name.endswith((".lock", LEASE)):
                continue  # a world's build lock and its lease go with the world
            items.append(Item("world", p, tree_size(p), _mtime(p), re.sub(r"-v\d+$", "", p.name), extra=_beside(p),
                              busy=p.name.startswith(".tmp-") and _busy(p, now)))
    for name in ("mlartifacts", "mlruns"):
        p = home / name
        if p.exists():
            items.append(Item("tracking", p, tree_size(p), _mtime(p)))
    if (home / "leaderboards").exists():
        for p in sorted((home / "leaderboards").iterdir()):
            items.append(Item("leaderboards", p, tree_size(p), _mtime(p), p.name))
    known = {"products", "cache", "downloads", "build-envs", "worlds", "mlartifacts", "mlruns", "leaderboards"}
    for p in sorted(home.iterdir()) if home.is_dir() else []:
        if p.name not in known:
            items.append(Item("tracking" if store_file(p) else "other", p, tree_size(p), _mtime(p)))
    if (home / "cache").is_dir():
        for p in sorted((home / "cache").iterdir()):
            if p.name not in ("methods", "mappings", "boards"):
                items.append(Item("tracking" if store_file(p) else "other", p, tree_size(p), _mtime(p)))
    return items


def is_sqlite(path: Path) -> bool:
    """Whether ``path`` is an SQLite database file, whatever its name: its first 16 bytes are SQLite's header."""
    try:
        if path.is_symlink() or not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def store_file(path: Path) -> bool:
    """Whether ``path`` belongs to a tracking store (or any SQLite database): the database itself (by its header),
    its ``-journal``, ``-wal`` or ``-shm`` file (the database beside it, or a name of the default store), or a
    store's ``.<name>.runs.lock``. Such a file is the runs' results: nothing removes it."""
    name = path.name
    if name.startswith("mlflow.db") or (name.startswith(".") and name.endswith(RUNS_LOCK)) or is_sqlite(path):
        return True
    return any(name.endswith(c) and is_sqlite(path.with_name(name[: -len(c)])) for c in SQLITE_COMPANIONS)


def holds_store(path: Path) -> Path | None:
    """The first file of a tracking store (:func:`store_file`) at or below ``path``, or None."""
    if store_file(path):
        return path
    if path.is_dir() and not path.is_symlink():
        for q in path.rglob("*"):
            if not q.is_dir() and store_file(q):
                return q
    return None


def _products(home: Path, hashes: dict[str, str]) -> list[Item]:
    """The items under ``products/``: each product with the world and the finished state of its cell."""
    items: list[Item] = []
    products = home / "products"
    if products.is_dir():
        for kind_dir in sorted(p for p in products.iterdir() if p.is_dir()):
            if kind_dir.name == "tasks":
                for sub in sorted(p for p in kind_dir.iterdir() if p.is_dir()):
                    items.extend(_product_items(sub, sub.name, hashes))
            else:
                items.extend(_product_items(kind_dir, kind_dir.name, hashes))
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
    return items


def _method_items(mdir: Path, hashes: dict[str, str] | None = None) -> Iterator[Item]:
    """A method's cache: each fastText model (``.npz`` or ``.bin``, with its ``.json``, lock and lease) is one item;
    each product of its own product cache (``products/<kind>/<key>``: the CLP / OMP helper model, HyperOFA's
    hypernetwork) is one, as under ``products/``; each other file (with its lock and lease), in its folders too, is
    one."""
    kind = f"methods/{mdir.name}"
    now = time.time()
    for entry in sorted(mdir.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and entry.name == "fasttext":
            yield from _fasttext_items(kind, entry, now)
        elif entry.is_dir() and not entry.is_symlink() and entry.name == "products":
            for kind_dir in sorted(d for d in entry.iterdir() if d.is_dir()):
                yield from _product_items(kind_dir, kind, hashes or {})
        else:
            yield from _file_items(kind, entry, now)


def _fasttext_items(kind: str, folder: Path, now: float) -> Iterator[Item]:
    """The fastText models of a method's cache, each with the files that share its stem (``.json``, lock, lease,
    those being written); the lock and lease are those of ``<kind>-<key>.bin``
    (:func:`methods.fasttext_util.cached_model`)."""
    groups: dict[str, list[Path]] = {}
    for f in sorted(folder.iterdir()):
        groups.setdefault(f.name.lstrip(".").split(".")[0], []).append(f)
    for stem, group in groups.items():
        # the model file: its compact form (.npz) or a full .bin cached before
        main = next((f for f in group if f.suffix in MODEL_SUFFIXES and not f.name.startswith(".")), group[0])
        unfinished = main.name.startswith(".") or main.suffix not in MODEL_SUFFIXES
        created = min(_mtime(f) for f in group)
        guard = folder / f"{stem}.bin"
        yield Item(kind, main, sum(tree_size(f) for f in group), created, extra=tuple(f for f in group if f != main),
                   busy=unfinished and (_busy(main, now) or held(guard)), guard=guard)


def _file_items(kind: str, entry: Path, now: float) -> Iterator[Item]:
    """``entry`` of a method's cache as items: a file with its lock and lease (a file being written, ``.<stem>.<id>
    .<suffix>``, is busy while its builder holds the lock), or each file below a folder."""
    subject = entry.with_name(entry.name.rsplit(".", 1)[0]) if entry.name.endswith((".lock", LEASE)) else None
    if subject is not None and subject.exists():
        return  # the lock or lease of a cached file goes with it
    if entry.is_dir() and not entry.is_symlink():
        for sub in sorted(entry.iterdir()):
            yield from _file_items(kind, sub, now)
        return
    # (a lock without its file: a build that has written nothing yet, or one that failed; guarded as that file)
    yield Item(kind, entry, tree_size(entry), _mtime(entry), extra=_beside(entry), guard=subject,
               busy=entry.name.startswith(".") and _busy(entry, now) or subject is not None and held(subject))


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
    """The items ``prune`` would remove (never tracking, leaderboards or what is not the harness's product, never a
    build in progress; with ``finished`` only the init, CPT and tagger products of cells whose MLflow run
    finished)."""
    now = time.time() if now is None else now
    out = []
    for i in items:
        if i.kind in NEVER or i.busy or (finished and not i.finished):
            continue
        if kinds:
            if not kind_matches(i.kind, kinds):
                continue
        elif i.kind in HEAVY:
            continue
        if world and i.world != world:
            continue
        if older_than_s is not None and now - i.created < older_than_s:
            continue
        out.append(i)
    return out


def leased(i: Item, home: Path) -> bool:
    """Whether the item can be leased by its readers (:func:`harness.core.cache.lease`): every product in the
    home (a folder or a file, under ``products/``, ``worlds/`` or a method's cache) but a link."""
    return not i.path.is_symlink() and Path(i.path).resolve().is_relative_to(Path(home).resolve())


def in_use(i: Item, home: Path) -> bool:
    """Whether a process reads the item (holds its lease) or builds it (holds its lock); nothing is created to
    tell."""
    return leased(i, home) and (_lease_held(i.anchor) or held(i.anchor))


def _lease_held(path: Path) -> bool:
    if fcntl is None:
        return False
    try:
        fd = os.open(lease_file(path), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def kept(i: Item, home: Path, force: bool = False) -> str:
    """Why ``prune`` leaves the item now ("" when it would remove it): "an SQLite store" (a file of a tracking
    store, :func:`store_file`, or one below a cache's folder: never removed), "being built" (a process holds its
    lock: never removed), "in use" (a process holds its lease: removed by ``force``)."""
    # below the folders of the caches' entries too; a world, its downloads and build environments and the products
    # under products/ are the harness's own trees (a package fetched for a world build ships a database)
    look = holds_store if i.kind in ("mappings", "boards") or i.kind.startswith("methods/") else store_file
    if any(look(p) for p in (i.path, *i.extra)):
        return "an SQLite store"
    if held(i.anchor):
        return "being built"
    if not force and leased(i, home) and _lease_held(i.anchor):
        return "in use"
    return ""


def remove(items: Iterable[Item], home: Path, force: bool = False, skipped: list[Item] | None = None) -> int:
    """Remove the items (inside ``home`` only); returns the bytes freed. An item that holds an SQLite file, one that
    a process builds (holds its lock) and, unless ``force``, one that a process reads (holds its lease) are left in
    place and added to ``skipped``, each with its reason (``Item.why``); this process's own leases on the items are
    dropped (it is done with them). Each item is removed holding its lock and its lease exclusively (no build, no
    reader starts on it meanwhile), and its lock and lease files go with it."""
    home = Path(home).resolve()
    freed = 0
    for i in items:
        for p in (i.path, *i.extra):
            if not p.resolve().is_relative_to(home) or p.resolve() == home:
                raise ConfigError(f"refusing to remove {p}: it is not inside the harness home {home}")
        release_lease(i.anchor)  # (this process's own: it is done with the item)
        why, fds = kept(i, home, force), []
        if not why:
            why, fds = _guard(i, home, force)
        if why:
            i.why = why
            if skipped is not None:
                skipped.append(i)
            continue
        try:
            for p in dict.fromkeys((i.path, *i.extra)):
                _delete(p)
            if not i.path.exists():
                _delete(lease_file(i.anchor))
                _delete(lock_file(i.anchor))  # (held: a builder waiting on it takes the next one)
        finally:
            for fd in fds:
                os.close(fd)
        freed += i.bytes
    return freed


def _guard(i: Item, home: Path, force: bool) -> tuple[str, list[int]]:
    """Take the item's lock, then its lease, both exclusively without waiting: ("", the descriptors that hold
    them), or why not ("being built", "in use"; with ``force`` a lease held elsewhere is passed over)."""
    if not leased(i, home) or not i.anchor.parent.is_dir():
        return "", []
    lock = try_lock(lock_file(i.anchor))
    if lock is None:
        return "being built", []
    lease = claim(i.anchor)  # (drops this process's own lease first)
    if lease is None and not force:
        os.close(lock)
        return "in use", []
    return "", [fd for fd in (lease, lock) if fd is not None]


def _delete(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        # out of the way in one rename first, so a reader never finds it half removed (the name keeps the item's
        # lock, held now, as its builder's: no clean-up elsewhere takes it)
        gone = p.with_name(f".tmp-removed-{p.name}-{uuid.uuid4().hex[:8]}")
        os.replace(p, gone)
        shutil.rmtree(gone, onerror=_gone_already)
    elif p.exists() or p.is_symlink():
        p.unlink()


def _gone_already(func: Any, path: str, exc_info: Any) -> None:
    """``rmtree``'s error handler: an entry that vanished meanwhile is fine; any other error is raised."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def known_kinds(items: Iterable[Item]) -> list[str]:
    return sorted({i.kind for i in items} | {"init", "cpt", "corpus", "tagger", "tagger-test", "methods", "mappings",
                                             "boards", "world", "downloads", "build-envs"})
