"""The claims table: each paper's headline direction evaluated on crafted boards (holds, contradicted,
inconclusive, not tested), and how the verdicts read in the terminal, Markdown, HTML and JSON."""

from __future__ import annotations

import dataclasses
import json

import pytest
from rich.text import Text

from leaderboard.claims import CLAIMS, ClaimResult, evaluate_claims, languages_needed, summary
from leaderboard.model import Board, Entry, Leaderboard, Row, VariantInfo, VariantKey, finish_board
from leaderboard.stats import smallest_p

LANGS = [f"l{i}_Latn" for i in range(8)]
BASE = [0.20, 0.22, 0.18, 0.25, 0.30, 0.10, 0.15, 0.21]


def _row(method: str, values: list[float]) -> Row:
    return Row(method, {lang: Entry([v], ["1"]) for lang, v in zip(LANGS, values, strict=False)},
               variant=VariantKey(method, "full", "src"))


def _seeded_row(method: str, per_lang: list[list[float]]) -> Row:
    return Row(method, {lang: Entry(list(v), [str(s + 1) for s in range(len(v))])
                        for lang, v in zip(LANGS, per_lang, strict=False)}, variant=VariantKey(method, "full", "src"))


def _board(task: str, rows: list[Row], kind: str = "step", step: int = 0, hib: bool = True) -> Board:
    b = Board("exp", task, "acc@10", "cpu", hib, kind, step, [], rows)
    b.headline = True
    finish_board(b)
    return b


def _by(results, claim_id, task="sr-t"):
    return next(r for r in results if r.claim.id == claim_id and r.task == task)


def _ahead(d: float, n: int = 8) -> list[float]:
    """BASE shifted up by about ``d`` on each of the first ``n`` languages (a little more on each, no ties)."""
    return [v + d + 0.001 * i for i, v in enumerate(BASE[:n])]


# -- the verdicts ---------------------------------------------------------------------------------------------
def test_claims_hold_are_contradicted_or_inconclusive_as_the_numbers_say():
    rows = [
        _row("random", BASE),
        _row("focus", _ahead(0.05)),  # ahead on all 8: p = 0.0078, the interval above 0
        _row("wechsel", [v - 0.03 for v in BASE]),  # behind everywhere: the interval below 0
        _row("ofa", [v + 0.04 for v in BASE]),
        _row("hyperofa", [v + 0.03 for v in BASE]),  # 0.01 below OFA: level
        _row("fvt", [v + (0.01 if i % 2 else -0.009) for i, v in enumerate(BASE)]),  # ahead by a hair, 4 / 4
    ]
    res = evaluate_claims([_board("sr-t", rows)], [])
    focus = _by(res, "focus>random")
    assert focus.status == "holds" and focus.p_value < 0.01 and focus.n == 8 and focus.interval.lo > 0
    assert abs(focus.diff - (0.05 + 0.0035)) < 1e-9
    wechsel = _by(res, "wechsel>random")
    assert wechsel.status == "contradicted" and wechsel.interval.hi < 0 and "behind" in wechsel.detail
    assert "the whole interval lies below 0" in wechsel.detail
    assert _by(res, "ofa>random").status == "holds"
    level = _by(res, "hyperofa~ofa")
    assert level.status == "holds" and abs(level.diff + 0.01) < 1e-9
    fvt = _by(res, "fvt>random")
    assert fvt.status == "inconclusive" and fvt.diff > 0 and fvt.interval.lo < 0 < fvt.interval.hi
    assert "the interval includes 0" in fvt.detail and "4 wins / 0 ties / 4 losses" in fvt.detail
    assert _by(res, "tiktotok>random").status == "not tested"
    assert next(r for r in res if r.claim.id == "cpt").status == "not tested"
    assert summary(res) == ("3 hold, 1 contradicted, 1 inconclusive of the 5 tested claims of the papers on this "
                            "run (2 not tested).")
    assert json.loads(json.dumps(wechsel.as_dict()))["status"] == "contradicted"


def test_a_claim_whose_interval_spans_zero_is_inconclusive_even_with_a_significant_test():
    random = _seeded_row("random", [[v, v, v] for v in BASE])
    # ahead by 0.01 on the mean of every language (Wilcoxon over languages: p = 0.0078), but the seeds scatter by
    # ±0.3: the two-level bootstrap, which also resamples seeds, puts zero well inside the interval
    noisy = _seeded_row("focus", [[v + 0.31, v - 0.27, v + 0.01] for v in BASE])
    steady = _seeded_row("ofa", [[v + 0.009, v + 0.01, v + 0.011] for v in BASE])
    res = evaluate_claims([_board("sr-t", [random, noisy, steady])], [])
    focus = _by(res, "focus>random")
    assert focus.p_value < 0.01 and focus.diff > 0 and focus.interval.lo < 0 < focus.interval.hi
    assert focus.status == "inconclusive" and "the interval includes 0" in focus.detail
    assert focus.languages_needed is None and "cannot go below" not in focus.detail
    assert focus.interval.seeds_a == 3 and focus.interval.seeds_b == 3 and focus.interval.languages == 8
    ofa = _by(res, "ofa>random")
    assert ofa.status == "holds" and 0 < ofa.interval.lo <= ofa.diff <= ofa.interval.hi


def test_every_language_agreeing_with_four_languages_is_inconclusive_and_says_what_it_needs():
    """OFA > random on 4 of 4 languages, the interval above 0: the exact two-sided test cannot go below 0.125."""
    res = evaluate_claims([_board("sr-t", [_row("random", BASE[:4]), _row("ofa", _ahead(0.07, 4))])], [])
    ofa = _by(res, "ofa>random")
    assert ofa.n == 4 and ofa.p_value == pytest.approx(0.125) and ofa.interval.lo > 0
    assert ofa.status == "inconclusive" and ofa.languages_needed == 6
    assert "4 wins / 0 ties / 0 losses; ahead" in ofa.detail
    assert ("with 4 languages the Wilcoxon test cannot go below p = 0.125; it needs at least 6 languages"
            in ofa.detail) and ofa.design in ofa.detail
    assert ofa.as_dict()["languages_needed"] == 6
    # one more language: 0.0625, still out of reach; six: 0.03125
    five = _by(evaluate_claims([_board("sr-t", [_row("random", BASE[:5]), _row("ofa", _ahead(0.07, 5))])], []),
               "ofa>random")
    assert five.status == "inconclusive" and "cannot go below p = 0.0625" in five.detail
    six = _by(evaluate_claims([_board("sr-t", [_row("random", BASE[:6]), _row("ofa", _ahead(0.07, 6))])], []),
              "ofa>random")
    assert six.status == "holds" and six.p_value == pytest.approx(0.03125) and six.languages_needed is None


def test_the_floor_of_the_exact_wilcoxon_test_is_scipys():
    from scipy.stats import wilcoxon

    for n in range(1, 9):
        assert smallest_p(n) == pytest.approx(wilcoxon(list(range(1, n + 1))).pvalue), n
    assert languages_needed() == 6 and languages_needed(0.01) == 8 and smallest_p(0) == 1.0


def test_a_tie_does_not_count_towards_the_languages_the_test_needs():
    ofa = [v + 0.05 + 0.001 * i if i else v for i, v in enumerate(BASE[:6])]  # equal on the first language
    res = _by(evaluate_claims([_board("sr-t", [_row("random", BASE[:6]), _row("ofa", ofa)])], []), "ofa>random")
    assert res.status == "inconclusive" and res.languages_needed == 6
    assert "with 5 languages (1 more tied, which the test leaves out)" in res.detail


def test_a_claim_behind_where_lower_is_better_is_contradicted():
    base = [2.0 + 0.1 * i for i in range(8)]
    rows = [_row("random", base), _row("focus", [v - 0.5 for v in base]),  # lower loss: ahead
            _row("wechsel", [v + 0.3 for v in base])]  # higher loss: behind, the interval above 0
    res = evaluate_claims([_board("pos", rows, hib=False)], [])
    assert _by(res, "focus>random", "pos").status == "holds"
    wechsel = _by(res, "wechsel>random", "pos")
    assert wechsel.status == "contradicted" and wechsel.interval.lo > 0 and "lies above 0" in wechsel.detail


def test_a_level_claim_inside_outside_and_straddling_the_band():
    ofa = _seeded_row("ofa", [[v, v, v] for v in BASE])

    def level(hyper: list[list[float]], hib: bool = True) -> ClaimResult:
        return _by(evaluate_claims([_board("sr-t", [ofa, _seeded_row("hyperofa", hyper)], hib=hib)], []),
                   "hyperofa~ofa")

    inside = level([[v + 0.001, v - 0.001, v + 0.01] for v in BASE])
    assert inside.status == "holds" and -0.02 <= inside.interval.lo <= inside.interval.hi <= 0.02
    for d in (0.05, -0.05):  # outside the band, either side, in either direction of the metric
        for hib in (True, False):
            out = level([[v + d, v + d, v + d] for v in BASE], hib)
            assert out.status == "contradicted" and "the whole interval lies outside ±0.02" in out.detail, (d, hib)
    wide = level([[v + 0.2, v - 0.2, v] for v in BASE])  # level on average, the interval far over the band
    assert abs(wide.diff) < 1e-9 and wide.status == "inconclusive"
    assert "the difference is within ±0.02, but the interval reaches over ±0.02" in wide.detail
    edge = level([[v + 0.02, v + 0.03, v + 0.01] for v in BASE])  # straddles +0.02
    assert edge.interval.lo < 0.02 < edge.interval.hi and edge.status == "inconclusive"


def test_the_cpt_claim_reads_the_mlm_delta_board_or_the_heldout_curves():
    down = _row("random", [-0.2 - 0.01 * i for i in range(8)])
    up = _row("ofa", [0.1] * 8)
    res = evaluate_claims([_board("mlm", [down, up], kind="delta", step=10, hib=False)], [])
    cpt = next(r for r in res if r.claim.id == "cpt")
    assert cpt.status == "contradicted" and cpt.task == "mlm" and "ofa +0.100" in cpt.detail
    assert cpt.interval.lo > 0 and cpt.n == 2
    mixed = _row("ofa", [0.1 if i % 2 else -0.09 for i in range(8)])  # rose a little on average, not clearly
    cpt = next(r for r in evaluate_claims([_board("mlm", [down, mixed], kind="delta", step=10, hib=False)], [])
               if r.claim.id == "cpt")
    assert cpt.status == "inconclusive" and cpt.interval.lo < 0 < cpt.interval.hi
    res = evaluate_claims([_board("mlm", [down], kind="delta", step=10, hib=False)], [])
    cpt = next(r for r in res if r.claim.id == "cpt")
    assert cpt.status == "holds" and cpt.p_value < 0.01

    def info(label, curve):
        return VariantInfo(label, "cpu", VariantKey(label, "full", "src"), ["1"], {}, {},
                           {"cpt/heldout_loss": curve}, {})

    res = evaluate_claims([_board("sr-t", [down])], [info("random", [(0, 5.0), (10, 4.5)]),
                                                    info("ofa", [(0, 5.0), (10, 5.1)])])
    cpt = next(r for r in res if r.claim.id == "cpt")
    assert cpt.status == "contradicted" and cpt.task == "held-out diagnostic" and abs(cpt.diff - 0.1) < 1e-9
    # a decoder's held-out causal-LM curves are not the claim's (it was made on encoders' MLM loss): a board of
    # decoder rows only says nothing of it, not "not tested"; beside an encoder's rows, the encoder's are tested
    board = dataclasses.replace(_board("sr-t", [down]), sources={"src": "clm"})
    assert not [r for r in evaluate_claims([board], [info("random", [(0, 5.0), (10, 4.5)])]) if r.claim.id == "cpt"]
    enc = VariantInfo("ofa", "cpu", VariantKey("ofa", "full", "enc"), ["1"], {}, {},
                      {"cpt/heldout_loss": [(0, 5.0), (10, 4.0)]}, {})
    board = dataclasses.replace(board, sources={"src": "clm", "enc": "mlm"})
    (cpt,) = [r for r in evaluate_claims([board], [info("random", [(0, 5.0), (10, 5.5)]), enc]) if r.claim.id == "cpt"]
    assert cpt.status == "holds" and cpt.n == 1


def test_a_run_where_nothing_holds_is_said_in_one_sentence():
    res = evaluate_claims([_board("ner", [_row("random", BASE), _row("focus", [v - 0.01 for v in BASE])])], [])
    assert summary(res) == ("0 hold, 1 contradicted, 0 inconclusive of the 1 tested claim of the papers on this "
                            "run (6 not tested).")
    assert summary([]) == "No paper's claim could be tested on this run."
    assert {c.id for c in CLAIMS} >= {"focus>random", "wechsel>random", "ofa>random", "hyperofa~ofa",
                                      "tiktotok>random", "fvt>random", "cpt"}


def test_a_claim_reads_the_default_row_of_a_method_with_variants():
    variant = _row("focus", [v - 0.1 for v in BASE])
    variant.label = "focus d=full (overlap=casefold, specials=role)"
    default = _row("focus", _ahead(0.05))
    default.label = "focus d=full (defaults)"
    res = evaluate_claims([_board("sr-t", [_row("random", BASE), variant, default])], [])
    assert _by(res, "focus>random").status == "holds"


def test_diff_interval_is_reproducible_and_brackets_the_average_difference():
    from leaderboard.stats import diff_interval

    a = {lang: [0.1 * i, 0.1 * i + 0.02] for i, lang in enumerate(LANGS)}
    b = {lang: [0.1 * i - 0.05] for i, lang in enumerate(LANGS)}
    one = diff_interval(a, b, key="k")
    assert one == diff_interval(a, b, key="k")  # the same stream for the same cell
    assert abs(one.diff - 0.06) < 1e-12 and one.lo <= one.diff <= one.hi and one.lo > 0 and one.p_value < 0.01
    assert one.seeds_a == 2 and one.seeds_b == 1 and one.languages == 8
    assert diff_interval(a, {"xx_Latn": [0.0]}) is None  # no language in common
    flat = diff_interval({x: [0.5] for x in LANGS}, {x: [0.5] for x in LANGS})
    assert flat.lo == flat.hi == flat.diff == 0.0 and flat.p_value == 1.0


# -- the renderings -------------------------------------------------------------------------------------------
def _small_run() -> list[ClaimResult]:
    """Every verdict: sr-t on 4 languages (nothing can hold but the level claim), ner on 8."""
    srt = [_row("random", BASE[:4]), _row("ofa", _ahead(0.07, 4)), _row("hyperofa", _ahead(0.075, 4)),
           _row("focus", [v - 0.05 for v in BASE[:4]]), _row("fvt", _ahead(0.2, 4)),
           _row("wechsel", [v + (0.04 if i % 2 else -0.03) for i, v in enumerate(BASE[:4])])]
    ner = [_row("random", BASE), _row("ofa", _ahead(0.04)), _row("hyperofa", _ahead(0.1)),
           _row("focus", _ahead(0.05)), _row("wechsel", [v - 0.03 for v in BASE]), _row("fvt", _ahead(0.02))]
    return evaluate_claims([_board("sr-t", srt), _board("ner", ner)], [])


def _terminal(claims: list[ClaimResult], monkeypatch, columns: str = "100") -> str:
    """The claims as ``harness leaderboard`` prints them when piped with COLUMNS set."""
    from harness.commands.leaderboard import _board_console
    from leaderboard.render_terminal import render_claims

    monkeypatch.setenv("COLUMNS", columns)
    console = _board_console()
    with console.capture() as cap:
        render_claims(claims, console)
    return Text.from_ansi(cap.get()).plain


def test_the_terminal_claims_table_is_one_table_with_each_verdict_beside_its_claim(monkeypatch):
    from rich.cells import cell_len

    res = _small_run()
    assert {r.status for r in res} == {"holds", "contradicted", "inconclusive", "not tested"}
    text = _terminal(res, monkeypatch)
    lines = text.splitlines()
    assert max(cell_len(line) for line in lines) <= 100
    assert sum(line.startswith("┏") for line in lines) == 1 and "part 1/" not in text  # one table
    header = next(line for line in lines if line.startswith("┃"))
    for col in ("claim", "task", "verdict", "diff", "95% interval", "n"):
        assert f" {col} " in header, col
    for col in ("paper", "profile", " p ", "note"):
        assert col not in header, col
    for r in res:  # the row's first line: the claim's first words, its task, its verdict and its numbers
        words = " ".join(r.claim.statement.split()[:3])
        if r.status == "not tested":  # no row each: one line names them, after the table
            assert f"{r.claim.statement} ({r.task})" in " ".join(text[text.index("not tested ("):].split())
            assert not [x for x in lines if x.startswith(f"│ {words}") and f"│ {r.task} " in x]
            continue
        (line,) = [x for x in lines if x.startswith(f"│ {words}") and f"│ {r.task} " in x]
        assert f"│ {r.status} " in line and (r.diff is None or f"{r.diff:+.3f}" in line), line
    assert " ".join(text[:text.index("the papers' claims on this run")].split()) == summary(res)  # wrapped
    assert "note: with 4 languages the Wilcoxon test cannot go below p = 0.125; it needs at least 6" in text


def test_a_narrow_terminal_keeps_one_table_and_each_verdict_on_its_claims_line(monkeypatch):
    from rich.cells import cell_len

    res = _small_run()
    for columns in ("40", "60"):
        lines = _terminal(res, monkeypatch, columns).splitlines()
        assert max(cell_len(line) for line in lines) <= int(columns)
        assert sum(line.startswith("┏") for line in lines) == 1
        for r in res:
            first = r.claim.statement.split()[0]
            if r.status == "not tested":
                continue  # named on one line after the table
            assert any(x.startswith(f"│ {first} ") and x.rstrip().endswith(f"{r.status} │") for x in lines), r


def test_markup_in_a_note_prints_as_written(monkeypatch):
    import io

    from rich.console import Console

    from leaderboard.render_terminal import render, render_text

    b = _board("sr-t", [_row("random", BASE), _row("ofa", _ahead(0.04))])
    b.notes.append("after CPT only the held-out MLM loss was measured (`[cpt] eval_tasks = true` evaluates them)")
    con = Console(width=200, record=True, file=io.StringIO())
    render(b, con, details=False)
    assert "`[cpt] eval_tasks = true`" in con.export_text()
    claim = _by(evaluate_claims([b], []), "ofa>random")
    claim.design = "[bold]with [x] languages[/bold]"
    claim.task = "sr-t [cpu]"
    text = _terminal([claim], monkeypatch)
    assert "note: [bold]with [x] languages[/bold]" in text and "│ sr-t [cpu] " in text
    assert "[bold]with [x] languages[/bold]" in render_text([], claims=[claim])


def test_markdown_html_and_json_carry_the_verdicts_and_the_details(tmp_path):
    from leaderboard.publish import write_files
    from leaderboard.render_html import leaderboard_html
    from leaderboard.render_markdown import leaderboard_md

    res = _small_run()
    lb = Leaderboard("e", [], [], {}, [], claims=res)
    md, page = leaderboard_md(lb), leaderboard_html(lb)
    for doc in (md, page):
        assert summary(res) in doc
        for word in ("holds", "contradicted", "inconclusive", "not tested", "it needs at least 6 languages",
                     "the whole interval lies below 0"):
            assert word in doc, word
        assert "fails" not in doc
    assert "| claim | paper | task | profile | verdict | a | b | diff | 95% interval | p | n | note |" in md
    for cls in ("claim-holds", "claim-contradicted", "claim-inconclusive"):
        assert f'class="{cls}"' in page, cls
    data = json.loads(write_files(lb, tmp_path, generated="now")["json"].read_text())["claims"]
    assert {c["status"] for c in data} == {"holds", "contradicted", "inconclusive", "not tested"}
    assert {c["languages_needed"] for c in data} == {None, 6}
