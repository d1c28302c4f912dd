"""No silent stretch in ``harness run``: each step that can take seconds (the world's loading, the MLflow store's
opening, the workers' start, each cell's initialization, the seed aggregates, the results) says itself when it
starts, and a step that lasts says it still runs; a run whose cells are all finished starts no worker and loads no
model. A run with CPT whose second training step is made slow on purpose is timed line by line: no gap over 5 s,
and the slow step says it still runs (``benchmarks/bench_startup.py --run`` measures the gaps of the main job)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness.core.progress import stage, still_running


def _index(lines: list[str], text: str, start: int = 0) -> int:
    """The index of the first line at or after ``start`` that contains ``text``."""
    for i in range(start, len(lines)):
        if text in lines[i]:
            return i
    raise AssertionError(f"no line with {text!r} after line {start}:\n" + "\n".join(lines))


def test_a_run_says_each_slow_step_when_it_starts_and_a_finished_one_starts_no_worker(run_cli, synthetic_world):
    job = ["run", "--world", "synthetic", "--methods", "random", "--seeds", "1,2", "--tasks", "mlm", "--cpt-steps",
           "0", "--workers", "2", "--experiment", "t-silence"]
    first = run_cli(*job, check=True)
    lines = first.stderr.splitlines()
    at = _index(lines, "world synthetic: loading: start")
    at = _index(lines, "MLflow store: opening: start", at)
    at = _index(lines, "world synthetic (", at)  # the plan
    workers = _index(lines, "cells: 2 worker process(es) starting", at)
    for seed in (1, 2):  # each worker says its own start-up, then its cell's initialization, in that order
        own = [x for x in lines[workers:] if x.startswith(f"[random/s{seed}] ")]
        i = _index(own, "worker process: importing torch: start")
        i = _index(own, "MLflow store: opening: start", i)
        i = _index(own, f"init random | src | dim full | seed {seed}: start", i)
        _index(own, f"init random | src | dim full | seed {seed}: done in", i)
    done = _index(lines, "cells: done 2/2", workers)
    at = _index(lines, "seed aggregates: mean and sd over seeds, per variant and task: start", done)
    _index(lines, "results of t-silence: boards, intervals and claims: start", at)
    assert "random d=full" in first.stdout

    again = run_cli(*job, check=True)  # nothing left to do
    lines = again.stderr.splitlines()
    assert sum("finished, every evaluation logged" in x for x in lines) == 2, again.stderr
    assert not any("worker" in x or "init random" in x for x in lines), again.stderr  # no worker, no model
    at = _index(lines, "world synthetic: loading: start")
    at = _index(lines, "MLflow store: opening: start", at)
    _index(lines, "results of t-silence: boards, intervals and claims: start", at)
    assert "random d=full" in again.stdout  # the results table, as after the first run

    # a run with nothing to compute reads the store with sqlite3 alone (harness.core.store_view): MLflow is not
    # imported, and its board is the same (Python's import log, on stderr, names every module imported)
    third = run_cli(*job, env={"PYTHONPROFILEIMPORTTIME": "1"}, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in third.stderr.splitlines() if line.startswith("import time:")}
    assert "harness.core.store_view" in imported and "mlflow" not in imported and "sqlalchemy" not in imported
    assert third.stdout == again.stdout


# installed through PYTHONPATH into every process of the run (the harness, its workers): the second optimizer step
# of each CPT sleeps SLOW_STEP_S seconds, a batch whose count does not move for that long
_SLOW_STEP = """
import importlib.abc, importlib.util, os, sys, time


class _SlowSecondStep(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "transformers.trainer":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            original, calls = module.Trainer.training_step, [0]

            def training_step(self, *args, **kwargs):
                calls[0] += 1
                if calls[0] == 2:
                    time.sleep(float(os.environ["SLOW_STEP_S"]))
                return original(self, *args, **kwargs)

            module.Trainer.training_step = training_step

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _SlowSecondStep())
"""


def test_a_run_with_a_slow_cpt_step_is_never_silent_for_more_than_5_s(synthetic_world, harness_home, tmp_path):
    """Every line of ``harness run`` (synthetic world, CPT, output piped) timed as it arrives: from the first to the
    last, no two lines more than 5 s apart, while one CPT step takes 9 s (its count does not move): the CPT says it
    still runs, with the step it is at, and nothing of it comes after its end."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SLOW_STEP)
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HARNESS_HOME": str(harness_home), "SLOW_STEP_S": "9", "OMP_NUM_THREADS": "1",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}", "HARNESS_PROGRESS": "lines",
           "PYTHONPATH": os.pathsep.join([str(hook), str(repo), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", "random",
                             "--tasks", "mlm", "--cpt-steps", "4", "--experiment", "t-slow-step"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=repo)
    timed: list[tuple[float, str]] = []

    def read() -> None:
        for line in proc.stdout:
            timed.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    rc = proc.wait(timeout=600)
    reader.join(timeout=30)
    text = "\n".join(f"{t - timed[0][0]:7.2f} {line}" for t, line in timed)
    assert rc == 0, text
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(timed, timed[1:], strict=False)]
    longest = max(gaps)
    assert longest[0] <= 5.0, f"{longest[0]:.1f} s of silence before {longest[1]!r}:\n{text}"
    lines = [line for _, line in timed]
    start, end = _index(lines, "CPT: start (4)"), _index(lines, "CPT: done 4/4")
    slow = [x for x in lines[start:end] if x.startswith("CPT: still running (1/4, ")]
    assert len(slow) >= 2, text  # 9 s at one step: a line at least every 4 s
    assert not any(x.startswith("CPT: ") for x in lines[end + 1:]), text


def test_a_task_whose_count_does_not_move_says_it_still_runs_until_it_ends():
    """Piped progress (:class:`PlainProgress`) speaks without being called: a task stuck at a count says ``still
    running`` every ``heartbeat`` seconds, and its thread stops once no task is left."""
    from harness.core.progress import PlainProgress

    out = io.StringIO()
    prog = PlainProgress(out, prefix="", heartbeat=0.2)
    tid = prog.add_task("CPT", total=10)
    prog.advance(tid, 1)
    time.sleep(0.75)
    prog.remove_task(tid)
    lines = out.getvalue().splitlines()
    assert lines[0] == "CPT: start (10)" and lines[-1].startswith("CPT: stopped at 1/10 after")
    beats = lines[1:-1]
    assert len(beats) >= 2 and all(x.startswith("CPT: still running (1/10, ") for x in beats), lines
    time.sleep(0.6)
    assert out.getvalue().splitlines() == lines and prog._ticker is None  # nothing after its end; no thread left


def test_a_stage_that_lasts_says_it_still_runs_until_it_ends():
    out = io.StringIO()

    class Console:
        file = out

    with stage("MLflow store: opening", console=Console(), heartbeat=0.05):
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines[0] == "MLflow store: opening: start" and lines[-1].startswith("MLflow store: opening: done in")
    beats = lines[1:-1]
    assert beats and all(x.startswith("MLflow store: opening: still running (") for x in beats), lines
    time.sleep(0.15)
    assert out.getvalue().splitlines() == lines  # nothing after its end


def test_still_running_counts_from_the_step_start():
    out = io.StringIO()

    class Console:
        file = out

    began = time.monotonic() - 10  # a step that started 10 s ago: its first line comes at once, with its age
    with still_running("  init x", 4.0, console=Console(), since=began):
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("  init x: still running (10."), lines


def test_a_step_that_cannot_count_is_never_silent_for_more_than_5_s(monkeypatch):
    """fastText's training (minutes on the main job) says it still runs within 5 s, with the default heartbeat."""
    from harness.core.progress import activity

    monkeypatch.setenv("HARNESS_PROGRESS", "lines")
    out = io.StringIO()
    t0 = time.monotonic()
    with activity("fastText focus-tokens: training", file=out):
        while "still running" not in out.getvalue() and time.monotonic() - t0 < 5.0:
            time.sleep(0.05)
    beats = [x for x in out.getvalue().splitlines() if "still running" in x]
    assert beats and beats[0].startswith("fastText focus-tokens: training: still running ("), out.getvalue()


def test_the_cells_left_to_do_follow_the_rerun_policy(monkeypatch):
    """Which cells need a worker: not a finished one, unless the --rerun policy starts it over (all; failed with
    a FAILED or KILLED run of it; stale with a run of other code of its method)."""
    from types import SimpleNamespace

    import harness.cell as cell_module
    from harness.plan import Cell

    done, failed_before, stale, fresh = (Cell("src", m, None, 1) for m in ("done", "failed", "stale", "fresh"))
    statuses = {"done": ["FINISHED"], "failed": ["FINISHED", "FAILED"], "stale": ["FINISHED"], "fresh": []}
    codes = {"stale": {"m.py": "old"}}

    class Record:
        def __init__(self, tracker):
            pass

        def cell_status(self, exp, key):
            return statuses[key]

        def cell_code(self, exp, key):
            return codes.get(key, {"m.py": "now"})

        @staticmethod
        def recorded_code(run):  # the code the finished run recorded (read with it)
            return codes.get(run.key, {"m.py": "now"})

    monkeypatch.setattr(cell_module, "RunRecord", Record)
    monkeypatch.setattr(cell_module, "finished_cell_run", lambda record, exp, key, spec: SimpleNamespace(
        key=key, info=SimpleNamespace(run_id="run")) if statuses[key] else None)

    def spec(policy: str) -> SimpleNamespace:
        cells = [done, failed_before, stale, fresh]
        return SimpleNamespace(  # a cell's key: its method's name
            plan=SimpleNamespace(cells=cells, tasks=["mlm"]), cfg=SimpleNamespace(rerun=policy),
            experiment=lambda source: "exp", keys=lambda cell: SimpleNamespace(key=cell.method),
            method_code={c.method: {"m.py": "now"} for c in cells})

    experiment = SimpleNamespace(experiment_id="1", lifecycle_stage="active")
    tracker = SimpleNamespace(reader=SimpleNamespace(get_experiment_by_name=lambda name: experiment))
    assert cell_module.pending(spec("never"), tracker) == [fresh]
    assert cell_module.pending(spec("failed"), tracker) == [failed_before, fresh]
    assert cell_module.pending(spec("stale"), tracker) == [stale, fresh]
    assert cell_module.pending(spec("all"), tracker) == [done, failed_before, stale, fresh]
    found: dict = {}  # the finished runs of the cells left out, handed to the cells that pass them over
    assert cell_module.pending(spec("stale"), tracker, found) == [stale, fresh]
    assert set(found) == {done, failed_before} and {r.info.run_id for r in found.values()} == {"run"}
