"""Published figures beside ours, on runs of the ``glot500`` world (the papers' setting).

The glot500 world provides ``harness.worlds.glot500.reference_scores(task, model_setting) -> {method: {lang:
value}}`` (model settings such as ``"mono-100"`` or ``"multi-400"``: RoBERTa- or XLM-R-based, factorized dim). It is
imported lazily; when it is absent (or has no figures for a task and setting) nothing is added. The figures become
rows labelled ``paper: <method>`` on the task's headline-metric boards. They sit beside ours but never enter our
rows' common language set, ranks or paired tests. If the function takes a ``step`` argument the board's CPT step is
passed (0 before CPT; the papers publish per-language figures at steps 0 and 4000 only, so other steps get none);
otherwise the board notes that the reference does not say at which step its figures are. Published percentages
become fractions when our metric is one (``as_fraction=True`` when the function takes it, else divided by 100).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from typing import Any

from leaderboard.collect import ExperimentData
from leaderboard.model import Board, Entry, Row, finish_board

log = logging.getLogger(__name__)
PAPER_WORLD = "glot500"
MODULE = "harness.worlds.glot500"


def _module() -> Any | None:
    try:
        return importlib.import_module(MODULE)
    except ImportError:
        return None


def model_setting(source: str, dim: str, module: Any | None = None) -> str | None:
    """``mono-100`` / ``multi-400`` from a source model and a factorized dim (the world may define its own rule)."""
    if module is not None and callable(getattr(module, "model_setting", None)):
        return module.model_setting(source, dim)
    s = source.lower()
    kind = "multi" if ("xlm" in s or "multi" in s) else ("mono" if ("roberta" in s or "mono" in s) else None)
    if kind is None or not str(dim).isdigit():
        return None
    return f"{kind}-{dim}"


def attach_paper_rows(board: Board, data: ExperimentData) -> None:
    if board.kind == "delta" or not board.headline or not board.rows:
        return
    if not any(r.world == PAPER_WORLD for r in data.tasks if r.task == board.task):
        return
    mod = _module()
    fn = getattr(mod, "reference_scores", None) if mod is not None else None
    if not callable(fn):
        return
    settings = sorted({s for r in board.rows if r.variant is not None
                       and (s := model_setting(r.variant.source, r.variant.dim, mod)) is not None})
    try:
        accepted = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        accepted = set()
    ours = [v for r in board.rows for v in r.values().values()]
    fraction = bool(ours) and max(abs(v) for v in ours) <= 1.0
    kwargs: dict[str, Any] = {}
    if "step" in accepted:
        kwargs["step"] = board.step
    if "as_fraction" in accepted:
        kwargs["as_fraction"] = fraction
    added = False
    for setting in settings:
        try:
            ref = fn(board.task, setting, **kwargs)
        except Exception as exc:  # no figures for this task / setting / step
            log.debug("no published figures for %s %s: %s", board.task, setting, exc)
            continue
        for method, per_lang in sorted((ref or {}).items()):
            vals = {lang: float(v) for lang, v in per_lang.items() if v is not None}
            if not vals:
                continue
            # a reference that cannot convert: percentages (any value above 1) beside our fractions
            scale = 0.01 if "as_fraction" not in kwargs and fraction and max(
                abs(v) for v in vals.values()) > 1.0 else 1.0
            label = f"paper: {method}" + (f" ({setting})" if len(settings) > 1 else "")
            board.paper_rows.append(Row(label, {lang: Entry([v * scale], []) for lang, v in vals.items()},
                                        kind="paper"))
            added = True
            if scale != 1.0 and "published percentages divided by 100" not in board.notes:
                board.notes.append("published percentages divided by 100")
    if added:
        if "step" not in kwargs:
            board.notes.append("paper rows: the reference does not say at which CPT step its figures are")
        finish_board(board)
