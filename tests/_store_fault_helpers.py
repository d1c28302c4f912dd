"""What the run store's crash-consistency tests share (tests/test_store_faults.py: writers killed inside the
store's writes; tests/test_store_faults_locks_disk.py: a store held by another process, a read-only home, a full
disk, a damaged file, two commands in one home): a home whose store holds finished runs, and the checks that every
finished run is kept, the store is intact and MLflow's own client opens it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

from harness.core.store_open import ensure_sqlite_store
from tests.conftest import REPO

HARNESS = [sys.executable, "-m", "harness.cli"]
T0 = 1_700_000_000_000


# -- a store and what it holds -----------------------------------------------------------------------------------
def _uri(path: Path) -> str:
    return f"sqlite:///{path}"


def _build_base(home: Path) -> Path:
    """A home whose store holds three FINISHED runs with params, tags and metrics at three steps, and one RUNNING
    run (the target of the tests' writes) owned by a process of this machine that is gone."""
    from mlflow.tracking import MlflowClient

    db = home / "mlflow.db"
    ensure_sqlite_store(_uri(db))
    client = MlflowClient(_uri(db))
    exp = client.create_experiment("faults")
    for i in range(3):
        rid = client.create_run(exp, start_time=T0 + i, tags={"harness.kind": "cell"}, run_name=f"done{i}").info.run_id
        client.log_param(rid, "method", f"m{i}")
        for step in range(3):
            for key in ("mlm/loss/avg", "sr-t/acc_1/avg", "sr-t/acc_1/xho_Latn"):
                client.log_metric(rid, key, i + step / 10, timestamp=T0, step=step)
        client.set_terminated(rid, status="FINISHED")
    target = client.create_run(exp, start_time=T0 + 9, run_name="target",
                               tags={"harness.kind": "cell", "harness.pid": "999999999",
                                     "harness.host": socket.gethostname()})
    client.log_metric(target.info.run_id, "loss", 1.0, timestamp=T0, step=0)
    client._tracking_client.store.engine.dispose()
    return home


def _copy(base: Path, dest: Path) -> Path:
    shutil.copytree(base, dest)
    return dest / "mlflow.db"


def _finished(db: Path) -> dict[str, tuple]:
    """Every FINISHED run with its metrics (every logged value), params and tags, read with sqlite3 alone."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out = {}
        for (rid,) in con.execute("select run_uuid from runs where status = 'FINISHED' order by run_uuid"):
            out[rid] = (sorted(con.execute("select key, value, step from metrics where run_uuid = ?", (rid,))),
                        sorted(con.execute("select key, value from params where run_uuid = ?", (rid,))),
                        sorted(con.execute("select key, value from tags where run_uuid = ?", (rid,))))
        return out
    finally:
        con.close()


def _env(home: Path, **extra: str) -> dict[str, str]:
    """A command's environment: this home, no tracking URI or harness setting of the test process (MLflow's
    set_tracking_uri, which a Tracker's client calls, exports MLFLOW_TRACKING_URI)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "MLFLOW_TRACKING_URI"))}
    env.update({"HARNESS_HOME": str(home), "HF_HOME": str(home / "hf"), "OMP_NUM_THREADS": "1",
                "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra})
    return env


def _harness(home: Path, *args: str, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*HARNESS, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=_env(home, **extra))


def _hot(db: Path) -> bool:
    """Whether a killed writer left a hot journal (a read-only reader cannot read: it would have to roll back)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        con.execute("select count(*) from runs").fetchone()
        return False
    except sqlite3.OperationalError as exc:
        assert "readonly" in str(exc)
        return True
    finally:
        con.close()


def _integrity(db: Path) -> str:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("pragma integrity_check").fetchone()[0]
    finally:
        con.close()


def _mlflow_opens(db: Path) -> dict[str, str]:
    """MLflow's own client opens the store (an engine of its own): {run name: status}."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking import MlflowClient

    client = MlflowClient(_uri(db))
    try:
        exp = client.get_experiment_by_name("faults").experiment_id
        return {r.info.run_name: r.info.status for r in client.search_runs([exp])}
    finally:
        client._tracking_client.store.engine.dispose()
        SqlAlchemyStore._engine_map.pop(_uri(db), None)


def _check_kept(db: Path, before: dict[str, tuple]) -> None:
    now = _finished(db)
    assert {rid: now.get(rid) for rid in before} == before  # every finished run, FINISHED, with all it held
    assert _integrity(db) == "ok"


def _raw_killed_writer(db: Path) -> None:
    """The issue's writer: a large transaction, SQLite spilling its pages into the file, SIGKILL before the commit
    (a hot journal holds the only copy of the overwritten pages)."""
    code = ("import sqlite3, os, signal, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('create table junk(id integer primary key, v text)'); c.execute('begin'); "
            "c.executemany('insert into junk(v) values (?)', [('x' * 200,)] * 5000); c.execute('commit'); "
            "c.execute('pragma cache_size=1'); c.execute('begin'); c.execute('update junk set v=?', ('y' * 200,)); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    assert subprocess.run([sys.executable, "-c", code, str(db)]).returncode == -signal.SIGKILL
    assert _hot(db)
