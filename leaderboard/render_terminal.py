"""Terminal rendering (rich): the board with the best value of every column in bold green, its slices and the
paired tests. Boards with many languages are printed transposed (languages as rows) so that they stay readable."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from leaderboard import fmt
from leaderboard.claims import claim_rows, summary
from leaderboard.tables import Board, Row

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


def board_table(board: Board, transpose: bool | None = None) -> Table:
    transpose = len(board.languages) > TRANSPOSE_ABOVE if transpose is None else transpose
    title = f"{board.title} ({fmt.direction(board)})"
    t = Table(title=title, title_justify="left")
    rows = board.rows + board.paper_rows
    if not transpose:
        t.add_column("row")
        for lang in board.languages:
            t.add_column(lang, justify="right")
        for h in _summary_headers(board):
            t.add_column(h, justify="right")
        for i, r in enumerate(rows):
            if r.kind == "paper" and (i == 0 or rows[i - 1].kind != "paper"):
                t.add_section()
            label = r.label if r.kind == "ours" else f"[italic]{r.label}[/italic]"
            t.add_row(label, *[_cell(board, r, lang) for lang in board.languages], *_summary(board, r))
        return t
    t.add_column("language")
    for r in rows:
        t.add_column(r.label, justify="right")
    for lang in board.languages:
        t.add_row(lang, *[_cell(board, r, lang) for r in rows])
    t.add_section()
    sums = [_summary(board, r) for r in rows]
    for i, h in enumerate(_summary_headers(board)):
        t.add_row(h, *[s[i] for s in sums])
    return t


def slices_table(board: Board) -> Table | None:
    if not board.slices:
        return None
    t = Table(title=f"slices · {board.task} · {board.metric} · {board.step_label}", title_justify="left")
    t.add_column("row")
    for s in board.slices:
        t.add_column(f"{s.dimension}: {s.header}", justify="right")
    for r in board.rows + board.paper_rows:
        cells = []
        for s in board.slices:
            v = s.averages.get(r.label)
            best = board.best_of([s.averages.get(o.label) for o in board.rows])
            cells.append(_mark(fmt.cell(board, v), r.kind == "ours" and v is not None and v == best))
        t.add_row(r.label if r.kind == "ours" else f"[italic]{r.label}[/italic]", *cells)
    return t


def pairs_table(board: Board, limit_rows: int = 6) -> Table | None:
    if not board.pairs:
        return None
    pairs = board.pairs
    note = ""
    if len(board.rows) > limit_rows:  # many rows: the best row against each other
        top = board.rows[0].label
        pairs = [p for p in pairs if top in (p.a, p.b)]
        note = f" (against {top}; all pairs in the HTML page)"
    t = Table(title=f"paired Wilcoxon signed-rank over languages · {board.step_label}{note}", title_justify="left")
    for col in ("A", "B", "langs", "A wins/ties/losses", "median A-B", "p", "p Holm"):
        t.add_column(col, justify="left" if col in ("A", "B") else "right")
    for p in pairs:
        t.add_row(p.a, p.b, str(p.n), f"{p.wins}/{p.ties}/{p.losses}", fmt.value(p.median_diff, True),
                  fmt.p(p.p_value), fmt.p(p.p_holm))
    return t


def render(board: Board, console: Console, *, transpose: bool | None = None, details: bool = True) -> None:
    console.print(board_table(board, transpose))
    for note in board.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    if details:
        for extra in (slices_table(board), pairs_table(board)):
            if extra is not None:
                console.print(extra)
    console.print()


def render_claims(claims: list, console: Console) -> None:
    """The papers' claims on this run: one sentence, then the table (nothing when there are no claims)."""
    if not claims:
        return
    head, rows = claim_rows(claims)
    console.print(f"[bold]{summary(claims)}[/bold]")
    t = Table(title="the papers' claims on this run", show_lines=False)
    for h in head:
        t.add_column(h, justify="right" if h in ("a", "b", "diff", "p", "n") else "left")
    for r in rows:
        style = {"holds": "green", "fails": "red"}.get(r[4], "dim")
        t.add_row(*r[:4], f"[{style}]{r[4]}[/{style}]", *r[5:])
    console.print(t)
    console.print()


def render_text(boards: list[Board], width: int = 400, claims: list | None = None) -> str:
    """The terminal rendering as plain text (the ``leaderboard.txt`` artifact)."""
    console = Console(width=width, record=True, color_system=None, file=_Null())
    render_claims(claims or [], console)
    for b in boards:
        render(b, console)
    return console.export_text()


class _Null:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass
