"""The whole run record (:class:`harness.core.record.RunRecord`) in process, on the MLflow store kept in memory
of tests/_mutation_record_fakes.py, local and remote: the names the stores hold, a cell's runs opened, found
again and deleted, the reports, curves and evaluations logged once and read back, an evaluation extended to
more languages. Written to kill the mutants of scripts/mutation.sh that the tests on a real store let live."""

from __future__ import annotations

import json

import pytest

from harness.core import record as R
from tests._mutation_record_fakes import _run, _Store


# -- the whole record, on a store kept in memory ---------------------------------------------------------------
@pytest.fixture(params=["local", "remote"])
def store(request, tmp_path):
    return _Store(tmp_path / "artifacts", remote=request.param == "remote")


def test_the_names_the_stores_hold():
    """The tag keys, identities, done markers and artifact paths the record writes: the runs that earlier
    versions wrote are found again, skipped and read only under these exact names."""
    assert (R.TAG, R.PARENT_TAG) == ("harness.", "mlflow.parentRunId")
    assert [R.Kind.CELL, R.Kind.TASK, R.Kind.AGGREGATE, R.Kind.LEADERBOARD, R.Kind.RESULT, R.Kind.REFERENCE] == [
        "cell", "task", "aggregate", "leaderboard", "result", "reference"]
    assert (R.tag("kind"), R.tag("mlflow.runName"), R.tag("done.x")) == ("harness.kind", "mlflow.runName",
                                                                         "harness.done.x")
    assert R.cell_identity("k") == {"cell": "k", "kind": "cell"}
    assert R.task_identity("k", "t") == {"cell": "k", "kind": "task", "task": "t"}
    assert R.cell_task_runs("k") == {"cell": "k", "kind": "task"}
    assert R.cell_all_runs("k") == {"cell": "k"}
    assert R.aggregate_identity("g", "t") == {"kind": "aggregate", "group": "g", "task": "t"}
    assert R.leaderboard_identity() == {"kind": "leaderboard"}
    assert R.result_identity("t", "p", "row") == {"kind": "result", "task": "t", "profile": "p", "row": "row"}
    assert R.reference_identity("k", "t") == {"kind": "reference", "reference": "k", "task": "t"}
    assert R.cells_of(method="m", dim="8") == {"kind": "cell", "method": "m", "dim": "8"}
    assert R.variant_aggregates({"method": "m"}) == {"kind": "aggregate", "method": "m"}
    assert (R.Done.INIT, R.Done.CPT_LOG, R.Done.heldout(3), R.Done.evaluated(4), R.Done.aggregated(5, 2)) == (
        "init", "cpt_log", "heldout_3", "step_4", "agg_5_2")
    assert R.done_tag(R.Done.INIT) == "harness.done.init"
    assert (R.INIT_REPORT, R.LANGUAGES, R.CPT_LAYOUT, R.INIT_ARTIFACTS, R.TABLES, R.ITEMS) == (
        "init_report.json", "languages.json", "cpt_layout.json", "init", "tables", "items")
    assert R.TRAINED_HELPER == "helper model (trained)"
    assert (R.table_path("sr-t", 3), R.table_path("sr-t", 3, 2)) == ("tables/sr-t_step3.json",
                                                                     "tables/sr-t_step3.part2.json")
    assert (R.items_path("ner", 0), R.items_path("ner", 10, 1)) == ("items/ner_step0.json",
                                                                    "items/ner_step10.part1.json")
    assert R.board_table_path("main") == "tables/main.json"


def test_metric_keys_are_valid_mlflow_keys():
    assert R.metric_key("ner", "acc@10", "eng_Latn") == "ner/acc_at_10/eng_Latn"
    assert R.metric_key("a-b. c:d", "é_1") == "a-b. c:d/é_1"
    assert R.metric_key("x%y", "a/b", "q(1)!") == "x_y/a/b/q_1__"
    assert R.metric_key("t") == "t"


def test_a_run_s_own_tags_parent_seeds_and_markers():
    run = _run({"harness.kind": "task", "harness.parent": "p", R.PARENT_TAG: "q", "other.x": "1",
                "harness.seeds": "1,2,,11", R.done_tag("init"): "1", R.done_tag("cpt_log"): "0"})
    assert R.own_tags(run) == {"kind": "task", "parent": "p", "seeds": "1,2,,11", "done.init": "1",
                               "done.cpt_log": "0"}
    assert R.parent_of(run) == "p" and R.seeds_of(run) == ["1", "2", "11"]
    assert R.is_marked(run, "init") and not R.is_marked(run, "cpt_log") and not R.is_marked(run, "heldout_0")
    assert R.parent_of(_run({R.PARENT_TAG: "q", "harness.parent": ""})) == "q"
    assert R.parent_of(_run()) is None and R.seeds_of(_run()) == []


def test_kind_filter_quotes_its_values():
    assert R.kind_filter("cell") == "tags.`harness.kind` = 'cell'"
    assert R.kind_filter("task", task="it's", seed=3) == (
        "tags.`harness.kind` = 'task' and tags.`harness.task` = 'it\\'s' and tags.`harness.seed` = '3'")


def test_table_and_items_paths_parsed_back():
    for task, step, part in [("sr-t", 12, 0), ("a_b_step1", 3, 2), ("x.y", 0, 1)]:
        assert R.parse_table_path(R.table_path(task, step, part)) == (task, step)
        assert R.parse_items_path(R.items_path(task, step, part), task) == step
    for bad in ("tables/t_step.json", "tables/t_step3.jsonx", "xtables/t_step3.json", "tables/t_step3.part.json",
                "tables/main.json", "items/t_step3.json", "tables/_step3.json", "tables/t_stepx.json"):
        assert R.parse_table_path(bad) is None, bad
    for bad, task in [("items/axy_step3.json", "a.y"), ("items/tt_step3.json", "t"), ("items/t_step3.json.1", "t"),
                      ("tables/t_step3.json", "t"), ("xitems/t_step3.json", "t"), ("items/t_step3.partx.json", "t")]:
        assert R.parse_items_path(bad, task) is None, bad


def _items(num: float) -> dict:
    return {"num": [num], "den": [1.0], "transform": "identity"}


def test_read_items_merges_every_part_of_the_step(store):
    run_id, _ = store.get_or_create_run("e", R.task_identity("k", "t"), "t")
    store.log_dict(run_id, {"acc": {"a": _items(1)}, "f1": {"a": _items(2)}}, R.items_path("t", 3))
    store.log_dict(run_id, {"acc": {"b": _items(3)}}, R.items_path("t", 3, 1))
    store.log_dict(run_id, {"acc": {"c": _items(4)}}, R.items_path("t", 4))
    store.log_dict(run_id, {"acc": {"d": _items(5)}}, R.items_path("u", 3))
    store.log_dict(run_id, None, R.items_path("t", 3, 2))  # a part that holds nothing
    uri = store.runs[run_id].info.artifact_uri
    assert R.read_items(store, run_id, "t", 3, uri) == {"acc": {"a": _items(1), "b": _items(3)}, "f1": {"a": _items(2)}}
    assert R.read_items(store, run_id, "t", 4, uri) == {"acc": {"c": _items(4)}}
    assert R.read_items(store, run_id, "t", 5, uri) == {}


def test_evaluated_steps_from_markers_else_tables_else_a_metric_s_history(tmp_path):
    store = _Store(tmp_path, remote=True)
    rid, _ = store.get_or_create_run("e", R.task_identity("k", "t"), "t")
    run = store.get_run(rid)
    assert R.evaluated_steps(store, run, "t") == set()
    store.log_metrics(rid, {"t/b/x": 1.0}, step=7)
    store.log_metrics(rid, {"t/acc/x": 1.0, "u/acc/x": 1.0, "tt/acc/x": 1.0}, step=0)
    store.log_metrics(rid, {"t/acc/x": 1.0, "u/acc/x": 1.0}, step=2)
    store.log_metrics(rid, {"u/acc/x": 1.0, "tt/acc/x": 1.0}, step=9)
    assert R.evaluated_steps(store, run, "t") == {0, 2}  # the first of its task's metrics
    assert R.evaluated_steps(store, run, "u") == {0, 2, 9}
    store.log_dict(rid, {}, R.table_path("t", 3))
    store.log_dict(rid, {}, R.table_path("t", 5, 1))
    store.log_dict(rid, {}, R.board_table_path("main"))
    assert R.evaluated_steps(store, run, "t") == {3, 5}
    store.set_tags(rid, {"done.step_4": "1", "done.step_11": "0", "done.step_x": "1", "done.heldout_6": "1",
                         "done.step_8x": "1"})
    assert R.evaluated_steps(store, run, "t") == {4, 11}


def test_a_cell_s_runs_opened_found_again_and_deleted(store):
    """A cell's run and its task runs are found again by their identity (opening twice is the same run, its tags
    set again); deleting a cell removes its runs and the aggregates that counted its seed, nothing else."""
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "random-s1", {"method": "m", "seed": 1})
    assert store.runs[cell].info.run_name == "random-s1"
    assert R.own_tags(store.runs[cell]) == {"cell": "k", "kind": "cell", "method": "m", "seed": "1"}
    store.finish(cell)
    assert record.open_cell("e", "k", "other", {"seed": 2}) == cell and store.runs[cell].info.status == "RUNNING"
    assert store.runs[cell].data.tags[R.tag("seed")] == "2"
    task = record.open_task("e", "k", "sr-t", cell, {"x": 1})
    assert store.runs[task].info.run_name == "sr-t"
    assert store.runs[task].data.tags == {"harness.cell": "k", "harness.kind": "task", "harness.task": "sr-t",
                                          "harness.x": "1", "harness.parent": cell, R.PARENT_TAG: cell}
    ner = record.open_task("e", "k", "ner", cell, {})
    assert record.open_task("e", "k", "sr-t", cell, {}) == task != ner
    assert record.cell_status("e", "k") == ["RUNNING"] and record.cell_status("e", "none") == []
    assert not record.done(cell, R.Done.INIT)
    store.mark_done(cell, R.Done.INIT)
    assert record.done(cell, R.Done.INIT) and not record.done(task, R.Done.INIT)
    other = record.open_cell("e", "k2", "c2", {})
    mine = [store.get_or_create_run("e", {"kind": "aggregate", "group": g, "method": "m", "seeds": s}, g)[0]
            for g, s in [("g1", "1,2"), ("g2", "11,2"), ("g3", "2,3")]]
    assert record.delete_cell("e", "k", {"method": "m"}, 1) == 4
    assert store.deleted == [cell, task, ner, mine[0]]
    assert record.cell_status("e", "k") == [] and record.cell_status("e", "k2") == ["RUNNING"]
    assert other not in store.deleted and mine[1] not in store.deleted and mine[2] not in store.deleted


def test_the_code_a_cell_recorded(store):
    record = R.RunRecord(store)
    assert record.cell_code("e", "k") is None
    cell = record.open_cell("e", "k", "c", {})
    assert record.cell_code("e", "k") is None  # logged before the code was recorded
    store.set_tags(cell, {"method_code": json.dumps({"methods/x.py": "abc"})})
    assert record.cell_code("e", "k") == {"methods/x.py": "abc"}
    assert R.RunRecord.recorded_code(store.runs[cell]) == {"methods/x.py": "abc"}
    store.set_tags(cell, {"method_code": "{not json"})
    assert record.cell_code("e", "k") is None
    store.set_tags(cell, {"method_code": ""})
    assert record.cell_code("e", "k") is None and R.RunRecord.recorded_code(None) is None


def test_log_init_logs_the_report_once(store, tmp_path):
    """The report's numbers (no flag, no text) as ``init/*`` metrics at step 0, the report and the languages as
    artifacts, a donor other than the trained helper as a param, each file the method kept (but one of 200 MiB or
    more) under ``init/``, its curves as series; nothing again once marked done."""
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    kept = tmp_path / "kept"
    (kept / "sub" / "deep").mkdir(parents=True)
    (kept / "a.txt").write_text("a")
    (kept / "sub" / "b.txt").write_text("b")
    (kept / "sub" / "deep" / "c.txt").write_text("c")
    (kept / "curves.json").write_text(json.dumps({"loss": [[0, 1.5], ["10", "0.5"]], "acc@1": [[5, 0.25]]}))
    with open(kept / "big.bin", "wb") as f:  # sparse: no bytes written
        f.truncate(200 * 2**20)
    with open(kept / "almost.bin", "wb") as f:
        f.truncate(200 * 2**20 - 1)
    report = {"method_stats": {"n": 3, "ratio": 0.5, "flag": True, "name": "x", "donor_model": {"donor": "xlm-r"}},
              "memory": {"peak_rss_mb": 100}, "counts": {"copied": 3, "random": 2}, "seconds": 0.25}
    record.log_init(cell, report, {"a": {"script": "Latn"}}, wall_seconds=0.75, cached=True, artifacts=kept)
    assert store.logged(cell, 0) == {"init/n": 3.0, "init/ratio": 0.5, "init/peak_rss_mb": 100.0, "init/copied": 3.0,
                                     "init/random": 2.0, "init/seconds": 0.25, "init/wall_seconds": 0.75,
                                     "init/cached": 1.0, "init/loss": 1.5}
    assert store.points(cell, "init/loss") == [(0, 1.5), (10, 0.5)]
    assert store.points(cell, "init/acc_at_1") == [(5, 0.25)]
    assert store.runs[cell].data.params == {"init.donor": "xlm-r"}
    assert store.artifact(cell, R.INIT_REPORT) == report
    assert store.artifact(cell, R.LANGUAGES) == {"a": {"script": "Latn"}}
    assert store.files == [(cell, "a.txt", "init"), (cell, "almost.bin", "init"), (cell, "curves.json", "init"),
                           (cell, "b.txt", "init/sub"), (cell, "c.txt", "init/sub/deep")]
    assert record.done(cell, R.Done.INIT)
    record.log_init(cell, {"seconds": 9.0}, {}, wall_seconds=9.0, cached=False, artifacts=kept)
    assert store.points(cell, "init/seconds") == [(0, 0.25)] and len(store.files) == 5
    assert store.artifact(cell, R.INIT_REPORT) == report


@pytest.mark.parametrize("stats", [None, {"donor_model": None}, {"donor_model": {"donor": R.TRAINED_HELPER}},
                                   {"donor_model": {"donor": ""}}])
def test_log_init_of_a_bare_report(store, tmp_path, stats):
    """A report with no statistics, memory nor time (a method that keeps nothing), or the trained helper as its
    donor: its counts and times only, no param, no file."""
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    report = {"counts": {}, "memory": {"peak_rss_mb": "n/a"}, "method_stats": stats}
    record.log_init(cell, report, {}, wall_seconds=2.0, cached=False, artifacts=tmp_path / "none")
    assert store.logged(cell, 0) == {"init/seconds": 0.0, "init/wall_seconds": 2.0, "init/cached": 0.0}
    assert store.runs[cell].data.params == {} and store.files == []
    assert store.artifact_names(cell) == sorted([R.INIT_REPORT, R.LANGUAGES]) and record.done(cell, R.Done.INIT)
    other = record.open_cell("e", "k2", "c", {})
    record.log_init(other, {"memory": None}, {}, wall_seconds=1.0, cached=True, artifacts=None)
    assert store.logged(other, 0) == {"init/seconds": 0.0, "init/wall_seconds": 1.0, "init/cached": 1.0}


def test_log_init_without_curves(store, tmp_path):
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "x.npy").write_bytes(b"x")
    record.log_init(cell, {}, {}, wall_seconds=1.0, cached=False, artifacts=tmp_path / "kept")
    assert store.files == [(cell, "x.npy", "init")]
    assert set(store.logged(cell, 0)) == {"init/seconds", "init/wall_seconds", "init/cached"}


def test_log_cpt_logs_its_time_curve_and_layouts_once(store):
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    layouts = [{"per_device": 8, "accumulation": 2, "from_step": 0}, {"per_device": 4, "accumulation": 4,
                                                                       "from_step": "50"}]
    record.log_cpt(cell, 100, 12.5, [{"step": 10, "loss": 2.0}, {"step": 20, "loss": 1.5}], layouts)
    assert store.points(cell, "cpt/seconds") == [(100, 12.5)]
    assert store.points(cell, "cpt/train_loss") == [(10, 2.0), (20, 1.5)]
    assert store.points(cell, "cpt/per_device_batch") == [(0, 8.0), (50, 4.0)]
    assert store.points(cell, "cpt/grad_accumulation") == [(0, 2.0), (50, 4.0)]
    assert store.artifact(cell, R.CPT_LAYOUT) == layouts and record.done(cell, R.Done.CPT_LOG)
    record.log_cpt(cell, 100, 99.0, [{"step": 30, "loss": 1.0}], layouts)
    assert store.points(cell, "cpt/seconds") == [(100, 12.5)] and len(store.points(cell, "cpt/train_loss")) == 2
    bare = record.open_cell("e", "k2", "c", {})
    record.log_cpt(bare, 0, 1.0, [], [])
    assert store.points(bare, "cpt/seconds") == [(0, 1.0)] and store.points(bare, "cpt/train_loss") == []
    assert store.artifact_names(bare) == [] and record.done(bare, R.Done.CPT_LOG)


def test_heldout_loss_cell_metrics_and_the_last_value_a_step(store):
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    record.log_heldout(cell, 0, 2.5)
    record.log_heldout(cell, 10, None)  # not computed: marked all the same
    record.log_heldout(cell, 0, 2.0)  # a resumed cell logs it again
    record.log_heldout(cell, 5, 3.0)
    assert record.heldout_curve(cell) == [(0, 2.0), (5, 3.0)]
    assert all(record.done(cell, R.Done.heldout(s)) for s in (0, 5, 10)) and not record.done(cell, "heldout_1")
    record.log_cell_metrics(cell, {}, 3)
    record.log_cell_metrics(cell, {"bpb/x": 1.25}, 3)
    assert store.logged(cell, 3) == {"bpb/x": 1.25}
    assert record.logged_average(cell, "t", "acc@1", 0) is None
    store.log_metrics(cell, {"t/acc_at_1/avg": 0.5}, step=0)
    store.log_metrics(cell, {"t/acc_at_1/avg": 0.75}, step=4)
    store.log_metrics(cell, {"t/acc_at_1/avg": 0.25}, step=0)
    assert record.logged_average(cell, "t", "acc@1", 0) == 0.25
    assert record.logged_average(cell, "t", "acc@1", 4) == 0.75
    assert record.logged_average(cell, "t", "acc@1", 2) is None


def test_task_values_are_the_last_of_each_key_and_step(store):
    """Every ``{task}/{metric}/{lang}`` metric of a cell's task run at every step, the last value logged of each
    (a cell killed between logging and marking logs it again); not its other metrics nor another task's."""
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    task = record.open_task("e", "k", "t", cell, {})
    store.log_metrics(task, {"t/seconds": 3.0, "tt/acc/a": 1.0, "t/a/b/c": 1.0}, 0)
    store.log_metrics(task, {"t/acc/a": 0.5, "t/acc/avg": 0.5}, 0)
    store.log_metrics(task, {"t/acc/a": 0.25, "t/acc/avg": 0.25}, 0)
    store.log_metrics(task, {"t/acc/a": 0.75}, 2)
    other = record.open_task("e", "k", "u", cell, {})
    store.log_metrics(other, {"u/acc/a": 1.0}, 0)
    assert record.task_values("e", "k", "t") == {("t/acc/a", 0): 0.25, ("t/acc/avg", 0): 0.25, ("t/acc/a", 2): 0.75}
    assert record.task_values("e", "k2", "t") == {}


def test_an_aggregate_is_logged_once_a_step(store):
    record = R.RunRecord(store)
    assert not record.aggregated("e", "g", "t", [0], 3)
    record.log_aggregate("e", "g", "t", "agg-g", {"seeds": "1,2,3", "method": "m"}, {5: {"x": 2.0}, 0: {"x": 1.0}},
                         3)
    (run,) = store.find_runs("e", R.aggregate_identity("g", "t"))
    assert run.info.run_name == "agg-g" and run.info.status == "FINISHED"
    assert R.own_tags(run) == {"kind": "aggregate", "group": "g", "task": "t", "seeds": "1,2,3", "method": "m",
                               "done.agg_0_3": "1", "done.agg_5_3": "1"}
    assert store.points(run.info.run_id, "x") == [(0, 1.0), (5, 2.0)]
    assert record.aggregated("e", "g", "t", [0, 5], 3) and record.aggregated("e", "g", "t", [], 3)
    assert not record.aggregated("e", "g", "t", [0, 5], 2) and not record.aggregated("e", "g", "t", [0, 7], 3)
    assert not record.aggregated("e", "g", "u", [0], 3)
    record.log_aggregate("e", "g", "t", "agg-g", {}, {0: {"x": 9.0}, 7: {"x": 3.0}}, 3)
    assert store.points(run.info.run_id, "x") == [(0, 1.0), (5, 2.0), (7, 3.0)]
    assert record.aggregated("e", "g", "t", [0, 5, 7], 3) and run.info.status == "FINISHED"


def _result(scores, items=None, hyperparameters=None, **extras):
    from tasks.base import ItemStats, TaskResult

    return TaskResult(scores=scores, extras={"hyperparameters": hyperparameters, **extras},
                      label_source={lang: "gold" for per in scores.values() for lang in per},
                      items={m: {lang: ItemStats([v], [1.0]) for lang, v in per.items()}
                             for m, per in (items or {}).items()})


def test_an_evaluation_then_its_extension_to_more_languages(store):
    """The first evaluation of a step: its protocol as params, each language's score and the averages on the task
    run (the averages on the cell run too), its table and items as the step's first part, the languages asked for
    as covered. A later one on more languages: only those it lacked are logged, the averages over all of them
    logged again, the table and items of the new languages as the step's next part, the coverage widened."""
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    task = record.open_task("e", "k", "sr-t", cell, {})
    first = _result({"acc@10": {"a": 0.5, "b": 0.25}, "f1": {"a": 1.0, "b": 0.0}, "none": {}},
                    items={"acc@10": {"a": 1.0, "b": 0.0}}, hyperparameters={"k": 1, "lr": 0.5}, dev=[1])
    record.log_evaluation(task, cell, "sr-t", 0, first, 1.5)
    assert store.runs[task].data.params == {"sr-t.k": "1", "sr-t.lr": "0.5"}
    assert store.logged(task, 0) == {"sr-t/acc_at_10/a": 0.5, "sr-t/acc_at_10/b": 0.25, "sr-t/f1/a": 1.0,
                                     "sr-t/f1/b": 0.0, "sr-t/acc_at_10/avg": 0.375, "sr-t/f1/avg": 0.5,
                                     "sr-t/seconds": 1.5}
    assert store.logged(cell, 0) == {"sr-t/acc_at_10/avg": 0.375, "sr-t/f1/avg": 0.5}
    assert store.artifact(task, R.table_path("sr-t", 0)) == {
        "task": "sr-t", "step": 0, "part": 0, "scores": first.scores, "averages": {"acc@10": 0.375, "f1": 0.5},
        "label_source": {"a": "gold", "b": "gold"}, "extras": {"hyperparameters": {"k": 1, "lr": 0.5}, "dev": [1]},
        "seconds": 1.5}
    items = {"a": {"num": [1.0], "den": [1.0], "transform": "identity"},
             "b": {"num": [0.0], "den": [1.0], "transform": "identity"}}
    assert store.artifact(task, R.items_path("sr-t", 0)) == {"acc@10": items}
    assert R.covered_languages(store.runs[task], "sr-t", 0) == {"a", "b"}
    assert record.logged_scores(store.runs[task], "sr-t", 0) == {"acc@10": {"a": 0.5, "b": 0.25},
                                                                 "f1": {"a": 1.0, "b": 0.0}, "none": {}}
    more = _result({"acc@10": {"a": 0.9, "c": 0.0, "d": 0.75}}, items={"acc@10": {"a": 0.0, "c": 1.0}},
                   hyperparameters={"k": 2})
    record.log_evaluation(task, cell, "sr-t", 0, more, 2.0, languages=["c"])
    assert store.runs[task].data.params == {"sr-t.k": "1", "sr-t.lr": "0.5"}
    assert store.points(task, "sr-t/acc_at_10/a") == [(0, 0.5)]  # the score it logged is kept
    assert store.points(task, "sr-t/acc_at_10/c") == [(0, 0.0)] and store.points(task, "sr-t/seconds") == [(0, 1.5)]
    assert store.points(task, "sr-t/acc_at_10/avg") == [(0, 0.375), (0, 0.375)]  # (0.5 + 0.25 + 0 + 0.75) / 4
    assert store.points(task, "sr-t/f1/avg") == [(0, 0.5), (0, 0.5)]  # a metric it lacked now: over what it had
    assert store.points(cell, "sr-t/acc_at_10/avg") == [(0, 0.375), (0, 0.375)]
    assert store.points(cell, "sr-t/f1/avg") == [(0, 0.5), (0, 0.5)]
    table = store.artifact(task, R.table_path("sr-t", 0, 1))
    assert table["part"] == 1 and table["scores"] == {"acc@10": {"c": 0.0, "d": 0.75}}
    assert list(table["averages"].items()) == [("acc@10", 0.375), ("f1", 0.5)] and table["seconds"] == 2.0
    assert store.artifact(task, R.items_path("sr-t", 0, 1)) == {"acc@10": {"c": {"num": [1.0], "den": [1.0],
                                                                                  "transform": "identity"}}}
    assert R.covered_languages(store.runs[task], "sr-t", 0) == {"a", "b", "c"}  # those asked, those it had
    assert record.logged_scores(store.runs[task], "sr-t", 0) == {"acc@10": {"a": 0.5, "b": 0.25, "c": 0.0,
                                                                            "d": 0.75}, "f1": {"a": 1.0, "b": 0.0},
                                                                 "none": {}}
    third = _result({"acc@10": {"e": 1.0}})
    record.log_evaluation(task, cell, "sr-t", 0, third, 1.0)
    assert store.artifact(task, R.table_path("sr-t", 0, 2))["part"] == 2
    assert store.points(task, "sr-t/acc_at_10/avg")[-1] == (0, 0.5)
    assert R.covered_languages(store.runs[task], "sr-t", 0) == {"a", "b", "c", "e"}  # those it scored
    assert R.items_path("sr-t", 0, 2) not in store.artifact_names(task)  # no items: none written
    record.log_evaluation(task, cell, "sr-t", 5, _result({"acc@10": {"a": 1.0}}, hyperparameters=None), 3.0)
    assert store.artifact(task, R.table_path("sr-t", 5))["averages"] == {"acc@10": 1.0}
    assert store.logged(task, 5)["sr-t/seconds"] == 3.0
    assert R.covered_languages(store.runs[task], "sr-t", 0) == {"a", "b", "c", "e"}
    assert R.covered_languages(store.runs[task], "sr-t", 5) == {"a"}
    assert all(record.done(task, R.Done.evaluated(s)) for s in (0, 5)) and not record.done(task, "step_1")


def test_logged_scores_read_the_step_s_tables_only(store):
    """Every part of the step's tables, this task's only; a language without a score (None) is none; a table
    of another name, step or task is no part of it."""
    record = R.RunRecord(store)
    rid, _ = store.get_or_create_run("e", R.task_identity("k", "t"), "t")
    store.log_dict(rid, {"scores": {"acc": {"a": 1, "b": None}}}, R.table_path("t", 2))
    store.log_dict(rid, {"scores": {"acc": {"c": "0.5"}, "f1": {"a": 0.25}}}, R.table_path("t", 2, 1))
    store.log_dict(rid, {"scores": {"acc": {"x": 1.0}}}, R.table_path("t", 3))
    store.log_dict(rid, {"scores": {"acc": {"y": 1.0}}}, R.table_path("u", 2))
    store.log_dict(rid, {"scores": {"acc": {"z": 1.0}}}, R.board_table_path("main"))
    store.log_dict(rid, {"no": "scores"}, R.table_path("t", 2, 2))
    store.log_dict(rid, None, R.table_path("t", 2, 3))
    scores = record.logged_scores(store.runs[rid], "t", 2)
    assert scores == {"acc": {"a": 1.0, "c": 0.5}, "f1": {"a": 0.25}}
    assert all(type(v) is float for per in scores.values() for v in per.values())
    assert record._next_part(store.runs[rid], "t", 2) == 4 and record._next_part(store.runs[rid], "t", 9) == 0


def test_an_evaluation_killed_before_its_marker_is_done_again_whole(store):
    """An evaluation killed after its table was written but before the step was marked: the step is evaluated
    again as a first one (its table written over, as part 0; its averages over what it scores now)."""
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    task = record.open_task("e", "k", "t", cell, {})
    store.log_dict(task, {"task": "t", "step": 0, "part": 0, "scores": {"acc": {"a": 0.0, "x": 0.0}}},
                   R.table_path("t", 0))
    record.log_evaluation(task, cell, "t", 0, _result({"acc": {"a": 1.0, "b": 0.5}}), 1.0)
    assert store.points(task, "t/acc/avg") == [(0, 0.75)] and store.points(task, "t/seconds") == [(0, 1.0)]
    assert store.artifact(task, R.table_path("t", 0))["scores"] == {"acc": {"a": 1.0, "b": 0.5}}
    assert R.table_path("t", 0, 1) not in store.artifact_names(task)
    assert R.covered_languages(store.runs[task], "t", 0) == {"a", "b"}


def test_a_run_logged_before_coverage_is_extended_by_the_languages_its_metrics_lack(store):
    """A task run evaluated before coverage was recorded (a done marker, its metrics, no coverage tag) covers the
    languages its metrics name: an evaluation on more languages logs only the others and covers them all."""
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    task = record.open_task("e", "k", "t", cell, {})
    store.log_metrics(task, {"t/acc/a": 1.0, "t/acc/avg": 1.0}, 0)
    store.log_dict(task, {"scores": {"acc": {"a": 1.0}}}, R.table_path("t", 0))
    store.mark_done(task, R.Done.evaluated(0))
    assert record.missing(task, "t", 0, ["b", "a", "c"]) == ["b", "c"]
    record.log_evaluation(task, cell, "t", 0, _result({"acc": {"a": 0.0, "b": 0.5}}), 1.0)
    assert store.points(task, "t/acc/a") == [(0, 1.0)] and store.points(task, "t/acc/b") == [(0, 0.5)]
    assert store.points(task, "t/acc/avg") == [(0, 1.0), (0, 0.75)]
    assert store.artifact(task, R.table_path("t", 0, 1))["scores"] == {"acc": {"b": 0.5}}
    assert record.missing(task, "t", 0, ["b", "a", "c"]) == ["c"]


def test_items_of_a_metric_without_scores_are_none(store):
    record = R.RunRecord(store)
    cell = record.open_cell("e", "k", "c", {})
    task = record.open_task("e", "k", "t", cell, {})
    result = _result({"acc": {"a": 1.0}}, items={"acc": {"a": 1.0}, "loss": {"a": 2.0}})
    record.log_evaluation(task, cell, "t", 0, result, 1.0)
    assert store.artifact(task, R.items_path("t", 0)) == {
        "acc": {"a": {"num": [1.0], "den": [1.0], "transform": "identity"}}, "loss": {}}
