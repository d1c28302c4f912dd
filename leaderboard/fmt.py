"""Number formats shared by every rendering, so that the terminal, Markdown, CSV and HTML show the same digits."""

from __future__ import annotations

from leaderboard.tables import Board

MISSING = "—"


def value(v: float | None, delta: bool = False) -> str:
    if v is None:
        return MISSING
    if abs(v) < 0.0005:
        v = 0.0  # no "-0.000"
    return f"{v:+.3f}" if delta else f"{v:.3f}"


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
    if key == "init/val_cosine":
        return f"{v:.3f}"
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.1f}"


def p(v: float | None) -> str:
    return MISSING if v is None else f"{v:.3g}"


def ci(c: tuple[float, float] | None, delta: bool = False) -> str:
    return "" if c is None else f"[{value(c[0], delta)}, {value(c[1], delta)}]"


def direction(board: Board) -> str:
    return "higher is better" if board.higher_is_better else "lower is better"
