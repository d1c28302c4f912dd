"""No silent stretch in ``harness run``: each step that can take seconds (the world's loading, the MLflow store's
opening, the workers' start, each cell's initialization, the seed aggregates, the results) says itself when it
starts, and a step that lasts says it still runs; a run whose cells are all finished starts no worker and loads no
model. The longest gap is measured by ``benchmarks/bench_startup.py --run``, not here (timings vary with load)."""

from __future__ import annotations

import io
import time

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

    monkeypatch.setattr(cell_module, "RunRecord", Record)
    monkeypatch.setattr(cell_module, "finished_run", lambda record, exp, key, spec: "run" if statuses[key] else None)

    def spec(policy: str) -> SimpleNamespace:
        cells = [done, failed_before, stale, fresh]
        return SimpleNamespace(  # a cell's key: its method's name
            plan=SimpleNamespace(cells=cells, tasks=["mlm"]), cfg=SimpleNamespace(rerun=policy),
            experiment=lambda source: "exp", keys=lambda cell: SimpleNamespace(key=cell.method),
            method_code={c.method: {"m.py": "now"} for c in cells})

    experiment = SimpleNamespace(experiment_id="1", lifecycle_stage="active")
    tracker = SimpleNamespace(client=SimpleNamespace(get_experiment_by_name=lambda name: experiment))
    assert cell_module.pending(spec("never"), tracker) == [fresh]
    assert cell_module.pending(spec("failed"), tracker) == [failed_before, fresh]
    assert cell_module.pending(spec("stale"), tracker) == [stale, fresh]
    assert cell_module.pending(spec("all"), tracker) == [done, failed_before, stale, fresh]
