"""The journal of an addition of sources to a built world (:mod:`harness.worlds.adding`): where it lies, and how a
load of the world finishes an addition that was killed after its commit began (the renames it names, idempotent).
Apart from the addition itself so that loading a world (:mod:`harness.worlds`) reads it without importing what adds.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from harness.core.errors import MissingResourceError
from harness.worlds.base import CHECKSUMS

MANIFEST = "manifest.json"


def journal_path(root: Path) -> Path:
    return root.parent / f".add-{root.name}.json"


def finish_pending(root: Path) -> bool:
    """Finish an addition to the world at ``root`` that was killed after its journal was written (the caller holds
    the world's lock): the renames its journal names, then the journal and the staging folder removed. True when
    there was one."""
    journal = journal_path(root)
    if not journal.is_file():
        return False
    try:
        plan = json.loads(journal.read_text(encoding="utf-8"))
        staging, sources = Path(plan["staging"]), list(plan["sources"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MissingResourceError(f"world at {root}: the journal of an addition of sources, {journal}, is "
                                   f"unreadable ({type(exc).__name__}); move it away and run `harness world check`") \
            from exc
    _commit(root, staging, sources)
    journal.unlink()
    shutil.rmtree(staging, ignore_errors=True)
    return True


def _commit(root: Path, staging: Path, sources: list[str]) -> None:
    """The renames, each skipped where it was done already (a commit finished after a kill)."""
    (root / "sources").mkdir(exist_ok=True)
    for name in sources:
        staged, final = staging / "sources" / name, root / "sources" / name
        if staged.exists() and not final.exists():
            os.replace(staged, final)
    for rel in (MANIFEST, CHECKSUMS):  # the record last: until it is in place the new manifest is not trusted
        if (staging / rel).is_file():
            os.replace(staging / rel, root / rel)
