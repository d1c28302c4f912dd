"""A derived world's entry in the world registry (:mod:`harness.worlds`): found by its folder in the home, never
built; made by ``harness world derive`` (:mod:`harness.worlds.derived`, which describes the layout).

Apart from the derivation so that the registry reads it without importing what derives (which imports the
registry)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError
from harness.core.paths import home_dir
from harness.worlds.base import CheckRow, World, load_world_dir

VERSION = "1"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def derived_root(name: str) -> Path:
    return home_dir() / "worlds" / f"{name}-v{VERSION}"


def _derived_manifest(root: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("derived_from"), dict) else None


def derived_names() -> list[str]:
    """The derived worlds in this home."""
    worlds = home_dir() / "worlds"
    suffix = f"-v{VERSION}"
    return sorted(p.name[: -len(suffix)] for p in worlds.glob(f"*{suffix}")
                  if p.is_dir() and _derived_manifest(p) is not None) if worlds.is_dir() else []


class DerivedBuilder:
    """What the world registry holds for a derived world: its name, version and description, and a build that
    refuses (a derived world is made by ``harness world derive``)."""

    derived = True
    version = VERSION

    def __init__(self, name: str, manifest: dict[str, Any], registry: Any = None):
        self.name = name
        self.manifest = manifest
        self.registry = registry  # the world registry (the base world's default seeds)
        base = manifest["derived_from"].get("world")
        source = manifest.get("default_source")
        target = manifest.get("target_tokenizer") or {}
        trimmed = target.get("trimmed") or {}
        tok = target.get("kind", "?") + (f", trimmed to {trimmed.get('kept', 0):,} of {trimmed.get('total', 0):,} "
                                         f"pieces" if trimmed else "")
        self.description = f"derived from {base}: source {source}, target tokenizer ({tok})" + (
            ", donor" if manifest.get("donor") else "")

    @property
    def default_seeds(self) -> Any:
        try:
            return getattr(self.registry.get(self.manifest["derived_from"].get("world")), "default_seeds", None)
        except Exception:  # noqa: BLE001 -- a base world no longer registered: the harness's default seeds
            return None

    def build(self, out: Path) -> None:
        raise ConfigError(f"world {self.name!r} is a derived world: it is not built; remove {derived_root(self.name)} "
                          f"and make it again with `harness world derive {self.name} --from "
                          f"{self.manifest['derived_from'].get('world')} --source ...`")

    def check(self) -> list[Any]:
        base = self.manifest["derived_from"]
        root = derived_root(self.name)
        base_root = root.parent / str(base.get("folder"))
        rows = [CheckRow(f"base world {base.get('world')}", (base_root / "manifest.json").is_file(), str(base_root),
                         how=f"harness world build {base.get('world')}")]
        for rel in ("sources", "target_tokenizer", "donor"):
            if (root / rel).is_dir():
                rows.append(CheckRow(rel, True, str(root / rel)))
        return rows

    def declare(self) -> World:
        return load_world_dir(self.name, derived_root(self.name))


def derived_builder(name: str, registry: Any = None) -> DerivedBuilder | None:
    """The registry's entry for derived world ``name`` of this home; None where there is none."""
    manifest = _derived_manifest(derived_root(name)) if NAME_RE.match(name) else None
    return DerivedBuilder(name, manifest, registry) if manifest is not None else None
