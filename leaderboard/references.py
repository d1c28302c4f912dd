"""What each row's method was checked against, as its cell runs recorded it (the leaderboard imports no method).

The runner tags every cell run with its method's reference line (``harness.method_reference``; see
:meth:`methods.base.Reference.line`), one of:

* ``"<implementation> · <what is compared> · <tests>"``: the method was compared with a reference implementation,
  the authors' package (``deepfocus 1.0.1``) or repository at a commit (``cisnlp/ofa@73fce73``);
* ``"no reference implementation compared · <what the tests check instead> · <tests>"``;
* ``"not declared"``: a method that declares no reference.

A run logged before the tag existed has none: ``"not recorded"``. A row's line is the one of its runs (its seeds);
runs that disagree are shown as such. The settings of each row carry the whole line (:data:`SETTING`); the boards
show a short form beside the row (:func:`short`) and a marker (:func:`kind`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TAG = "method_reference"  # the cell run's tag, without the ``harness.`` prefix
SETTING = "checked against"  # the key in a row's settings (leaderboard.tables.settings_of)
SEPARATOR = " · "
NO_REFERENCE = "no reference implementation compared"  # as methods.base writes it
NOT_DECLARED = "not declared"
NOT_RECORDED = "not recorded"
DIFFERS = "differs between seeds"

# the marker beside a row's name, by kind, and what it says
MARKS = {"checked": "✓", "none": "○", "unknown": "?"}
MEANING = {"checked": "checked against a reference implementation",
           "none": NO_REFERENCE,
           "unknown": "not recorded (runs logged before they carried it) or not declared by the method"}


def cell_reference(cell: Any) -> str:
    """A cell run's reference line: its ``method_reference`` (as the run record reads the tag), else the tag among
    its ``tags``; ``"not recorded"`` for a run that has neither."""
    line = getattr(cell, "method_reference", None) or (getattr(cell, "tags", None) or {}).get(TAG)
    return str(line) if line else NOT_RECORDED


def reference_of(cells: Iterable[Any]) -> str:
    """The line of a row from the cell runs of its seeds (all logged by the same code: one line)."""
    lines = list(dict.fromkeys(cell_reference(c) for c in cells))
    if not lines:
        return NOT_RECORDED
    return lines[0] if len(lines) == 1 else f"{DIFFERS}: " + " / ".join(lines)


def _parts(line: str) -> list[str]:
    return line.split(SEPARATOR)


def kind(line: str | None) -> str:
    """``checked`` (a reference implementation was compared), ``none`` (none was) or ``unknown``."""
    if not line or line.startswith(DIFFERS):
        return "unknown"
    parts = _parts(line)
    if len(parts) < 3:  # "not recorded", "not declared"
        return "unknown"
    return "none" if parts[0] == NO_REFERENCE else "checked"


def short(line: str | None) -> str:
    """A few words for a board's column: the reference implementation, ``none``, or why there is no line."""
    if not line:
        return NOT_RECORDED
    if line.startswith(DIFFERS):
        return DIFFERS
    k = kind(line)
    return {"checked": _parts(line)[0], "none": "none"}.get(k, line)


def by_label(variants: Iterable[Any]) -> dict[str, str]:
    """Row label -> the row's reference line, from the leaderboard's variants (their settings)."""
    return {v.label: v.settings[SETTING] for v in variants if SETTING in (v.settings or {})}


def legend(lines: Iterable[str]) -> str:
    """What the markers of the given lines mean, in the order check, none, unknown (those that occur)."""
    kinds = {kind(x) for x in lines}
    return "; ".join(f"{MARKS[k]} {MEANING[k]}" for k in MARKS if k in kinds)
