"""The record of the CPU kernels' measured labels (:mod:`harness.core.kernels`, ``<home>/cache/kernels.json``) is
keyed on what a label depends on -- the CPU, the pins, the libraries, bf16 or not -- and not on the thread
variables each cell's process sets for itself: a worker of ``harness run --workers 2`` records what it measured
under the key its harness process reads, so a stale record is replaced by the first measurement and the next run
takes the measured label; the refusal of the cell that found it stale says in one line how to go on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import kernels
from harness.core.errors import HarnessError
from harness.core.hosts import available_cpus

REPO = Path(__file__).resolve().parents[1]
STALE = "native:0badf00d"  # a label no process here measures
# the variables of the kernels' threads: a worker's are set by its executor, not by the user
THREAD_VARS = {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3", "MKL_DYNAMIC": "FALSE",
               "OMP_PROC_BIND": "close", "KMP_AFFINITY": "compact", "GOMP_SPINCOUNT": "0"}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A harness home of the test's own, with this process's measured labels and record bookkeeping restored after."""
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    monkeypatch.setenv(kernels.TAKEN_ENV, "")  # (what a test's cpu_kernels sets there is undone)
    monkeypatch.setattr(kernels, "_labels", {})
    monkeypatch.setattr(kernels, "_recorded", set())
    for var in THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _record(home: Path) -> dict[str, str]:
    return json.loads((home / "cache" / kernels.LABELS_FILE).read_text())


def test_a_label_recorded_under_one_thread_count_is_found_under_another(home, monkeypatch):
    """A process with OMP_NUM_THREADS=1 records; a process with other thread variables (a worker's) finds it,
    without loading torch. The variables that choose the kernels still key the record."""
    code = ("import sys, json\nfrom harness.core import kernels\n"
            "if sys.argv[1] == 'write':\n    kernels._record_label(False, 'native:cafef00d')\n"
            "print(json.dumps({'label': kernels.cpu_kernels(False), 'torch': 'torch' in sys.modules}))")
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}

    def child(step: str, **extra: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", code, step], capture_output=True, text=True, cwd=REPO,
                              timeout=120, env={**env, "PYTHONPATH": str(REPO), **extra})
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert child("write", OMP_NUM_THREADS="1") == {"label": "native:cafef00d", "torch": False}
    assert child("read", **THREAD_VARS) == {"label": "native:cafef00d", "torch": False}
    # in this process too, each variable alone: the same key
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    base = kernels.conditions(False)
    for var, value in THREAD_VARS.items():
        monkeypatch.setenv(var, value)
        assert kernels.conditions(False) == base, var
    assert kernels._recorded_label(False) == "native:cafef00d"
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX512")  # a variable that chooses kernels: another key
    assert kernels.conditions(False) != base and kernels._recorded_label(False) is None


def test_a_stale_record_under_the_harness_process_key_is_replaced_by_a_worker(home, monkeypatch):
    """The harness process (no thread variable of its own) reads a stale label; its worker (OMP_NUM_THREADS=1, as
    the local executor sets it) measures and replaces that very record, so that the next run reads the measured
    label and is not refused again."""
    key = kernels.conditions(False)
    (home / "cache").mkdir()
    (home / "cache" / kernels.LABELS_FILE).write_text(json.dumps({key: STALE}))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the worker
    measured = kernels.measured_kernels(False)
    assert measured != STALE
    assert _record(home) == {key: measured}
    monkeypatch.delenv("OMP_NUM_THREADS")  # the next harness process
    assert kernels._recorded_label(False) == measured


def _take_from_record() -> str:
    """What a harness process that has not loaded torch yet takes as the run's label (from the record)."""
    torch = sys.modules.pop("torch", None)
    try:
        return kernels.cpu_kernels(False)
    finally:
        if torch is not None:
            sys.modules["torch"] = torch


def test_the_refusal_of_a_stale_label_says_how_to_go_on(home, monkeypatch):
    key = kernels.conditions(False)
    (home / "cache").mkdir()
    labels = home / "cache" / kernels.LABELS_FILE
    labels.write_text(json.dumps({key: STALE}))
    taken = _take_from_record()
    assert taken == STALE and f"{key}={STALE}" in os.environ[kernels.TAKEN_ENV].split()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the cell's worker
    with pytest.raises(HarnessError) as refused:
        kernels.check_measured(STALE, False)
    text = str(refused.value)
    measured = kernels._fingerprint_label(False)
    assert "\n" not in text and f"the run with {STALE}" in text and str(labels) in text
    assert text.endswith(f"the record now holds {measured}: run the same command again"), text
    assert _record(home) == {key: measured}
    assert kernels.check_measured(measured, False) == measured  # the next run's cells compute
    # the run's label not taken from this record (another machine's, another environment's): no rerun would help
    monkeypatch.delenv(kernels.TAKEN_ENV)
    with pytest.raises(HarnessError, match=r"python -m harness.core.kernels` on each says which$"):
        kernels.check_measured("native:12345678", False)


def test_a_stale_record_does_not_refuse_every_run_with_workers(harness_home, synthetic_world, tmp_path):
    """``harness run --workers 2`` on the synthetic world, a stale label planted under the harness process's key,
    the harness process with another OMP_NUM_THREADS than its workers: the first run is refused (its cells' keys
    were planned under the stale label), its workers replace the record, the same command then runs."""
    home = tmp_path / "home"
    shutil.copytree(harness_home / "worlds", home / "worlds")
    parent = {k: v for k, v in os.environ.items() if k not in (*THREAD_VARS, kernels.TAKEN_ENV)}
    parent.update({"HARNESS_HOME": str(home), "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow.db'}",
                   "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(max(1, available_cpus() // 2) + 1)})
    key = subprocess.run([sys.executable, "-c", "from harness.core import kernels; print(kernels.conditions(False))"],
                         capture_output=True, text=True, cwd=REPO, env=parent, timeout=120).stdout.strip()
    (home / "cache").mkdir()
    labels = home / "cache" / kernels.LABELS_FILE
    labels.write_text(json.dumps({key: STALE}))
    job = [sys.executable, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", "random", "--seeds",
           "1,2", "--tasks", "sr-t", "--cpt-steps", "0", "--workers", "2"]
    first = subprocess.run(job, capture_output=True, text=True, cwd=REPO, env=parent, timeout=300)
    assert first.returncode == 2 and f"the run with {STALE}" in first.stderr, first.stderr[-3000:]
    assert json.loads(labels.read_text())[key] == kernels._fingerprint_label(False)  # replaced by a worker
    assert first.stderr.strip().splitlines()[-1].endswith("run the same command again"), first.stderr[-2000:]
    again = subprocess.run(job, capture_output=True, text=True, cwd=REPO, env=parent, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "cells: done 2/2" in again.stderr
