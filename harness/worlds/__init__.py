"""Worlds: named builders that produce a world folder (see :mod:`harness.worlds.base` for the layout).

A builder is registered under its name; :func:`get_world` builds it on first use into the harness home
(atomically: a killed build leaves nothing half-done behind) and loads it.

A built world carries ``checksums.json``: the sha256 of its ``manifest.json`` and ``languages.json`` and the size of
every file. A world that does not match it (a damaged manifest, a truncated or missing file) is reported in one
warning line and built again before it is used; a world built before these checks gets the file on its next load.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.core.paths import harness_home
from harness.core.registry import Registry
from harness.worlds.base import World, load_world_dir

log = logging.getLogger(__name__)


@dataclass
class CheckRow:
    """One input of a world, for ``harness world check``."""

    name: str
    present: bool
    where: str  # where it comes from (package, hub id, path)
    size: str = ""
    how: str = ""  # the exact command or path to provide it


class WorldBuilder(Protocol):
    name: str
    description: str
    version: str  # bump when the layout or the build changes, so that old caches are not reused

    def build(self, out: Path) -> None:
        """Write the complete world layout into ``out`` (an empty folder)."""

    def check(self) -> list[CheckRow]:
        """Which inputs are present, where they come from, how to provide the missing ones."""


WORLDS: Registry = Registry(
    "world", "harness.worlds", builtin_modules=("harness.worlds.synthetic", "harness.worlds.available")
)


def world_dir(name: str) -> Path:
    builder = WORLDS.get(name)
    return harness_home() / "worlds" / f"{name}-v{builder.version}"


def get_world(name: str, *, build: bool = True) -> World:
    """Load world ``name``, building it first if it is not in the cache (``build=False`` only loads)."""
    builder = WORLDS.get(name)
    root = world_dir(name)
    if (root / "manifest.json").is_file():
        problem = verify_world(root)
        if problem is not None:
            if not build:
                from harness.core.errors import MissingResourceError

                raise MissingResourceError(f"world {name!r} at {root} is damaged ({problem}); "
                                           f"run `harness world build {name} --force`")
            log.warning("world %s at %s is damaged (%s); building it again", name, root, problem)
            build_world(name, force=True)
    if not (root / "manifest.json").is_file():
        if not build:
            from harness.core.errors import MissingResourceError

            raise MissingResourceError(f"world {name!r} is not built yet: run `harness world build {name}`")
        build_world(name)
    world = load_world_dir(name, root)
    world.builder = builder  # type: ignore[attr-defined]
    return world


def build_world(name: str, *, force: bool = False, keep_inputs: bool = False) -> Path:
    """Build world ``name`` (if not built, or ``force``). Once it is in place, what its builder downloaded and
    installed under the home for the build (``builder.build_inputs``: folders no later step reads) is removed,
    unless ``keep_inputs``; a later build fetches it again."""
    from harness.core.locks import exclusive

    builder = WORLDS.get(name)
    root = world_dir(name)
    if (root / "manifest.json").is_file() and not force:
        problem = verify_world(root)
        if problem is None:
            return root
    root.parent.mkdir(parents=True, exist_ok=True)
    # one build of a world at a time: a second process (another `harness run` started beside this one) waits,
    # then finds the world built
    with exclusive(root, waiting=f"world {name}: built by another process"):
        if (root / "manifest.json").is_file() and not force:
            problem = verify_world(root)
            if problem is None:
                return root
            log.warning("world %s at %s is damaged (%s); building it again", name, root, problem)
        return _build_locked(name, builder, root, keep_inputs)


def _build_locked(name: str, builder: Any, root: Path, keep_inputs: bool) -> Path:
    # what a killed build of this world left (nobody else builds it while the lock is held)
    for stale in root.parent.glob(f".tmp-{root.name}-*"):
        log.warning("removing %s, left by a world build that was killed", stale)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root.parent / f".tmp-{root.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        log.info("building world %s into %s", name, root)
        builder.build(tmp)
        if not (tmp / "manifest.json").is_file():
            raise RuntimeError(f"world builder {name!r} wrote no manifest.json")
        write_checksums(tmp)
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not keep_inputs:
        from harness.core.cache import discard_build_inputs

        discard_build_inputs(harness_home(), getattr(builder, "build_inputs", ()))
    return root


CHECKSUMS = "checksums.json"
_HASHED = ("manifest.json", "languages.json")  # the world's identity and its language table: hashed, not only sized


def write_checksums(root: Path) -> None:
    from harness.core.hashing import sha256_file

    files = {p.relative_to(root).as_posix(): p.stat().st_size for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != CHECKSUMS}
    sums = {rel: sha256_file(root / rel) for rel in _HASHED if (root / rel).is_file()}
    tmp = root / f".{CHECKSUMS}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps({"sha256": sums, "sizes": files}, indent=0, sort_keys=True))
    os.replace(tmp, root / CHECKSUMS)


def verify_world(root: Path) -> str | None:
    """None when the world at ``root`` matches its ``checksums.json``, else what is wrong (one phrase). A world
    without the file (built before these checks) gets one if its manifest and language table parse."""
    from harness.core.hashing import sha256_file

    path = root / CHECKSUMS
    if not path.is_file():
        for rel in _HASHED:
            try:
                json.loads((root / rel).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                return f"{rel} is unreadable ({type(exc).__name__})"
        try:
            write_checksums(root)
        except OSError:
            pass
        return None
    try:
        sums = json.loads(path.read_text())
        sha, sizes = sums["sha256"], sums["sizes"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{CHECKSUMS} is unreadable ({type(exc).__name__})"
    for rel, size in sizes.items():
        f = root / rel
        if not f.is_file():
            return f"{rel} is missing"
        if f.stat().st_size != size:
            return f"{rel} has {f.stat().st_size} bytes, {size} expected"
    for rel, digest in sha.items():
        if sha256_file(root / rel) != digest:
            return f"{rel} does not match its sha256"
    return None
