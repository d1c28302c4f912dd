"""Terminal rendering (rich): the board with the best value of every column in bold green, its slices and the
paired tests. Boards with many languages are printed transposed (languages as rows) so that they stay readable.

Every table meets the console's width: a table wider than the console is split into parts that each repeat the key
column (row names or languages), and long names wrap at words, so no glyph is cut and no column is dropped; the
files (``render_text``) hold the whole tables. The claims table is never split: it is one short table (its details
are in the Markdown and HTML boards) whose claims wrap beside their verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from leaderboard import fmt
from leaderboard.claims import brief_rows, summary
from leaderboard.costs import cost_table
from leaderboard.model import Board, Row
from leaderboard.titles import NullWriter, title_atoms, title_text

BEST = "bold green"
TRANSPOSE_ABOVE = 16  # languages


def _mark(text: str, best: bool) -> str:
    return f"[{BEST}]{text}[/{BEST}]" if best else text


def _cell(board: Board, row: Row, lang: str) -> str:
    e = row.entries.get(lang)
    if e is None:
        return f"[dim]{fmt.MISSING}[/dim]"
    text = fmt.cell(board, e.mean)
    best = row.kind == "ours" and e.mean == board.best(lang)
    out = _mark(text, best)
    if e.std is not None:
        out += f"[dim]±{fmt.std(e.std)}[/dim]"
    return out


def _summary(board: Board, row: Row) -> list[str]:
    """avg, (avg∩), rank and the init-report columns of a row."""
    ours = row.kind == "ours"
    show_common = board.common != board.languages
    best_avg = board.best_of([r.avg for r in board.rows])
    best_common = board.best_of([r.avg_common for r in board.rows])
    best_rank = board.best_of([r.mean_rank for r in board.rows], lower_is_better=True)
    avg = fmt.cell(board, row.avg) if row.avg is not None else ("[dim]gaps[/dim]" if ours else fmt.MISSING)
    cells = [_mark(avg, ours and row.avg is not None and row.avg == best_avg)]
    if show_common:
        cells.append(_mark(fmt.cell(board, row.avg_common), ours and row.avg_common is not None
                           and row.avg_common == best_common))
    cells.append(_mark(fmt.rank(row.mean_rank), ours and row.mean_rank is not None and row.mean_rank == best_rank))
    for key, _ in board.init_columns():
        cells.append(fmt.init(key, row.init.get(key)))
    return cells


def _summary_headers(board: Board) -> list[str]:
    heads = ["avg"] + (["avg∩"] if board.common != board.languages else []) + ["rank"]
    return heads + [name for _, name in board.init_columns()]


# -- tables that fit the width ------------------------------------------------------------------------------
NUMBER_HEADER_CAP = 12  # a number column's header wraps at words beyond this many cells
TEXT_CAP = 60  # a text column (row names with their qualifiers, claims, details) wraps beyond this many cells
UNLIMITED = 10**6


@dataclass
class Col:
    header: str
    justify: str = "right"
    text: bool = False  # words that may wrap over lines (names, details); numbers are kept whole when they fit


@dataclass
class Grid:
    """A table before it meets a width: a key column repeated in every part, then the other columns."""

    title: str
    key: Col
    cols: list[Col]
    rows: list[tuple[str, list[str]]] = field(default_factory=list)
    sections: set[int] = field(default_factory=set)  # row indexes that start a new section

    def add(self, key: str, cells: list[str], section: bool = False) -> None:
        if section:
            self.sections.add(len(self.rows))
        self.rows.append((key, list(cells)))


def _cells(markup: str) -> int:
    """Terminal cells the markup takes on its widest line."""
    return max((Text.from_markup(line).cell_len for line in markup.split("\n")), default=0)


def _longest_word(markup: str) -> int:
    return max((cell_len(w) for w in Text.from_markup(markup).plain.split()), default=0)


def _want(col: Col, cells: list[str], limit: bool) -> int:
    """The width a column asks for: every number whole, headers and texts wrapped at words beyond a cap."""
    widest = max([_cells(c) for c in cells] or [1])
    head = _cells(col.header)
    if not limit:
        return max(widest, head, 1)
    if col.text:
        return max(1, min(max(widest, head), max(TEXT_CAP, 8)))
    return max(widest, min(head, max(NUMBER_HEADER_CAP, _longest_word(col.header))), 1)


def _table_width(widths: list[int]) -> int:
    """A rich table with the default box and padding: one cell of padding either side, one rule between columns
    and one at each edge."""
    return sum(w + 2 for w in widths) + len(widths) + 1


def _parts(key_w: int, widths: list[int], width: int) -> list[list[int]]:
    """Consecutive column indexes per part, so that every part with the key column fits ``width``."""
    parts: list[list[int]] = []
    cur: list[int] = []
    for i, w in enumerate(widths):
        if cur and _table_width([key_w, *[widths[j] for j in cur], w]) > width:
            parts.append(cur)
            cur = []
        cur.append(i)
    if cur or not parts:
        parts.append(cur)
    return parts


def fit(grid: Grid, width: int | None) -> list[Any]:
    """``grid`` as one rich table when it fits ``width`` terminal cells (None: any width), else as several, each
    repeating the key column and titled with the part it holds; wide texts wrap, nothing is cut or dropped."""
    limit = width is not None
    width = UNLIMITED if width is None else max(int(width), 20)
    # the key column (row names) whole on one line where a third of the width holds it: a row's qualifiers do not
    # wrap it over lines
    key_w = _want(grid.key, [k for k, _ in grid.rows], False)
    widths = [_want(c, [r[1][i] for r in grid.rows], limit) for i, c in enumerate(grid.cols)]
    if limit:
        # a key column never takes more than a third of the width, and each part holds at least one column
        key_w = min(key_w, max(8, width // 3))
        room = width - _table_width([key_w, 0]) - 2
        widths = [max(1, min(w, room)) for w in widths]
    parts = _parts(key_w, widths, width)
    if len(parts) > 1:  # as many parts, as even as they come: the narrowest width that needs no more of them
        narrow = width
        while narrow > 20 and len(_parts(key_w, widths, narrow - 1)) == len(parts):
            narrow -= 1
        parts = _parts(key_w, widths, narrow)
    tables: list[Any] = []
    title_width = width if limit else None
    for n, idx in enumerate(parts, 1):
        t = Table()
        # the title on lines of its own, at the console's width rather than the table's, broken between names
        atoms = title_atoms(grid.title)
        if len(parts) > 1:
            heads = [" ".join(Text.from_markup(grid.cols[i].header).plain.split()) for i in idx]
            atoms = [*atoms[:-1], atoms[-1] + " ·", f"part {n}/{len(parts)}:", heads[0],
                     *(["…", heads[-1]] if len(heads) > 1 else [])]
        tables.append(title_text(atoms, title_width))
        t.add_column(grid.key.header, justify=grid.key.justify, overflow="fold",
                     **({"width": key_w} if limit else {}))
        for i in idx:
            c = grid.cols[i]
            t.add_column(c.header, justify=c.justify, overflow="fold", **({"width": widths[i]} if limit else {}))
        for r, (key, cells) in enumerate(grid.rows):
            if r in grid.sections and r > 0:
                t.add_section()
            t.add_row(key, *[cells[i] for i in idx])
        tables.append(t)
    return tables


def _width(console: Console, split: bool) -> int | None:
    return console.width if split else None


# -- the tables -----------------------------------------------------------------------------------------------
def board_grid(board: Board, transpose: bool | None = None) -> Grid:
    transpose = len(board.languages) > TRANSPOSE_ABOVE if transpose is None else transpose
    title = f"{board.title} ({fmt.direction(board)})"
    rows = board.rows + board.paper_rows
    if not transpose:
        g = Grid(title, Col("row", "left", text=True), [Col(lang) for lang in board.languages]
                 + [Col(h) for h in _summary_headers(board)])
        for i, r in enumerate(rows):
            label = r.label if r.kind == "ours" else f"[italic]{r.label}[/italic]"
            label += f"[bold red]{escape(fmt.blowup(r))}[/bold red]" if r.blowup else ""
            g.add(label, [*[_cell(board, r, lang) for lang in board.languages], *_summary(board, r)],
                  section=r.kind != "ours" and (i == 0 or rows[i - 1].kind == "ours"))
        return g
    g = Grid(title, Col("language", "left"), [Col(r.label + escape(fmt.blowup(r))) for r in rows])
    for lang in board.languages:
        g.add(lang, [_cell(board, r, lang) for r in rows])
    sums = [_summary(board, r) for r in rows]
    for i, h in enumerate(_summary_headers(board)):
        g.add(h, [s[i] for s in sums], section=i == 0)
    return g


def slices_grid(board: Board) -> Grid | None:
    if not board.slices:
        return None
    g = Grid(f"slices · {board.task} · {board.metric} · {board.step_label}", Col("row", "left", text=True),
             [Col(f"{s.dimension}: {s.header}") for s in board.slices])
    for r in board.rows + board.paper_rows:
        cells = []
        for s in board.slices:
            v = s.averages.get(r.label)
            best = board.best_of([s.averages.get(o.label) for o in board.rows])
            cells.append(_mark(fmt.cell(board, v), r.kind == "ours" and v is not None and v == best))
        g.add(r.label if r.kind == "ours" else f"[italic]{r.label}[/italic]", cells)
    return g


def pairs_grid(board: Board, limit_rows: int = 6) -> Grid | None:
    if not board.pairs:
        return None
    pairs = board.pairs
    note = ""
    if len(board.rows) > limit_rows:  # many rows: the best row against each other
        top = board.rows[0].label
        pairs = [p for p in pairs if top in (p.a, p.b)]
        note = f" (against {top}; all pairs in the HTML page)"
    g = Grid(f"paired Wilcoxon signed-rank over languages · {board.step_label}{note}", Col("A", "left", text=True),
             [Col("B", "left", text=True)] + [Col(c) for c in ("langs", "A wins/ties/losses", "median A-B", "p",
                                                                "p Holm")])
    for p in pairs:
        g.add(p.a, [p.b, str(p.n), f"{p.wins}/{p.ties}/{p.losses}", fmt.value(p.median_diff, True),
                    fmt.p(p.p_value), fmt.p(p.p_holm)])
    return g


def render(board: Board, console: Console, *, transpose: bool | None = None, details: bool = True,
           split: bool = True) -> None:
    """The board (then its slices and paired tests) at the console's width: a table wider than the console is
    split into parts that repeat the row names (``split=False``: whole tables, for files)."""
    width = _width(console, split)
    for t in fit(board_grid(board, transpose), width):
        console.print(t)
    for note in board.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if tie_note := fmt.ties_note(board):
        console.print(f"[yellow]note:[/yellow] {escape(tie_note)} (none is marked)")
    if (costs := cost_table(board)) is not None:
        console.print(costs)
    if details:
        for g in (slices_grid(board), pairs_grid(board)):
            if g is not None:
                for t in fit(g, width):
                    console.print(t)
    console.print()


def claims_table(head: list[str], rows: list[list[str]], width: int | None,
                 title: str = "the papers' claims on this run") -> Table:
    """The claims as ONE table that meets ``width`` (None: any width), each verdict on its claim's first line: the
    claim and its task wrap at words, the verdict and the numbers stay whole. Where six columns cannot fit, the
    claim (task below it) sits beside its verdict and numbers stacked in one cell; nothing is split into parts."""
    style = {"holds": "green", "contradicted": "red", "inconclusive": "yellow"}
    words = [max((cell_len(w) for w in r[0].split()), default=1) for r in rows]
    nat = [max([cell_len(head[i])] + [cell_len(r[i]) for r in rows]) for i in range(len(head))]
    table = Table(title=title, title_justify="left")
    if width is None:
        for i, h in enumerate(head):
            table.add_column(h, justify="left" if i < 3 else "right", no_wrap=True)
        for r in rows:
            table.add_row(*[Text(c, style=style.get(c, "dim") if i == 2 else "") for i, c in enumerate(r)])
        return table
    # the task (and its group) whole where the claims keep their width beside it, else what the claims leave
    task_word = max((cell_len(w) for r in rows for w in r[1].split()), default=1)
    task_w = min(nat[1], max(12, task_word, width - _table_width([nat[0], 0, *nat[2:]])))
    rest = [task_w, *nat[2:]]
    room = width - _table_width([0, *rest])
    if room >= max(16, max(words, default=1)):
        for i, (h, w) in enumerate(zip(head, [min(nat[0], room), *rest], strict=True)):
            table.add_column(h, justify="left" if i < 3 else "right", width=w, overflow="fold")
        for r in rows:
            table.add_row(*[Text(c, style=style.get(c, "dim") if i == 2 else "") for i, c in enumerate(r)])
        return table
    right = min(max(nat[2:]), max(8, (width - _table_width([0, 0])) // 2))
    table.show_lines = True  # a claim spans several lines here: a rule between claims
    table.add_column(f"{head[0]} · {head[1]}", justify="left", width=max(1, width - _table_width([0, right])),
                     overflow="fold")
    table.add_column(" · ".join(head[2:]), justify="right", width=right, overflow="fold")
    for r in rows:
        table.add_row(Text.assemble(r[0], "\n", (r[1], "dim")),
                      Text("\n").join([Text(r[2], style=style.get(r[2], "dim")), *map(Text, r[3:])]))
    return table


def render_claims(claims: list, console: Console, *, split: bool = True, details_hint: bool = True) -> None:
    """The papers' claims on this run: one sentence, then one table (claim, task, verdict, difference, interval,
    n) and the notes on what the design cannot show; the p-values, averages and every claim's note are in the
    Markdown and HTML boards (nothing when there are no claims)."""
    if not claims:
        return
    tested = [c for c in claims if c.status != "not tested"]
    console.print(f"[bold]{escape(summary(claims))}[/bold]")
    if tested:
        head, rows = brief_rows(tested)
        console.print(claims_table(head, rows, _width(console, split)))
    untested = list(dict.fromkeys(f"{c.claim.statement} ({c.where})" for c in claims if c.status == "not tested"))
    if untested:  # one line, not a row each: the rows they need are not on the board
        console.print(escape("not tested (a row they need is not on the board): " + "; ".join(untested)))
    for note in dict.fromkeys(c.design for c in claims if c.design):
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if details_hint:
        console.print("[dim]p-values, averages and a note per claim: `harness leaderboard --claims`, leaderboard.md "
                      "and leaderboard.html[/dim]")
    console.print()


def render_open_question(results: list, console: Console, *, split: bool = True) -> None:
    """The open question (:func:`leaderboard.claims.evaluate_open_question`): the question, then one table of OFA
    and HyperOFA against random on each source (its kind named), with the verdict, difference, interval and n
    (nothing where no decoder's rows are on the board)."""
    if not results:
        return
    from leaderboard.claims import OPEN_QUESTION, brief_rows

    console.print(f"[bold]{escape(OPEN_QUESTION)}[/bold]")
    head, rows = brief_rows([o.result for o in results])
    head[1] = "source · task"
    rows = [[r[0], f"{o.source} ({o.objective}) · {o.result.task}", *r[2:]]
            for r, o in zip(rows, results, strict=True)]
    console.print(claims_table(head, rows, _width(console, split), title="the open question, source by source"))
    console.print(escape(open_sign_sentence(results)))
    console.print()


def open_sign_sentence(results: list) -> str:
    """Which sign of the open question's differences is better, task by task: ``diff = OFA or HyperOFA minus
    random on each task's headline metric; on clm bpb ↓ a diff below 0 is the method ahead``."""
    from harness.core.record_read import untagged_task_facts

    parts = []
    for task in dict.fromkeys(o.result.task for o in results):
        facts = untagged_task_facts(task)
        better = "above" if facts.higher_is_better else "below"
        parts.append(f"on {task} {facts.headline or ''} {fmt.arrow(facts.higher_is_better)} a diff {better} 0 is "
                     "the method ahead")
    return "diff = OFA or HyperOFA minus random on each task's headline metric; " + "; ".join(parts)


def render_claims_detail(claims: list, console: Console, *, split: bool = True) -> None:
    """Every claim with its numbers (both averages, the difference and its interval, the p-value, n) in one table
    whose claim and task wrap at words to meet the console's width, then the note that says why each verdict
    (``harness leaderboard --claims``)."""
    if not claims:
        console.print("no claim of the papers could be tested on these runs")
        return
    from leaderboard.claims import LEGEND, claim_rows

    head, rows = claim_rows(claims)
    keep = [i for i, h in enumerate(head) if h not in ("paper", "note")
            and (h != "profile" or len({c.profile for c in claims}) > 1)]
    style = {"holds": "green", "contradicted": "red", "inconclusive": "yellow"}
    table = Table(title="the papers' claims on this run", title_justify="left",
                  width=None if not split else min(console.width, UNLIMITED))
    for i in keep:
        words = head[i] in ("claim", "task")
        table.add_column(head[i], justify="left" if i < 5 else "right", no_wrap=not words,
                         overflow="fold", ratio=(2 if head[i] == "claim" else 1) if words else None)
    for r in rows:
        table.add_row(*[Text(r[i], style=style.get(r[i], "") if head[i] == "verdict" else "") for i in keep])
    console.print(f"[bold]{escape(summary(claims))}[/bold]")
    console.print(table)
    for r in rows:
        console.print(escape(f"{r[0]} · {r[2]}: {r[-1]}"))
    console.print(f"[dim]{escape(LEGEND)}[/dim]")
    console.print()


def overview_notes(boards: list[Board]) -> list[str]:
    """The notes of the overview (each once): what the headline boards say about how their rows compare, without
    the settings every row shares (those are on the per-language boards)."""
    out: list[str] = []
    for b in boards:
        for n in b.notes:
            if n.startswith(f"{b.task} protocol: "):
                continue
            if n not in out:
                out.append(n)
    return out


def render_overview(lb: Any, console: Console, *, tasks: list[str] | None = None, html: str | None = None) -> None:
    """What ``harness leaderboard`` prints by default, on one screen for the main job: the papers' claims once,
    one table of every task's headline average per row (the results table of ``harness run``), the notes once,
    and where the per-language tables, the claims' details and the page are."""
    from leaderboard.summary import render as render_summary
    from leaderboard.summary import summaries

    render_claims([c for c in lb.claims if tasks is None or c.task in (*tasks, "held-out diagnostic")], console,
                  details_hint=False)
    render_open_question([o for o in lb.open_question if tasks is None or o.result.task in tasks], console)
    heads = [b for b in lb.headline_boards() if tasks is None or b.task in tasks]
    tables = summaries(lb, tasks)
    for table in tables:
        table.claims = ""  # the claims are above, once
        render_summary(table, console)
    if not any(t.costs for t in tables):  # what each method costs, once (beside the averages where a table has them)
        costs = next((cost_table(b) for b in heads if b.costs), None)
        if costs is not None:
            console.print(costs)
    printed = {n for t in tables for n in t.notes}  # said under a table already: not again
    for note in overview_notes(heads):
        if note not in printed:
            console.print(f"[yellow]note:[/yellow] {escape(note)}")
    page = "the HTML page (its path below)" if html else "the HTML page (leaderboard.html, unless --no-write)"
    console.print(escape(f"more: `harness leaderboard --langs` (per-language tables, slices, paired tests; --task T: "
                         f"one task), `--claims` (each claim's numbers and note), {page}"))


def render_text(boards: list[Board], width: int = 400, claims: list | None = None) -> str:
    """The terminal rendering as plain text (the ``leaderboard.txt`` artifact)."""
    console = Console(width=width, record=True, color_system=None, file=NullWriter())
    render_claims(claims or [], console, split=False)
    for b in boards:
        render(b, console, split=False)
    return console.export_text()
