"""Crash consistency of the run store (the SQLite ``mlflow.db`` of a home), tested the way SQLite tests itself: a
writer SIGKILLed at many points inside MLflow's own writes (a metric, a batch, a tag, ``set_terminated``; with
SQLite spilling dirty pages into the file before the commit, so that the journal holds the only copy of the old
pages), a lock held by another process for 1, 10 and 60 s, a second ``harness run`` in the same home at the same
time with ``harness leaderboard`` reading during it, a read-only home, a full disk, a damaged file.

Each case ends with every run that had finished still FINISHED with all its metrics, MLflow's own client opening
the store, SQLite's integrity check passing, and a one-line message (exit 2) wherever the harness must stop. The
harness never deletes a store or its journal: recovery is SQLite's (a read-write open rolls a hot journal back).

The kill points are reached through SQLAlchemy's statement events on MLflow's engine in a forked writer (the
helpers of this file; no hook of the harness is involved). The probe of 20 SIGKILLs timed to land inside the
harness's own store writes is ``test_probe_twenty_kills_inside_store_writes`` (slow)."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.errors import HarnessError
from harness.core.store_view import SqliteStoreView
from harness.core.tracking import StoreUnavailable, Tracker, ensure_sqlite_store, read_store
from tests.conftest import REPO

HARNESS = [sys.executable, "-m", "harness.cli"]
T0 = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _own_tracking_uri(monkeypatch):
    """MLflow's set_tracking_uri (a Tracker's client calls it) exports MLFLOW_TRACKING_URI: kept to each test."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


# -- a store and what it holds -----------------------------------------------------------------------------------
def _uri(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A home whose store holds three FINISHED runs with params, tags and metrics at three steps, and one RUNNING
    run (the target of the writes below) owned by a process of this machine that is gone."""
    from mlflow.tracking import MlflowClient

    home = tmp_path_factory.mktemp("store-base")
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
def test_a_writer_killed_inside_mlflows_writes_loses_nothing(base, tmp_path, op):
    before = _finished(base / "mlflow.db")
    assert len(before) == 3
    hot = 0
    for i, k in enumerate(KILL_POINTS[op]):
        db = _copy(base, tmp_path / f"k{k}")
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


def test_the_issues_killed_writer_keeps_every_run(base, tmp_path):
    """The reproduction of issue 48: a writer killed inside a large transaction leaves a hot journal; opening the
    home used to take the store for half-created and delete it with its journal (0 runs of 3)."""
    home = tmp_path / "home"
    db = _copy(base, home)
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


def test_the_view_and_mark_stopped_runs_work_after_a_killed_writer(base, tmp_path):
    """A command's store view, opened before a worker was killed mid-write (clean_stop's case), cannot read the
    store with its read-only connection ("attempt to write a readonly database"): MLflow's client answers for it,
    recovering the journal, and mark_stopped_runs marks the dead process's run KILLED."""
    from harness.core.lifecycle import mark_stopped_runs

    db = _copy(base, tmp_path / "home")
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


# -- another process holds the store -----------------------------------------------------------------------------
def _hold(db: Path, seconds: float) -> subprocess.Popen:
    """Another process holding SQLite's exclusive lock on the store for ``seconds`` (started once it holds it)."""
    code = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('begin exclusive'); print('held', flush=True); time.sleep(float(sys.argv[2])); "
            "c.execute('commit')")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("seconds", [1, 10])
def test_a_lock_is_waited_for_saying_so_every_five_seconds(base, tmp_path, capsys, seconds):
    db = _copy(base, tmp_path / "home")
    before = _finished(db)
    holder = _hold(db, seconds)
    started = time.monotonic()
    ensure_sqlite_store(_uri(db))
    took = time.monotonic() - started
    holder.wait(timeout=60)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("waiting for tracking store")]
    assert took >= seconds - 0.5
    assert int(took // 5) - 1 <= len(lines) <= int(took // 5), (took, lines)  # one line each 5 s of waiting
    assert len(lines) >= (1 if seconds >= 10 else 0)
    for line in lines:
        assert str(db) in line and f"pid {holder.pid}" in line
    _check_kept(db, before)


def test_a_lock_held_past_the_wait_is_refused_in_one_line(base, tmp_path):
    """The 60 s lock against a wait shortened to 3 s (HARNESS_STORE_WAIT): the real wait is the slow test."""
    db = _copy(base, tmp_path / "home")
    before = _finished(db)
    holder = _hold(db, 60)
    try:
        out = _harness(db.parent, "leaderboard", "--no-log", HARNESS_STORE_WAIT="3")
    finally:
        holder.kill()
        holder.wait()
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert out.returncode == 2, out.stderr
    assert len(errors) == 1 and "Traceback" not in out.stderr
    assert str(db) in errors[0] and f"pid {holder.pid}" in errors[0] and "HARNESS_STORE_WAIT" in errors[0]
    _check_kept(db, before)
    assert read_store(db).runs == 4


@pytest.mark.slow
def test_a_sixty_second_lock_is_waited_out_with_the_default_wait(base, tmp_path):
    db = _copy(base, tmp_path / "home")
    before = _finished(db)
    holder = _hold(db, 60)
    out = _harness(db.parent, "leaderboard", "--no-log", timeout=600)
    holder.wait(timeout=60)
    assert out.returncode == 0, out.stderr
    assert len([ln for ln in out.stderr.splitlines() if ln.startswith("waiting for tracking store")]) >= 10
    _check_kept(db, before)


def test_mlflows_writes_wait_for_a_lock_of_seven_seconds(base, tmp_path):
    db = _copy(base, tmp_path / "home")
    tracker = Tracker(_uri(db))
    run = tracker.find_runs(tracker.experiment("faults"), {"kind": "cell"})[0].info.run_id
    holder = _hold(db, 7)  # past SQLite's default 5 s, within MLflow's own 20 s
    tracker.set_tags(run, {"seen": "after the lock"})
    holder.wait(timeout=60)
    assert tracker.tags(run)["seen"] == "after the lock"


# -- a read-only home, a full disk, a damaged file ---------------------------------------------------------------
def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_a_read_only_home_is_refused_in_one_line_and_recovered_once_writable(base, tmp_path):
    mnt = tmp_path / "ro"
    if os.geteuid() != 0 or not _mount_tmpfs(mnt, "64m"):
        pytest.skip("needs a file system this test can remount read-only (root, tmpfs)")
    try:
        db = _copy(base, mnt / "home")
        before = _finished(db)
        _raw_killed_writer(db)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        with pytest.raises(StoreUnavailable) as err:
            ensure_sqlite_store(_uri(db))
        assert "\n" not in str(err.value) and str(db) in str(err.value) and "journal" in str(err.value)
        out = _harness(db.parent, "leaderboard", "--no-log", timeout=300)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stderr.startswith("error:") and str(db.parent) in out.stderr
        assert Path(f"{db}-journal").stat().st_size > 0  # kept: it holds the pages to restore
        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
        ensure_sqlite_store(_uri(db))
        _check_kept(db, before)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_stops_the_write_in_one_line_and_loses_nothing(base, tmp_path):
    """A file-size limit (RLIMIT_FSIZE) at the store's size: the harness's write fails with one line, SQLite rolls
    it back whole, and every finished run is as it was."""
    db = _copy(base, tmp_path / "home")
    before = _finished(db)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            SqlAlchemyStore._engine_map.clear()
            tracker = Tracker(_uri(db))
            run = tracker.find_runs(tracker.experiment("faults"), {"kind": "cell"})[0].info.run_id
            tracker.client.get_run(run)  # (MLflow's client opened before the disk fills)
            limit = db.stat().st_size
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            try:
                tracker.log_metrics(run, {f"full/{i}": float(i) for i in range(3000)}, step=5)
                os.write(write, b"no error")
            except HarnessError as exc:
                os.write(write, f"{type(exc).__name__}|{exc.exit_code}|{exc}".encode())
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)
    os.close(write)
    kind, exit_code, message = os.read(read, 10000).decode().split("|", 2)
    os.close(read)
    assert kind == "StoreUnavailable" and exit_code == "2"
    assert "\n" not in message
    assert str(db) in message and "disk is full" in message and "nothing logged before is lost" in message
    ensure_sqlite_store(_uri(db))
    _check_kept(db, before)
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from metrics where key like 'full/%'").fetchone()[0] == 0
    con.close()
    assert _mlflow_opens(db)["done1"] == "FINISHED"


def test_a_damaged_store_is_refused_in_one_line_and_kept_byte_for_byte(base, tmp_path):
    db = _copy(base, tmp_path / "home")
    before = _finished(db)
    good = db.read_bytes()
    con = sqlite3.connect(db)
    size = con.execute("pragma page_size").fetchone()[0]
    roots = [r[0] for r in con.execute("select rootpage from sqlite_master where tbl_name = 'runs'")]
    con.close()
    data = bytearray(good)
    for root in roots:  # the root pages of the runs table and its index
        data[size * (root - 1):size * root] = b"\xff" * size
    db.write_bytes(bytes(data))
    with pytest.raises(sqlite3.DatabaseError):
        sqlite3.connect(db).execute("select count(*) from runs").fetchone()
    out = _harness(db.parent, "leaderboard", "--no-log")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("error:") and "damaged" in out.stderr and str(db) in out.stderr
    assert db.read_bytes() == bytes(data)  # nothing rewritten, nothing recreated
    db.write_bytes(good)  # the user restores the pages (a backup, .recover): every run is there
    _check_kept(db, before)


# -- two commands in one home --------------------------------------------------------------------------------------
JOB = ["run", "--world", "synthetic", "--methods", "random", "--seeds", "1,2", "--tasks", "mlm", "--cpt-steps", "2",
       "--workers", "1", "--experiment", "two"]


@pytest.fixture(scope="module")
def world_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("store-world")
    out = _harness(home, "world", "build", "synthetic", timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return home


@pytest.mark.slow  # (three runs of the synthetic world and its build: 165 s on a loaded 2-core machine)
def test_two_runs_in_one_home_and_a_board_reading_during_them(world_home, tmp_path):
    """Two ``harness run`` of the same cells started together in one home, and ``harness leaderboard`` reading
    while they write: each command ends (exit 0, or one line and exit 2 where it must stop), the same command then
    finishes what is left, and the store holds each run once, every one FINISHED."""
    home = tmp_path / "home"
    shutil.copytree(world_home / "worlds", home / "worlds")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    files = [open(log, "w") for log in logs]  # noqa: SIM115 - closed below
    procs = [subprocess.Popen([*HARNESS, *JOB], cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=_env(home))
             for f in files]
    boards = []
    try:
        while any(p.poll() is None for p in procs):
            if (home / "mlflow.db").exists() and len(boards) < 2:
                boards.append(_harness(home, "leaderboard", "--no-log"))
            time.sleep(1)
    finally:
        for p, f in zip(procs, files, strict=True):
            p.wait(timeout=900)
            f.close()
    assert boards, "no board was read during the runs"
    for board in boards:
        assert board.returncode == 0 and "Traceback" not in board.stderr, board.stderr
    for p, log in zip(procs, logs, strict=True):
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]
        if p.returncode != 0:
            assert p.returncode == 2 and len([ln for ln in text.splitlines() if ln.startswith("error:")]) == 1, text
    again = _harness(home, *JOB, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    db = home / "mlflow.db"
    con = sqlite3.connect(db)
    rows = con.execute("select r.experiment_id, r.name, r.status, "
                       "(select value from tags t where t.run_uuid = r.run_uuid and t.key = 'mlflow.parentRunId') "
                       "from runs r where r.lifecycle_stage = 'active'").fetchall()
    con.close()
    keys = [(e, name, parent) for e, name, _, parent in rows]
    assert len(keys) == len(set(keys)), sorted(keys)  # no run twice
    assert {status for *_, status, _ in rows} == {"FINISHED"}
    assert {"random-full-s1", "random-full-s2"} <= {name for _, name, _, _ in rows}
    assert _integrity(db) == "ok"


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


def test_harness_cache_never_selects_the_stores_journal(base, tmp_path):
    """``harness cache prune --kind other`` removes what the home holds beside its known kinds: a hot journal is
    the store's (kind ``tracking``, never pruned), not "other"."""
    from harness.cache_admin import scan, select

    home = tmp_path / "home"
    db = _copy(base, home)
    _raw_killed_writer(db)
    items = scan(home)
    journal = [i for i in items if i.path.name == "mlflow.db-journal"]
    assert [i.kind for i in journal] == ["tracking"]
    assert not [i for i in select(items, ["other"], None, None) if i.path.name.startswith("mlflow.db")]
    assert not [i for i in select(items, None, None, None) if i.path.name.startswith("mlflow.db")]
