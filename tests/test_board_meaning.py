"""The board says what it means (issue 62, points 1, 4 and 5): every column holds the values of one step, a row
that blew up is marked on every board and kept out of the notes' averages, and a decoder's board says each metric's
direction, what bits per byte are, each row's held-out loss beside the uniform guess, and which sign of a
difference is better. Runs are written in the runner's schema (tests/_leaderboard_runs.py), no `harness run`."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tests._leaderboard_runs import LANGS, _build, mixed_experiment


def _renderings(lb) -> dict[str, str]:
    """The terminal (boards and the `harness run` table), Markdown, CSV (every board's and the long file) and HTML
    renderings of a leaderboard."""
    from leaderboard.render_csv import board_csv, long_csv
    from leaderboard.render_html import leaderboard_html
    from leaderboard.render_markdown import leaderboard_md
    from leaderboard.render_terminal import render_text
    from leaderboard.summary import render, summaries

    con = Console(width=400, record=True, file=io.StringIO())
    for table in summaries(lb):
        render(table, con)
    return {"terminal": render_text(lb.boards, claims=lb.claims), "summary": con.export_text(),
            "markdown": leaderboard_md(lb), "csv": "\n".join(board_csv(b) for b in lb.boards) + long_csv(lb),
            "html": leaderboard_html(lb)}


# -- 1. one step a column -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed_lb(tracking_uri):
    return _build(tracking_uri, mixed_experiment(tracking_uri, "meaning-mixed"), bootstrap=0)


TWO_STEP = "random d=full cpt=2 cpt.precision=fp32 eval=fp32"


def test_every_column_holds_the_values_of_one_step(mixed_lb):
    """`--cpt-steps 2` beside step-0-only rows: no board holds a row's step 0 beside another's step 2; the final
    board shows every row at step 0, the 2-step budget's final step is a board of its own, and the `harness run`
    table has a column for each."""
    from leaderboard.model import board_dict

    for b in mixed_lb.boards:
        assert b.step is not None, b.title  # every board names its one step
        steps = {s for r in b.rows for s in r.steps}
        assert len(steps) <= 1 and steps <= {b.step}, (b.title, steps)
        assert "each row's final step" not in b.title
    final = next(b for b in mixed_lb.boards if b.kind == "final" and b.metric == "acc@10")
    assert final.step == 0 and final.step_label == "step 0, before CPT" and len(final.rows) == 5
    # the 2-step row at step 0 (20 + j hits of 50 at the final step, half of them at step 0), not at step 2
    assert final.row(TWO_STEP).value(LANGS[0]) == pytest.approx(10 / 50)
    budget = mixed_lb.budget_boards(final)
    assert [(b.step, [r.label for r in b.rows]) for b in budget] == [(2, [TWO_STEP])]
    assert budget[0].row(TWO_STEP).value(LANGS[0]) == pytest.approx(20 / 50)
    assert budget[0].step_label == "step 2 (final of the 2-step CPT budget)"
    deltas = [b for b in mixed_lb.boards if b.kind == "delta" and b.metric == "acc@10"]
    assert [(d.step, [r.label for r in d.rows]) for d in deltas] == [(2, [TWO_STEP])]
    assert all(set(board_dict(b)["rows"][0]["steps"]) <= {b.step} for b in mixed_lb.boards if b.kind == "final")
    out = _renderings(mixed_lb)
    for name, text in out.items():
        assert "each row's final step" not in text and "@ step" not in text, name
    head = next(line for line in out["summary"].splitlines() if "sr-t acc@10" in line)
    assert head.count("sr-t acc@10") == 2, head  # a column at step 0 and one at the 2-step budget's final step
    assert "step 0, before CPT" in out["summary"] and "step 2 (final of the 2-step CPT budget)" in out["summary"]
    for name in ("markdown", "html", "terminal"):
        assert "step 2 (final of the 2-step CPT budget)" in out[name], name
    assert "step,sr-t" not in out["csv"] and ",step," not in out["csv"].splitlines()[0]  # no per-row step column
    assert len({b.id for b in mixed_lb.boards}) == len(mixed_lb.boards)  # a file per board
