"""What each row of the board costs, beside it: one line per row (a method's variant: its dimension, parameters,
precision -- never pooled across variants) with its initialization's own time and peak memory (``init/seconds``,
``init/peak_rss_mb``, as each cell logged them: the method's call, less waiting for shared products and loading the
world's model, :mod:`methods.own_cost`), what it needs (the resources and models its cells' init reports name under
``costs.needs``), what ``harness plan`` prices one initialization at -- on a board of CPU cells the core-minutes of
this world's model (``costs.core_minutes_plan``), on a GPU board the GPU-hours at the papers' scale
(``costs.gpu_hours_plan``) -- the row's average on the board and its init time as a multiple of the cheapest row's.
A one-line note under the table says what the board's lead costs: the best row's margin over the runner-up and the
ratio of their init times, so that a row that wins by 0.01 at 100x the cost says so.

Attached to the headline board of each task and profile at its final step (:func:`attach_costs`); rendered by
:mod:`leaderboard.render_terminal` (:func:`cost_table`) and :mod:`leaderboard.render_html` (:func:`costs_html`).
Cells logged before the costs were recorded show "-" for what they did not log.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from html import escape
from typing import Any

from leaderboard import fmt

GPU_PLAN, CPU_PLAN = "GPU-h (plan)", "core-min (plan)"
HEAD = ("row", "cells", "init s", "peak MB", GPU_PLAN, "needs", "avg", "x time")
# the keys of :func:`cost_cells`, in the order of the table's columns (the plan's header is the board's unit)
KEYS = ("row", "cells", "init s", "peak MB", "plan", "needs", "avg", "x time")


@dataclass
class CostRow:
    method: str
    cells: int
    seconds: float | None  # median over the row's cells of the initialization's own time
    peak_mb: float | None  # highest peak RSS of the initialization over its cells
    gpu_hours: float | None  # `harness plan`'s GPU-hours of one initialization at the papers' scale
    needs: list[str] | None = field(default=None)  # None: not logged by its cells
    avg: float | None = None  # the row's average on the board
    ratio: float | None = None  # seconds / the cheapest row's seconds
    label: str = ""  # the board row's label (a method's variant); the method where empty
    core_minutes: float | None = None  # `harness plan`'s core-minutes of one initialization on a CPU
    cpu: bool = False  # every cell of the row initialized on a CPU

    @property
    def name(self) -> str:
        return self.label or self.method


def cpu_board(board: Any) -> bool:
    """Whether every row of the board's cost table initialized on a CPU (its plan column: core-minutes)."""
    rows = getattr(board, "costs", None) or []
    return bool(rows) and all(r.cpu for r in rows)


def plan_head(board: Any) -> str:
    """The plan column's header: core-minutes on a board of CPU cells, else GPU-hours."""
    return CPU_PLAN if cpu_board(board) else GPU_PLAN


def plan_of(board: Any, r: CostRow) -> float | None:
    """What the plan prices the row's initialization at, in the unit of the board's plan column."""
    return r.core_minutes if cpu_board(board) else r.gpu_hours


def head(board: Any) -> tuple[str, ...]:
    return tuple(plan_head(board) if k == "plan" else h for k, h in zip(KEYS, HEAD, strict=True))


def _method_of(row: Any) -> str | None:
    return row.variant.method if row.variant is not None else None


def _cells_by_variant(board: Any, data: Any) -> dict[Any, dict[str, Any]]:
    """``{variant: {run id: cell}}`` of the cells of the board's task and profile (a row's variant: its method,
    dimension, source, parameters, CPT settings and precision, as the board's rows are keyed)."""
    from leaderboard.labels import _variant

    cells: dict[Any, dict[str, Any]] = {}
    for run in data.tasks:
        if run.task != board.task or run.profile != board.profile:
            continue
        p = data.parent(run)
        if p is not None:
            cells.setdefault(_variant(p, p, False), {})[p.run_id] = p
    return cells


def _on_cpu(cell: Any) -> bool:
    device = cell.init_report.get("device") if isinstance(cell.init_report, dict) else None
    return isinstance(device, str) and device.startswith("cpu")


def cost_row(row: Any, mine: list[Any]) -> CostRow:
    """The :class:`CostRow` of a board row from its own cells ``mine`` (none of another variant's)."""
    secs = [c.metrics["init/seconds"] for c in mine if "init/seconds" in c.metrics]
    peaks = [c.metrics["init/peak_rss_mb"] for c in mine if "init/peak_rss_mb" in c.metrics]
    logged = [c.init_report.get("costs") for c in mine if isinstance(c.init_report.get("costs"), dict)]
    needs = sorted({n for cost in logged for n in cost.get("needs", [])}) if logged else None
    hours = [float(cost["gpu_hours_plan"]) for cost in logged if cost.get("gpu_hours_plan") is not None]
    minutes = [float(cost["core_minutes_plan"]) for cost in logged if cost.get("core_minutes_plan") is not None]
    return CostRow(_method_of(row) or row.label, len(mine), statistics.median(secs) if secs else None,
                   max(peaks) if peaks else None, max(hours) if hours else None, needs, row.avg, label=row.label,
                   core_minutes=statistics.median(minutes) if minutes else None,
                   cpu=bool(mine) and all(_on_cpu(c) for c in mine))


def cost_rows(board: Any, data: Any) -> list[CostRow]:
    """One :class:`CostRow` per row of ``board`` (each variant of a method its own), from the cells of the board's
    task and profile."""
    cells = _cells_by_variant(board, data)
    out = [cost_row(r, list(cells.get(r.variant, {}).values())) for r in board.rows if r.variant is not None]
    cheapest = min((r.seconds for r in out if r.seconds is not None), default=None)
    for r in out:
        r.ratio = time_ratio(r.seconds, cheapest)
    return out


RATIO_FLOOR_S = 1.0  # init times are compared as at least a second: a ratio of two fractions of a second means nothing


def time_ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, each taken as at least :data:`RATIO_FLOOR_S` (None where either is unknown)."""
    if a is None or b is None:
        return None
    return max(a, RATIO_FLOOR_S) / max(b, RATIO_FLOOR_S)


def attach_costs(boards: list[Any], data: Any) -> None:
    """Each task's and profile's headline board at its final step gets its :func:`cost_rows` (``board.costs``)."""
    for b in boards:
        if b.headline and b.kind == "final":
            b.costs = cost_rows(b, data)


def _num(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.{digits}f}"


def cost_cells(board: Any, r: CostRow) -> dict[str, str]:
    """The row's cells as text, keyed as :data:`KEYS` (the plan's in the board's unit, :func:`plan_head`)."""
    needs = "not logged" if r.needs is None else (", ".join(r.needs) or "the two tokenizers")
    plan = plan_of(board, r)
    return {"row": r.name, "cells": str(r.cells), "init s": _secs(r.seconds), "peak MB": _num(r.peak_mb, 0),
            "plan": _num(plan, 1 if cpu_board(board) else 2), "needs": needs, "avg": fmt.cell(board, r.avg),
            "x time": "-" if r.ratio is None else f"{r.ratio:,.0f}x" if r.ratio >= 10 else f"{r.ratio:.1f}x"}


def cells_of(board: Any, r: CostRow) -> list[str]:
    """The row's cells as text, in the order of :func:`head`."""
    return list(cost_cells(board, r).values())


def _secs(v: float | None) -> str:
    """Seconds: to the hundredth below 1 s (a method's own call is often a fraction of a second)."""
    return _num(v, 2) if v is not None and abs(v) < 1 else _num(v)


def lead_note(board: Any) -> str | None:
    """The best method's lead over the runner-up on the board, and what it costs in init time."""
    ranked = [r for r in board.costs if r.avg is not None]
    if len(ranked) < 2:
        return None
    ranked.sort(key=lambda r: r.avg, reverse=board.higher_is_better)
    a, b = ranked[0], ranked[1]
    if a.avg == b.avg:  # a tie at the top: the cheapest of the best
        best = [r for r in ranked if r.avg == a.avg]
        cheap = min((r for r in best if r.seconds is not None), key=lambda r: r.seconds, default=None)
        return (f"{', '.join(r.name for r in best)} share the best average ({fmt.cell(board, a.avg)})"
                + (f"; the cheapest of them is {cheap.name} ({_secs(cheap.seconds)} s)" if cheap else ""))
    lead = abs(a.avg - b.avg)
    ratio = time_ratio(a.seconds, b.seconds)
    times = f"({_secs(a.seconds)} s vs {_secs(b.seconds)} s)"
    cost = ("(init times not logged)" if ratio is None else f"at {ratio:,.1f}x its init time {times}" if ratio >= 1
            else f"at 1/{1 / ratio:,.0f} of its init time {times}")
    return f"{a.name} leads {b.name} by {fmt.cell(board, lead)} {cost}"


def costs_html(board: Any) -> str:
    """The cost table of ``board`` as one compact HTML table with its note ('' when the board has none)."""
    if not getattr(board, "costs", None):
        return ""
    cols = "".join(f"<th>{escape(h)}</th>" for h in head(board))
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells_of(board, r)) + "</tr>"
                   for r in board.costs)
    note = lead_note(board)
    return (f'<table class="costs" data-board="{escape(board.id)}"><caption>what each method costs '
            f"(initialization, median over its cells)</caption><thead><tr>{cols}</tr></thead><tbody>{body}"
            "</tbody></table>" + (f'<p class="note">cost: {escape(note)}</p>' if note else ""))


def cost_table(board: Any) -> Any:
    """The cost table of ``board`` as a rich Table, one line per method (None when the board has none)."""
    if not getattr(board, "costs", None):
        return None
    from rich.table import Table

    t = Table(title=f"what each method costs (its initialization's own time, median over the row's cells; avg: "
                    f"{board.task} {board.metric})", title_justify="left", box=None, show_edge=False, pad_edge=False)
    for i, h in enumerate(head(board)):
        t.add_column(h, justify="left" if i in (0, 5) else "right", no_wrap=True, overflow="ellipsis",
                     max_width=36 if i == 5 else None)
    for r in board.costs:
        t.add_row(*cells_of(board, r))
    note = lead_note(board)
    if note:
        t.caption = f"cost: {note}"
        t.caption_justify = "left"
    return t
