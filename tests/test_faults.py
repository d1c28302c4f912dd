"""Kill the real ``harness`` command at many moments of a synthetic run, then start the same command again.

Each kill point starts ``harness run`` as a subprocess in a fresh home and makes it die at a named moment: the
``HARNESS_FAULT_AT`` hook (:mod:`harness.core.lifecycle`) sends SIGKILL to the ``harness`` process before (or after) the
n-th call of a named function, in whichever process reaches it first (the ``harness`` process itself, a pool
worker, a fastText training child, a CPT rank); two more kills come at fixed delays. After each kill:

* no process of the run is alive 10 s later (they carry a tag in their environment; a worker that reached the
  hook signals its parent and then waits, so it is still there unless it dies with its parent);
* the same command finishes (exit 0);
* the MLflow store holds exactly the runs of an uninterrupted run (0 missing, 0 duplicated), every one FINISHED;
* every metric value is bit-identical to the uninterrupted run's (timings and memory peaks aside).

SIGTERM and SIGINT stop a run cleanly (exit 143 / 130, one line, the unfinished runs KILLED), and the same command
then finishes. The default suite runs three kill points (one during the store's creation) and the two signals;
``-m slow`` runs the rest.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO

# one test process runs every test that starts a Ray cluster (two local clusters at once contend for its ports)
pytestmark = pytest.mark.xdist_group("ray")

JOB = ["run", "--world", "synthetic", "--methods", "random", "--seeds", "1,2", "--tasks", "mlm,sr-t",
       "--cpt-steps", "4", "--cpt-checkpoints", "2", "--experiment", "faults"]
POOL = ["--workers", "2"]  # two cells side by side, each in its own worker process
IN_PROCESS = ["--workers", "1"]
FASTTEXT_JOB = ["run", "--world", "synthetic", "--methods", "wechsel", "--tasks", "mlm", "--cpt-steps", "2",
                "--experiment", "faults-ft", "--workers", "1"]
VOLATILE = ("seconds", "peak_rss_mb", "init/cached")  # timings, memory peaks, whether a product was found cached
TAG = "HARNESS_FAULT_TEST_TAG"


def _cpus() -> set[int]:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return set(cpus[:2])


def _pin() -> None:
    # at most two CPUs: a pool of two workers then computes with one torch thread each, as the in-process
    # baseline does (OMP_NUM_THREADS=1), whatever the machine, so their numbers are comparable bit for bit
    cpus = _cpus()
    if cpus:
        os.sched_setaffinity(0, cpus)


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "MLFLOW_TRACKING_URI"))}
    env.update({"HARNESS_HOME": str(home), "HF_HOME": str(home / "hf"), "OMP_NUM_THREADS": "1",
                "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONPATH": str(REPO), **extra})
    return env


def _start(args: list[str], home: Path, log: Path, **extra: str) -> tuple[subprocess.Popen, str]:
    """Start ``harness ARGS`` (output to ``log``, so that a worker left behind holds no pipe of ours)."""
    tag = uuid.uuid4().hex
    out = open(log, "w")  # noqa: SIM115 - closed by _finish
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=REPO, stdout=out,
                            stderr=subprocess.STDOUT, env=_env(home, **{TAG: tag}, **extra),
                            preexec_fn=_pin if hasattr(os, "sched_setaffinity") else None)
    proc._log_file = out  # type: ignore[attr-defined]
    return proc, tag


def _finish(proc: subprocess.Popen, timeout: float = 900) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        proc._log_file.close()  # type: ignore[attr-defined]


def _tagged(tag: str) -> list[int]:
    """Processes whose environment carries ``tag`` (the run's processes, wherever they were reparented)."""
    needle = f"{TAG}={tag}".encode()
    pids = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    with open(f"/proc/{e}/stat") as st:
                        if st.read().rsplit(")", 1)[1].split()[0] != "Z":
                            pids.append(int(e))
        except OSError:
            continue
    return pids


def _left_alive(tag: str, within: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within
    while True:
        left = _tagged(tag)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _snapshot(home: Path) -> tuple[dict, dict]:
    """({identity: status}, {(identity, metric, step): {values}}) of every run in the home's MLflow store.
    Identity: experiment, kind, cell, task, group (the tags a resumed run is found again by)."""
    con = sqlite3.connect(f"file:{home / 'mlflow.db'}?mode=ro", uri=True)
    try:
        tags: dict[str, dict[str, str]] = {}
        for run, key, value in con.execute("select run_uuid, key, value from tags where key like 'harness.%'"):
            tags.setdefault(run, {})[key] = value
        runs, ident = {}, {}
        for run, status, exp in con.execute(
                "select r.run_uuid, r.status, e.name from runs r join experiments e using (experiment_id) "
                "where r.lifecycle_stage = 'active'"):
            t = tags.get(run, {})
            key = (exp, *(t.get(f"harness.{k}", "") for k in ("kind", "cell", "task", "group")))
            runs.setdefault(key, []).append(status)
            ident[run] = key
        metrics: dict[tuple, set[float]] = {}
        for run, key, step, value in con.execute("select run_uuid, key, step, value from metrics"):
            if run in ident and not any(v in key for v in VOLATILE):
                metrics.setdefault((ident[run], key, step), set()).add(value)
    finally:
        con.close()
    return runs, metrics


def _check_like_baseline(home: Path, baseline: tuple[dict, dict]) -> None:
    runs, metrics = _snapshot(home)
    base_runs, base_metrics = baseline
    missing = set(base_runs) - set(runs)
    extra = set(runs) - set(base_runs)
    duplicated = {k: len(v) for k, v in runs.items() if len(v) > 1}
    assert not missing and not extra and not duplicated, (missing, extra, duplicated)
    not_finished = {k: v for k, v in runs.items() if v != ["FINISHED"]}
    assert not not_finished, not_finished
    assert set(metrics) == set(base_metrics), set(metrics) ^ set(base_metrics)
    differ = {k: (metrics[k], base_metrics[k]) for k in metrics if metrics[k] != base_metrics[k]}
    assert not differ, list(differ.items())[:5]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A home holding only the built synthetic world (copied into each fresh home)."""
    home = tmp_path_factory.mktemp("faults-template")
    proc, _ = _start(["world", "build", "synthetic"], home, home / "build.log")
    assert _finish(proc) == 0, (home / "build.log").read_text()[-3000:]
    return home


def _fresh_home(tmp_path: Path, template: Path, world: bool = True) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    if world:
        shutil.copytree(template / "worlds", home / "worlds")
    return home


@pytest.fixture(scope="module")
def baseline(template, tmp_path_factory) -> tuple[dict, dict]:
    """The uninterrupted run (in this process: the pool's workers compute the same numbers, see _pin)."""
    home = tmp_path_factory.mktemp("faults-baseline")
    shutil.copytree(template / "worlds", home / "worlds")
    proc, _ = _start([*JOB, *IN_PROCESS], home, home / "run.log")
    assert _finish(proc) == 0, (home / "run.log").read_text()[-3000:]
    snap = _snapshot(home)
    assert snap[0] and snap[1] and all(v == ["FINISHED"] for v in snap[0].values())
    return snap


def _kill_and_resume(tmp_path: Path, template: Path, baseline: tuple[dict, dict], point: str | None,
                     mode: list[str], *, after_s: float | None = None, world: bool = True,
                     job: list[str] = JOB, say: bool = True) -> None:
    home = _fresh_home(tmp_path, template, world=world)
    log = tmp_path / "killed.log"
    extra = {"HARNESS_FAULT_AT": point} if point else {}
    proc, tag = _start([*job, *mode], home, log, **extra)
    if after_s is not None:
        try:
            proc.wait(timeout=after_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
    rc = _finish(proc)
    text = log.read_text()
    assert rc == -signal.SIGKILL, f"rc {rc}: the run was not killed\n{text[-3000:]}"
    if point and say:  # (a CPT rank's stderr goes to the launcher's pipe, not to this log)
        assert f"HARNESS_FAULT_AT={point}" in text, text[-3000:]
    left = _left_alive(tag)
    assert not left, f"processes of the killed run still alive after 10 s: {left}"
    resumed_log = tmp_path / "resumed.log"
    proc, tag2 = _start([*job, *mode], home, resumed_log)
    rc = _finish(proc)
    assert rc == 0, resumed_log.read_text()[-3000:]
    assert not _left_alive(tag2, within=5)
    _check_like_baseline(home, baseline)


# -- the kill points ------------------------------------------------------------------------------------------
# (name, HARNESS_FAULT_AT, how the cells run); the first three run in the default suite
DEFAULT_POINTS = [
    ("store-creation", "mlflow.store.db.utils:_upgrade_db", IN_PROCESS),
    ("cpt-checkpoint-in-a-worker", "harness.initialize:save_model@2", POOL),
    ("task-metrics-logged-not-marked", "harness.core.tracking:Tracker.log_metrics@3", IN_PROCESS),
]
SLOW_POINTS = [
    ("task-metrics-logging-in-a-worker", "harness.core.tracking:Tracker.log_metrics@3", POOL),
    ("world-load", "harness.worlds:load_world_dir@1", IN_PROCESS),
    ("experiment-creation", "harness.core.tracking:Tracker.experiment@1", POOL),
    ("orphan-scan", "harness.core.tracking:Tracker.mark_orphans_killed@1", IN_PROCESS),
    ("cell-run-creation", "harness.core.tracking:Tracker.get_or_create_run@1", POOL),
    ("params-logging", "harness.core.tracking:Tracker.log_params@1", IN_PROCESS),
    ("init-product-writing", "harness.initialize:save_model@1", IN_PROCESS),
    ("init-report-logging", "harness.core.tracking:Tracker.log_dict@1", POOL),
    ("init-marked-done", "harness.core.tracking:Tracker.mark_done@1/after", IN_PROCESS),
    ("step0-mlm-evaluation", "tasks.mlm:MLMLoss.evaluate@1", POOL),
    ("step0-retrieval-evaluation", "tasks.retrieval:RetrievalTask.evaluate@1", IN_PROCESS),
    ("cpt-training-step", "transformers.trainer:Trainer.training_step@3", POOL),
    ("cpt-done-before-loss-logged", "harness.cpt:read_train_log@1", IN_PROCESS),
    ("cpt-loss-logging", "harness.core.tracking:Tracker.log_series@1", POOL),
    ("checkpoint-retrieval-evaluation", "tasks.retrieval:RetrievalTask.evaluate@2", POOL),
    ("final-mlm-evaluation", "tasks.mlm:MLMLoss.evaluate@3", IN_PROCESS),
    ("first-run-finished", "harness.core.tracking:Tracker.finish@1/after", POOL),
    ("seed-aggregation", "harness.aggregate:aggregate_seeds", IN_PROCESS),
    ("aggregate-logging", "harness.core.tracking:Tracker.log_metrics@37", IN_PROCESS),
]


@pytest.mark.parametrize("name,point,mode", DEFAULT_POINTS, ids=[p[0] for p in DEFAULT_POINTS])
def test_kill_point(tmp_path, template, baseline, name, point, mode):
    _kill_and_resume(tmp_path, template, baseline, point, mode)


@pytest.mark.slow
@pytest.mark.parametrize("name,point,mode", SLOW_POINTS, ids=[p[0] for p in SLOW_POINTS])
def test_kill_point_slow(tmp_path, template, baseline, name, point, mode):
    _kill_and_resume(tmp_path, template, baseline, point, mode)


@pytest.mark.slow
def test_kill_during_world_build(tmp_path, template, baseline):
    _kill_and_resume(tmp_path, template, baseline, "harness.worlds.synthetic:write_jsonl@5", IN_PROCESS,
                     world=False)


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [4.0, 9.0])
def test_kill_at_a_moment(tmp_path, template, baseline, after_s):
    _kill_and_resume(tmp_path, template, baseline, None, POOL, after_s=after_s)


@pytest.mark.slow
def test_kill_during_fasttext_training_children(tmp_path, template):
    """WECHSEL trains its word-vector models side by side in forked children; the hook fires in a child."""
    home = tmp_path / "base"
    shutil.copytree(template / "worlds", home / "worlds")
    proc, _ = _start(FASTTEXT_JOB, home, tmp_path / "base.log")
    assert _finish(proc) == 0, (tmp_path / "base.log").read_text()[-3000:]
    base = _snapshot(home)
    _kill_and_resume(tmp_path, template, base, "methods.fasttext_util:train_model@1", [], job=FASTTEXT_JOB)


@pytest.mark.slow
def test_kill_during_distributed_cpt(tmp_path, template):
    """CPT on two processes (torchrun, gloo): the launcher and both ranks end with the harness process."""
    job = [*JOB[:-2], "--experiment", "faults-ddp", "--seeds", "1", "--cpt-devices", "2", *IN_PROCESS]
    home = tmp_path / "base"
    shutil.copytree(template / "worlds", home / "worlds")
    proc, _ = _start(job, home, tmp_path / "base.log")
    assert _finish(proc) == 0, (tmp_path / "base.log").read_text()[-3000:]
    base = _snapshot(home)
    _kill_and_resume(tmp_path, template, base, "transformers.trainer:Trainer.training_step@2", [], job=job,
                     say=False)


@pytest.mark.slow
def test_kill_with_the_ray_executor(tmp_path, template, baseline):
    """Cells on a local Ray instance, the harness process killed while they run (Ray's workers do not see the
    fault hook, so the kill comes at a fixed delay, once Ray has started them): the Ray instance (GCS, raylet,
    workers: all started from the harness process, so they carry its tag) must not outlive it, and the same command
    then finishes with the uninterrupted run's numbers."""
    pytest.importorskip("ray")
    _kill_and_resume(tmp_path, template, baseline, None, ["--executor", "ray"], after_s=30.0)


@pytest.mark.slow
def test_kill_during_leaderboard_writing(tmp_path, template, baseline):
    home = _fresh_home(tmp_path, template)
    proc, _ = _start([*JOB, *IN_PROCESS], home, tmp_path / "run.log")
    assert _finish(proc) == 0
    board = ["leaderboard", "--experiment", "faults", "--bootstrap", "0"]
    proc, tag = _start(board, home, tmp_path / "board-killed.log",
                       HARNESS_FAULT_AT="leaderboard.render_markdown:leaderboard_md")
    assert _finish(proc) == -signal.SIGKILL
    assert not _left_alive(tag)
    proc, _ = _start(board, home, tmp_path / "board.log")
    assert _finish(proc) == 0, (tmp_path / "board.log").read_text()[-3000:]
    out = home / "leaderboards" / "faults"
    assert {p.suffix for p in out.iterdir()} >= {".html", ".md", ".csv", ".json"}
    runs, _ = _snapshot(home)
    boards = [k for k in runs if k[1] == "leaderboard"]
    assert len(boards) <= 1 and all(runs[k] == ["FINISHED"] for k in boards)
    _check_like_baseline_runs_only(home, baseline)


def _check_like_baseline_runs_only(home: Path, baseline: tuple[dict, dict]) -> None:
    runs, metrics = _snapshot(home)
    cells = {k: v for k, v in runs.items() if k[1] in {"cell", "task", "aggregate"}}
    assert cells == baseline[0]
    assert {k: v for k, v in metrics.items() if k[0] in cells} == baseline[1]


# -- SIGTERM and SIGINT stop a run cleanly --------------------------------------------------------------------
SIGNALS = [("TERM", 143, POOL, True), ("INT", 130, IN_PROCESS, False)]  # (signal, exit status, cells, resume)
SIGNALS_SLOW = [("INT", 130, POOL, True), ("TERM", 143, IN_PROCESS, True), ("INT", 130, IN_PROCESS, True)]


def _signal_case(tmp_path, template, baseline, sig, code, mode, resume):
    home = _fresh_home(tmp_path, template)
    log = tmp_path / "stopped.log"
    point = "tasks.mlm:MLMLoss.evaluate@2"  # at the first CPT checkpoint (in a worker with the pool)
    proc, tag = _start([*JOB, *mode], home, log, HARNESS_FAULT_AT=point, HARNESS_FAULT_SIGNAL=sig)
    rc = _finish(proc)
    text = log.read_text()
    assert rc == code, f"rc {rc}\n{text[-3000:]}"
    lines = [ln for ln in text.splitlines() if ln.startswith(f"stopped by SIG{sig}")]
    assert len(lines) == 1 and "marked KILLED" in lines[0] and "run the same command" in lines[0]
    assert "Traceback" not in text
    assert not _left_alive(tag), "a worker outlived the stopped run"
    runs, _ = _snapshot(home)
    statuses = [s for v in runs.values() for s in v]
    assert "RUNNING" not in statuses and "FAILED" not in statuses, runs
    assert statuses.count("KILLED") >= 1
    n_killed = int(lines[0].split("workers stopped, ")[1].split()[0])
    assert n_killed == statuses.count("KILLED")
    if not resume:
        return
    proc, _ = _start([*JOB, *mode], home, tmp_path / "resumed.log")
    assert _finish(proc) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
    _check_like_baseline(home, baseline)


def _signal_id(case: tuple) -> str:
    sig, _, mode, resume = case
    return f"SIG{sig}-{'pool' if mode == POOL else 'in-process'}{'-resumed' if resume else ''}"


@pytest.mark.parametrize("sig,code,mode,resume", SIGNALS, ids=[_signal_id(c) for c in SIGNALS])
def test_signal_stops_the_run_cleanly(tmp_path, template, baseline, sig, code, mode, resume):
    _signal_case(tmp_path, template, baseline, sig, code, mode, resume)


@pytest.mark.slow
@pytest.mark.parametrize("sig,code,mode,resume", SIGNALS_SLOW, ids=[_signal_id(c) for c in SIGNALS_SLOW])
def test_signal_stops_the_run_cleanly_slow(tmp_path, template, baseline, sig, code, mode, resume):
    _signal_case(tmp_path, template, baseline, sig, code, mode, resume)


# -- process control (harness.core.processes, through psutil) ------------------------------------------------------
def test_liveness_children_and_stopping_them():
    """A child is among this process's children and alive; one that died and is not reaped yet (a zombie) is not
    alive; stop_pids ends a child with SIGTERM, and one that ignores SIGTERM with SIGKILL after the timeout, without
    reaping them (their Popen still gets their status)."""
    from harness.core.processes import children, pid_alive, stop_pids

    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                                 "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    short = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert stubborn.stdout.readline().strip() == "ready"
        assert {polite.pid, stubborn.pid} <= set(children()) and pid_alive(polite.pid) and pid_alive(os.getpid())
        deadline = time.monotonic() + 30
        while pid_alive(short.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(short.pid) and os.path.exists(f"/proc/{short.pid}")  # a zombie: dead, not reaped
        assert short.wait(5) == 0 and not pid_alive(short.pid)
        t0 = time.monotonic()
        stop_pids([polite.pid, stubborn.pid], timeout=1.0)
        took = time.monotonic() - t0
        assert polite.wait(5) == -signal.SIGTERM and stubborn.wait(5) == -signal.SIGKILL
        assert 1.0 <= took < 10, took
        assert not pid_alive(polite.pid) and polite.pid not in children()
    finally:
        for p in (polite, stubborn, short):
            p.kill()
            p.wait()


def test_fault_hooks_live_only_in_the_faults_module():
    """No production step kills its own process or reads a fault's variable: the faults wrap it from outside
    (harness.core.faults). Only the faults module and the parent-death watchdog (harness.core.processes) end their
    own process."""
    import re

    allowed = {REPO / "harness" / "core" / "faults.py", REPO / "harness" / "core" / "processes.py"}
    own_kill = re.compile(r"os\.kill\(\s*os\.getpid\(\)")
    fault_env = re.compile(r"environ[^\n]*\b(HARNESS_FAULT_\w+|\w*KILL_AFTER\w*)|getenv\([^)]*FAULT")
    found = []
    for package in ("harness", "methods", "tasks", "leaderboard"):
        for path in (REPO / package).rglob("*.py"):
            if path in allowed:
                continue
            text = path.read_text(encoding="utf-8")
            found += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in (*own_kill.finditer(text),
                                                                         *fault_env.finditer(text))]
    assert not found, found
