"""MLflow that opens on the results: model-training experiments, results runs with the headline numbers as
metrics, the saved runs-table view, and the URLs `harness ui` prints."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from harness.core.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, SHARED_VIEW_PREFIX, Tracker
from tests._leaderboard_runs import HITS, make_cell


def test_experiments_are_model_training_ones_old_ones_too(tracking_uri):
    tracker = Tracker(tracking_uri)
    client = tracker.client
    new = tracker.experiment("kind-new")
    assert client.get_experiment(new).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    # an experiment created before the tag existed gets it the next time it is used
    old = client.create_experiment("kind-old")
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(old).tags
    assert tracker.experiment("kind-old") == old
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    # a kind someone chose is left alone
    mine = client.create_experiment("kind-mine", tags={EXPERIMENT_KIND_TAG: "finetuning"})
    tracker.experiment("kind-mine")
    assert client.get_experiment(mine).tags[EXPERIMENT_KIND_TAG] == "finetuning"


@pytest.fixture(scope="module")
def published(tracking_uri, tmp_path_factory):
    """Experiment ``res-fake``: alpha (2 seeds) and beta (1 seed) on sr-t, rendered and published twice."""
    from leaderboard.collect import collect_experiment
    from leaderboard.publish import publish
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment("res-fake")  # as before this change: no kind tag
    make_cell(client, exp_id, "alpha", 1)
    make_cell(client, exp_id, "alpha", 2)
    make_cell(client, exp_id, "beta", 1)
    tracker = Tracker(tracking_uri)
    lb = build_leaderboard(collect_experiment(client, client.get_experiment(exp_id)), bootstrap=0)
    out = tmp_path_factory.mktemp("res-board")
    publish(tracker, lb, out)
    pub = publish(tracker, lb, out)  # a re-render updates the same runs
    return client, exp_id, lb, pub


def test_results_runs_hold_the_headline_numbers_as_metrics(published):
    client, exp_id, lb, pub = published
    assert client.get_experiment(exp_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    runs = client.search_runs([exp_id], "tags.`harness.kind` = 'result'")
    assert sorted(r.info.run_name for r in runs) == ["sr-t · alpha d=full", "sr-t · beta d=full"]
    final = next(b for b in lb.boards if b.kind == "final" and b.metric == "acc@10")
    step0 = next(b for b in lb.boards if b.kind == "step" and b.step == 0 and b.metric == "acc@10")
    for r in runs:
        assert r.info.status == "FINISHED"
        label = r.data.params["row"]
        m = r.data.metrics
        assert m["final/avg"] == pytest.approx(final.row(label).avg)
        assert m["step0/avg"] == pytest.approx(step0.row(label).avg)
        assert m["delta/avg"] == pytest.approx(final.row(label).avg - step0.row(label).avg)
        assert m["final/mean_rank"] == pytest.approx(final.row(label).mean_rank)
        assert m["final/aaa_Latn"] == pytest.approx(final.row(label).value("aaa_Latn"))
        assert m["step0/bbb_Latn"] == pytest.approx(step0.row(label).value("bbb_Latn"))
        assert r.data.params["task"] == "sr-t" and r.data.params["metric"] == "acc@10"
        assert r.data.params["method"] == label.split()[0]
        assert r.data.tags["harness.leaderboard_run"] == pub.run_id
        arts = {a.path for a in client.list_artifacts(r.info.run_id, "init")}
        seeds = r.data.params["seeds"].split()
        assert arts == {f"init/init_report_seed{s}.json" for s in seeds}
        boards = {a.path for a in client.list_artifacts(r.info.run_id, "leaderboard")}
        assert f"leaderboard/{final.id}.csv" in boards
    alpha = next(r for r in runs if r.data.params["row"] == "alpha d=full")
    assert alpha.data.params["seeds"] == "1 2"
    # alpha's final mean on aaa_Latn: the mean of its two seeds
    hits = [HITS[("alpha", s)]["aaa_Latn"] for s in (1, 2)]
    assert alpha.data.metrics["final/aaa_Latn"] == pytest.approx(sum(hits) / 2 / 50)


def test_the_saved_view_shows_the_results_runs_with_metric_columns(published):
    client, exp_id, _, _ = published
    tags = client.get_experiment(exp_id).tags
    view = json.loads(tags[SHARED_VIEW_PREFIX + "harness-results"])
    assert "metrics.`final/avg`" in view["selectedColumns"] and "metrics.`step0/avg`" in view["selectedColumns"]
    assert view["orderByKey"] == "metrics.`final/avg`" and view["orderByAsc"] is False
    assert len(client.search_runs([exp_id], view["searchFilter"])) == 2


def test_ui_links_point_at_the_runs_table_view_and_the_current_leaderboard(published, tracking_uri, capsys):
    from harness.ui import links, print_links

    _, exp_id, _, pub = published
    items = {x.experiment: x for x in links(tracking_uri, "http://127.0.0.1:5999")}
    x = items["res-fake"]
    assert x.runs == (f"http://127.0.0.1:5999/#/experiments/{exp_id}/runs?workflowType=machine_learning"
                      "&viewStateShareKey=harness-results")
    assert x.leaderboard == (f"http://127.0.0.1:5999/#/experiments/{exp_id}/runs/{pub.run_id}"
                             "/artifactPath/leaderboard.html?workflowType=machine_learning")
    # an experiment from before the kind tag, with runs, gets it when harness ui lists it
    client = MlflowClient(tracking_uri)
    old = client.create_experiment("ui-old-kind")
    client.create_run(old)
    links(tracking_uri, "http://127.0.0.1:5999")
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    target = print_links(list(items.values()), "http://127.0.0.1:5999")
    out = capsys.readouterr().out
    assert x.runs in out and x.leaderboard in out
    rendered = sorted((y.rendered, y.leaderboard) for y in items.values() if y.leaderboard)
    assert target == rendered[-1][1]  # the most recently rendered leaderboard
