"""Number formats shared by every rendering, so that the terminal, Markdown, CSV and HTML show the same digits."""

from __future__ import annotations

from leaderboard.blowups import MARK
from leaderboard.model import Board, Row

MISSING = "—"


def value(v: float | None, delta: bool = False) -> str:
    if v is None:
        return MISSING
    if abs(v) < 0.0005:
        v = 0.0  # no "-0.000"
    return f"{v:+.3f}" if delta else f"{v:.3f}"


def signed(v: float | None, decimals: int = 3) -> str:
    """A difference with the digits that show it: ``decimals`` places, more (up to 6) until two significant digits
    show, so that a small change never prints as ``+0.000``."""
    if v is None:
        return MISSING
    d = decimals
    while d < 6 and v != 0 and abs(v) < 10 ** (1 - d):
        d += 1
    return f"{v:+.{d}f}"


def pair(a: float, b: float, decimals: int = 2) -> tuple[str, str]:
    """``a`` and ``b`` with as many places as it takes (at least ``decimals``, up to 6) for their printed forms to
    differ where the numbers do: a change is never hidden by the rounding (``6.12`` to ``6.12``)."""
    d = decimals
    while d < 6 and a != b and f"{a:.{d}f}" == f"{b:.{d}f}":
        d += 1
    return f"{a:.{d}f}", f"{b:.{d}f}"


def blowup(row: Row) -> str:
    """The mark a row that blew up carries after its name on every board (leaderboard.blowups); "" otherwise."""
    return f" {MARK}" if row.blowup else ""


def cell(board: Board, v: float | None) -> str:
    return value(v, board.kind == "delta")


def std(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def rank(v: float | None) -> str:
    return MISSING if v is None else f"{v:.2f}"


def init(key: str, v: float | None) -> str:
    if v is None:
        return MISSING
    if key == "init/seconds":
        return f"{v:.2f}"
    if key in ("init/val_cosine", "bpb_retained"):  # a cosine; a transplant's BPB retained (leaderboard.retained)
        return f"{v:.3f}"
    if key == "cpt/heldout_loss":
        return f"{v:,.2f}"
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.1f}"


def p(v: float | None) -> str:
    return MISSING if v is None else f"{v:.3g}"


def ci(c: tuple[float, float] | None, delta: bool = False) -> str:
    return "" if c is None else f"[{value(c[0], delta)}, {value(c[1], delta)}]"


def arrow(higher_is_better: bool) -> str:
    """The direction of a metric as lm-eval's tables give it: ``↑`` higher is better, ``↓`` lower is better."""
    return "↑" if higher_is_better else "↓"


def direction(board: Board) -> str:
    return f"{arrow(board.higher_is_better)} " + ("higher is better" if board.higher_is_better else "lower is better")


def tied_columns(board: Board) -> dict[str, float]:
    """Languages where every one of our rows (two or more) scores the same: no row is best there."""
    out = {}
    for lang in board.languages:
        vals = [v for r in board.rows if (v := r.value(lang)) is not None]
        if len(vals) > 1 and len(set(vals)) == 1:
            out[lang] = vals[0]
    return out


def ties_note(board: Board) -> str | None:
    """``no best in jpn_Jpan (every row 0.000)...`` for the columns where every row scores the same."""
    tied = tied_columns(board)
    if not tied:
        return None
    return ("no best in " + ", ".join(f"{lang} (every row {cell(board, v)})" for lang, v in tied.items())
            + ": every row scores the same there")
