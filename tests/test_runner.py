"""End-to-end runner tests on the synthetic world, through the real CLI in subprocesses."""

from __future__ import annotations

import re
import signal
import textwrap

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import REPO

BASE = ["run", "--world", "synthetic", "--tasks", "mlm", "--cpt-steps", "4"]


def _runs(tracking_uri: str, experiment: str, kind: str):
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return c.search_runs([exp.experiment_id], filter_string=f"tags.`harness.kind` = '{kind}'")


def _products(home, run) -> dict[str, bool]:
    """{kind: whether it is in the home} of the init and CPT products a cell run names (its product tags)."""
    tags = run.data.tags
    return {kind: (home / "products" / kind / tags[f"harness.{kind}_product"] / "_DONE.json").is_file()
            for kind in ("init", "cpt") if f"harness.{kind}_product" in tags}


def test_run_logs_the_tracking_schema_and_a_repeat_recomputes_nothing(run_cli, tracking_uri, harness_home):
    exp = "t-schema"
    first = run_cli(*BASE, "--methods", "random", "--experiment", exp, check=True)
    c = MlflowClient(tracking_uri)
    (parent,) = _runs(tracking_uri, exp, "cell")
    (child,) = _runs(tracking_uri, exp, "task")
    assert parent.info.status == "FINISHED" and child.info.status == "FINISHED"
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
    p = parent.data.params
    assert p["method"] == "random" and p["dim"] == "full" and p["seed"] == "1" and p["profile"] == "cpu"
    assert p["world"] == "synthetic" and len(p["world_hash"]) == 16 and p["version.torch"].startswith("2.")
    assert int(p["cpt.steps"]) == 4
    # every run, the task runs too, says what it computed with (tags) and the cell also as params
    import subprocess

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    for run in (parent, child):
        tags = run.data.tags
        for lib in ("python", "harness", "torch", "transformers", "tokenizers", "datasets", "fasttext", "mlflow"):
            assert tags[f"harness.version.{lib}"] not in ("", "absent"), lib
        assert tags["harness.version.torch"] == p["version.torch"]
        assert tags["harness.git_commit"].split("+")[0] == head
    assert p["git_revision"] == parent.data.tags["harness.git_commit"]
    m = parent.data.metrics
    assert m["init/copied"] + m["init/method"] + m["init/random"] + m["init/unk"] > 0
    assert "mlm/loss/avg" in m
    train = c.get_metric_history(parent.info.run_id, "cpt/train_loss")
    assert sorted(x.step for x in train) == [1, 2, 3, 4]
    for lang in ("qaa_Latn", "qab_Latn", "qad_Cyrl"):
        hist = c.get_metric_history(child.info.run_id, f"mlm/loss/{lang}")
        assert sorted(x.step for x in hist) == [0, 4]
    arts = {a.path for a in c.list_artifacts(parent.info.run_id)}
    assert "init_report.json" in arts
    tables = {a.path for a in c.list_artifacts(child.info.run_id, "tables")}
    assert tables == {"tables/mlm_step0.json", "tables/mlm_step4.json"}

    # the finished cell's init and CPT products are removed (its results are logged)
    assert _products(harness_home, parent) == {"init": False, "cpt": False}
    assert "removed the finished cell's init and cpt product(s)" in first.stderr

    again = run_cli(*BASE, "--methods", "random", "--experiment", exp, check=True)
    # the finished cell is found before anything is built: no initialization, no CPT, no evaluation
    assert "finished, every evaluation logged" in again.stderr
    assert "  init " not in again.stderr and "CPT:" not in again.stderr and "@ step" not in again.stderr
    assert _products(harness_home, parent) == {"init": False, "cpt": False}
    (parent2,) = _runs(tracking_uri, exp, "cell")
    assert parent2.info.status == "FINISHED" and parent2.info.end_time == parent.info.end_time
    assert len(_runs(tracking_uri, exp, "cell")) == 1 and len(_runs(tracking_uri, exp, "task")) == 1
    hist = c.get_metric_history(child.info.run_id, "mlm/loss/qab_Latn")
    assert sorted(x.step for x in hist) == [0, 4]  # nothing logged twice

    # a new task for the same cell is not finished work: the cell runs again (its init product built again)
    more = run_cli(*BASE[:-4], "--tasks", "mlm,sr-t", "--cpt-steps", "4", "--methods", "random",
                   "--experiment", exp, check=True)
    assert "finished, every evaluation logged" not in more.stderr and "mlm @ step 0: already logged" in more.stderr
    assert "sr-t @ step 0" in more.stderr
    assert len(_runs(tracking_uri, exp, "cell")) == 1 and len(_runs(tracking_uri, exp, "task")) == 2


@pytest.mark.parametrize("stage", ["init", "step0", "cpt"])
def test_killed_run_resumes_without_duplicates(run_cli, tracking_uri, harness_home, stage):
    exp = f"t-kill-{stage}"
    args = [*BASE, "--methods", "random", "--experiment", exp, "--seeds", "7"]
    killed = run_cli(*args, env={"HARNESS_FAULT_AFTER": stage})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (parent,) = _runs(tracking_uri, exp, "cell")
    assert parent.info.status == "RUNNING"
    # the unfinished cell keeps what it built, so its resume builds it not again
    assert _products(harness_home, parent) == {"init": True, "cpt": stage == "cpt"}
    resumed = run_cli(*args, check=True)
    assert ": done in " in resumed.stderr and "· cached, {" in resumed.stderr  # its init product reused
    (parent2,) = _runs(tracking_uri, exp, "cell")
    assert parent2.info.run_id == parent.info.run_id and parent2.info.status == "FINISHED"
    assert _products(harness_home, parent2) == {"init": False, "cpt": False}
    (child,) = _runs(tracking_uri, exp, "task")
    c = MlflowClient(tracking_uri)
    hist = c.get_metric_history(child.info.run_id, "mlm/loss/qac_Latn")
    assert sorted(x.step for x in hist) == [0, 4]
    train = c.get_metric_history(parent.info.run_id, "cpt/train_loss")
    assert sorted(x.step for x in train) == [1, 2, 3, 4]
    # the status tells the truth: every run of the resumed work ends FINISHED
    every = _runs(tracking_uri, exp, "cell") + _runs(tracking_uri, exp, "task")
    assert [r.info.status for r in every] == ["FINISHED"] * len(every)


def test_run_left_running_by_a_dead_process_is_marked_killed_then_resumed(run_cli, tracking_uri):
    exp = "t-orphan"
    killed = run_cli(*BASE, "--methods", "random", "--experiment", exp, "--seeds", "8",
                     env={"HARNESS_FAULT_AFTER": "init"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (orphan,) = _runs(tracking_uri, exp, "cell")
    assert orphan.info.status == "RUNNING"
    other = run_cli(*BASE, "--methods", "random", "--experiment", exp, "--seeds", "9", "--cpt-steps", "0",
                    check=True)  # another cell: the orphan is found and marked, not resumed
    assert "marked KILLED" in other.stderr
    status = {r.data.tags["harness.seed"]: r.info.status for r in _runs(tracking_uri, exp, "cell")}
    assert status == {"8": "KILLED", "9": "FINISHED"}
    run_cli(*BASE, "--methods", "random", "--experiment", exp, "--seeds", "8", check=True)
    (again,) = [r for r in _runs(tracking_uri, exp, "cell") if r.data.tags["harness.seed"] == "8"]
    assert again.info.run_id == orphan.info.run_id and again.info.status == "FINISHED"


def test_keep_products_keeps_them_and_a_later_run_removes_them(run_cli, tracking_uri, harness_home):
    """``--keep-products`` keeps a finished cell's products; a later run without it finds the cell finished and
    removes them (as it does those of a command killed after the run finished, before it removed them), but
    not one that a live run of another command names."""
    from harness.core.tracking import Tracker

    exp = "t-keep"
    args = [*BASE, "--methods", "random", "--experiment", exp, "--seeds", "11"]
    kept = run_cli(*args, "--keep-products", check=True)
    assert "removed the finished cell" not in kept.stderr
    (parent,) = _runs(tracking_uri, exp, "cell")
    assert parent.info.status == "FINISHED"
    assert _products(harness_home, parent) == {"init": True, "cpt": True}

    # another command works on a cell that reads the same init product (other CPT settings, another experiment)
    import os

    other, _ = Tracker(tracking_uri).get_or_create_run(Tracker(tracking_uri).experiment("t-keep-other"),
                                                       {"cell": "other", "kind": "cell"}, "other")
    c = MlflowClient(tracking_uri)
    c.set_tag(other, "harness.init_product", parent.data.tags["harness.init_product"])
    assert c.get_run(other).data.tags["harness.pid"] == str(os.getpid())  # alive: this process
    again = run_cli(*args, check=True)
    assert "finished, every evaluation logged" in again.stderr and "· cached, {" not in again.stderr
    assert _products(harness_home, parent) == {"init": True, "cpt": False}
    c.set_terminated(other, status="FINISHED")
    run_cli(*args, check=True)
    assert _products(harness_home, parent) == {"init": False, "cpt": False}


def test_killed_after_the_run_finished_removes_the_products_when_started_again(run_cli, tracking_uri,
                                                                                 harness_home):
    exp = "t-kill-finished"
    args = [*BASE, "--methods", "random", "--experiment", exp, "--seeds", "12"]
    killed = run_cli(*args, env={"HARNESS_FAULT_AFTER": "finished"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (parent,) = _runs(tracking_uri, exp, "cell")
    assert parent.info.status == "FINISHED"
    assert _products(harness_home, parent) == {"init": True, "cpt": True}
    again = run_cli(*args, check=True)
    assert "finished, every evaluation logged" in again.stderr and "· cached, {" not in again.stderr
    assert _products(harness_home, parent) == {"init": False, "cpt": False}
    assert len(_runs(tracking_uri, exp, "cell")) == 1 and len(_runs(tracking_uri, exp, "task")) == 1


def test_unknown_method_exits_2_with_a_suggestion(run_cli):
    r = run_cli("run", "--world", "synthetic", "--methods", "randm", "--tasks", "mlm")
    assert r.returncode == 2
    assert "unknown method 'randm'" in r.stderr and "Did you mean 'random'" in r.stderr
    r = run_cli("run", "--world", "synthetic", "--methods", "nosuch", "--tasks", "mlm")
    assert r.returncode == 2 and "Available:" in r.stderr
    r = run_cli("run", "--world", "nosuchworld", "--methods", "random", "--tasks", "mlm")
    assert r.returncode == 2 and "unknown world" in r.stderr


def test_bad_config_exits_2_naming_the_key(run_cli, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('world = "synthetic"\nseeds = "x"\n')
    r = run_cli("run", "--config", str(cfg))
    assert r.returncode == 2 and "'seeds'" in r.stderr
    r = run_cli("run", "--world", "synthetic", "--methods", "random", "--tasks", "mlm", "--langs", "xxx_Latn")
    assert r.returncode == 2 and "xxx_Latn" in r.stderr


def _readme_plugin_code() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"```python\n(# my_methods\.py.*?)```", text, re.S)
    assert m, "README must hold the outside-method example"
    return m.group(1)


def _install_plugin(tmp_path, module_code: str, entry: str) -> dict[str, str]:
    dist = tmp_path / "my_methods-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[harness.methods]\n{entry}\n")
    (tmp_path / "my_methods.py").write_text(module_code)
    import os

    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}


def test_outside_method_from_the_readme_runs_through_harness_run(run_cli, tmp_path, tracking_uri):
    env = _install_plugin(tmp_path, _readme_plugin_code(), "mean = my_methods:MeanInit")
    listed = run_cli("list", env=env, check=True)
    assert "mean" in listed.stdout
    exp = "t-plugin"
    run_cli(*BASE, "--methods", "mean", "--experiment", exp, "--cpt-steps", "0", env=env, check=True)
    (parent,) = _runs(tracking_uri, exp, "cell")
    assert parent.info.status == "FINISHED" and parent.data.params["method"] == "mean"
    assert parent.data.metrics["init/method"] > 0 and "mlm/loss/avg" in parent.data.metrics


def test_rerun_never_failed_all(run_cli, tracking_uri):
    """``--rerun``: ``never`` resumes a killed cell in its own runs and leaves a finished one alone; ``failed``
    starts only the killed cell over in new runs (the earlier ones deleted); ``all`` starts every cell over. The
    policy is no part of a cell's identity (the kept cell's runs are found again whatever it is)."""
    exp = "t-rerun"
    args = [*BASE, "--methods", "random", "--experiment", exp, "--cpt-steps", "0"]
    c = MlflowClient(tracking_uri)

    def cells() -> dict[str, object]:
        return {r.data.tags["harness.seed"]: r for r in _runs(tracking_uri, exp, "cell")}

    def kill_seed_2(*flags: str) -> None:
        killed = run_cli(*args, "--seeds", "2", *flags, env={"HARNESS_FAULT_AFTER": "init"})
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]

    run_cli(*args, "--seeds", "1", check=True)
    kill_seed_2()
    before = cells()
    assert before["2"].info.status == "RUNNING"  # left by the killed process (marked KILLED by the next command)

    never = run_cli(*args, "--seeds", "1,2", "--rerun", "never", check=True)
    after = cells()
    assert {s: r.info.run_id for s, r in after.items()} == {s: r.info.run_id for s, r in before.items()}
    assert [r.info.status for r in after.values()] == ["FINISHED", "FINISHED"]
    assert "starts over" not in never.stderr and "finished, every evaluation logged" in never.stderr
    hist1 = c.get_metric_history(after["1"].info.run_id, "mlm/loss/avg")

    kill_seed_2("--rerun", "all")  # started over in a new run, killed again (a finished cell is passed over)
    killed_run = cells()["2"].info.run_id
    failed = run_cli(*args, "--seeds", "1,2", "--rerun", "failed", check=True)
    after_failed = cells()
    assert after_failed["1"].info.run_id == after["1"].info.run_id  # finished: kept, nothing logged again
    assert c.get_metric_history(after["1"].info.run_id, "mlm/loss/avg") == hist1
    assert after_failed["2"].info.run_id != killed_run and after_failed["2"].info.status == "FINISHED"
    assert c.get_run(killed_run).info.lifecycle_stage == "deleted"
    assert failed.stderr.count("starts over") == 1
    tasks = _runs(tracking_uri, exp, "task")
    assert len(tasks) == 2 and {t.data.tags["harness.parent"] for t in tasks} == \
        {r.info.run_id for r in after_failed.values()}

    every = run_cli(*args, "--seeds", "1,2", "--rerun", "all", check=True)
    after_all = cells()
    assert every.stderr.count("starts over") == 2 and "already logged" not in every.stderr
    assert not {r.info.run_id for r in after_all.values()} & {r.info.run_id for r in after_failed.values()}
    assert [r.info.status for r in after_all.values()] == ["FINISHED", "FINISHED"]
    assert len(_runs(tracking_uri, exp, "task")) == 2
    aggregates = _runs(tracking_uri, exp, "aggregate")
    assert len(aggregates) == 1 and aggregates[0].data.tags["harness.seeds"] == "1,2"


def test_rerun_policy_is_checked_and_read_from_a_config_file(tmp_path):
    from harness.config import make_config

    assert make_config().rerun == "never"
    assert make_config({"rerun": "failed"}).rerun == "failed"
    assert make_config({"rerun": "failed"}, {"rerun": "all"}).rerun == "all"
    with pytest.raises(Exception, match="config key 'rerun': expected one of never, failed, stale, all"):
        make_config({"rerun": "sometimes"})


def test_a_crashing_method_marks_its_run_failed(run_cli, tmp_path, tracking_uri):
    code = textwrap.dedent("""
        class Exploding:
            name = "exploding"
            description = "always fails"
            requires = frozenset()
            overlap_rule = "ofa"
            supports_factorized = True

            def initialize(self, ctx):
                raise RuntimeError("planned failure inside the method")
    """)
    env = _install_plugin(tmp_path, code, "exploding = my_methods:Exploding")
    exp = "t-crash"
    r = run_cli(*BASE, "--methods", "exploding", "--experiment", exp, env=env)
    assert r.returncode == 1 and "planned failure" in r.stderr
    (parent,) = _runs(tracking_uri, exp, "cell")
    assert parent.info.status == "FAILED"
    assert "planned failure inside the method" in parent.data.tags["harness.error"]


def test_leaderboard_prints_the_per_language_table(run_cli, tracking_uri):
    exp = "t-board"
    run_cli(*BASE, "--methods", "random", "--experiment", exp, "--seeds", "1,2", "--cpt-steps", "0", check=True)
    r = run_cli("leaderboard", "--experiment", exp, "--task", "mlm", "--step", "0", "--per-seed", check=True)
    out = r.stdout
    assert "mlm" in out and "loss" in out and "step 0" in out
    for lang in ("qaa_Latn", "qab_Latn", "qac_Latn", "qad_Cyrl", "qae_Grek"):
        assert lang in out
    assert "random d=full s=1" in out and "random d=full s=2" in out
    c = MlflowClient(tracking_uri)
    runs = _runs(tracking_uri, exp, "task")
    assert len(runs) == 2
    # the printed average equals the mean of the logged per-language values
    r1 = next(r for r in runs if r.data.tags["harness.seed"] == "1")
    vals = [c.get_metric_history(r1.info.run_id, f"mlm/loss/{lang}")[0].value
            for lang in ("qaa_Latn", "qab_Latn", "qac_Latn", "qad_Cyrl", "qae_Grek")]
    assert f"{sum(vals) / len(vals):.3f}" in out


def test_seeds_are_aggregated_and_convergence_is_recorded(run_cli, tracking_uri):
    import statistics

    exp = "t-seeds"
    run_cli(*BASE, "--methods", "random", "--experiment", exp, "--seeds", "3,4", "--cpt-checkpoints", "2",
            check=True)
    c = MlflowClient(tracking_uri)
    parents = _runs(tracking_uri, exp, "cell")
    assert len(parents) == 2
    for p in parents:
        held = c.get_metric_history(p.info.run_id, "cpt/heldout_loss")
        assert sorted(m.step for m in held) == [0, 2, 4]
        curve = sorted((m.step, m.value) for m in held)
        area = ((curve[0][1] + curve[1][1]) + (curve[1][1] + curve[2][1])) / 2 / 2
        assert p.data.metrics["cpt/heldout_auc"] == pytest.approx(area)
    (agg,) = _runs(tracking_uri, exp, "aggregate")
    assert agg.data.tags["harness.seeds"] == "3,4"
    per_seed = []
    for p in parents:
        (child,) = c.search_runs([p.info.experiment_id], filter_string=(
            f"tags.`harness.kind` = 'task' and tags.`harness.parent` = '{p.info.run_id}'"))
        per_seed.append({m.step: m.value for m in c.get_metric_history(child.info.run_id, "mlm/loss/qab_Latn")})
    for step in (0, 2, 4):
        mean = {m.step: m.value for m in c.get_metric_history(agg.info.run_id, "mlm/loss/qab_Latn/mean")}[step]
        std = {m.step: m.value for m in c.get_metric_history(agg.info.run_id, "mlm/loss/qab_Latn/std")}[step]
        vals = [s[step] for s in per_seed]
        assert mean == pytest.approx(statistics.fmean(vals))
        assert std == pytest.approx(statistics.stdev(vals))


def test_heldout_mlm_loss_is_logged_when_mlm_is_not_a_chosen_task(run_cli, tracking_uri):
    exp = "t-heldout"
    run_cli("run", "--world", "synthetic", "--tasks", "sr-t", "--cpt-steps", "2", "--methods", "random",
            "--experiment", exp, check=True)
    (parent,) = _runs(tracking_uri, exp, "cell")
    c = MlflowClient(tracking_uri)
    held = c.get_metric_history(parent.info.run_id, "cpt/heldout_loss")
    assert sorted(m.step for m in held) == [0, 2]
    assert all(0 < m.value < 20 for m in held)
    assert {r.data.tags["harness.task"] for r in _runs(tracking_uri, exp, "task")} == {"sr-t"}


def test_cpu_profile_evaluates_tasks_at_step_0_and_only_the_heldout_loss_after_its_smoke_test_cpt(
        run_cli, tracking_uri, tmp_path):
    """The cpu profile's 10 CPT steps are a smoke test: the tasks run at step 0, the held-out MLM loss at step 0
    and after CPT; the board's final table is step 0 with a note. ``[cpt] eval_tasks = true`` evaluates them."""
    exp = "t-smoke-cpt"
    run_cli("run", "--world", "synthetic", "--tasks", "sr-t", "--methods", "random", "--experiment", exp,
            check=True)
    c = MlflowClient(tracking_uri)
    (parent,) = _runs(tracking_uri, exp, "cell")
    (child,) = _runs(tracking_uri, exp, "task")
    steps = int(parent.data.params["cpt.steps"])
    assert steps > 0 and parent.data.params["cpt.eval_tasks"] == "False"
    assert parent.data.tags["harness.final_step"] == str(steps)
    assert parent.data.tags["harness.task_final_step"] == "0"
    assert sorted(m.step for m in c.get_metric_history(parent.info.run_id, "cpt/heldout_loss")) == [0, steps]
    assert {m.step for m in c.get_metric_history(child.info.run_id, "sr-t/acc_at_10/avg")} == {0}
    assert child.info.status == "FINISHED" and parent.info.status == "FINISHED"
    board = run_cli("leaderboard", "--experiment", exp, "--no-write", "--bootstrap", "0", check=True).stdout
    assert "evaluated at step 0 only" in " ".join(board.split())

    cfg = tmp_path / "c.toml"
    cfg.write_text("[cpt]\neval_tasks = true\n")
    run_cli("run", "--world", "synthetic", "--tasks", "sr-t", "--methods", "random", "--experiment", exp,
            "--config", str(cfg), check=True)
    (parent,) = _runs(tracking_uri, exp, "cell")  # the same cell: eval_tasks does not change what it computes
    (child,) = _runs(tracking_uri, exp, "task")
    assert {m.step for m in c.get_metric_history(child.info.run_id, "sr-t/acc_at_10/avg")} == {0, steps}
    assert parent.data.tags["harness.task_final_step"] == str(steps)


def test_unknown_cpt_setting_exits_2_naming_it(run_cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[cpt]\neval_task = true\n")
    r = run_cli("run", "--world", "synthetic", "--methods", "random", "--config", str(cfg))
    assert r.returncode == 2 and "eval_task" in r.stderr and "eval_tasks" in r.stderr
    cfg.write_text("[cpt]\neval_tasks = 'yes'\n")
    r = run_cli("run", "--world", "synthetic", "--methods", "random", "--config", str(cfg))
    assert r.returncode == 2 and "cpt.eval_tasks" in r.stderr


def test_a_rerun_reads_no_cell_values_for_aggregates_already_logged(run_cli, tracking_uri, monkeypatch):
    """A command whose seed aggregates an earlier command logged from the same cells reads nothing again (the
    cells' metric histories are the slow part of a rerun with nothing to do)."""
    from harness.aggregate import aggregate_seeds
    from harness.config import make_config
    from harness.core.record import RunRecord
    from harness.core.tracking import Tracker
    from harness.spec import resolve
    from harness.worlds import get_world

    exp = "t-seeds-again"
    run_cli("run", "--world", "synthetic", "--tasks", "sr-t", "--methods", "random", "--experiment", exp,
            "--seeds", "5,6", check=True)
    cfg = make_config(overrides={"world": "synthetic", "tasks": ["sr-t"], "methods": ["random"], "experiment": exp,
                                 "seeds": [5, 6], "tracking_uri": tracking_uri})
    world, tracker = get_world("synthetic"), Tracker(tracking_uri)
    read: list[str] = []
    monkeypatch.setattr(RunRecord, "task_values", lambda self, e, key, task: read.append(key) or {})
    aggregate_seeds(resolve(cfg, world), tracker)
    assert read == []
    cfg.tasks = ["sr-t", "mlm"]  # a task not aggregated yet is read
    aggregate_seeds(resolve(cfg, world), tracker)
    assert len(read) == 2
