"""What a finished evaluation covers: the languages it was asked for.

A run with ``--langs`` evaluates some languages; a later run that asks for more must not take that evaluation for
the whole (it once printed the subset's average as the board's). It evaluates the languages it lacks, and only
those, on the same products, and its board is a fresh home's."""

from __future__ import annotations

from harness.core.record import Done, RunRecord, covered_languages, missing_languages, read_items
from harness.core.record_read import read_task_run
from harness.core.tracking import Tracker
from tasks.base import ItemStats, TaskResult

BASE = ("run", "--world", "synthetic", "--methods", "random", "--tasks", "sr-t")


def _sr_t(stdout: str) -> str:
    """The sr-t value of the ``random`` row of the board a run ends with."""
    line = next(line for line in stdout.splitlines() if "random d=full" in line)
    return line.split("│")[2].strip()


def _scores(tracking_uri: str, experiment: str) -> dict[int, dict[str, dict[str, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'task'")
    assert len(runs) == 1
    return read_task_run(client, runs[0]).scores


def test_a_run_on_more_languages_evaluates_those_it_lacks_and_boards_them_all(run_cli, tracking_uri):
    sub = run_cli(*BASE, "--langs", "qab_Latn", "--experiment", "langs-sub", check=True)
    assert "removed the finished cell's" not in sub.stderr  # kept: a run on more languages evaluates on them
    full = run_cli(*BASE, "--experiment", "langs-sub", check=True)
    assert "finished, every evaluation logged" not in full.stderr
    assert "the 3 language(s) it lacked: qac_Latn, qad_Cyrl, qae_Grek" in full.stderr, full.stderr[-3000:]
    assert "· cached," in full.stderr  # the initialized model of the first run, not a second initialization
    fresh = run_cli(*BASE, "--experiment", "langs-fresh", check=True)
    assert _sr_t(full.stdout) == _sr_t(fresh.stdout) != _sr_t(sub.stdout)
    assert _scores(tracking_uri, "langs-sub") == _scores(tracking_uri, "langs-fresh")
    again = run_cli(*BASE, "--experiment", "langs-sub", check=True)
    assert "finished, every evaluation logged" in again.stderr and "lacked" not in again.stderr
    assert _sr_t(again.stdout) == _sr_t(fresh.stdout)


def _task_run(tracking_uri: str, name: str) -> tuple[RunRecord, str, str, str]:
    tracker = Tracker(tracking_uri)
    record = RunRecord(tracker)
    exp = tracker.experiment(name)
    parent = record.open_cell(exp, "k1", "random-full-s1", {"method": "random", "seed": 1})
    trun = record.open_task(exp, "k1", "sr-t", parent, {"method": "random", "task.headline": "acc@10",
                                                         "task.higher_is_better": "true", "task.metrics": "acc@10"})
    return record, exp, parent, trun


def _result(scores: dict[str, float]) -> TaskResult:
    return TaskResult(scores={"acc@10": scores}, extras={"hyperparameters": {"k": 10}},
                      items={"acc@10": {lang: ItemStats([v], [1.0]) for lang, v in scores.items()}},
                      label_source=dict.fromkeys(scores, "gold"))


def test_an_evaluation_extended_logs_only_what_it_lacked_and_averages_over_all(tracking_uri, own_tracking_uri):
    from mlflow.tracking import MlflowClient

    record, exp, parent, trun = _task_run(tracking_uri, "langs-extend")
    record.log_evaluation(trun, parent, "sr-t", 0, _result({"a": 0.5}), 1.0, languages=["a"])
    assert record.missing(trun, "sr-t", 0, ["a", "b", "c"]) == ["b", "c"]
    assert record.missing(trun, "sr-t", 2, ["a"]) == ["a"]  # another step: not evaluated at all
    # the task evaluated again on what it lacked (a retrieval task is handed the pivot too: it gives no score)
    record.log_evaluation(trun, parent, "sr-t", 0, _result({"a": 0.9, "b": 0.25, "c": 0.0}), 2.0,
                          languages=["b", "c"])
    assert record.missing(trun, "sr-t", 0, ["a", "b", "c"]) == []
    client = MlflowClient(tracking_uri)
    run = client.get_run(trun)
    assert covered_languages(run, "sr-t", 0) == {"a", "b", "c"}
    assert read_task_run(client, run).scores == {0: {"acc@10": {"a": 0.5, "b": 0.25, "c": 0.0}}}  # a: the first
    assert [m.value for m in client.get_metric_history(trun, "sr-t/acc_at_10/a")] == [0.5]  # logged once
    assert record.logged_average(parent, "sr-t", "acc_at_10", 0) == (0.5 + 0.25 + 0.0) / 3
    items = read_items(client, trun, "sr-t", 0, run.info.artifact_uri)
    assert {lang: st["num"] for lang, st in items["acc@10"].items()} == {"a": [0.5], "b": [0.25], "c": [0.0]}
    record.tracker.mark_done(parent, Done.INIT)
    record.tracker.finish(parent)
    assert record.finished_cell(exp, "k1", [Done.INIT], {"sr-t": ["a", "b", "c"]}, [0]) == parent
    assert record.finished_cell(exp, "k1", [Done.INIT], {"sr-t": ["a", "b", "c", "d"]}, [0]) is None


def test_a_run_logged_before_coverage_covers_the_languages_its_metrics_name(tracking_uri, own_tracking_uri):
    """A home of an earlier version: its evaluation marked done, no coverage tag; it ran in one command on one
    set of languages, which its per-language metrics name."""
    from mlflow.tracking import MlflowClient

    record, _, parent, trun = _task_run(tracking_uri, "langs-legacy")
    record.tracker.log_metrics(trun, {"sr-t/acc_at_10/a": 0.5, "sr-t/acc_at_10/avg": 0.5, "sr-t/seconds": 1.0}, 0)
    record.tracker.mark_done(trun, Done.evaluated(0))
    run = MlflowClient(tracking_uri).get_run(trun)
    assert covered_languages(run, "sr-t", 0) == {"a"}
    assert missing_languages(run, "sr-t", 0, ["a"]) == [] and missing_languages(run, "sr-t", 0, ["a", "b"]) == ["b"]
    assert missing_languages(None, "sr-t", 0, ["a"]) == ["a"]


def test_a_long_language_list_is_recorded_whole(tracking_uri, own_tracking_uri):
    """MLflow caps a tag's value: the coverage of a world of many languages is split over tags, read back whole."""
    from mlflow.tracking import MlflowClient

    record, _, parent, trun = _task_run(tracking_uri, "langs-many")
    langs = [f"q{i:03d}_Latn" for i in range(900)]  # ~8,100 characters
    record.log_evaluation(trun, parent, "sr-t", 0, _result({lang: 0.5 for lang in langs}), 1.0, languages=langs)
    assert covered_languages(MlflowClient(tracking_uri).get_run(trun), "sr-t", 0) == set(langs)


def test_the_heldout_diagnostic_is_the_cells_whatever_langs_says(synthetic_world):
    """The held-out loss is one value per CPT step of a cell: a run on a subset of the languages and one on all
    of them find the same value (it is not part of what --langs narrows)."""
    from harness.config import RunConfig
    from harness.spec import resolve

    def spec(**kw):
        return resolve(RunConfig(world="synthetic", methods=["random"], tasks=["sr-t"], cpt_steps=2, **kw),
                       synthetic_world, probe=False)

    whole, subset = spec(), spec(langs=["qab_Latn"])
    assert subset.plan.subset and not whole.plan.subset
    assert subset.plan.languages["sr-t"] == ["qab_Latn"] != whole.plan.languages["sr-t"]
    assert subset.heldout_languages == whole.heldout_languages and len(whole.heldout_languages) > 1
    assert subset.keys(subset.plan.cells[0]).key == whole.keys(whole.plan.cells[0]).key


def test_a_row_whose_seeds_cover_different_languages_says_so():
    from leaderboard.model import Board, Entry, Row, finish_board
    from leaderboard.summary import _cell

    even = Row("ofa", {"a": Entry([0.5, 0.6], ["1", "2"]), "b": Entry([0.4, 0.5], ["1", "2"])}, seeds=["1", "2"])
    uneven = Row("random", {"a": Entry([0.3, 0.2], ["1", "2"]), "b": Entry([0.1], ["1"])}, seeds=["1", "2"])
    gaps = Row("focus", {"a": Entry([0.7], ["1"])}, seeds=["1"])
    board = Board("e", "sr-t", "acc@10", "cpu", True, "step", 0, [], [even, uneven, gaps])
    finish_board(board)
    assert even.uneven_languages() == {} and uneven.uneven_languages() == {"b": 1}
    notes = " | ".join(board.notes)
    assert "random: its seeds cover different languages (b 1 of its 2 seeds)" in notes
    assert "focus: evaluated on 1 of the board's 2 languages" in notes and "ofa" not in notes
    assert _cell(board, gaps) == "incomplete (1 of 2 languages)"


def test_a_tasks_loss_stands_for_the_diagnostic_only_where_it_computes_the_same():
    """The held-out curve is the cell's, whichever tasks the command that computed it asked for: the MLM task's
    average is its figure only on the diagnostic's languages, at its sentence cap, without parameters of its own."""
    from types import SimpleNamespace

    from harness.evaluation import _heldout_languages_of

    def spec(eval_cap=None, heldout_cap=None, task_params=None):
        return SimpleNamespace(heldout_languages=("a", "b"), eval_max_sentences=eval_cap,
                               heldout_max_sentences=heldout_cap, cfg=SimpleNamespace(task_params=task_params or {}))

    assert _heldout_languages_of(spec(), ["b", "a"], "mlm")
    assert not _heldout_languages_of(spec(), ["a"], "mlm")  # --langs a
    assert not _heldout_languages_of(spec(200, 16), ["a", "b"], "mlm")  # the paper profile's two caps
    assert not _heldout_languages_of(spec(task_params={"mlm": {"mlm_probability": 0.3}}), ["a", "b"], "mlm")
    assert _heldout_languages_of(spec(task_params={"sr-t": {"layer": 4}}), ["a", "b"], "mlm")
