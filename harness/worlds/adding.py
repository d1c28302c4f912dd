"""Adding to a built world the sources that carry their own identity (``own_identity``: the bible world's decoders)
and that an earlier version's build did not make, without building the world again.

``harness world build bible --add-sources``. Such a source is outside the world's identity
(:func:`harness.worlds.base.world_identity`), so every cell computed on the world keeps its key; no file of the world
is rewritten but ``manifest.json`` (the new entries beside the old ones) and ``checksums.json`` (the new files' sizes,
sha256 and times added to the old record).

Nothing is lost when it is killed or the disk fills. Everything the addition writes is staged first beside the world
(``.tmp-<world>-add-<id>/``: each source's folder, the new manifest, the new record), under the world's lock; a
failure while staging leaves the world as it was (the staging folder is removed, now or by the next addition). The
staged files and folders are fsynced; then a journal (``.add-<world>.json`` beside the world, fsynced with its
folder) names the staging folder relative to the world's folder (a home moved after a kill still finds it), and the
commit is three renames (the source folders into ``sources/``, the manifest, the record; the folder each writes into
fsynced after it), which need no new space on the disk. A process killed after the journal was written leaves it,
and the next load of the world (:func:`harness.worlds.get_world`) finishes the renames under the lock before it
checks the world; the renames are idempotent, so a kill while finishing is finished by the load after.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, MissingResourceError
from harness.worlds.base import CHECKSUMS
from harness.worlds.journal import (
    MANIFEST,
    finish_pending,
    journal_path,
    staging_prefix,
    sync_tree,
    write_journal,
)

__all__ = ["add_sources", "finish_pending", "journal_path", "missing_sources"]


def missing_sources(root: Path, builder: Any) -> list[str]:
    """The sources the builder declares today with their own identity that the world at ``root`` lacks."""
    from harness.worlds.base import builder_sketch

    sketch = builder_sketch(builder)
    if sketch is None:
        return []
    have = json.loads((root / MANIFEST).read_text(encoding="utf-8")).get("sources", {})
    return [name for name in sketch.sources if name not in have and sketch.source_identity(name) is not None]


def add_sources(name: str, *, note: Callable[[str], None] = print, keep_inputs: bool = False) -> list[str]:
    """Add to the built world ``name`` every own-identity source its builder declares and it lacks; the names
    added (empty where none was missing). What the builder downloaded for them is removed once they are in place,
    as after a build, unless ``keep_inputs``. One-line errors: the world is not built, is damaged, or its builder
    cannot add a source."""
    from harness.core.locks import exclusive
    from harness.worlds import WORLDS, check_world_files, refuse_unlisted, world_dir

    builder = WORLDS.get(name)
    root = world_dir(name)
    if not (root / MANIFEST).is_file():
        raise ConfigError(f"world {name!r} is not built yet: `harness world build {name}` builds it with every "
                          f"source")
    with exclusive(root, waiting=f"world {name}: in use by another build"):
        finish_pending(root)
        check = check_world_files(root)
        refuse_unlisted(name, root, check)
        if check.problems:
            raise MissingResourceError(f"world {name!r} at {root} is damaged ({check.problems[0]}): sources are "
                                       f"added to a sound world only; `harness world build {name} --force` builds it "
                                       f"again")
        missing = missing_sources(root, builder)
        if not missing:
            return []
        build_source = getattr(builder, "build_source", None)
        if not callable(build_source):
            raise ConfigError(f"world {name!r}: its builder cannot add a source to a built world "
                              f"({', '.join(missing)}); `harness world build {name} --force` builds it again")
        for stale in root.parent.glob(f"{staging_prefix(root)}*"):  # a staging that was killed before its journal
            shutil.rmtree(stale, ignore_errors=True)
        staging = root.parent / f"{staging_prefix(root)}{uuid.uuid4().hex[:8]}"
        try:
            _stage(name, root, staging, missing, build_source, note)
            sync_tree(staging)  # on the disk before the journal names it
            write_journal(root, staging, missing)
        except BaseException:
            if not journal_path(root).is_file():  # (once it is, the next load finishes the addition)
                shutil.rmtree(staging, ignore_errors=True)
            raise
        finish_pending(root)
    if not keep_inputs:
        from harness.core.cache import discard_build_inputs
        from harness.core.paths import harness_home

        discard_build_inputs(harness_home(), getattr(builder, "build_inputs", ()))
    return missing


def _stage(world: str, root: Path, staging: Path, names: list[str], build_source: Callable[..., dict[str, Any]],
           note: Callable[[str], None]) -> None:
    """Each source's folder, then the new manifest and the new record, under ``staging``."""
    from harness.worlds import file_entry
    from harness.worlds.writer import write_json

    manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    record = json.loads((root / CHECKSUMS).read_text(encoding="utf-8"))
    added: dict[str, dict[str, Any]] = {}
    for name in names:
        note(f"world {world}: adding source {name}")
        added[name] = build_source(name, staging / "sources" / name, staging / "work", root=root)
    shutil.rmtree(staging / "work", ignore_errors=True)
    manifest["sources"] = {**manifest["sources"], **added}
    write_json(staging / MANIFEST, manifest)
    files = record.get("files")
    moved = [(p, f"sources/{p.relative_to(staging / 'sources').as_posix()}")
             for p in sorted((staging / "sources").rglob("*")) if p.is_file()]
    for path, rel in [*moved, (staging / MANIFEST, MANIFEST)]:
        record["sizes"][rel] = path.stat().st_size
        entry = file_entry(path)  # times as they are here: a rename keeps a file's times, the folder's aside
        if isinstance(files, dict):  # (the manifest's move changes its ctime: it is hashed once again)
            files[rel] = entry
        if rel == MANIFEST:
            record["sha256"][MANIFEST] = entry["sha256"]
    (staging / CHECKSUMS).write_text(json.dumps(record, indent=0, sort_keys=True))
