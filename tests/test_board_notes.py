"""Every note on a board comes from the runs it describes: the cpu profile's post-CPT note gives the CPT budget and
the held-out MLM loss its own cells logged, and no profile's message carries a measurement of its own."""

from __future__ import annotations

import re
import statistics

from tests._leaderboard_runs import _board, _build


def test_the_cpt_note_gives_the_boards_own_heldout_losses(fake_exp, tracking_uri):
    from mlflow.tracking import MlflowClient

    from leaderboard.collect import collect_experiment

    b = _board(_build(tracking_uri, fake_exp, bootstrap=0))  # the cpu profile's final board: its rows ran CPT
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
    assert f"from {before:.2f} to {after:.2f} nats (mean over its {len(rows)} row(s)" in note
    assert "17.2" not in note and "15.6" not in note  # the bible world's numbers, once written into the profile


def test_no_profile_message_carries_a_measurement():
    from harness.core.profiles import PROFILES

    for name, prof in PROFILES.items():
        for key, value in prof.items():
            if isinstance(value, str):
                assert not re.search(r"\d+\.\d+", value), (name, key, value)
