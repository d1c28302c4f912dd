"""Crash consistency of the run store (the SQLite ``mlflow.db`` of a home) when it is held or cannot be written: a
lock held by another process for 1, 10 and 60 s, MLflow's own writes under a lock, a read-only home, a full disk, a
damaged file, and a second ``harness run`` in the same home at the same time with ``harness leaderboard`` reading
during it. Writers killed inside the store's writes are tests/test_store_faults.py.

Each case ends with every run that had finished still FINISHED with all its metrics, MLflow's own client opening
the store, SQLite's integrity check passing, and a one-line message (exit 2) wherever the harness must stop. The
harness never deletes a store or its journal: recovery is SQLite's (a read-write open rolls a hot journal back)."""

from __future__ import annotations

import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.errors import HarnessError
from harness.core.store_open import StoreUnavailable, ensure_sqlite_store, read_store
from harness.core.tracking import Tracker
from tests._store_fault_helpers import (
    HARNESS,
    _check_kept,
    _copy,
    _env,
    _finished,
    _harness,
    _integrity,
    _mlflow_opens,
    _raw_killed_writer,
    _uri,
)
from tests.conftest import REPO

pytestmark = pytest.mark.usefixtures("own_tracking_uri")


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
def test_a_lock_is_waited_for_saying_so_every_five_seconds(store_base, tmp_path, capsys, seconds):
    db = _copy(store_base, tmp_path / "home")
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


def test_a_lock_held_past_the_wait_is_refused_in_one_line(store_base, tmp_path):
    """The 60 s lock against a wait shortened to 3 s (HARNESS_STORE_WAIT): the real wait is the slow test."""
    db = _copy(store_base, tmp_path / "home")
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
def test_a_sixty_second_lock_is_waited_out_with_the_default_wait(store_base, tmp_path):
    db = _copy(store_base, tmp_path / "home")
    before = _finished(db)
    holder = _hold(db, 60)
    out = _harness(db.parent, "leaderboard", "--no-log", timeout=600)
    holder.wait(timeout=60)
    assert out.returncode == 0, out.stderr
    assert len([ln for ln in out.stderr.splitlines() if ln.startswith("waiting for tracking store")]) >= 10
    _check_kept(db, before)


def test_mlflows_writes_wait_for_a_lock_of_seven_seconds(store_base, tmp_path):
    db = _copy(store_base, tmp_path / "home")
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


def test_a_read_only_home_is_refused_in_one_line_and_recovered_once_writable(store_base, tmp_path):
    mnt = tmp_path / "ro"
    if os.geteuid() != 0 or not _mount_tmpfs(mnt, "64m"):
        pytest.skip("needs a file system this test can remount read-only (root, tmpfs)")
    try:
        db = _copy(store_base, mnt / "home")
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


def test_a_full_disk_stops_the_write_in_one_line_and_loses_nothing(store_base, tmp_path):
    """A file-size limit (RLIMIT_FSIZE) at the store's size: the harness's write fails with one line, SQLite rolls
    it back whole, and every finished run is as it was."""
    db = _copy(store_base, tmp_path / "home")
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


def test_a_damaged_store_is_refused_in_one_line_and_kept_byte_for_byte(store_base, tmp_path):
    db = _copy(store_base, tmp_path / "home")
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
