"""Markdown rendering: the headline tables first (per task: final step, slices, delta, paired tests), then every
other board, the settings behind each row and the languages. Best values are bold; ``± std`` over seeds. Beside
each row, what its method was checked against (:mod:`leaderboard.references`; the whole line in the settings)."""

from __future__ import annotations

from harness.core.objective import heldout_name
from leaderboard import fmt, references
from leaderboard.claims import LEGEND, claim_rows, summary
from leaderboard.model import Board, Leaderboard, Row


def _esc(s: str) -> str:
    return str(s).replace("|", "\\|")


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: list[str], rows: list[list[str]], align_right_from: int = 1) -> list[str]:
    sep = ["---" if i < align_right_from else "---:" for i in range(len(head))]
    return [_line([_esc(h) for h in head]), _line(sep), *[_line(r) for r in rows]]


def _text_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A table of text cells, each escaped, none right-aligned (claims, the open question, tokenizer figures)."""
    return _table(head, [[_esc(c) for c in r] for r in rows], len(head))


def _bold(text: str, best: bool) -> str:
    return f"**{text}**" if best else text


def _cell(board: Board, row: Row, lang: str) -> str:
    e = row.entries.get(lang)
    if e is None:
        return fmt.MISSING
    out = _bold(fmt.cell(board, e.mean), row.kind == "ours" and e.mean == board.best(lang))
    return out + (f" ± {fmt.std(e.std)}" if e.std is not None else "")


def board_md(board: Board, refs: dict[str, str] | None = None) -> list[str]:
    """The board as a Markdown table; with ``refs`` (row label -> reference line), a "checked against" column."""
    show_common = board.common != board.languages
    inits = board.init_columns()
    checked = refs is not None and any(r.label in refs for r in board.rows)
    head = ["row", *(["checked against"] if checked else []), *board.languages, "avg",
            *(["avg∩"] if show_common else []), "rank", *[n for _, n in inits]]
    best_avg = board.best_of([r.avg for r in board.rows])
    best_common = board.best_of([r.avg_common for r in board.rows])
    best_rank = board.best_of([r.mean_rank for r in board.rows], lower_is_better=True)
    rows = []
    for r in board.rows + board.paper_rows:
        ours = r.kind == "ours"
        label = _esc(r.label) if ours else f"*{_esc(r.label)}*"
        cells = [label + (f" **{fmt.blowup(r).strip()}**" if r.blowup else "")]
        if checked:
            line = refs.get(r.label) if ours else None
            cells.append(f"{references.MARKS[references.kind(line)]} {_esc(references.short(line))}" if line
                         else fmt.MISSING)
        cells += [_cell(board, r, lang) for lang in board.languages]
        cells.append(_bold(fmt.cell(board, r.avg), ours and r.avg is not None and r.avg == best_avg)
                     if r.avg is not None else ("gaps" if ours else fmt.MISSING))
        if show_common:
            cells.append(_bold(fmt.cell(board, r.avg_common), ours and r.avg_common is not None
                               and r.avg_common == best_common))
        cells.append(_bold(fmt.rank(r.mean_rank), ours and r.mean_rank is not None and r.mean_rank == best_rank))
        cells.extend(fmt.init(k, r.init.get(k)) for k, _ in inits)
        rows.append(cells)
    out = [f"#### {_esc(board.title)}", "", f"*{fmt.direction(board)}; mean ± std over seeds; "
           f"avg only for rows with every language; rank = mean rank over the {len(board.common)} languages "
           f"every row has (ties share their average rank).*", ""]
    out += _table(head, rows, 2 if checked else 1)
    out += [f"> note: {n}" for n in board.notes]
    if tie_note := fmt.ties_note(board):
        out.append(f"> note: {tie_note} (none is bold)")
    cis = [(r.label, lang, e.ci) for r in board.rows for lang, e in sorted(r.entries.items()) if e.ci]
    if cis:
        out += ["", "<details><summary>95% bootstrap intervals (seeds, then test items)</summary>", ""]
        out += _table(["row", *board.languages],
                      [[_esc(r.label), *[fmt.ci(r.entries[lang].ci, board.kind == "delta")
                                         if lang in r.entries and r.entries[lang].ci else fmt.MISSING
                                         for lang in board.languages]] for r in board.rows])
        out += ["", "</details>"]
    return out + [""]


def slices_md(board: Board) -> list[str]:
    if not board.slices:
        return []
    head = ["row", *[f"{s.dimension}: {s.header}" for s in board.slices]]
    rows = []
    for r in board.rows + board.paper_rows:
        cells = [_esc(r.label) if r.kind == "ours" else f"*{_esc(r.label)}*"]
        for s in board.slices:
            v = s.averages.get(r.label)
            best = board.best_of([s.averages.get(o.label) for o in board.rows])
            cells.append(_bold(fmt.cell(board, v), r.kind == "ours" and v is not None and v == best))
        rows.append(cells)
    return [f"Slices ({board.step_label}): average over the slice's languages, complete rows only.", "",
            *_table(head, rows), ""]


def pairs_md(board: Board) -> list[str]:
    if not board.pairs:
        return []
    rows = [[_esc(p.a), _esc(p.b), str(p.n), f"{p.wins}/{p.ties}/{p.losses}", fmt.value(p.median_diff, True),
             fmt.p(p.p_value), fmt.p(p.p_holm)] for p in board.pairs]
    return [f"Paired Wilcoxon signed-rank tests over languages ({board.step_label}; two-sided, zero differences "
            "are ties; Holm-adjusted across the pairs):", "",
            *_table(["A", "B", "langs", "A wins/ties/losses", "median A-B", "p", "p Holm"], rows, 2), ""]


def claims_md(lb: Leaderboard) -> list[str]:
    if not lb.claims:
        return []
    head, rows = claim_rows(lb.claims)
    return ["## The papers' claims on this run", "", summary(lb.claims), "",
            *_text_table(head, rows), "", _esc(LEGEND), ""]


def open_question_md(lb: Leaderboard) -> list[str]:
    if not lb.open_question:
        return []
    from leaderboard.claims import OPEN_QUESTION, open_question_rows

    head, rows = open_question_rows(lb.open_question)
    return ["## The open question: OFA and HyperOFA on a decoder", "", _esc(OPEN_QUESTION), "",
            *_text_table(head, rows), "", _esc(LEGEND), ""]


def tokstats_md(lb: Leaderboard) -> list[str]:
    """The tokenizer statistics of each source (:mod:`leaderboard.tokstats`)."""
    from leaderboard.tokstats import language_rows, share_rows

    out: list[str] = []
    for st in lb.tokstats:
        out += [f"## Tokenizers of source {_esc(st.source)}", "",
                "Per language, on its held-out text: tokens a word, bytes a token and the UNK rate of the source's "
                "tokenizer and of the target tokenizer.", ""]
        head, rows = language_rows(st)
        out += _text_table(head, rows) + [""]
        head, rows = share_rows(st)
        if rows:
            out += ["Of the target tokens in that text, the share whose rows each method copied, computed, drew at "
                    "random or left unknown (mean over the languages and the method's cells):", ""]
            out += _text_table(head, rows) + [""]
    return out


def leaderboard_md(lb: Leaderboard, *, generated: str = "", html_name: str = "leaderboard.html") -> str:
    out = [f"# Leaderboard · {_esc(lb.experiment)}", ""]
    meta = [f"worlds: {', '.join(lb.worlds) or '-'}", f"{len(lb.variants)} variant(s)"]
    if generated:
        meta.append(f"generated {generated}")
    out += ["; ".join(meta) + f". Interactive page: `{html_name}`.", ""]
    refs = references.by_label(lb.variants)
    if refs:
        out += [f"*The column \"{references.SETTING}\" names the code each row's method was compared with "
                f"({_esc(references.legend(refs.values()))}); what was compared, and the test that compares them, "
                "are in the settings of each row.*", ""]
    out += claims_md(lb) + open_question_md(lb)
    heads = [b for b in lb.boards if b.headline and b.kind == "final"]
    for b in heads:
        out += [f"## {_esc(b.task)} · {_esc(b.metric)} · profile {_esc(b.profile)}", ""]
        out += board_md(b, refs) + slices_md(b)
        for budget in lb.budget_boards(b):  # each CPT budget's final step, where rows stopped at different steps
            out += board_md(budget, refs) + slices_md(budget)
        for delta in [d for d in lb.boards if d.kind == "delta" and (d.task, d.metric, d.profile) ==
                      (b.task, b.metric, b.profile)]:
            out += board_md(delta, refs) + slices_md(delta)
        out += pairs_md(b)
    shown = {id(x) for b in heads for x in lb.budget_boards(b)}
    others = [b for b in lb.boards if b not in heads and not (b.headline and b.kind == "delta")
              and id(b) not in shown]
    if others:
        out += ["## All steps and metrics", ""]
        for b in others:
            out += board_md(b, refs)
    out += tokstats_md(lb)
    if lb.variants:
        out += ["## Settings of each row", ""]
        keys = list(lb.variants[0].settings)
        out += _table(["row", *keys], [[_esc(v.label), *[_esc(v.settings.get(k, "-")) for k in keys]]
                                       for v in lb.variants], len(keys) + 1)
        out += [""]
        conv = [v for v in lb.variants if v.convergence]
        if conv:
            heldout = heldout_name(o for b in lb.boards for o in (b.sources or {}).values())
            out += [f"CPT convergence ({heldout}; area under the curve per step, lower is better):", ""]
            out += _table(["row", "heldout loss step 0", "heldout loss final", "AUC", "steps to threshold"],
                          [[_esc(v.label),
                            fmt.value(v.curves["cpt/heldout_loss"][0][1] if v.curves.get("cpt/heldout_loss")
                                      else None),
                            fmt.value(v.curves["cpt/heldout_loss"][-1][1] if v.curves.get("cpt/heldout_loss")
                                      else None),
                            fmt.value(v.convergence.get("cpt/heldout_auc")),
                            fmt.init("", v.convergence.get("cpt/steps_to_threshold"))] for v in conv])
            out += [""]
    if lb.languages:
        out += ["## Languages", ""]
        srcs = sorted({s for m in lb.languages.values() for s in (m.get("seen") or {})})
        tasks = sorted({t for m in lb.languages.values() for t in (m.get("label_source") or {})})
        rows = []
        for lang, m in lb.languages.items():
            rows.append([lang, str(m.get("script", "-")), str(m.get("resource_level", "-")),
                         *[{True: "seen", False: "unseen"}.get((m.get("seen") or {}).get(s), "-") for s in srcs],
                         *[(m.get("label_source") or {}).get(t, "-") for t in tasks]])
        out += _table(["language", "script", "resource", *[f"seen by {s}" for s in srcs],
                       *[f"{t} labels" for t in tasks]], rows, 99)
        out += [""]
    return "\n".join(out) + "\n"
