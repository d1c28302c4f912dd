"""A decoder source end to end through the CLI on the synthetic world: init, evaluation at step 0, causal CPT,
evaluation again, the held-out causal-LM loss as the CPT diagnostic; every method (slow)."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

BASE = ["run", "--world", "synthetic", "--source", "dec", "--cpt-steps", "2", "--keep-products"]


def _cells(tracking_uri: str, experiment: str, kind: str = "cell"):
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name(experiment)
    return c.search_runs([exp.experiment_id], filter_string=f"tags.`harness.kind` = '{kind}'") if exp else []


def _check_cells(tracking_uri: str, harness_home, exp: str, methods: list[str], tasks: list[str]) -> None:
    c = MlflowClient(tracking_uri)
    cells = {r.data.params["method"]: r for r in _cells(tracking_uri, exp)}
    assert sorted(cells) == sorted(methods)
    for method, run in cells.items():
        assert run.info.status == "FINISHED", method
        m = run.data.metrics
        assert m["init/copied"] + m["init/method"] + m["init/random"] + m["init/unk"] > 0
        held = c.get_metric_history(run.info.run_id, "cpt/heldout_loss")
        # finite and positive: the loop ran (how good a method's rows are is the board's, not this test's; CLP's
        # rows give this decoder 833 nats a token, docs/decoders.md)
        assert sorted(x.step for x in held) == [0, 2] and all(0 < x.value < 1e6 for x in held), method
        report = json.loads((harness_home / "products" / "init" / run.data.tags["harness.init_product"]
                             / "init_report.json").read_text())
        assert report["surgery"]["objective"] == "clm" and report["source"] == "dec"
    for run in _cells(tracking_uri, exp, "task"):
        task = run.data.tags["harness.task"] if "harness.task" in run.data.tags else None
        hist = {k for k in run.data.metrics if k.endswith("/avg")}
        assert hist, (task, run.data.tags)
        for name in hist:
            assert sorted(x.step for x in c.get_metric_history(run.info.run_id, name)) == [0, 2], name


def test_a_decoder_cell_runs_init_cpt_and_its_tasks(run_cli, tracking_uri, harness_home):
    exp = "t-decoder"
    out = run_cli(*BASE, "--methods", "fvt", "--tasks", "clm,sr-t,ner", "--experiment", exp, check=True)
    assert "held-out CLM loss" in out.stderr or "clm @ step 2" in out.stderr
    _check_cells(tracking_uri, harness_home, exp, ["fvt"], ["clm", "sr-t", "ner"])
    params = {}
    for run in _cells(tracking_uri, exp, "task"):
        params.update(run.data.params)
    # each protocol named in the task runs' parameters: the causal LM's scoring, the decoder's tagged sub-token
    assert params["clm.protocol"] == "clm-rolling-bos" and params["ner.label_subtoken"] == "last"


@pytest.mark.slow
def test_every_method_runs_on_the_decoder_at_step_0_and_after_cpt(run_cli, tracking_uri, harness_home):
    from harness.core.registry import METHODS

    exp = "t-decoder-all"
    run_cli(*BASE, "--methods", "all", "--tasks", "clm,sr-t", "--experiment", exp, check=True, timeout=3000)
    usable = [m for m in METHODS.names() if not (METHODS.get(m).requires - {"word_vectors", "target_text",
                                                                              "cpt_text", "dictionary"})]
    _check_cells(tracking_uri, harness_home, exp, usable, ["clm", "sr-t"])


def test_a_decoder_board_names_its_held_out_diagnostic_the_causal_lm_loss(run_cli):
    """The board's notes on CPT name the diagnostic a decoder's cells logged (the causal-LM loss), not the MLM
    loss of an encoder's."""
    exp = "t-decoder-notes"
    run_cli("run", "--world", "synthetic", "--source", "dec", "--methods", "random", "--tasks", "sr-t",
            "--experiment", exp, check=True)
    board = " ".join(run_cli("leaderboard", "--experiment", exp, check=True).stdout.split())
    assert "only the held-out causal-LM loss was measured" in board, board[-3000:]
    assert "took the held-out causal-LM loss (the CPT diagnostic) from" in board
    # nor does it list the papers' claim on an encoder's MLM loss as "not tested": a decoder's rows are not its own
    assert "held-out MLM loss" not in board and "papers' claim" not in board.replace("No paper's claim", "")
