"""The cost table beside the board (leaderboard/costs.py): each method's init time and peak memory as its cells
logged them, what it needs and its GPU-hours estimate from the cells' init reports, on the terminal board and the
HTML page; and what initialize_model logs for it."""

from __future__ import annotations

import re

import pytest
from mlflow.tracking import MlflowClient

from tests._leaderboard_runs import _build, _log_json, make_cell

COSTS = {"alpha": {"needs": ["word vectors"], "gpu_hours_plan": 0.05},
         "beta": {"needs": ["CPT text", "the source model"], "gpu_hours_plan": 0.2}}
SECONDS = {("alpha", 1): 2.0, ("alpha", 2): 3.0, ("beta", 1): 250.0, ("beta", 2): 350.0}
PEAK = {("alpha", 1): 300.0, ("alpha", 2): 320.0, ("beta", 1): 900.0, ("beta", 2): 950.0}


@pytest.fixture(scope="module")
def costed(tracking_uri):
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment("lb-costs")
    for (method, seed), secs in SECONDS.items():
        parent, _ = make_cell(client, exp_id, method, seed, init={"copied": 100, "method": 50, "random": 10,
                                                                  "unk": 0, "seconds": secs,
                                                                  "peak_rss_mb": PEAK[(method, seed)]})
        _log_json(client, parent, {"method": method, "overlap_rule": "ofa", "costs": COSTS[method],
                                   "surgery": {"mode": "extension", "bias_policy": "remap"}}, "init_report.json")
    return _build(tracking_uri, "lb-costs", bootstrap=0)


def _headline(lb):
    return next(b for b in lb.boards if b.costs)


def test_cost_rows_from_the_logged_values(costed):
    board = _headline(costed)
    assert board.headline and board.kind == "final"
    assert [b for b in costed.boards if b.costs] == [board]  # one cost table per task and profile
    rows = {r.method: r for r in board.costs}
    assert rows["alpha"].seconds == 2.5 and rows["alpha"].peak_mb == 320.0 and rows["alpha"].cells == 2
    assert rows["beta"].seconds == 300.0 and rows["beta"].peak_mb == 950.0
    assert rows["alpha"].needs == ["word vectors"] and rows["beta"].gpu_hours == 0.2
    assert rows["alpha"].ratio == 1.0 and rows["beta"].ratio == 120.0
    assert rows["beta"].avg > rows["alpha"].avg  # beta's rows score higher here


def test_cost_table_on_the_terminal_board(costed):
    from leaderboard.render_terminal import render_text

    text = render_text([_headline(costed)], width=160)
    assert "what each method costs" in text
    lines = {m.group(1): ln for ln in text.splitlines() if (m := re.match(r"^\W*(alpha|beta)\s.*x\s*\W*$", ln))}
    assert re.search(r"alpha\s.*\b2\s.*\b2\.5\s.*\b320\s.*0\.05\s.*word vectors.*1\.0x", lines["alpha"])
    assert re.search(r"beta\s.*\b2\s.*\b300\s.*\b950\s.*0\.20\s.*CPT text.*120x", lines["beta"])
    assert re.search(r"cost: beta d=full leads alpha d=full by \S+ at 120\.0x its init time \(300 s vs 2\.5 s\)",
                     text)


def test_cost_table_on_the_default_terminal_leaderboard(costed, tracking_uri):
    """`harness leaderboard` without flags prints the overview: the cost table once, under the averages."""
    import io

    from rich.console import Console

    from leaderboard.publish import run_leaderboard

    con = Console(width=160, record=True, file=io.StringIO())
    assert run_leaderboard(tracking_uri, "lb-costs", console=con, write=False, bootstrap=0) == 0
    text = con.export_text()
    assert text.count("what each method costs") == 1
    assert re.search(r"beta\s.*\b300\s.*\b950\s.*0\.20\s.*CPT text.*120x", text)
    assert text.index("average over languages") < text.index("what each method costs")


def test_cost_table_on_the_html_page(costed):
    from leaderboard.render_html import leaderboard_html

    page = leaderboard_html(costed)
    table = re.search(r'<table class="costs".*?</table>', page, re.S)
    assert table is not None
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(0))
    cells = {re.findall(r"<td>(.*?)</td>", r)[0]: re.findall(r"<td>(.*?)</td>", r) for r in rows[1:]}
    assert cells["alpha d=full"][1:5] == ["2", "2.5", "320", "0.05"] and cells["alpha d=full"][-1] == "1.0x"
    assert cells["beta d=full"][2:5] == ["300", "950", "0.20"] and cells["beta d=full"][-1] == "120x"
    assert "beta d=full leads alpha d=full by" in page and "120.0x its init time" in page


def test_a_tie_at_the_top_names_the_cheapest(costed):
    from leaderboard.costs import lead_note

    board = _headline(costed)
    rows = {r.method: r for r in board.costs}
    saved = rows["alpha"].avg
    rows["alpha"].avg = rows["beta"].avg
    try:
        assert lead_note(board) == (f"beta d=full, alpha d=full share the best average ({rows['beta'].avg:.3f}); the "
                                    "cheapest of them is alpha d=full (2.5 s)")
    finally:
        rows["alpha"].avg = saved


def test_initialize_model_logs_what_the_method_needs():
    from harness.core.registry import METHODS
    from harness.initialize import method_costs

    assert method_costs(METHODS.get("tokdist"), "cpu") == {
        "needs": ["CPT text", "the source model"], "gpu_hours_plan": 0.2}
    assert method_costs(METHODS.get("fvt"), "cpu")["needs"] == []
    wechsel = method_costs(METHODS.get("wechsel"), "paper")
    assert "word vectors" in wechsel["needs"] or "bilingual dictionaries" in wechsel["needs"]
