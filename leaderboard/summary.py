"""The compact table ``harness run`` ends with: per task, each row's headline average over languages at the
task's final step, with its spread over seeds (the standard deviation of the per-seed averages) and the claims'
one-line summary. The full boards are ``harness leaderboard``'s; this reads the same runs the same way.

A row is marked where its numbers are not simply this command's with the method's current code
(:func:`row_origins`): ``[older code]`` when a cell run of the row recorded another version of its method's code
than the one installed now, ``[earlier run]`` when none of the row's cell runs is one of the command's cells (an
earlier run of the same experiment), ``[seeds 2, 3 earlier]`` when some of its seeds are, ``[blew up]`` when its
held-out loss or its new rows' norms are far outside the others' (:mod:`leaderboard.blowups`); a note under the table
says what each mark means. Each column holds one step and names its metric's direction (↑ / ↓); where rows stopped
CPT at different steps, a task has a column at step 0 and one at each CPT budget's final step. A decoder's rows show
their held-out loss in nats beside a uniform guess's, and each headline metric that needs it is defined under the
table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from leaderboard.blowups import MARK, blowup_note
from leaderboard.fmt import arrow
from leaderboard.model import (
    GUESS,
    HELDOUT,
    METRIC_NOTES,
    REFERENCE,
    RETAINED,
    Board,
    Leaderboard,
    Row,
    sources_phrase,
)


@dataclass
class SummaryTable:
    experiment: str
    profile: str
    # the columns: (task, headline metric, step label), each the values of one step (a task whose rows stopped CPT
    # at different steps: a column at step 0 and one per CPT budget's final step)
    tasks: list[tuple[str, str, str]]
    rows: list[str]  # row labels, in the first task's order (best first)
    # (row, column: "task · step label") -> "0.322 ± 0.013 (3)"
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    claims: str = ""
    precision: str = ""  # the boards' precision of evaluation and CPT (Board.precision)
    sources: str = ""  # the rows' sources and their kinds (Board.sources: model.sources_phrase)
    # what each row's method costs (leaderboard.costs), beside its averages: row label -> the cost cells of
    # COST_COLUMNS; cost_note: the lead's cost (costs.lead_note) and which board the costs are of
    costs: dict[str, list[str]] = field(default_factory=dict)
    cost_note: str = ""
    notes: list[str] = field(default_factory=list)  # what the rows' marks mean, printed under the table


@dataclass
class RowOrigin:
    """Where a row's numbers come from, against the command that prints it."""

    method: str
    older_code: list[str] = field(default_factory=list)  # files of its method changed since a cell of it ran
    earlier_seeds: list[str] = field(default_factory=list)  # seeds of the row that are not the command's cells
    all_earlier: bool = False  # no cell of the row is the command's

    def marks(self) -> list[str]:
        out = ["older code"] if self.older_code else []
        if self.all_earlier:
            out.append("earlier run")
        elif self.earlier_seeds:
            out.append(f"seed{'s' if len(self.earlier_seeds) > 1 else ''} {', '.join(self.earlier_seeds)} earlier")
        return out


def row_origins(data: Any, ours: set[str], older_code: dict[str, list[str]]) -> dict[tuple[str, Any], RowOrigin]:
    """``(profile, variant) -> RowOrigin`` for every row of the experiment ``data`` (:class:`leaderboard.collect.
    ExperimentData`) whose numbers are not all the command's own with its method's current code: ``ours``: the ids
    of the command's cell runs; ``older_code``: cell run id -> the files of its method that changed since it ran
    (runs with the current code, or whose code was not recorded, absent)."""
    from leaderboard.labels import _variant

    groups: dict[tuple[str, Any], list[Any]] = {}
    for cell in data.cells.values():
        groups.setdefault((cell.profile, _variant(cell, cell, False)), []).append(cell)
    out = {}
    for key, cells in groups.items():
        origin = RowOrigin(cells[0].method, sorted({f for c in cells for f in older_code.get(c.run_id, [])}),
                           sorted({c.seed for c in cells if c.run_id not in ours}, key=_seed_key),
                           not any(c.run_id in ours for c in cells))
        if origin.marks():
            out[key] = origin
    return out


def _seed_key(seed: str) -> tuple[int, str]:
    return (int(seed), seed) if seed.lstrip("-").isdigit() else (1 << 30, seed)


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
        return f"incomplete ({len(row.entries)} of {len(board.languages)} languages)"
    sd, n = seed_spread(row, board.common or board.languages)
    text = f"{row.avg:.3f}"
    text += (f" ± {sd:.3f}" if sd is not None else "") + (f" ({n} seeds)" if n > 1 else "")
    return text


def column(board: Board) -> str:
    """A summary column's key: its task and the one step its values are of."""
    return f"{board.task} · {board.step_label}"


def summaries(lb: Leaderboard, tasks: list[str] | None = None,
              origins: dict[tuple[str, Any], RowOrigin] | None = None) -> list[SummaryTable]:
    """One table per profile of the leaderboard: the headline boards at each task's final step. ``origins``
    (:func:`row_origins`): rows to mark, with a note under the table for each mark used."""
    heads = [b for b in lb.boards if b.headline and b.kind == "final" and (tasks is None or b.task in tasks)]
    out = []
    for profile in sorted({b.profile for b in heads}):
        boards = sorted((b for b in heads if b.profile == profile), key=lambda b: (tasks or []).index(b.task)
                        if tasks and b.task in tasks else 99)
        boards = [c for b in boards for c in (b, *lb.budget_boards(b))]  # a column per step
        table = SummaryTable(lb.experiment, profile, [(b.task, f"{b.metric} {arrow(b.higher_is_better)}",
                                                       b.step_label) for b in boards], [],
                             precision="; ".join(dict.fromkeys(b.precision for b in boards if b.precision)),
                             sources=sources_phrase({k: v for b in boards for k, v in b.sources.items()})
                             if any(b.sources for b in boards) else "")
        methods: dict[str, str] = {}  # row label -> its method (what its costs are looked up by)
        shown: dict[str, str] = {}  # a board's row label -> its label in the table (with its marks)
        for b in boards:
            ranked = sorted(b.rows, key=lambda r: (r.avg is None, -(r.avg or 0) if b.higher_is_better
                                                   else (r.avg or 0)))
            for r in ranked:
                origin = (origins or {}).get((profile, r.variant))
                label = r.label + "".join(f" [{m}]" for m in origin.marks()) if origin else r.label
                label += " [languages by seed]" if r.uneven_languages() else ""
                label += f" {MARK}" if r.blowup else ""
                shown[r.label] = label
                if label not in table.rows:
                    table.rows.append(label)
                table.cells[(label, column(b))] = _cell(b, r)
                if r.variant is not None:
                    methods[label] = r.variant.method
        cost_board = next((b for b in boards if b.costs), None)
        if cost_board is not None:
            _attach_costs(table, cost_board, methods)
        for b in boards:  # a uniform guess beside the losses (ln |V|), below the rows
            for r in b.paper_rows:
                if r.kind == GUESS and r.avg is not None:
                    label = r.label.split(" (")[0] + " (ln |V|)" if b.metric == "loss" else r.label
                    if label not in table.rows:
                        table.rows.append(label)
                    table.cells[(label, column(b))] = f"{r.avg:.3f}"
        table.notes = _notes([o for (p, _), o in (origins or {}).items() if p == profile], table.rows)
        _retained(table, lb, boards, shown)
        _meaning(table, boards, shown)
        from leaderboard.claims import summary

        table.claims = summary([c for c in lb.claims if getattr(c, "profile", profile) == profile]) if lb.claims \
            else ""
        out.append(table)
    return out


def _retained(table: SummaryTable, lb: Leaderboard, boards: list[Board], shown: dict[str, str]) -> None:
    """A transplant's measure beside its bits per byte (a derived world's ``clm`` / ``mlm-bpb``): the reference
    rows' bits per byte (the source with its own tokenizer, the donor) in the task's column, and a column of BPB
    retained (the source's bits per byte over the row's) with its interval over languages and seeds."""
    for b in boards:
        kept = next((k for k in lb.boards if k.metric == RETAINED and (k.task, k.profile, k.kind, k.step_label) ==
                     (b.task, b.profile, b.kind, b.step_label)), None)
        if kept is None:
            continue
        key = (f"{b.task} BPB retained", "↑", b.step_label)
        table.tasks.append(key)
        col = f"{key[0]} · {key[2]}"
        for r in kept.rows:
            if r.label in shown and r.avg is not None:
                ci = f" [{r.avg_ci[0]:.3f}, {r.avg_ci[1]:.3f}]" if r.avg_ci else ""
                table.cells[(shown[r.label], col)] = f"{r.avg:.3f}{ci}"
        for r in b.paper_rows:
            if r.kind == REFERENCE and r.avg is not None:
                if r.label not in table.rows:
                    table.rows.append(r.label)
                table.cells[(r.label, column(b))] = f"{r.avg:.3f}"
                if RETAINED in r.init:
                    table.cells[(r.label, col)] = f"{r.init[RETAINED]:.3f}"
        table.notes.append(METRIC_NOTES[RETAINED])


def _meaning(table: SummaryTable, boards: list[Board], shown: dict[str, str]) -> None:
    """What the table's numbers mean: each row's held-out loss in nats beside a uniform guess's where the rows are
    a decoder's (a column of its own), why a row is marked as blown up, and what each headline metric is."""
    loss_board = next((b for b in boards if any(HELDOUT in r.init for r in b.rows)), None)
    if loss_board is not None:
        key = ("held-out loss", "↓ nats", loss_board.step_label)
        table.tasks.append(key)
        for r in loss_board.rows:
            if HELDOUT in r.init and r.label in shown:
                table.cells[(shown[r.label], f"{key[0]} · {key[2]}")] = f"{r.init[HELDOUT]:,.2f}"
        if loss_board.guess is not None:
            guess = next((label for label in table.rows if label.startswith("uniform guess")), None)
            if guess is None:
                guess = "uniform guess (ln |V|)"
                table.rows.append(guess)
            table.cells[(guess, f"{key[0]} · {key[2]}")] = f"{loss_board.guess:,.2f}"
    marked = {r.label: r.blowup for b in boards for r in b.rows if r.blowup}
    if marked:
        table.notes.append(blowup_note(marked))
    table.notes += [METRIC_NOTES[m] for m in dict.fromkeys(b.metric for b in boards) if m in METRIC_NOTES]


# the cost table's columns shown beside the averages (leaderboard.costs.KEYS: its row is the row's, its average the
# row's own); "plan" names its unit in each cell: core-minutes on a board of CPU cells, GPU-hours on a GPU board
COST_COLUMNS = ("init s", "peak MB", "plan", "needs", "x time")


def _attach_costs(table: SummaryTable, board: Board, methods: dict[str, str]) -> None:
    """The cost cells of each row (:mod:`leaderboard.costs`, of the headline board ``board``): those of the board's
    row of the same variant (the table's label is the board row's, with its marks), never another variant's."""
    from leaderboard.costs import CPU_PLAN, cost_cells, lead_note, plan_head

    unit = "core-min" if plan_head(board) == CPU_PLAN else "GPU-h"
    by_label = {r.name: cost_cells(board, r) for r in board.costs}
    for label in methods:
        base = next((b for b in sorted(by_label, key=len, reverse=True)
                     if label == b or label.startswith(b + " [")), None)
        if base is None:
            continue
        cells = dict(by_label[base])
        cells["plan"] = f"{cells['plan']} {unit}" if cells["plan"] != "-" else "-"
        table.costs[label] = [cells[c] for c in COST_COLUMNS]
    lead = lead_note(board)
    table.cost_note = ("what each method costs, each variant apart: its initialization's own time (the method's "
                       "call: not the worker's start, the world's loading or a wait for a shared product), median "
                       "over the row's cells; plan: what `harness plan` prices one initialization at (x time: as a "
                       "multiple of the cheapest row's, each taken as a second at least)"
                       + (f"; cost: {lead}" if lead else ""))


def _notes(origins: list[RowOrigin], rows: list[str]) -> list[str]:
    """What the marks used in ``rows`` mean."""
    notes = []
    stale: dict[str, set[str]] = {}
    for o in origins:
        stale.setdefault(o.method, set()).update(o.older_code)
    stale = {m: files for m, files in stale.items() if files}
    if stale and any("[older code]" in r for r in rows):
        notes.append("[older code]: computed by an older version of the method's code ("
                     + "; ".join(f"{m}: {', '.join(sorted(f))} changed since" for m, f in sorted(stale.items()))
                     + "); `--rerun stale` runs those cells again")
    if any("[earlier run]" in r for r in rows):
        notes.append("[earlier run]: from earlier runs of this experiment, not this command's cells "
                     "(`harness leaderboard` shows the whole experiment)")
    if any("[languages by seed]" in r for r in rows):
        notes.append("[languages by seed]: the row's seeds cover different languages (a run with --langs); its "
                     "average mixes languages averaged over different seeds (`harness leaderboard` shows which)")
    if any(" earlier]" in r for r in rows):
        notes.append("[seeds ... earlier]: the row averages this command's seeds with those seeds of earlier runs "
                     "of this experiment")
    return notes


def label_width(table: SummaryTable, values: dict[str, list[str]], console_width: int) -> int:
    """How wide the row labels may be so that the table fits ``console_width``: what the other columns take at
    their widest (three columns of padding and border each), at least 24."""
    heads = [max(len(f"{task} {metric}"), len(step)) for task, metric, step in table.tasks]
    widths = [max([h, *(len(v[i]) for v in values.values())]) for i, h in enumerate(heads)]
    costs = [max([len(c), *(len(row[i]) for row in table.costs.values())]) if c != "needs" else
             min(28, max([len(c), *(len(row[i]) for row in table.costs.values())]))
             for i, c in enumerate(COST_COLUMNS)] if table.costs else []
    return max(24, console_width - sum(w + 3 for w in widths + costs) - 4)


def label_fit(label: str, width: int) -> str:
    """``label`` whole when it fits ``width``, else shortened in the middle of its name, its marks (`` [..]``)
    kept whole at its end: a label never wraps onto a line of its own."""
    if len(label) <= width:
        return label
    i = label.find(" [")
    name, marks = (label[:i], label[i:]) if i > 0 else (label, "")
    keep = max(width - len(marks) - 1, 8)
    return name[: keep - keep // 2] + "…" + name[len(name) - keep // 2:] + marks


def render(table: SummaryTable, console: Any) -> None:
    """The table on ``console`` (stdout): rows x tasks, then the claims' sentence."""
    from rich.markup import escape
    from rich.table import Table

    from leaderboard.titles import title_text

    precision = [f"{table.precision} ·"] if table.precision else []
    # the title on lines of its own at the console's width, broken between its names (not at the table's width)
    precision += [f"{table.sources} ·"] if table.sources else []
    console.print(title_text([f"{table.experiment} ·", f"profile {table.profile} ·", *precision,
                              "average over languages ± sd over seeds"], console.width))
    t = Table()
    t.add_column("row", no_wrap=True)  # a label is whole on its line, or shortened in its middle (label_fit)
    for task, metric, step in table.tasks:
        t.add_column(f"{task} {metric}\n{step}", justify="right")
    for c in COST_COLUMNS if table.costs else ():
        t.add_column(c, justify="left" if c == "needs" else "right", no_wrap=True, overflow="ellipsis",
                     max_width=28 if c == "needs" else None)
    blank = [""] * len(COST_COLUMNS) if table.costs else []  # (a uniform guess costs nothing)
    values = {label: [table.cells.get((label, f"{task} · {step}"), "-") for task, _, step in table.tasks]
              for label in table.rows}
    width = label_width(table, values, console.width)
    for label in table.rows:
        t.add_row(escape(label_fit(label, width)), *values[label], *map(escape, table.costs.get(label, blank)))
    console.print(t)
    if table.cost_note:
        console.print(escape(table.cost_note))
    for note in table.notes:
        console.print(escape(note))
    if table.claims:
        console.print("claims: " + escape(table.claims))
