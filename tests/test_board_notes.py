"""Every note on a board comes from the runs it describes: the cpu profile's post-CPT note gives the CPT budget and
the held-out MLM loss its own cells logged, and no profile's message carries a measurement of its own."""

from __future__ import annotations

import re
import statistics

import pytest

from tests._leaderboard_runs import _board, _build


def test_the_cpt_note_gives_the_boards_own_heldout_losses(fake_exp, tracking_uri):
    from mlflow.tracking import MlflowClient

    from leaderboard.collect import collect_experiment

    b = _board(_build(tracking_uri, fake_exp, bootstrap=0))  # the cpu profile's final board: its rows ran CPT
    from leaderboard import fmt

    note = next(n for n in b.notes if n.startswith("post-CPT results of the cpu profile"))
    client = MlflowClient(tracking_uri)
    data = collect_experiment(client, client.get_experiment_by_name(fake_exp))
    rows: dict[str, list] = {}
    for c in data.cells.values():
        if c.profile == "cpu" and "cpt/heldout_loss" in c.curves:
            rows.setdefault(f"{c.method} {c.dim} {c.source}", []).append(sorted(c.curves["cpt/heldout_loss"]))
    before = statistics.fmean(statistics.fmean(c[0][1] for c in cs) for cs in rows.values())
    after = statistics.fmean(statistics.fmean(c[-1][1] for c in cs) for cs in rows.values())
    steps = {c.params["cpt.steps"] for c in data.cells.values() if c.profile == "cpu"}
    assert f"{steps.pop()} CPT steps" in note
    a, b = fmt.pair(before, after)  # with the digits that show the change
    assert f"from {a} to {b} nats (mean over {len(rows)} row(s)" in note
    assert "17.2" not in note and "15.6" not in note  # the bible world's numbers, once written into the profile


@pytest.mark.parametrize("steps, smoke", [(10, True), (400, False)])
def test_the_cpt_note_describes_the_budget_the_run_logged(steps, smoke, tracking_uri):
    """Cells of the cpu profile that logged its own budget (10 steps of 8 x 64 tokens) get its smoke-test note;
    cells that logged a budget of their own (``--cpt-steps 400``) get that budget, against the papers' CPT, and no
    word of a smoke test."""
    from mlflow.tracking import MlflowClient

    from tests._leaderboard_runs import make_cell

    client = MlflowClient(tracking_uri)
    name = f"lb-budget-{steps}"
    exp_id = client.create_experiment(name)
    for seed in (1, 2):
        make_cell(client, exp_id, "alpha", seed, final=steps, cpt={"effective_batch": 8, "block_size": 64})
    board = _board(_build(tracking_uri, name, bootstrap=0))
    note = next(n for n in board.notes if n.startswith("post-CPT results of the cpu profile"))
    assert f"{steps} CPT steps of 8 x 64 tokens" in note
    assert ("smoke test" in note) is smoke and ("10 CPT steps" in note) is smoke
    if not smoke:
        assert "budget of the run's own" in note and f"{steps * 8 * 64:,} tokens a row" in note
        assert "4,000 steps of 512 x 512 tokens" in note and "0.02%" in note
    assert all("smoke test" not in n for n in board.notes) is not smoke


def test_no_profile_message_carries_a_measurement():
    from harness.core.profiles import PROFILES

    for name, prof in PROFILES.items():
        for key, value in prof.items():
            if isinstance(value, str):
                assert not re.search(r"\d+\.\d+", value), (name, key, value)
