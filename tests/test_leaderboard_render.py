"""Leaderboard renderings (terminal, Markdown, HTML, CSV), published figures beside our rows, and the terminal's
width, on runs written in the test with MlflowClient (``tests/_leaderboard_runs.py``)."""

from __future__ import annotations

import csv
import io
import re
import sys
import types

import pytest
from mlflow.tracking import MlflowClient

from tests._leaderboard_runs import FINAL, _board, _build, make_cell


# -- renderings -------------------------------------------------------------------------------------------
def _shown_numbers(b) -> list[str]:
    from leaderboard import fmt

    out = []
    for r in b.rows:
        out += [fmt.cell(b, e.mean) for e in r.entries.values()]
        out += [fmt.cell(b, r.avg)] if r.avg is not None else []
        out += [fmt.cell(b, r.avg_common), fmt.rank(r.mean_rank)]
    return out


def test_every_rendering_shows_the_table_numbers(lb):
    from leaderboard.render_csv import board_csv, long_csv
    from leaderboard.render_html import leaderboard_html
    from leaderboard.render_markdown import board_md, leaderboard_md
    from leaderboard.render_terminal import render_text

    b = _board(lb)
    text = render_text([b])
    md = leaderboard_md(lb)
    page = leaderboard_html(lb)
    for s in _shown_numbers(b):
        assert s in text and s in md and s in page, s
    for r in b.rows:
        assert r.label in text and r.label in md and r.label in page
    assert "gaps" in text and "gaps" in "\n".join(board_md(b))
    # csv: full precision, same numbers
    rows = {r["row"]: r for r in csv.DictReader(io.StringIO(board_csv(b)))}
    for r in b.rows:
        for lang in b.languages:
            v = r.value(lang)
            assert (rows[r.label][lang] == "") if v is None else float(rows[r.label][lang]) == v
        assert (rows[r.label]["avg"] == "") == (r.avg is None)
        assert r.mean_rank is None or float(rows[r.label]["mean_rank"]) == r.mean_rank
    long = list(csv.DictReader(io.StringIO(long_csv(lb))))
    cell = next(x for x in long if x["row"] == "alpha d=full" and x["language"] == "aaa_Latn"
                and x["kind"] == "final" and x["metric"] == "acc@10" and x["profile"] == "cpu")
    e = b.row("alpha d=full").entries["aaa_Latn"]
    assert float(cell["mean"]) == e.mean and float(cell["ci_low"]) == e.ci[0] and cell["n"] == "2"


def test_terminal_marks_the_best_per_column(lb):
    from rich.console import Console

    from leaderboard.render_terminal import render

    b = _board(lb)
    con = Console(width=300, record=True, force_terminal=True, color_system="truecolor", file=io.StringIO())
    render(b, con, details=False)
    out = con.export_text(styles=True)
    # gamma is best on aaa_Latn (0.900): printed bold green; alpha's 0.820 is not
    assert re.search(r"\x1b\[1;32m0\.900", out) and not re.search(r"\x1b\[1;32m0\.820", out)
    # a column where every row scores the same (jpn_Jpan NER: 0.000 for all) has no best, and nothing is painted
    from leaderboard.tables import Board, Entry, Row

    zero = Board("e", "ner", "f1", "cpu", True, "step", 0, [], [
        Row(m, {"jpn_Jpan": Entry([0.0], ["1"]), "fra_Latn": Entry([v], ["1"])}) for m, v in (("a", 0.2), ("b", 0.3))])
    assert zero.best("jpn_Jpan") is None and zero.best("fra_Latn") == 0.3
    con = Console(width=300, record=True, force_terminal=True, color_system="truecolor", file=io.StringIO())
    render(zero, con, details=False)
    assert not re.search(r"\x1b\[1;32m0\.000", con.export_text(styles=True))
    assert zero.best_of([0.0, 0.1, 0.1]) == 0.1 and zero.best_of([0.3]) == 0.3
    transposed = Console(width=300, record=True, file=io.StringIO())
    render(b, transposed, transpose=True, details=False)
    lines = transposed.export_text().splitlines()
    assert any(line.strip("│ ").startswith("aaa_Latn") for line in lines)  # languages are rows


def test_html_is_self_contained_and_sortable(lb):
    from leaderboard.render_html import leaderboard_html

    page = leaderboard_html(lb)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # nothing is fetched at view time: no external scripts, styles, images or fonts
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert not re.search(r"url\(|@import", page)
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert page.count("<svg") >= 3  # per-language bars, held-out and training loss curves
    assert 'class="board sortable"' in page and "addEventListener('click'" in page
    assert "gamma d=full" in page and "val cos" in page


# -- published figures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def glot_exp(tracking_uri) -> str:
    client = MlflowClient(tracking_uri)
    name = "lb-glot"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        for m in ("alpha", "beta"):
            make_cell(client, exp_id, m, 1, world="glot500", source="xlm-roberta-base", dim="100")
    return name


def test_paper_rows_beside_ours_never_ranked(glot_exp, tracking_uri, monkeypatch):
    calls = []

    def reference_scores(task, model_setting, step=None):
        calls.append((task, model_setting, step))
        if task != "sr-t":
            raise KeyError(task)
        return {"Ofa-multi-100": {"aaa_Latn": 99.0, "bbb_Latn": 99.0, "ccc_Cyrl": 99.0, "ddd_Grek": 99.0},
                "Random-multi-100": {"aaa_Latn": 1.0}}

    fake = types.ModuleType("harness.worlds.glot500")
    fake.reference_scores = reference_scores
    monkeypatch.setitem(sys.modules, "harness.worlds.glot500", fake)
    with_paper = _build(tracking_uri, glot_exp, bootstrap=0)
    b = _board(with_paper)
    assert ("sr-t", "multi-100", FINAL) in calls and ("sr-t", "multi-100", 0) in calls
    labels = [r.label for r in b.paper_rows]
    assert labels == ["paper: Ofa-multi-100", "paper: Random-multi-100"]
    ofa = b.row("paper: Ofa-multi-100")
    assert ofa.value("aaa_Latn") == pytest.approx(0.99) and ofa.mean_rank is None  # percentages -> fractions
    assert "published percentages divided by 100" in b.notes
    # our rows: same ranks and tests as without the published figures, although the paper row is "best"
    monkeypatch.setitem(sys.modules, "harness.worlds.glot500", None)  # module absent: no paper rows, no error
    plain = _board(_build(tracking_uri, glot_exp, bootstrap=0))
    assert plain.paper_rows == []
    assert [(r.label, r.mean_rank) for r in b.rows] == [(r.label, r.mean_rank) for r in plain.rows]
    assert [(p.a, p.b, p.p_value) for p in b.pairs] == [(p.a, p.b, p.p_value) for p in plain.pairs]
    assert b.best("aaa_Latn") == pytest.approx(0.8)
    from leaderboard.render_html import leaderboard_html

    assert '<tbody class="paper">' in leaderboard_html(with_paper)


def test_paper_rows_from_the_glot500_reference(tracking_uri):
    """With the glot500 world's own reference module: HyperOFA Table 13 (SR-T, multi-400) beside step-0 runs."""
    ref = pytest.importorskip("harness.worlds.glot500")
    if not hasattr(ref, "reference_scores"):
        pytest.skip("the glot500 world has no reference_scores")
    client = MlflowClient(tracking_uri)
    name = "lb-glot-ref"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        for m, hits in (("ofa", {"tur_Latn": 12, "ell_Grek": 10}), ("random", {"tur_Latn": 11, "ell_Grek": 9})):
            make_cell(client, exp_id, m, 1, world="glot500", source="xlm-roberta-base", dim="400", hits=hits,
                      final=0)
    lb = _build(tracking_uri, name, bootstrap=0)
    b = _board(lb, step=0)
    paper = {r.label: r for r in b.paper_rows}
    assert {"paper: ofa", "paper: random", "paper: hyperofa"} <= set(paper)
    assert paper["paper: ofa"].value("tur_Latn") == pytest.approx(0.222)  # 22.2 as printed, as a fraction
    assert paper["paper: hyperofa"].value("ell_Grek") == pytest.approx(0.203)
    assert [r.label for r in b.rows] == ["ofa d=400", "random d=400"] and b.rows[0].mean_rank == 1.0


# -- terminal width ---------------------------------------------------------------------------------------
WIDE_LANGS = [f"l{i:02d}_{'Latn' if i % 3 else 'Cyrl'}" for i in range(14)]  # 14: languages stay columns
WIDE_METHODS = ["alpha", "wechsel+overlap-long-variant", "beta", "focus-with-a-long-name"]


@pytest.fixture(scope="module")
def wide_exp(tracking_uri) -> str:
    """Experiment ``lb-wide``: 14 languages and long method names, far wider than 100 columns."""
    client = MlflowClient(tracking_uri)
    name = "lb-wide"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        for k, m in enumerate(WIDE_METHODS):
            make_cell(client, exp_id, m, 1, world="wideworld",
                      hits={lang: (7 * i + 11 * k) % 50 for i, lang in enumerate(WIDE_LANGS)})
    return name


_BOX_PAIRS = {"┏": "┓", "┃": "┃", "┡": "┩", "│": "│", "├": "┤", "└": "┘"}


def _check_fits(text: str, width: int) -> None:
    from rich.cells import cell_len

    for line in text.splitlines():
        assert cell_len(line) <= width and len(line) <= width, line
        body = line.rstrip()
        if body[:1] in _BOX_PAIRS:  # a table line is never cut: it closes with its own border
            assert body[-1] == _BOX_PAIRS[body[0]], line


@pytest.mark.parametrize("columns", ["100", None])
def test_piped_leaderboard_fits_100_columns_and_keeps_every_language(run_cli, wide_exp, tmp_path, columns):
    """``COLUMNS=100 harness leaderboard | cat`` (and piped without COLUMNS: 100): no line over 100 cells, no
    table cut at a border, every language column and every row shown; the files keep the whole tables."""
    out = tmp_path / "o"
    env = {"COLUMNS": columns} if columns else {}
    proc = run_cli("leaderboard", "--experiment", wide_exp, "--langs", "--out", str(out), "--no-log", "--bootstrap",
                   "0", env=env, check=True)
    text = proc.stdout
    _check_fits(text, 100)
    board = text[text.index("lb-wide · sr-t · acc@10 · step 10 (final)"):text.index("slices ·")]
    assert "part 1/" in board  # it did not fit in one table
    for lang in WIDE_LANGS:
        assert re.search(rf"┃ +{lang} +┃", board), lang
    for m in WIDE_METHODS:
        assert re.search(rf"│ {re.escape(m)} ", board), m  # every row, its name wrapped at words only
    for col in ("avg", "rank", "copied", "method", "random"):
        assert re.search(rf"┃ +{col} +┃", board), col
    # the text file holds the whole board in one table: one header line with every language
    whole = (out / "leaderboard.txt").read_text()
    assert any(all(lang in line for lang in WIDE_LANGS) for line in whole.splitlines())


def test_terminal_tables_split_at_any_width_and_drop_nothing(lb):
    from rich.console import Console

    from leaderboard.render_terminal import render, render_claims

    b = _board(lb)
    for width in (40, 60, 100, 300):
        con = Console(width=width, record=True, file=io.StringIO())
        render_claims(lb.claims, con)
        render(b, con)
        text = con.export_text()
        _check_fits(text, width)
        for lang in b.languages:
            assert lang in text
        for s in _shown_numbers(b):
            assert s in text, (width, s)
        assert ("part 1/" in text) == (width < 300), width  # split where it must be, whole where it fits


def test_a_column_where_every_row_scores_the_same_is_named_in_every_rendering():
    from rich.console import Console

    from leaderboard.render_html import board_html
    from leaderboard.render_markdown import board_md
    from leaderboard.render_terminal import render
    from leaderboard.tables import Board, Entry, Leaderboard, Row

    zero = Board("e", "ner", "f1", "cpu", True, "step", 0, ["fra_Latn", "jpn_Jpan"], [
        Row(m, {"jpn_Jpan": Entry([0.0], ["1"]), "fra_Latn": Entry([v], ["1"])}) for m, v in (("a", 0.2), ("b", 0.3))])
    note = "no best in jpn_Jpan (every row 0.000)"
    con = Console(width=200, record=True, file=io.StringIO())
    render(zero, con, details=False)
    assert note in con.export_text()
    md = "\n".join(board_md(zero))
    assert note in md and "**0.000**" not in md and "**0.300**" in md
    page = board_html(Leaderboard("e", [zero], [], {}, []), zero)
    assert note in page and page.count('class="tie"') == 2 and page.count('class="best"') == 1
    # a tie between some rows above the rest is still the best
    top = Board("e", "ner", "f1", "cpu", True, "step", 0, ["fra_Latn"], [
        Row(m, {"fra_Latn": Entry([v], ["1"])}) for m, v in (("a", 0.3), ("b", 0.3), ("c", 0.1))])
    assert "no best" not in "\n".join(board_md(top)) and "**0.300**" in "\n".join(board_md(top))
