"""Worlds: named builders that produce a world folder (see :mod:`harness.worlds.base` for the layout).

A builder is registered under its name; :func:`get_world` builds it on first use into the harness home
(atomically: a killed build leaves nothing half-done behind) and loads it.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.paths import harness_home
from harness.registry import Registry
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
    if not (root / "manifest.json").is_file():
        if not build:
            from harness.errors import MissingResourceError

            raise MissingResourceError(f"world {name!r} is not built yet: run `harness world build {name}`")
        build_world(name)
    world = load_world_dir(name, root)
    world.builder = builder  # type: ignore[attr-defined]
    return world


def build_world(name: str, *, force: bool = False) -> Path:
    builder = WORLDS.get(name)
    root = world_dir(name)
    if (root / "manifest.json").is_file() and not force:
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / f".tmp-{root.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        log.info("building world %s into %s", name, root)
        builder.build(tmp)
        if not (tmp / "manifest.json").is_file():
            raise RuntimeError(f"world builder {name!r} wrote no manifest.json")
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root
