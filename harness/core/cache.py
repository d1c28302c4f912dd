"""Content-addressed product cache with atomic completion.

A product (initialized model, CPT checkpoint, fine-tuned tagger, trained hypernetwork ...) lives in
``<home>/products/<kind>/<key>/``. It is built in a temporary sibling folder and renamed into place only when
complete, with a ``_DONE.json`` marker holding its inputs, so a run killed mid-build leaves no half product
behind, and a repeated run finds the finished one and recomputes nothing.

The marker also records the size and sha256 of every file of the product. A product found damaged (a file
truncated, changed or missing, an unreadable marker) or without its marker is reported in one warning line, removed
and built again: a damaged product is never used. A marker written before these checks (no file list) is trusted.
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
from harness.core.locks import exclusive
from harness.core.paths import harness_home

log = logging.getLogger(__name__)
DONE = "_DONE.json"


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
            problem = verify_product(path)
            if problem is None:
                return Product(kind, key, path, cached=True)
            log.warning("%s product %s at %s is damaged (%s); removing it and computing it again",
                        kind, key, path, problem)
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
            return self._build(kind, inputs, key, path, build)

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

    def clean_stale(self, older_than_s: float = 3600) -> int:
        """Remove temporary folders left by killed builds."""
        n = 0
        if not self.root.exists():
            return 0
        for kind_dir in self.root.iterdir():
            for p in kind_dir.glob(".tmp-*"):
                if time.time() - p.stat().st_mtime > older_than_s:
                    shutil.rmtree(p, ignore_errors=True)
                    n += 1
        return n


_VERIFIED: dict[str, float] = {}  # product folders checked by this process (marker mtime): checked once


def file_digests(folder: Path) -> dict[str, dict[str, Any]]:
    """{relative path: {size, sha256}} of every file below ``folder`` but the marker."""
    out = {}
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.name != DONE:
            out[f.relative_to(folder).as_posix()] = {"size": f.stat().st_size, "sha256": sha256_file(f)}
    return out


def verify_product(path: Path) -> str | None:
    """None when the product at ``path`` matches its marker, else what is wrong (one phrase)."""
    marker_path = path / DONE
    try:
        stamp = marker_path.stat().st_mtime
        if _VERIFIED.get(str(path)) == stamp:
            return None
        marker = json.loads(marker_path.read_text())
    except (OSError, ValueError) as exc:
        return f"its marker {DONE} is unreadable: {type(exc).__name__}"
    files = marker.get("files") if isinstance(marker, dict) else None
    if files is None:
        return None if isinstance(marker, dict) else f"its marker {DONE} is not an object"
    for rel, want in files.items():
        f = path / rel
        if not f.is_file():
            return f"{rel} is missing"
        size = f.stat().st_size
        if size != want.get("size"):
            return f"{rel} has {size} bytes, {want.get('size')} expected"
    for rel, want in files.items():
        if sha256_file(path / rel) != want.get("sha256"):
            return f"{rel} does not match its sha256"
    _VERIFIED[str(path)] = stamp
    return None


def discard_damaged(path: Path, kind: str) -> bool:
    """True (after one warning line, with the product moved away) when the finished product at ``path`` does not
    match the sizes and sha256s its marker records; False when it does (or records none)."""
    problem = verify_product(path)
    if problem is None:
        return False
    log.warning("%s product at %s is damaged (%s); removing it and computing it again", kind, path, problem)
    _remove(path)
    return True


def discard_build_inputs(home: Path, folders: tuple[str, ...] | list[str], busy_s: float = 24 * 3600) -> int:
    """Remove the folders (relative to ``home``) a world build downloaded or installed and no later step reads;
    the bytes freed. Nothing is removed while another world build is under way (a ``.tmp-*`` folder under
    ``worlds/`` younger than ``busy_s``): it may be reading them."""
    worlds = Path(home) / "worlds"
    now = time.time()
    if worlds.is_dir() and any(now - p.stat().st_mtime < busy_s for p in worlds.glob(".tmp-*")):
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
    too."""
    import numpy as np

    def load() -> dict[str, Any]:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    path = Path(path)
    if path.is_file():
        return load()
    with exclusive(path, waiting):
        if path.is_file():  # built by the process that held the lock
            return load()
        arrays = compute()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.npz")
        np.savez(tmp, **arrays)
        tmp.replace(path)
    return arrays
