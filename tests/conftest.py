"""Shared fixtures: an isolated harness home, the synthetic world (built once per test session), a tracking URI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before a test module loads torch or numpy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # two test processes on the machine: one thread each (torch's OpenMP
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # spins, and two processes of two threads on two cores crawl)
    for name in ("COLUMNS", "LINES"):  # set to 80 x 24 in a test process; a piped `harness` sizes its own tables
        os.environ.pop(name, None)

REPO = Path(__file__).resolve().parents[1]


def cpu_vendor() -> str:
    """The CPU's vendor (``GenuineIntel``, ``AuthenticAMD``), as the kernels' record of the CPU reads it."""
    from harness.core import kernels

    return next((line.split(":", 1)[1].strip() for line in kernels._cpu_identity() if line.startswith("vendor_id")),
                "")


def pinned_labels() -> tuple[str, str]:
    """The labels the pinned kernel set earns on this machine, measured in this (pinned) test process and recorded
    nowhere: ``("avx2", "avx2-onednn")`` where its fp32 and bf16 fingerprints are the golden ones; else
    ``native:<hex>`` of what it computes. On an Intel x86-64 CPU the pins give the golden bits (asserted in
    ``test_cpu_kernels.py``); on an AMD EPYC, MKL computes ``exp`` (its VML) and a transposed GEMM (``linear``)
    otherwise under the same pins, whatever ``MKL_CBWR`` says (measured), and its cells are labelled apart."""
    from harness.core import kernels

    return kernels._fingerprint_label(False), kernels._fingerprint_label(True)


def in_two_children(target, *args, timeout: float = 60) -> list:
    """Run ``target(*args, queue)`` in two forked processes at once (two processes racing for one cached product);
    what each put on the queue, sorted. Each must exit with status 0."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, out)) for _ in range(2)]
    for p in procs:
        p.start()
    got = sorted(out.get(timeout=timeout) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return got


@pytest.fixture(scope="session")
def harness_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("harness-home")
    os.environ["HARNESS_HOME"] = str(home)
    os.environ["HF_HOME"] = str(home / "hf")
    return home


@pytest.fixture(scope="session")
def synthetic_world(harness_home):
    from harness.worlds import get_world

    return get_world("synthetic")


@pytest.fixture(scope="session")
def tracking_uri(harness_home) -> str:
    return f"sqlite:///{harness_home / 'mlflow-tests.db'}"


@pytest.fixture
def run_cli(harness_home, tracking_uri):
    """Run ``harness`` in a subprocess (a real process: exit codes, kills) with the test's home and tracking."""
    import subprocess

    def _run(*args: str, env: dict[str, str] | None = None, check: bool = False, timeout: float = 600):
        full_env = {**os.environ, "HARNESS_HOME": str(harness_home), "MLFLOW_TRACKING_URI": tracking_uri,
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), **(env or {})}
        proc = subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                              env=full_env, timeout=timeout, cwd=REPO)
        if check and proc.returncode != 0:
            raise AssertionError(f"harness {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    return _run


@pytest.fixture(scope="module")
def private_hf_home(tmp_path_factory):
    """``evaluate`` writes module copies under HF_HOME: keep them in a temp dir (only before its first import)."""
    if "evaluate" not in sys.modules:
        mp = pytest.MonkeyPatch()
        mp.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf_home")))
        yield
        mp.undo()
    else:
        yield


@pytest.fixture(scope="module")
def fake_exp(tracking_uri) -> str:
    """Experiment ``lb-fake`` of the leaderboard tests (``tests/_leaderboard_runs.py``: ``fake_experiment``)."""
    from tests._leaderboard_runs import fake_experiment

    return fake_experiment(tracking_uri)


@pytest.fixture(scope="module")
def lb(fake_exp, tracking_uri):
    """The leaderboard of ``lb-fake``, with 200 bootstrap resamples."""
    from tests._leaderboard_runs import _build

    return _build(tracking_uri, fake_exp, bootstrap=200)


@pytest.fixture(scope="module")
def built_world(tmp_path_factory) -> Path:
    """The synthetic world, built once in a private home (tests copy it, times kept, into a home of their own)."""
    home = tmp_path_factory.mktemp("world-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_HOME", str(home))
    try:
        from harness.worlds import build_world

        return build_world("synthetic")
    finally:
        mp.undo()


@pytest.fixture
def own_tracking_uri(monkeypatch):
    """MLflow's set_tracking_uri (a Tracker's client calls it) exports MLFLOW_TRACKING_URI: kept to each test."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def store_base(tmp_path_factory) -> Path:
    """A home whose store holds three FINISHED runs with params, tags and metrics at three steps, and one
    RUNNING run (the target of the tests' writes) owned by a process of this machine that is gone (the run
    store's crash-consistency tests: tests/_store_fault_helpers.py)."""
    from tests._store_fault_helpers import _build_base

    return _build_base(tmp_path_factory.mktemp("store-base"))


@pytest.fixture(autouse=True)
def _no_main_pid_left_behind():
    """A command run in this test process (``harness.cli.main``) names this process as the harness process
    (``HARNESS_MAIN_PID``), which the processes it starts inherit: a later test's child whose fault signals "the
    harness process" would then kill this test process. The name goes with the test that set it."""
    from harness.core.processes import MAIN_PID_ENV

    before = os.environ.get(MAIN_PID_ENV)
    yield
    if before is None:
        os.environ.pop(MAIN_PID_ENV, None)
    else:
        os.environ[MAIN_PID_ENV] = before
