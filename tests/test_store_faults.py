"""Crash consistency of the run store (the SQLite ``mlflow.db`` of a home) under kills, tested the way SQLite tests
itself: a writer SIGKILLed at many points inside MLflow's own writes (a metric, a batch, a tag, ``set_terminated``;
with SQLite spilling dirty pages into the file before the commit, so that the journal holds the only copy of the old
pages), the issue's killed writer, and 20 SIGKILLs timed to land inside the harness's own store writes. A lock held by
another process, a read-only home, a full disk, a damaged file and two commands in one home are
tests/test_store_faults_locks_disk.py.

Each case ends with every run that had finished still FINISHED with all its metrics, MLflow's own client opening
the store, SQLite's integrity check passing, and a one-line message (exit 2) wherever the harness must stop. The
harness never deletes a store or its journal: recovery is SQLite's (a read-write open rolls a hot journal back).

The kill points are reached through SQLAlchemy's statement events on MLflow's engine in a forked writer (the
helpers of this file; no hook of the harness is involved). The probe of 20 SIGKILLs timed to land inside the
harness's own store writes is ``test_probe_twenty_kills_inside_store_writes`` (slow)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.store_open import ensure_sqlite_store
from harness.core.store_view import SqliteStoreView
from harness.core.tracking import Tracker
from tests._store_fault_helpers import (
    T0,
    _check_kept,
    _copy,
    _env,
    _finished,
    _harness,
    _hot,
    _integrity,
    _mlflow_opens,
    _raw_killed_writer,
    _uri,
)
from tests.conftest import REPO

pytestmark = pytest.mark.usefixtures("own_tracking_uri")


# -- a writer killed inside MLflow's writes ----------------------------------------------------------------------
def _killed_writer(db: Path, op: str, kill_at: int, spill: bool) -> int:
    """Fork a process that opens MLflow's client on ``db`` and does ``op`` on the target run, SIGKILLing itself
    just before the ``kill_at``-th statement of it reaches SQLite (counting COMMITs); ``spill``: SQLite keeps one
    page in memory, so dirty pages reach the file before the commit. Returns the signal that ended it (0: none)."""
    pid = os.fork()
    if pid == 0:  # the writer (never returns into the test)
        code = 1
        try:
            from mlflow.entities import Metric, Param, RunTag
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
            from mlflow.tracking import MlflowClient
            from sqlalchemy import event

            SqlAlchemyStore._engine_map.clear()  # (the test process's engines: never used from here)
            client = MlflowClient(_uri(db))
            engine = client._tracking_client.store.engine
            target = client.search_runs([client.get_experiment_by_name("faults").experiment_id],
                                        "attributes.run_name = 'target'")[0].info.run_id
            seen = [0]

            def count(*_args):
                seen[0] += 1
                if seen[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

            def connect(dbapi_con, _record):
                if spill:
                    dbapi_con.execute("pragma cache_size = 1")

            engine.dispose()
            event.listen(engine, "connect", connect)
            event.listen(engine, "before_cursor_execute", count)
            event.listen(engine, "commit", count)
            ops = {
                "log_metric": lambda: client.log_metric(target, "loss", 2.0, timestamp=T0 + 1, step=1),
                "log_batch": lambda: client.log_batch(
                    target, metrics=[Metric(f"m{i:03d}", float(i), T0, 1) for i in range(300)],
                    params=[Param("p", "v" * 300)], tags=[RunTag("t", "v" * 300)]),
                "set_tag": lambda: client.set_tag(target, "harness.error", "x" * 3000),
                "set_terminated": lambda: client.set_terminated(target, "FINISHED"),
            }
            ops[op]()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0


# the statements (counting COMMITs) of each write as MLflow 3.17 makes it, from its first write on: killed before
# each INSERT/UPDATE, between them and before each COMMIT (the earlier ones are reads and pragmas)
KILL_POINTS = {"log_metric": [5, 6, 7, 8], "set_tag": [6, 7], "set_terminated": [5, 6, 9],
               "log_batch": [10, 11, 16, 18, 19, 25, 26, 27]}


@pytest.mark.parametrize("op", sorted(KILL_POINTS))
def test_a_writer_killed_inside_mlflows_writes_loses_nothing(store_base, tmp_path, op):
    before = _finished(store_base / "mlflow.db")
    assert len(before) == 3
    hot = 0
    for i, k in enumerate(KILL_POINTS[op]):
        db = _copy(store_base, tmp_path / f"k{k}")
        assert _killed_writer(db, op, k, spill=i % 2 == 0) == signal.SIGKILL, f"{op} finished before point {k}"
        hot += _hot(db)
        ensure_sqlite_store(_uri(db))  # what every harness command does first: SQLite rolls the journal back
        ro = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # no hot journal is left: a read-only reader reads
        assert ro.execute("select count(*) from runs").fetchone()[0] == 4
        ro.close()
        _check_kept(db, before)
        con = sqlite3.connect(db)  # the write happened whole or not at all
        target = con.execute("select run_uuid, status from runs where name = 'target'").fetchone()
        if op == "log_batch":
            n = con.execute("select count(*) from metrics where run_uuid = ? and key like 'm%'",
                            (target[0],)).fetchone()[0]
            assert n in (0, 300)
        con.close()
        assert target[1] in ("RUNNING", "FINISHED")
    if op == "log_batch":  # (its 300 rows spill pages into the file before the commit)
        assert hot >= 1  # kills that left a hot journal: the case the issue lost a store to
    runs = _mlflow_opens(db)
    assert runs["done0"] == runs["done1"] == runs["done2"] == "FINISHED"


def test_the_issues_killed_writer_keeps_every_run(store_base, tmp_path):
    """The reproduction of issue 48: a writer killed inside a large transaction leaves a hot journal; opening the
    home used to take the store for half-created and delete it with its journal (0 runs of 3)."""
    home = tmp_path / "home"
    db = _copy(store_base, home)
    before = _finished(db)
    _raw_killed_writer(db)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # what a read-only reader gets now
        sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute("select count(*) from runs").fetchone()
    out = _harness(home, "leaderboard", "--no-log", timeout=300)
    assert out.returncode == 0, out.stderr
    assert "never completed" not in out.stderr and "half-created" not in out.stderr
    _check_kept(db, before)
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from runs").fetchone()[0] == 4
    assert con.execute("select count(*) from junk where v like 'y%'").fetchone()[0] == 0  # rolled back
    con.close()


def test_the_view_and_mark_stopped_runs_work_after_a_killed_writer(store_base, tmp_path):
    """A command's store view, opened before a worker was killed mid-write (clean_stop's case), cannot read the
    store with its read-only connection ("attempt to write a readonly database"): MLflow's client answers for it,
    recovering the journal, and mark_stopped_runs marks the dead process's run KILLED."""
    from harness.core.lifecycle import mark_stopped_runs

    db = _copy(store_base, tmp_path / "home")
    tracker = Tracker(_uri(db))
    view = tracker.reader
    assert isinstance(view, SqliteStoreView)
    exp = view.get_experiment_by_name("faults").experiment_id
    assert len(view.search_runs([exp], "")) == 4
    view.close()
    _raw_killed_writer(db)
    calls = []
    factory = view._client_factory
    view._client_factory = lambda: calls.append(1) or factory()
    runs = view.search_runs([exp], "attributes.status = 'RUNNING'")
    assert [r.info.run_name for r in runs] == ["target"] and calls  # answered by the client
    assert mark_stopped_runs(tracker, [exp], "stopped by SIGTERM") == 1
    assert tracker.reader.get_run(runs[0].info.run_id).info.status == "KILLED"
    assert len(_finished(db)) == 3 and _integrity(db) == "ok"


# -- the probe: 20 SIGKILLs timed to land inside the harness's store writes -----------------------------------------
PROBE_WRITER = """
import sys
from harness.core.tracking import Tracker

tracker = Tracker(sys.argv[1])
if sys.argv[2] == "spill":  # SQLite writes dirty pages into the file before the commit (a kill leaves a hot journal)
    from sqlalchemy import event

    engine = tracker.client._client._tracking_client.store.engine
    engine.dispose()
    event.listen(engine, "connect", lambda con, _record: con.execute("pragma cache_size = 1"))
exp = tracker.experiment("probe")
tracker.mark_orphans_killed([exp])  # what a command does first: runs of a dead process become KILLED
for c in range(6):
    found = tracker.find_runs(exp, {"cell": f"c{c}"})
    if found and found[0].info.status == "FINISHED":
        continue  # a finished cell is passed over
    run, _ = tracker.get_or_create_run(exp, {"cell": f"c{c}"}, f"c{c}")
    tracker.log_params(run, {"method": "probe", "cell": c})
    for step in range(3):
        if tracker.is_done(run, f"step_{step}"):
            continue
        tracker.log_metrics(run, {f"task/m{i:03d}/avg": c + step + i / 1000 for i in range(200)}, step)
        tracker.mark_done(run, f"step_{step}")
    tracker.finish(run)
"""


def _probe_writer(home: Path, spill: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PROBE_WRITER, _uri(home / "mlflow.db"),
                             "spill" if spill else "cache"], cwd=REPO,
                            env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _probe_check(db: Path) -> None:
    con = sqlite3.connect(db)
    runs = con.execute("select name, status, run_uuid from runs where name like 'c%'").fetchall()
    assert sorted(name for name, _, _ in runs) == [f"c{c}" for c in range(6)]  # none lost, none twice
    assert {status for _, status, _ in runs} == {"FINISHED"}  # none left RUNNING (or KILLED)
    for _, _, rid in runs:
        rows = con.execute("select key, step, count(distinct value) from metrics where run_uuid = ? "
                           "group by key, step", (rid,)).fetchall()
        assert len(rows) == 600 and {n for *_, n in rows} == {1}
    con.close()
    assert _integrity(db) == "ok"


@pytest.mark.slow
def test_probe_twenty_kills_inside_store_writes(tmp_path):
    """The kill tests' pattern at the store: a writer doing what a cell does with the store (its run found or
    made by its identity, params, metrics per evaluated step marked done, FINISHED) is SIGKILLed the moment
    SQLite's journal appears (a write transaction is open; every other writer has SQLite spill its pages into the
    file before the commit, as a large transaction does, so a kill can leave a hot journal) -- 20 times, each
    followed by the same writer
    resuming in the same home; then no cell's run is lost, doubled or left RUNNING, and every metric holds one
    value per step."""
    import random

    rng = random.Random(48)
    kills = inside = hot = 0
    homes = 0
    home = None
    while kills < 20:
        if home is None:
            homes += 1
            home = tmp_path / f"home{homes}"
            home.mkdir()
        journal = home / "mlflow.db-journal"
        proc = _probe_writer(home, spill=kills % 2 == 1)
        killed = False
        while proc.poll() is None:
            if journal.exists():  # a write is open: the kill lands a moment into it (its first page .. its commit)
                time.sleep(rng.uniform(0, 0.03))
                proc.send_signal(signal.SIGKILL)
                killed = True
                break
            time.sleep(0.0002)
        proc.wait(timeout=300)
        if killed:
            kills += 1
            inside += journal.exists()  # the kill landed inside the write: its journal is left
            hot += journal.exists() and _hot(home / "mlflow.db")  # ... with pages to roll back
        else:
            assert proc.returncode == 0, proc.stderr.read().decode()[-3000:]
            _probe_check(home / "mlflow.db")
            home = None  # every cell done: the next kills in a new home
    if home is not None:
        proc = _probe_writer(home)
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()[-3000:]
        _probe_check(home / "mlflow.db")
    print(f"probe: {kills} SIGKILLs, {inside} left a journal behind ({hot} a hot one), {homes} home(s); nothing "
          "lost, doubled or left RUNNING")
    assert inside >= 10 and hot >= 1


def test_harness_cache_never_selects_the_stores_journal(store_base, tmp_path):
    """``harness cache prune --kind other`` removes what the home holds beside its known kinds: a hot journal is
    the store's (kind ``tracking``, never pruned), not "other"."""
    from harness.cache_admin import scan, select

    home = tmp_path / "home"
    db = _copy(store_base, home)
    _raw_killed_writer(db)
    items = scan(home)
    journal = [i for i in items if i.path.name == "mlflow.db-journal"]
    assert [i.kind for i in journal] == ["tracking"]
    assert not [i for i in select(items, ["other"], None, None) if i.path.name.startswith("mlflow.db")]
    assert not [i for i in select(items, None, None, None) if i.path.name.startswith("mlflow.db")]
