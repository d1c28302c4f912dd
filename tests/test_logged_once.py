"""Each metric once a step, whatever is killed when; one process computes a cell at a time in a home.

A value is logged, then marked done: a process killed between the two logs it again when the cell resumes, so
every reader keeps one value a key and step (the last). Two commands in one home that come to the same cell do
not compute it side by side: the second waits for the first (saying so) and then finds what it logged."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

JOB = ["run", "--world", "synthetic", "--methods", "random", "--tasks", "sr-t", "--cpt-steps", "2",
       "--workers", "1", "--experiment", "once"]


def _home(tmp_path: Path, world) -> Path:
    home = tmp_path / "home"
    shutil.copytree(world.root, home / "worlds" / world.root.name, symlinks=True)
    return home


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "HARNESS_HOME": str(home), "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow.db'}",
            "OMP_NUM_THREADS": "1", "HARNESS_PROGRESS": "lines", **extra}


def _start(home: Path, log: Path, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *JOB], cwd=REPO, env=_env(home, **extra),
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def _cell_run(home: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name("once")
    runs = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'cell'")
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return client, runs[0]


def test_a_kill_between_logging_and_marking_leaves_one_value_a_step_to_every_reader(tmp_path, synthetic_world):
    from harness.core.record import RunRecord
    from harness.core.record_read import read_cell_run
    from harness.core.tracking import Tracker

    home = _home(tmp_path, synthetic_world)
    # the 4th call of log_metrics is the held-out loss at step 0 (init, the task's run, its cell's averages first)
    killed = _start(home, tmp_path / "killed.log", HARNESS_FAULT_AT="harness.core.tracking:Tracker.log_metrics@4/after")
    assert killed.wait(timeout=600) == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    resumed = _start(home, tmp_path / "resumed.log")
    assert resumed.wait(timeout=600) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
    client, run = _cell_run(home)
    raw = sorted(m.step for m in client.get_metric_history(run.info.run_id, "cpt/heldout_loss"))
    assert raw == [0, 0, 2], raw  # the kill fell between the value and its mark: logged again on resume
    record = RunRecord(Tracker(f"sqlite:///{home / 'mlflow.db'}"))
    assert [s for s, _ in record.heldout_curve(run.info.run_id)] == [0, 2]
    assert [s for s, _ in read_cell_run(client, run).curves["cpt/heldout_loss"]] == [0, 2]


def test_two_commands_in_one_home_compute_a_cell_once(tmp_path, synthetic_world):
    home = _home(tmp_path, synthetic_world)
    first = _start(home, tmp_path / "first.log")
    time.sleep(2)
    second = _start(home, tmp_path / "second.log")
    assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-3000:]
    assert second.wait(timeout=600) == 0, (tmp_path / "second.log").read_text()[-3000:]
    logs = (tmp_path / "first.log").read_text() + (tmp_path / "second.log").read_text()
    assert "another process computes this cell; waiting for it" in logs, logs[-3000:]
    client, run = _cell_run(home)
    assert run.info.status == "FINISHED"
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), (key, steps)  # nothing logged twice at a step
