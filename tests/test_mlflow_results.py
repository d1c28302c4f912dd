"""MLflow that opens on the results: model-training experiments, results runs with the headline numbers as
metrics, the saved runs-table views (one per task, sorted in its direction), the descriptions that link to the
leaderboard page, and the URLs `harness ui` prints."""

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
        # its description links to the leaderboard page and to its task's view (links relative to the UI page)
        note = r.data.tags["mlflow.note.content"]
        assert note.startswith(f"**[Leaderboard](#/experiments/{exp_id}/runs/{pub.run_id}/artifactPath/"
                               "leaderboard.html?workflowType=machine_learning)**")
        assert f"(#/experiments/{exp_id}/runs?workflowType=machine_learning&viewStateShareKey=harness-results-sr-t)" \
            in note
        assert "evaluated at step 0 only" not in note
    alpha = next(r for r in runs if r.data.params["row"] == "alpha d=full")
    assert alpha.data.params["seeds"] == "1 2"
    # alpha's final mean on aaa_Latn: the mean of its two seeds
    hits = [HITS[("alpha", s)]["aaa_Latn"] for s in (1, 2)]
    assert alpha.data.metrics["final/aaa_Latn"] == pytest.approx(sum(hits) / 2 / 50)


def _view(client: MlflowClient, exp_id: str, key: str) -> tuple[str, dict]:
    """(name, state) of a saved view: MLflow 3's envelope around the runs table's state."""
    envelope = json.loads(client.get_experiment(exp_id).tags[SHARED_VIEW_PREFIX + key])
    assert isinstance(envelope["createdAt"], int) and envelope["updatedAt"] >= envelope["createdAt"]
    return envelope["name"], json.loads(envelope["state"])


HEADLINE = ["metrics.`step0/avg`", "metrics.`final/avg`", "metrics.`delta/avg`", "metrics.`final/mean_rank`"]


def test_one_saved_view_per_task_and_one_of_every_task(published):
    client, exp_id, _, _ = published
    name, view = _view(client, exp_id, "harness-results-sr-t")
    assert name == "sr-t · acc@10, higher is better"
    assert [c for c in view["selectedColumns"] if c.startswith("metrics.")] == HEADLINE
    assert view["orderByKey"] == "metrics.`final/avg`" and view["orderByAsc"] is False  # acc@10: best first
    assert "params.`task`" not in view["selectedColumns"] and "params.`profile`" not in view["selectedColumns"]
    runs = client.search_runs([exp_id], view["searchFilter"], order_by=[f"{view['orderByKey']} DESC"])
    assert [r.data.params["row"] for r in runs] == ["beta d=full", "alpha d=full"]  # 0.525 > 0.515
    name, every = _view(client, exp_id, "harness-results")
    assert name.startswith("all tasks") and "params.`task`" in every["selectedColumns"]
    assert every["orderByKey"] == "metrics.`final/mean_rank`" and every["orderByAsc"] is True  # 1 = best, any task
    assert len(client.search_runs([exp_id], every["searchFilter"])) == 2


def test_the_experiment_description_links_the_leaderboard_and_the_views_and_keeps_the_rest(published, tmp_path):
    from leaderboard.publish import NOTE_END, NOTE_START, publish

    client, exp_id, lb, pub = published
    note = client.get_experiment(exp_id).tags["mlflow.note.content"]
    first = note.split("\n")[1]  # the line the UI shows above the runs table
    assert note.startswith(NOTE_START) and first.startswith("**Results:** [leaderboard](")
    assert f"(#/experiments/{exp_id}/runs/{pub.run_id}/artifactPath/leaderboard.html?" in first
    assert f"[sr-t](#/experiments/{exp_id}/runs?workflowType=machine_learning&viewStateShareKey=harness-results-sr-t)" \
        in first and "(acc@10, higher is better)" in first and "viewStateShareKey=harness-results)" in first
    # a person's own description is kept, the harness's block replaced in place on the next render
    client.set_experiment_tag(exp_id, "mlflow.note.content", "my notes\n\n" + note + "\n\nmore notes")
    publish(Tracker(client.tracking_uri), lb, tmp_path / "again")
    again = client.get_experiment(exp_id).tags["mlflow.note.content"]
    assert again.startswith("my notes\n\n" + NOTE_START) and again.endswith(NOTE_END + "\n\nmore notes")
    assert again.count(NOTE_START) == 1 and "[leaderboard](" in again


@pytest.fixture(scope="module")
def published_cpu(tracking_uri, tmp_path_factory):
    """Experiment ``res-cpu``, as under the cpu profile: the tasks evaluated at step 0 only (their final step is
    step 0); sr-t (higher is better) and ``lossy``, a task whose headline is lower-is-better."""
    from leaderboard.collect import collect_experiment
    from leaderboard.publish import publish
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment("res-cpu")
    for method in ("alpha", "beta"):
        make_cell(client, exp_id, method, 1, final=0)
        _, trun = make_cell(client, exp_id, method, 1, final=0, task="lossy")
        for k, v in {"headline": "acc@10", "higher_is_better": "false", "metrics": "acc@10,acc@1"}.items():
            client.set_tag(trun, f"harness.task.{k}", v)
    lb = build_leaderboard(collect_experiment(client, client.get_experiment(exp_id)), bootstrap=0)
    pub = publish(Tracker(tracking_uri), lb, tmp_path_factory.mktemp("res-cpu"))
    return client, exp_id, lb, pub


def test_tasks_evaluated_at_step_0_only_have_step0_and_final_but_no_delta(published_cpu):
    client, exp_id, lb, _ = published_cpu
    runs = client.search_runs([exp_id], "tags.`harness.kind` = 'result'")
    assert sorted(r.info.run_name for r in runs) == [f"{t} · {m} d=full" for t in ("lossy", "sr-t")
                                                     for m in ("alpha", "beta")]
    for r in runs:
        m = r.data.metrics
        assert r.data.params["final_step"] == "0"
        assert m["step0/avg"] == m["final/avg"] and m["step0/aaa_Latn"] == m["final/aaa_Latn"]
        assert "final/mean_rank" in m and "delta/avg" not in m  # not measured: no 0 that reads "CPT changed nothing"
        assert "evaluated at step 0 only" in r.data.tags["mlflow.note.content"]
    for task, ascending, best in (("sr-t", False, "beta d=full"), ("lossy", True, "alpha d=full")):
        name, view = _view(client, exp_id, f"harness-results-{task}")
        assert name.endswith("lower is better" if ascending else "higher is better")
        assert [c for c in view["selectedColumns"] if c.startswith("metrics.")] == [
            h for h in HEADLINE if "delta" not in h]  # the columns its runs have
        assert view["orderByKey"] == "metrics.`final/avg`" and view["orderByAsc"] is ascending
        order = "ASC" if ascending else "DESC"
        got = client.search_runs([exp_id], view["searchFilter"], order_by=[f"{view['orderByKey']} {order}"])
        assert {r.data.params["task"] for r in got} == {task} and len(got) == 2
        assert got[0].data.params["row"] == best  # the same numbers (0.525 beta, 0.5 alpha) read both ways


def test_ui_links_point_at_the_runs_table_view_and_the_current_leaderboard(published, tracking_uri, capsys):
    from harness.ui import links, print_links

    _, exp_id, _, pub = published
    items = {x.experiment: x for x in links(tracking_uri, "http://127.0.0.1:5999")}
    x = items["res-fake"]
    assert x.runs == (f"http://127.0.0.1:5999/#/experiments/{exp_id}/runs?workflowType=machine_learning"
                      "&viewStateShareKey=harness-results")
    assert x.views == [("sr-t · acc@10, higher is better", f"http://127.0.0.1:5999/#/experiments/{exp_id}/runs"
                        "?workflowType=machine_learning&viewStateShareKey=harness-results-sr-t")]
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
    assert x.runs in out and x.leaderboard in out and f"sr-t · acc@10, higher is better: {x.views[0][1]}" in out
    # the most recently rendered leaderboard (two rendered in the same second: the later experiment name, as the
    # listing orders them)
    rendered = sorted((y.rendered, y.experiment, y.leaderboard) for y in items.values() if y.leaderboard)
    assert target == rendered[-1][2]
