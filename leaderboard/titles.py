"""Titles that meet a terminal's width (rich): a board's or a summary's title broken into lines only between its
names (the parts between `` · `` separators), never inside a language code, a row label or a column name. Shared by
the boards (:mod:`leaderboard.render_terminal`) and the overview's summary (:mod:`leaderboard.summary`).
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text


def title_atoms(title: str) -> list[str]:
    """A title's names, each kept whole on a line: the parts between its `` · `` separators (the separator stays
    at the end of the name before it)."""
    parts = title.split(" · ")
    return [p + " ·" for p in parts[:-1]] + parts[-1:]


def title_lines(atoms: list[str], width: int | None) -> list[str]:
    """``atoms`` (names) joined by spaces in lines of at most ``width`` terminal cells (None: one line), broken
    only between names: never inside a language code, a row label or a column name. A name wider than ``width``
    alone is broken at its spaces, and a word wider than that at ``width`` (nothing is cut)."""
    if width is None:
        return [" ".join(atoms)]
    width = max(int(width), 1)
    lines: list[str] = []
    cur = ""
    for atom in atoms:
        joined = f"{cur} {atom}" if cur else atom
        if cur and cell_len(joined) > width:
            lines.append(cur)
            cur = atom
        else:
            cur = joined
    lines.append(cur)
    out: list[str] = []
    for line in lines:
        if cell_len(line) <= width:
            out.append(line)
            continue
        text = Text(line)
        out.extend(part.plain.rstrip() for part in text.wrap(Console(width=width, file=NullWriter()), width))
    return out


def title_text(atoms: list[str], width: int | None) -> Text:
    """The title as one renderable whose lines already meet ``width`` (rich wraps nothing further)."""
    return Text("\n".join(title_lines(atoms, width)), no_wrap=True, overflow="ignore")


class NullWriter:
    """A file that drops what is written to it (a console that only measures or records)."""

    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass
