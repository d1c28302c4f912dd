"""The compact table ``harness run`` ends with: per task, each row's headline average over languages at the
task's final step, with its spread over seeds (the standard deviation of the per-seed averages) and the claims'
one-line summary. The full boards are ``harness leaderboard``'s; this reads the same runs the same way."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from leaderboard.model import Board, Leaderboard, Row


@dataclass
class SummaryTable:
    experiment: str
    profile: str
    tasks: list[tuple[str, str, str]]  # (task, headline metric, step label)
    rows: list[str]  # row labels, in the first task's order (best first)
    cells: dict[tuple[str, str], str] = field(default_factory=dict)  # (row, task) -> "0.322 ± 0.013 (3)"
    claims: str = ""
    precision: str = ""  # the boards' precision of evaluation and CPT (Board.precision)


def seed_spread(row: Row, languages: list[str]) -> tuple[float | None, int]:
    """The standard deviation over seeds of a row's average over ``languages`` (None with one seed), and the
    number of seeds that have every language."""
    per_seed: dict[str, list[float]] = {}
    for lang in languages:
        entry = row.entries.get(lang)
        if entry is None:
            return None, 0
        for seed, v in zip(entry.seeds, entry.values, strict=False):
            per_seed.setdefault(seed, []).append(v)
    complete = [statistics.fmean(v) for v in per_seed.values() if len(v) == len(languages)]
    return (statistics.stdev(complete) if len(complete) > 1 else None), len(complete)


def _cell(board: Board, row: Row) -> str:
    if row.avg is None:
        return "incomplete"
    sd, n = seed_spread(row, board.common or board.languages)
    text = f"{row.avg:.3f}"
    return text + (f" ± {sd:.3f}" if sd is not None else "") + (f" ({n} seeds)" if n > 1 else "")


def summaries(lb: Leaderboard, tasks: list[str] | None = None) -> list[SummaryTable]:
    """One table per profile of the leaderboard: the headline boards at each task's final step."""
    heads = [b for b in lb.boards if b.headline and b.kind == "final" and (tasks is None or b.task in tasks)]
    out = []
    for profile in sorted({b.profile for b in heads}):
        boards = sorted((b for b in heads if b.profile == profile), key=lambda b: (tasks or []).index(b.task)
                        if tasks and b.task in tasks else 99)
        table = SummaryTable(lb.experiment, profile, [(b.task, b.metric, b.step_label) for b in boards], [],
                             precision="; ".join(dict.fromkeys(b.precision for b in boards if b.precision)))
        for b in boards:
            ranked = sorted(b.rows, key=lambda r: (r.avg is None, -(r.avg or 0) if b.higher_is_better
                                                   else (r.avg or 0)))
            for r in ranked:
                if r.label not in table.rows:
                    table.rows.append(r.label)
                table.cells[(r.label, b.task)] = _cell(b, r)
        from leaderboard.claims import summary

        table.claims = summary([c for c in lb.claims if getattr(c, "profile", profile) == profile]) if lb.claims \
            else ""
        out.append(table)
    return out


def render(table: SummaryTable, console: Any) -> None:
    """The table on ``console`` (stdout): rows x tasks, then the claims' sentence."""
    from rich.markup import escape
    from rich.table import Table

    from leaderboard.render_terminal import title_text

    precision = [f"{table.precision} ·"] if table.precision else []
    # the title on lines of its own at the console's width, broken between its names (not at the table's width)
    console.print(title_text([f"{table.experiment} ·", f"profile {table.profile} ·", *precision,
                              "average over languages ± sd over seeds"], console.width))
    t = Table()
    t.add_column("row")
    for task, metric, step in table.tasks:
        t.add_column(f"{task} {metric}\n{step}", justify="right")
    for label in table.rows:
        t.add_row(escape(label), *(table.cells.get((label, task), "-") for task, _, _ in table.tasks))
    console.print(t)
    if table.claims:
        console.print("claims: " + escape(table.claims))
