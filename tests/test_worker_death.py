"""A worker process of the local executor that dies (killed, out of memory, crashed) takes the pool and every cell
not finished in it: those cells run again, one at a time, each in a fresh process, so that the others finish and
only a cell whose process dies alone too fails."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

GRID = ["run", "--world", "synthetic", "--methods", "random,ofa", "--tasks", "mlm", "--seeds", "1,2",
        "--cpt-steps", "2", "--workers", "2", "--executor", "local"]


def _cells(tracking_uri: str, experiment: str):
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name(experiment)
    return c, c.search_runs([exp.experiment_id], filter_string="tags.`harness.kind` = 'cell'")


def test_the_cells_of_a_pool_whose_worker_was_killed_run_again_and_finish(run_cli, tracking_uri, tmp_path):
    marker = tmp_path / "fault-fired"
    r = run_cli(*GRID, "--experiment", "t-died",
                env={"OMP_NUM_THREADS": "1", "HARNESS_FAULT_AFTER": "step0", "HARNESS_FAULT_MARKER": str(marker)})
    out = r.stdout + r.stderr
    assert marker.exists(), "the fault hook never killed a worker"
    assert r.returncode == 0, out[-3000:]
    assert "a worker process died" in out and "running them again one at a time" in out
    assert "BrokenProcessPool" not in out
    client, cells = _cells(tracking_uri, "t-died")
    assert len(cells) == 4 and {c.info.status for c in cells} == {"FINISHED"}
    assert len({c.data.tags["harness.cell"] for c in cells}) == 4  # the killed cell's run continued, not doubled
    tasks = client.search_runs([cells[0].info.experiment_id], filter_string="tags.`harness.kind` = 'task'")
    for t in tasks:  # each step logged once, the killed attempt's step 0 included
        for key in (k for k in t.data.metrics if k.startswith("mlm/loss/")):
            assert [m.step for m in client.get_metric_history(t.info.run_id, key)] == [0, 2], key


def test_a_cell_whose_process_dies_alone_too_fails_and_says_so(run_cli, tracking_uri):
    r = run_cli("run", "--world", "synthetic", "--methods", "random", "--tasks", "mlm", "--seeds", "1,2",
                "--cpt-steps", "2", "--workers", "2", "--executor", "local", "--experiment", "t-dies",
                env={"OMP_NUM_THREADS": "1", "HARNESS_FAULT_AFTER": "step0"})  # every time
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "a worker process died" in out and "taking 2 unfinished cell(s)" in out
    for seed in (1, 2):
        assert (f"cell random | src | dim full | seed {seed} failed: its worker process died, alone in a fresh "
                f"process too") in out
    # their runs say at once that their process died (not RUNNING until the next command starts)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("t-dies")
    cells = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'cell'")
    assert len(cells) == 2 and {c.info.status for c in cells} == {"KILLED"}
