"""``harness compare``'s outputs: the comparison of two sides (:mod:`leaderboard.compare`) rendered for the
terminal (the default, at most :data:`WIDTH` columns, no label wrapped), as Markdown or as CSV, and the command
itself (:func:`run_compare`)."""

from __future__ import annotations

import csv
import io
import textwrap
from pathlib import Path

from harness.core.errors import HarnessError
from leaderboard.compare import LEVEL, Comparison, LangDiff, Side, compare, resolve
from leaderboard.stats import VERDICT_RESAMPLES
from leaderboard.where_rows import where_rows_are


# -- rendering ------------------------------------------------------------------------------------------------
def _v(x: float | None, delta: bool = False) -> str:
    from leaderboard import fmt

    return fmt.value(x, delta)


def _sig(d: LangDiff) -> str:
    s = d.significant
    return "—" if s is None else ("yes" if s else "no")


COLUMNS = ["language", "A", "B", "A - B", "interval", "significant", "p", "better", "seeds A/B", "resampled"]


def cells(c: Comparison, d: LangDiff, resamples: int) -> list[str]:
    """One line of a comparison's table as text, in :data:`COLUMNS`' order (every rendering)."""
    iv = f"[{_v(d.lo, True)}, {_v(d.hi, True)}]" if d.lo is not None else "—"
    p = "—" if d.p is None else (f"< {1 / resamples:.2g}" if d.p == 0 and resamples > 0 else f"{d.p:.3g}")
    return [d.language, _v(d.a), _v(d.b), _v(d.diff, True), iv, _sig(d), p, c.better(d),
            f"{d.seeds_a}/{d.seeds_b}", d.resampled or "none"]


def notes(c: Comparison) -> list[str]:
    """What a reader needs under a comparison's table: what tells the rows' variants apart (--across-variants),
    and why the average is not significant."""
    out = []
    if c.differs:
        out.append(f"rows of different variants (A / B): {'; '.join(c.differs)}")
    v = c.average.verdict if c.average is not None else None
    if v is not None and not v.significant and v.why:
        out.append(f"avg: not significant: {v.why}")
    return out


def intro(a: Side, b: Side, resamples: int) -> str:
    """What the tables show, in one paragraph (every rendering)."""
    return (f"A = {a.title}, B = {b.title}. Per task and language: means over seeds, A - B, its {int(LEVEL * 100)} % "
            f"bootstrap interval ({resamples} resamples; what is resampled in the last column) and whether it is "
            "significant (the interval excludes 0). The average over the languages both rows have is significant "
            "where the Wilcoxon test over the languages gives p < 0.05 and its interval (languages, then seeds "
            "resampled) excludes 0: the verdict of the claims on the same rows. better names the better side "
            "where there is one.")


def to_markdown(a: Side, b: Side, comps: list[Comparison], *, resamples: int, ids: bool = False) -> str:
    out = [f"# {a.name} vs {b.name}", "", textwrap.fill(intro(a, b, resamples), 118), ""]
    if not comps:
        return "\n".join(out + [no_table(a, b)]) + "\n"
    for c in comps:
        rows = f"row {c.row_a}" if c.row_a == c.row_b else f"A: {c.row_a}, B: {c.row_b}"
        out += [f"## {c.task} · {c.metric} · {c.step_title} · profile {c.profile} · {rows}", "",
                f"{'higher' if c.higher_is_better else 'lower'} is better", "",
                "| " + " | ".join(COLUMNS) + " |", "| --- | ---: | ---: | ---: | --- | --- | ---: | --- | --- | --- |"]
        for d in c.lines + ([c.average] if c.average else []):
            line = cells(c, d, resamples)
            if d is c.average:
                line[0] = f"**{line[0]}**"
            out.append("| " + " | ".join(line) + " |")
        out += [""] + [f"*{n}*\n" for n in notes(c)]
    rows_a, rows_b = {c.row_a for c in comps}, {c.row_b for c in comps}
    out += ["---", "", f"A's rows: {where_rows_are(a, rows_a, ids)}", "",
            f"B's rows: {where_rows_are(b, rows_b, ids)}" + ("" if ids else " (run ids: --ids)"), ""]
    return "\n".join(out)


def no_table(a: Side, b: Side) -> str:
    only_a = sorted({k[:2] for k in a.tables} - {k[:2] for k in b.tables})
    return "No table in common" + (f" (only in A: {', '.join(' · '.join(k) for k in only_a)})" if only_a else "") + "."


WIDTH = 160  # the terminal rendering's widest line
FORMATS = ("terminal", "md", "csv")


def _fit(text: str, width: int = WIDTH, indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words only; a word wider than a line
    (a path, a label) is shortened in its middle, never broken over two lines."""
    words = [w if len(indent) + len(w) <= width else w[: (width - len(indent)) // 2 - 1] + "…"
             + w[-((width - len(indent)) // 2 - 1):] for w in text.split(" ")]
    return textwrap.wrap(" ".join(words), width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [indent]


def _label_line(side: str, label: str, indent: str = "  ") -> str:
    """``A: <label>``: a label on one line of its own, whole (shortened in its middle only where it alone is
    wider than the terminal)."""
    head = f"{indent}{side}: "
    if len(head) + len(label) <= WIDTH:
        return head + label
    keep = (WIDTH - len(head) - 1) // 2
    return head + label[:keep] + "…" + label[-keep:]


def _packed(head: str, items: list[str]) -> list[str]:
    """``head`` then ``items`` joined by commas, as many a line as fit, an item never broken."""
    lines, cur = [], head
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(cur) + 1 + len(piece) > WIDTH and cur.strip():
            lines.append(cur)
            cur = "    " + piece
        else:
            cur = f"{cur} {piece}" if cur else piece
    return lines + [cur]


def to_terminal(a: Side, b: Side, comps: list[Comparison], *, resamples: int, ids: bool = False) -> str:
    """The comparison for a terminal: plain text, at most :data:`WIDTH` columns, every row label on a line of its
    own (``--format md`` gives Markdown, ``csv`` CSV)."""
    out = _fit(f"{a.name} vs {b.name}") + [""] + _fit(intro(a, b, resamples)) + [""]
    if not comps:
        return "\n".join(out + _fit(no_table(a, b))) + "\n"
    for c in comps:
        out += _fit(f"{c.task} · {c.metric} · {c.step_title} · profile {c.profile} · "
                    f"{'higher' if c.higher_is_better else 'lower'} is better")
        out += [_label_line("A", c.row_a), _label_line("B", c.row_b)]
        table = [COLUMNS] + [cells(c, d, resamples) for d in c.lines + ([c.average] if c.average else [])]
        widths = [max(len(r[j]) for r in table) for j in range(len(COLUMNS))]
        right = {1, 2, 3, 6}
        for r in table:
            line = "  ".join(x.rjust(w) if j in right else x.ljust(w) for j, (x, w) in enumerate(zip(r, widths, strict=True)))
            out.append(("  " + line).rstrip())
        out += [x for n in notes(c) for x in _fit(n, indent="  ")] + [""]
    rows_a, rows_b = {c.row_a for c in comps}, {c.row_b for c in comps}
    for name, side, rows in (("A's rows:", a, rows_a), ("B's rows:", b, rows_b)):
        out += _packed(name, where_rows_are(side, rows, ids).split(", "))
    if not ids:
        out.append("(run ids: --ids)")
    return "\n".join(out) + "\n"


CSV_FIELDS = ["task", "metric", "profile", "step", "row_a", "row_b", "language", "a", "b", "diff", "ci_low",
              "ci_high", "p", "significant", "better", "seeds_a", "seeds_b", "resampled", "higher_is_better", "cpt_step", "variants_differ"]


def to_csv(comps: list[Comparison]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for c in comps:
        for d in c.lines + ([c.average] if c.average else []):
            w.writerow({"task": c.task, "metric": c.metric, "profile": c.profile, "step": c.step,
                        "row_a": c.row_a, "row_b": c.row_b, "language": d.language,
                        "a": "" if d.a is None else d.a, "b": "" if d.b is None else d.b,
                        "diff": "" if d.diff is None else d.diff, "ci_low": "" if d.lo is None else d.lo,
                        "ci_high": "" if d.hi is None else d.hi, "p": "" if d.p is None else d.p,
                        "significant": {None: "", True: "yes", False: "no"}[d.significant],
                        "better": "" if c.better(d) == "—" else c.better(d), "seeds_a": d.seeds_a,
                        "seeds_b": d.seeds_b, "resampled": d.resampled, "higher_is_better": c.higher_is_better,
                        "cpt_step": c.step if c.step != "final" else ("" if c.at is None else c.at),
                        "variants_differ": "; ".join(c.differs)})
    return buf.getvalue()


def run_compare(a: str, b: str, *, tracking_uri: str | None = None, task: str | None = None,
                metric: str | None = None, step: str = "final", fmt: str = "terminal", out: Path | None = None,
                resamples: int = VERDICT_RESAMPLES, seed: int = 0, experiment: str | None = None, ids: bool = False,
                across_variants: bool = False) -> int:
    """``harness compare``: print (or write to ``out``) the comparison of ``a`` and ``b``."""
    import sys

    from harness.core.tracking import Tracker

    if fmt not in FORMATS:
        raise HarnessError(f"--format {fmt!r}: use {', '.join(FORMATS)}")
    if step not in ("final", "all") and not str(step).isdigit():
        raise HarnessError(f"--step {step!r}: use final, all or a CPT step (0, 10, ...)")
    client = None
    if not all(Path(x).expanduser().exists() for x in (a, b)):
        client = Tracker(tracking_uri).reader
    side_a, side_b = resolve(a, client, experiment), resolve(b, client, experiment)
    comps = compare(side_a, side_b, task=task, metric=metric, step=step, resamples=resamples, seed=seed,
                    across_variants=across_variants)
    text = to_csv(comps) if fmt == "csv" else (to_markdown if fmt == "md" else to_terminal)(
        side_a, side_b, comps, resamples=resamples, ids=ids)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        sig = sum(1 for c in comps for d in c.lines if d.significant)
        n = sum(1 for c in comps for d in c.lines if d.diff is not None)
        sys.stderr.write(f"{len(comps)} table(s), {n} language comparison(s), {sig} significant: written to {out}\n")
    else:
        sys.stdout.write(text)
    return 0
