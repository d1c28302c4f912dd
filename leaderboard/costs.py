"""What each method's rows cost, beside the board: one line per method with its initialization's wall time and
peak memory (``init/seconds``, ``init/peak_rss_mb``, as each cell logged them), what it needs (the resources and
models its cells' init reports name under ``costs.needs``), the GPU-hours ``harness plan`` estimates for one
initialization at the papers' scale (``costs.gpu_hours_plan``), the method's best average on the board and its
init time as a multiple of the cheapest method's. A one-line note under the table says what the board's lead
costs: the best method's margin over the runner-up and the ratio of their init times, so that a row that wins by
0.01 at 100x the cost says so.

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

HEAD = ("method", "cells", "init s", "peak MB", "GPU-h (plan)", "needs", "best avg", "x time")


@dataclass
class CostRow:
    method: str
    cells: int
    seconds: float | None  # median over the method's cells of the initialization's own time
    peak_mb: float | None  # highest peak RSS of the initialization over its cells
    gpu_hours: float | None  # `harness plan`'s estimate of one initialization at the papers' scale
    needs: list[str] | None = field(default=None)  # None: not logged by its cells
    avg: float | None = None  # the method's best row average on the board
    ratio: float | None = None  # seconds / the cheapest method's seconds


def _method_of(row: Any) -> str | None:
    return row.variant.method if row.variant is not None else None


def cost_rows(board: Any, data: Any) -> list[CostRow]:
    """One :class:`CostRow` per method of ``board``'s rows, from the cells of the board's task and profile."""
    cells: dict[str, dict[str, Any]] = {}
    for run in data.tasks:
        if run.task != board.task or run.profile != board.profile:
            continue
        p = data.parent(run)
        if p is not None:
            cells.setdefault(p.method, {})[p.run_id] = p
    avgs: dict[str, list[float]] = {}
    for r in board.rows:
        if (m := _method_of(r)) is not None and r.avg is not None:
            avgs.setdefault(m, []).append(r.avg)
    out = []
    for method in dict.fromkeys(m for r in board.rows if (m := _method_of(r)) is not None):
        mine = list(cells.get(method, {}).values())
        secs = [c.metrics["init/seconds"] for c in mine if "init/seconds" in c.metrics]
        peaks = [c.metrics["init/peak_rss_mb"] for c in mine if "init/peak_rss_mb" in c.metrics]
        logged = [c.init_report.get("costs") for c in mine if isinstance(c.init_report.get("costs"), dict)]
        needs = sorted({n for cost in logged for n in cost.get("needs", [])}) if logged else None
        hours = [float(cost["gpu_hours_plan"]) for cost in logged if cost.get("gpu_hours_plan") is not None]
        vals = avgs.get(method, [])
        best = (min(vals) if not board.higher_is_better else max(vals)) if vals else None
        out.append(CostRow(method, len(mine), statistics.median(secs) if secs else None,
                           max(peaks) if peaks else None, max(hours) if hours else None, needs, best))
    cheapest = min((r.seconds for r in out if r.seconds), default=None)
    for r in out:
        r.ratio = r.seconds / cheapest if cheapest and r.seconds is not None else None
    return out


def attach_costs(boards: list[Any], data: Any) -> None:
    """Each task's and profile's headline board at its final step gets its :func:`cost_rows` (``board.costs``)."""
    for b in boards:
        if b.headline and b.kind == "final":
            b.costs = cost_rows(b, data)


def _num(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.{digits}f}"


def cells_of(board: Any, r: CostRow) -> list[str]:
    """The row's cells as text, in the order of :data:`HEAD`."""
    needs = "not logged" if r.needs is None else (", ".join(r.needs) or "the two tokenizers")
    return [r.method, str(r.cells), _num(r.seconds), _num(r.peak_mb, 0), _num(r.gpu_hours, 2), needs,
            fmt.cell(board, r.avg), "-" if r.ratio is None else f"{r.ratio:,.0f}x" if r.ratio >= 10
            else f"{r.ratio:.1f}x"]


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
        return (f"{', '.join(r.method for r in best)} share the best average ({fmt.cell(board, a.avg)})"
                + (f"; the cheapest of them is {cheap.method} ({_num(cheap.seconds)} s)" if cheap else ""))
    lead = abs(a.avg - b.avg)
    cost = (f"at {a.seconds / b.seconds:,.1f}x its init time ({_num(a.seconds)} s vs {_num(b.seconds)} s)"
            if a.seconds and b.seconds else "(init times not logged)")
    return f"{a.method} leads {b.method} by {fmt.cell(board, lead)} {cost}"


def costs_html(board: Any) -> str:
    """The cost table of ``board`` as one compact HTML table with its note ('' when the board has none)."""
    if not getattr(board, "costs", None):
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells_of(board, r)) + "</tr>"
                   for r in board.costs)
    note = lead_note(board)
    return (f'<table class="costs" data-board="{escape(board.id)}"><caption>what each method costs '
            f"(initialization, median over its cells)</caption><thead><tr>{head}</tr></thead><tbody>{body}"
            "</tbody></table>" + (f'<p class="note">cost: {escape(note)}</p>' if note else ""))


def cost_table(board: Any) -> Any:
    """The cost table of ``board`` as a rich Table, one line per method (None when the board has none)."""
    if not getattr(board, "costs", None):
        return None
    from rich.table import Table

    t = Table(title=f"what each method costs (initialization, median over its cells; best avg: {board.task} "
                    f"{board.metric})", title_justify="left", box=None, show_edge=False, pad_edge=False)
    for i, h in enumerate(HEAD):
        t.add_column(h, justify="left" if i in (0, 5) else "right", no_wrap=True, overflow="ellipsis",
                     max_width=36 if i == 5 else None)
    for r in board.costs:
        t.add_row(*cells_of(board, r))
    note = lead_note(board)
    if note:
        t.caption = f"cost: {note}"
        t.caption_justify = "left"
    return t
