"""The journal of an addition of sources to a built world (:mod:`harness.worlds.adding`): where it lies, how it is
written, and how a load of the world finishes an addition that was killed after its commit began (the renames it
names, idempotent). Apart from the addition itself so that loading a world (:mod:`harness.worlds`) reads it without
importing what adds.

The journal names the staging folder relative to the world's folder (``../.tmp-<world>-add-<id>``), so a home moved
or renamed after a kill still finds it; a journal an earlier version wrote (an absolute path) is read too. What the
commit's renames move is on the disk before the journal names it: the staged files and folders are fsynced, then
the journal and its folder, and the folder each rename writes into after that rename.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import uuid
from pathlib import Path

from harness.core.errors import MissingResourceError
from harness.worlds.base import CHECKSUMS

MANIFEST = "manifest.json"


def journal_path(root: Path) -> Path:
    return root.parent / f".add-{root.name}.json"


def staging_prefix(root: Path) -> str:
    """How the name of an addition's staging folder (beside the world) begins."""
    return f".tmp-{root.name}-add-"


def sync(path: Path) -> None:
    """fsync a file or a folder (a folder: the names it holds). A file system that cannot sync a folder is let be."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if not (path.is_dir() and exc.errno in (errno.EINVAL, errno.ENOTSUP, errno.EBADF)):
            raise
    finally:
        os.close(fd)


def sync_tree(folder: Path) -> None:
    """fsync every file under ``folder``, then every folder from the deepest up, ``folder`` itself and its parent."""
    paths = sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True)
    for path in [p for p in paths if p.is_file() and not p.is_symlink()]:
        sync(path)
    for path in [p for p in paths if p.is_dir() and not p.is_symlink()]:
        sync(path)
    sync(folder)
    sync(folder.parent)


def write_journal(root: Path, staging: Path, sources: list[str]) -> None:
    """Write the journal of an addition (``staging`` relative to the world's folder) and fsync it and its folder.
    Nothing is left of it where writing it fails before it is in place."""
    journal = journal_path(root)
    tmp = journal.with_name(f"{journal.name}.{uuid.uuid4().hex[:8]}")
    try:
        tmp.write_text(json.dumps({"staging": os.path.relpath(staging, root), "sources": sources}))
        sync(tmp)
        os.replace(tmp, journal)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync(journal.parent)


def _staging(root: Path, named: str) -> Path:
    """The staging folder a journal names: relative to the world's folder, or (a journal an earlier version wrote)
    an absolute path, taken where it is and otherwise beside the world (the home was moved since)."""
    path = Path(named)
    if path.is_absolute():
        path = path if path.exists() else root.parent / path.name
    else:
        path = Path(os.path.normpath(root / path))
        if path.parent != Path(os.path.normpath(root.parent)):
            raise ValueError(f"{named} is not beside the world")
    if not path.name.startswith(staging_prefix(root)):
        raise ValueError(f"{named} is no staging folder of an addition")
    return path


def finish_pending(root: Path) -> bool:
    """Finish an addition to the world at ``root`` that was killed after its journal was written (the caller holds
    the world's lock): the renames its journal names, then the journal and the staging folder removed. True when
    there was one."""
    journal = journal_path(root)
    if not journal.is_file():
        return False
    try:
        plan = json.loads(journal.read_text(encoding="utf-8"))
        staging, sources = _staging(root, plan["staging"]), [str(s) for s in plan["sources"]]
        if any(s in ("", ".", "..") or "/" in s or os.sep in s for s in sources):
            raise ValueError("a source's name is a path")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MissingResourceError(f"world at {root}: the journal of an addition of sources, {journal}, is "
                                   f"unreadable ({type(exc).__name__}); move it away and run `harness world check`") \
            from exc
    _commit(root, staging, sources)
    journal.unlink()
    shutil.rmtree(staging, ignore_errors=True)
    return True


def _commit(root: Path, staging: Path, sources: list[str]) -> None:
    """The renames, each skipped where it was done already (a commit finished after a kill); the folder each one
    writes into fsynced after it."""
    if not (root / "sources").is_dir():
        (root / "sources").mkdir()
        sync(root)
    for name in sources:
        staged, final = staging / "sources" / name, root / "sources" / name
        if staged.exists() and not final.exists():
            os.replace(staged, final)
            sync(final.parent)
    for rel in (MANIFEST, CHECKSUMS):  # the record last: until it is in place the new manifest is not trusted
        if (staging / rel).is_file():
            os.replace(staging / rel, root / rel)
            sync(root)
