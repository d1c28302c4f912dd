"""Content-addressed product cache with atomic completion.

A product (initialized model, CPT checkpoint, fine-tuned tagger, trained hypernetwork ...) lives in
``<home>/products/<kind>/<key>/``. It is built in a temporary sibling folder and renamed into place only when
complete, with a ``_DONE.json`` marker holding its inputs, so a run killed mid-build leaves no half product
behind, and a repeated run finds the finished one and recomputes nothing.

The marker also records the size and sha256 of every file of the product. A product found damaged (a file
truncated, changed or missing, an unreadable marker) or without its marker is reported in one warning line, removed
and built again: a damaged product is never used. A marker written before these checks (no file list) is trusted.

A product is hashed once, then trusted by its files' stats, as git's index trusts a file: the sha256 of every file
is checked against the marker when the product is built (or, for a product from before this record, by the first
process that reads it), and each file's (size, mtime_ns, ctime_ns, inode) is then recorded in ``_VERIFIED.json``
inside the product. A later process compares the stats only and hashes again just the files whose stats moved (a
copy, a write, a ``touch``) or that were changed in the same clock tick as the record was written (git's "racily
clean" files); ``harness cache verify`` hashes everything again on demand.

A process that reads a finished product holds a *lease* on it for the rest of its life: a shared ``flock`` on
``<key>.lease`` beside the product (:func:`lease`), which the operating system drops when the process ends, however it
ends. ``harness cache prune`` (:mod:`harness.cache_admin`) takes that file's exclusive lock before it removes a
product and leaves the products it cannot lock (in use) in place; only ``prune --force`` goes past a lease.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.hashing import hash_obj, sha256_file, stable_json
from harness.core.locks import exclusive, held, try_lock
from harness.core.paths import harness_home

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
DONE = "_DONE.json"
VERIFIED = "_VERIFIED.json"  # the files' stats at their last full sha256 check (trusted by stat from then on)
LEASE = ".lease"  # <product>.lease: readers hold a shared flock on it, prune an exclusive one


@dataclass(frozen=True)
class Product:
    kind: str
    key: str
    path: Path
    cached: bool  # True when it was found finished rather than built now

    @property
    def info(self) -> dict[str, Any]:
        return json.loads((self.path / DONE).read_text())


def cpt_product_key(init_key: str, settings: dict[str, Any], seed: Any) -> str:
    """The key (folder name) of a CPT product: the hash of its init product's key, its CPT settings and its seed."""
    return hash_obj({"init": init_key, "cpt": settings, "seed": seed})


class ProductCache:
    def __init__(self, root: Path | None = None):
        self.root = (root or harness_home()) / "products"

    def path_for(self, kind: str, inputs: Any) -> tuple[str, Path]:
        key = hash_obj(inputs)
        return key, self.root / kind / key

    def lookup(self, kind: str, inputs: Any) -> Product | None:
        """The finished product for ``inputs``, or None (also when the one found is damaged: it is removed)."""
        key, path = self.path_for(kind, inputs)
        if (path / DONE).is_file():
            lease(path)  # first, so that no prune removes it between the check and the use
            if not (path / DONE).is_file():  # removed (pruned) before the lease was taken
                release_lease(path)
                return None
            problem = verify_product(path)
            if problem is None:
                return Product(kind, key, path, cached=True)
            log.warning("%s product %s at %s is damaged (%s); removing it and computing it again",
                        kind, key, path, problem)
            release_lease(path)
            _remove(path)
        elif path.is_dir():
            log.warning("%s product %s at %s has no completion marker (%s); computing it again",
                        kind, key, path, DONE)
            _remove(path)
        return None

    def get_or_build(self, kind: str, inputs: Any, build: Callable[[Path], dict | None]) -> Product:
        """Return the finished product for ``inputs``, building it with ``build(tmp_dir)`` if needed.

        ``build`` writes into the folder it is given and may return a dict of extra info stored in the marker.
        """
        found = self.lookup(kind, inputs)
        if found is not None:
            log.info("%s %s: cached at %s", kind, found.key, found.path)
            return found
        key, path = self.path_for(kind, inputs)
        path.parent.mkdir(parents=True, exist_ok=True)
        # one process builds a product at a time; another that needs it waits, then finds it finished
        with exclusive(path, waiting=f"{kind} {key}: another process is building it, waiting for it"):
            found = self.lookup(kind, inputs)
            if found is not None:
                log.info("%s %s: built by another process, at %s", kind, found.key, found.path)
                return found
            lease(path)  # before it is in place: no prune can take it between its rename and its first use
            try:
                return self._build(kind, inputs, key, path, build)
            except BaseException:
                held = claim(path)  # (drops this process's lease; nobody else leases a product not yet built)
                if held is not None:
                    lease_file(path).unlink(missing_ok=True)
                    os.close(held)
                raise

    def _build(self, kind: str, inputs: Any, key: str, path: Path, build: Callable[[Path], dict | None]) -> Product:
        tmp = path.parent / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        t0 = time.time()
        try:
            extra = build(tmp) or {}
            marker = {"kind": kind, "key": key, "inputs": json.loads(stable_json(inputs)),
                      "seconds": round(time.time() - t0, 3), "created": time.time(), **extra,
                      "files": file_digests(tmp)}
            (tmp / DONE).write_text(json.dumps(marker, indent=1, ensure_ascii=False))
            if path.exists():  # a stale, unfinished folder (no marker) from an older layout
                shutil.rmtree(path)
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Product(kind, key, path, cached=False)

    def clean_stale(self) -> int:
        """Remove the temporary folders (``.tmp-*``) of builds that no process runs any more: those whose builder's
        lock is free (the build was killed), whatever their age. One whose builder holds its lock stays, however long
        the build takes. The home's cache cleans the method caches' products too
        (``cache/methods/<m>/products/``)."""
        n = 0
        for folder in self._build_folders():
            for p in sorted(folder.glob(".tmp-*")):
                if building(p):
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                n += not p.exists() and not p.is_symlink()
        return n

    def _build_folders(self) -> list[Path]:
        """The folders products are built in: one per kind (``tasks/<kind>`` for the taggers), those of the method
        caches beside this cache's root included."""
        roots = [self.root, *sorted((self.root.parent / "cache" / "methods").glob("*/products"))]
        out = []
        for root in roots:
            for kind_dir in sorted(root.iterdir()) if root.is_dir() else []:
                if kind_dir.is_dir() and not kind_dir.name.startswith("."):
                    out.append(kind_dir)
                    if kind_dir.name == "tasks":
                        out.extend(sorted(d for d in kind_dir.iterdir() if d.is_dir() and not d.name.startswith(".")))
        return out


def builders_of(path: Path) -> list[Path]:
    """The products whose build lock (:mod:`harness.core.locks`) guards the temporary entry ``path``, by its name:
    ``.tmp-<product>-<id>`` (a product or world being built, ``.tmp-removed-`` / ``.tmp-damaged-<product>-<id>``
    one being removed), ``.corpus-<model>-<id>.txt`` (a fastText model's training text, guarded by ``<model>.bin``),
    ``.<file stem>.<id>.<suffix>`` (a cached file being written), ``<product>.work`` and ``<product>.launch`` (a
    CPT). A name can be read several ways; every reading is listed (a product is only ever named by one)."""
    path = Path(path)
    name = path.name
    for suffix in (".work", ".launch"):
        if name.endswith(suffix) and not name.startswith("."):
            return [path.with_name(name[: -len(suffix)])]
    suffixes = [""]
    if name.startswith(".tmp-"):
        body = name[len(".tmp-"):]
    elif name.startswith(".corpus-"):
        body, suffixes = name[len(".corpus-"):].removesuffix(".txt"), [".bin"]
    elif name.startswith(".") and name.count(".") >= 3:
        parts = name[1:].split(".")
        return [path.with_name(parts[0] + s) for s in dict.fromkeys((f".{parts[-1]}", ".bin"))]
    else:
        return []
    bodies = [body] + [body[len(p):] for p in ("removed-", "damaged-") if body.startswith(p)]
    out: list[Path] = []
    for b in bodies:
        parts = b.split("-")
        out += [path.with_name("-".join(parts[:k]) + s) for k in range(1, len(parts) + 1) for s in suffixes]
    out += [b for p in out if p.name.endswith((".work", ".launch")) for b in builders_of(p)]  # (a CPT's, removed)
    return list(dict.fromkeys(out))


def building(path: Path) -> bool:
    """Whether a process holds the build lock of the temporary entry ``path`` (:func:`builders_of`): its build is
    running, whatever its age."""
    return any(held(b) for b in builders_of(path))


# -- verified once, then trusted by stat --------------------------------------------------------------------
_CHECKED: dict[str, int] = {}  # product folders checked by this process (their marker's mtime_ns): checked once


def file_stat(st: os.stat_result) -> list[int]:
    """What a file is trusted by once hashed: (size, mtime_ns, ctime_ns, inode), as git's index keeps them."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def file_digests(folder: Path) -> dict[str, dict[str, Any]]:
    """{relative path: {size, sha256}} of every file below ``folder`` but the marker and the stat record; the
    stats of the files hashed are recorded in ``folder``'s ``_VERIFIED.json`` (the product's first verification)."""
    out, stats = {}, {}
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.name not in (DONE, VERIFIED):
            rel = f.relative_to(folder).as_posix()
            before = f.stat()
            out[rel] = {"size": before.st_size, "sha256": sha256_file(f)}
            if file_stat(f.stat()) == file_stat(before):  # not written while it was hashed
                stats[rel] = file_stat(before)
    _write_verified(folder, stats)
    return out


def _read_verified(path: Path) -> tuple[dict[str, list[int]], int]:
    """The stats recorded at the product's last verification and the record's own mtime_ns ({}, 0 if none)."""
    try:
        rec = path / VERIFIED
        st = rec.stat()
        files = json.loads(rec.read_text()).get("files")
        return (files if isinstance(files, dict) else {}), st.st_mtime_ns
    except (OSError, ValueError, AttributeError):
        return {}, 0


def _write_verified(path: Path, stats: dict[str, list[int]]) -> None:
    """Record ``stats`` (atomically); a product that cannot be written to (a read-only home) is hashed again by
    each process instead."""
    tmp = path / f".{VERIFIED}.{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_text(json.dumps({"files": stats, "verified": time.time()}))
        os.replace(tmp, path / VERIFIED)
    except OSError:
        tmp.unlink(missing_ok=True)


def verify_product(path: Path, full: bool = False) -> str | None:
    """None when the product at ``path`` matches its marker, else what is wrong (one phrase). A file whose stats
    are those recorded at its last sha256 check (and not racily so) is not hashed again, unless ``full``
    (``harness cache verify``)."""
    marker_path = path / DONE
    try:
        stamp = marker_path.stat().st_mtime_ns
        if not full and _CHECKED.get(str(path)) == stamp:
            return None
        marker = json.loads(marker_path.read_text())
    except (OSError, ValueError) as exc:
        return f"its marker {DONE} is unreadable: {type(exc).__name__}"
    files = marker.get("files") if isinstance(marker, dict) else None
    if files is None:
        return None if isinstance(marker, dict) else f"its marker {DONE} is not an object"
    if not isinstance(files, dict):
        return f"its marker {DONE} lists no files"
    known, recorded_ns = ({}, 0) if full else _read_verified(path)
    stats: dict[str, list[int]] = {}
    hash_again = []
    for rel, want in files.items():
        try:
            st = (path / rel).stat()
        except OSError:
            st = None
        if st is None or not (path / rel).is_file():
            return f"{rel} is missing"
        if st.st_size != want.get("size"):
            return f"{rel} has {st.st_size} bytes, {want.get('size')} expected"
        stats[rel] = file_stat(st)
        # trusted: the same stats as at its last check, and changed before that record was written (a change in
        # the record's own clock tick would leave the same times: git's racily clean entries)
        if known.get(rel) != stats[rel] or st.st_mtime_ns >= recorded_ns or st.st_ctime_ns >= recorded_ns:
            hash_again.append(rel)
    for rel in hash_again:
        if sha256_file(path / rel) != files[rel].get("sha256"):
            return f"{rel} does not match its sha256"
    if hash_again:
        _write_verified(path, {rel: st for rel, st in stats.items()
                               if rel not in hash_again or _unchanged(path / rel, st)})
    _CHECKED[str(path)] = stamp
    return None


def _unchanged(f: Path, st: list[int]) -> bool:
    try:
        return file_stat(f.stat()) == st
    except OSError:
        return False


# -- leases: a product in use is never pruned -------------------------------------------------------------------
_LEASES: dict[str, int] = {}  # product path -> the descriptor holding its shared lease (for this process's life)


def lease_file(path: Path) -> Path:
    """The lease file of the product (or world) at ``path``: ``<path>.lease`` beside it."""
    path = Path(path)
    return path.with_name(path.name + LEASE)


def lease(path: Path) -> None:
    """Hold a shared lease on the product (or world) at ``path`` until this process ends or
    :func:`release_lease`: ``harness cache prune`` leaves it in place meanwhile. Waits only while a prune is removing
    it (the caller then finds it gone). Where the lease file cannot be made (a read-only home: nothing can prune it
    either) this does nothing."""
    path = Path(path)
    key = str(path)
    if key in _LEASES or fcntl is None:
        return
    lf = lease_file(path)
    while True:
        try:
            fd = os.open(lf, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:  # a prune that removed the product unlinked this file meanwhile: lease the new one
            same = os.fstat(fd).st_ino == os.stat(lf).st_ino
        except OSError:
            same = False
        if same:
            _LEASES[key] = fd
            return
        os.close(fd)


def release_lease(path: Path) -> None:
    """Drop this process's lease on ``path`` (if it holds one)."""
    fd = _LEASES.pop(str(Path(path)), None)
    if fd is not None:
        os.close(fd)


def claim(path: Path) -> int | None:
    """The exclusive lock of ``path``'s lease (an open descriptor: close it once the product is removed), or None
    when a process holds a lease on it (it is in use). This process's own lease is dropped first."""
    release_lease(path)
    try:
        return try_lock(lease_file(path))
    except FileNotFoundError:  # its folder is gone
        return None


def discard_damaged(path: Path, kind: str) -> bool:
    """True (after one warning line, with the product moved away) when the finished product at ``path`` does not
    match the sizes and sha256s its marker records; False when it does (or records none): this process then holds a
    lease on it (:func:`lease`)."""
    lease(path)
    problem = verify_product(path)
    if problem is None:
        return False
    release_lease(path)
    log.warning("%s product at %s is damaged (%s); removing it and computing it again", kind, path, problem)
    _remove(path)
    return True


def discard_build_inputs(home: Path, folders: tuple[str, ...] | list[str], busy_s: float = 24 * 3600) -> int:
    """Remove the folders (relative to ``home``) a world build downloaded or installed and no later step reads;
    the bytes freed. Nothing is removed while another world build is under way (a ``.tmp-*`` folder under
    ``worlds/`` whose builder holds its lock, or younger than ``busy_s``): it may be reading them."""
    worlds = Path(home) / "worlds"
    now = time.time()
    if worlds.is_dir() and any(building(p) or now - p.stat().st_mtime < busy_s for p in worlds.glob(".tmp-*")):
        log.info("another world build is under way; its build inputs (%s) are kept", ", ".join(folders))
        return 0
    freed = 0
    for rel in folders:
        path = Path(home) / rel
        if not path.is_dir() or path.is_symlink():
            continue
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            freed += size
            log.info("removed %s (%.0f MB): the world build's inputs, fetched again by a later build", path,
                     size / 2**20)
    return freed


def _remove(path: Path) -> None:
    """Move a damaged product out of the way (one rename, so no reader sees it half-deleted), then delete it."""
    trash = path.parent / f".tmp-damaged-{path.name}-{uuid.uuid4().hex[:8]}"
    try:
        os.replace(path, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def cached_arrays(path: Path, compute: Callable[[], dict[str, Any]], waiting: str | None = None) -> dict[str, Any]:
    """The named numpy arrays stored at ``path`` (an ``.npz``), or ``compute()``'s, written there atomically the
    first time. A lock on ``path`` (:mod:`harness.core.locks`) makes a second process that needs the same arrays
    wait for the first (``waiting``: the long step it shows meanwhile) and read its file instead of computing them
    too; the file is leased (:func:`lease`) while it is read, so no prune removes it half read."""
    import numpy as np

    def load() -> dict[str, Any]:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    path = Path(path)
    if (found := _leased_load(path, load)) is not None:
        return found
    with exclusive(path, waiting):
        if (found := _leased_load(path, load)) is not None:  # built by the process that held the lock
            return found
        arrays = compute()  # (the lock made path's folder)
        tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.npz")
        np.savez(tmp, **arrays)
        tmp.replace(path)
    return arrays


def _leased_load(path: Path, load: Callable[[], Any]) -> Any | None:
    """``load()`` of the cached file ``path`` under its lease (:func:`lease`), or None when there is no such file
    (none yet, or a prune removed it before the lease was taken)."""
    if not path.is_file():
        return None
    had = str(path) in _LEASES  # (a lease this process held before stays)
    lease(path)
    try:
        return load() if path.is_file() else None
    finally:
        if not had:
            release_lease(path)
