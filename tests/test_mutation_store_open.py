"""The SQLite tracking store opened safely (:mod:`harness.core.store_open`), function by function, in process: the
wait and its setting, the error behind MLflow's, the one line each SQLite error becomes, what holds a store, the
wait for a held store, and what is created, recreated or refused. Written to kill the mutants of
scripts/mutation.sh that the tests of killed writers let live."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.core import store_open as S
from harness.core.errors import HarnessError


def test_store_wait_reads_its_setting(monkeypatch):
    monkeypatch.delenv(S.STORE_WAIT_ENV, raising=False)
    assert S.store_wait() == 120.0
    for raw, want in (("", 120.0), ("  ", 120.0), ("7.5", 7.5), ("-3", 0.0), ("0", 0.0)):
        monkeypatch.setenv(S.STORE_WAIT_ENV, raw)
        assert S.store_wait() == want
    monkeypatch.setenv(S.STORE_WAIT_ENV, "soon")
    with pytest.raises(HarnessError) as exc:
        S.store_wait()
    assert str(exc.value) == ("HARNESS_STORE_WAIT='soon': give the seconds to wait for a tracking store another "
                              "process holds (a number, e.g. 120)")
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


def test_sqlite_error_found_behind_wrappers():
    inner = sqlite3.OperationalError("locked")
    assert S.sqlite_error(None) is None
    assert S.sqlite_error(inner) is inner
    assert S.sqlite_error(RuntimeError("x")) is None
    wrapped = RuntimeError("wrapped")
    wrapped.orig = inner
    assert S.sqlite_error(wrapped) is inner
    wrapped.orig = "not an error"
    assert S.sqlite_error(wrapped) is None
    outer = ValueError("outer")
    outer.__cause__ = wrapped
    wrapped.orig = inner
    assert S.sqlite_error(outer) is inner
    ctx = KeyError("ctx")
    ctx.__context__ = inner
    assert S.sqlite_error(ctx) is inner
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a  # a loop ends
    assert S.sqlite_error(a) is None


def _err(name: str, text: str = "boom") -> SimpleNamespace:
    e = sqlite3.OperationalError(text)
    e.sqlite_errorname = name
    return e


def test_describe_store_error_one_line_per_cause(tmp_path, monkeypatch):
    p = tmp_path / "mlflow.db"
    monkeypatch.setattr(S, "store_holder", lambda path: f"locked by X of {path.name}")
    d = S.describe_store_error
    assert d(p, _err("SQLITE_BUSY"), "while logging") == (
        f"tracking store {p} is busy while logging: locked by X of mlflow.db; let that process finish (or stop "
        "it), then run the same command again (it waits up to HARNESS_STORE_WAIT seconds)")
    assert d(p, _err("SQLITE_LOCKED_SHAREDCACHE")).startswith(f"tracking store {p} is busy: locked by X")
    journal = (f"tracking store {p} has a journal left by a writer that was killed (mlflow.db-journal) and SQLite "
               f"can roll it back only with write access to {tmp_path}: make it writable and run the same command "
               "again; nothing was changed (keep the journal: it holds the pages to restore)")
    assert d(p, _err("SQLITE_READONLY_ROLLBACK")) == journal
    assert d(p, _err("SQLITE_READONLY_RECOVERY")) == journal
    cannot = (f"tracking store {p} cannot be written now: boom (SQLITE_READONLY); fix the permissions of it and "
              f"of {tmp_path} (or give another --tracking-uri), then run the same command again")
    assert d(p, _err("SQLITE_READONLY"), "now") == cannot
    Path(f"{p}-journal").write_text("")
    assert d(p, _err("SQLITE_READONLY")) == journal
    Path(f"{p}-journal").unlink()
    for name in ("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH"):
        assert d(p, _err(name)).startswith(f"tracking store {p} cannot be written: boom ({name}); fix")
    assert d(p, _err("SQLITE_FULL"), "now") == (
        f"tracking store {p}: the disk is full now (boom (SQLITE_FULL)); the write was rolled back and nothing "
        "logged before is lost: free space, then run the same command again to resume")
    assert d(p, sqlite3.OperationalError("database or disk is full")).startswith(
        f"tracking store {p}: the disk is full (database or disk is full);")
    assert d(p, _err("SQLITE_IOERR_WRITE"), "now") == (
        f"tracking store {p} could not be written now (boom (SQLITE_IOERR_WRITE): the disk is full, a file-size "
        "limit was reached or the disk fails); SQLite rolls the write back and nothing logged before is lost: "
        "free space or fix the disk, then run the same command again to resume")
    for name in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        assert d(p, _err(name)) == (
            f"tracking store {p} is damaged (boom ({name})); the harness changes nothing in it: keep a copy, then "
            "recover it (`sqlite3 mlflow.db .recover`) or restore a backup")
    assert d(p, _err(""), "now") == (f"tracking store {p} cannot be used now: boom; nothing was changed in it; run "
                                     "the same command again once the cause is fixed")
    assert d(p, _err("SQLITE_ERROR")).startswith(f"tracking store {p} cannot be used: boom (SQLITE_ERROR); nothing")
    assert d(p, ValueError("odd")).startswith(f"tracking store {p} cannot be used: odd;")


def test_store_holder_names_the_locking_processes_and_journals(tmp_path, monkeypatch):
    p = tmp_path / "s.db"
    monkeypatch.setattr(S, "_lock_holders", lambda path: [])
    assert S.store_holder(p) == "locked by another process"
    Path(f"{p}-wal").write_text("")
    assert S.store_holder(p) == "locked by another process (s.db-wal present)"
    Path(f"{p}-journal").write_text("")
    assert S.store_holder(p) == "locked by another process (s.db-journal and s.db-wal present)"
    monkeypatch.setattr(S, "_lock_holders", lambda path: [1, 2, 3, 4])
    monkeypatch.setattr(S, "_describe_pid", lambda pid: f"pid {pid}")
    assert S.store_holder(p).startswith("locked by pid 1, pid 2, pid 3 (")


def test_describe_pid(monkeypatch):
    import os

    me = S._describe_pid(os.getpid())
    assert me.startswith(f"pid {os.getpid()} (") and me.endswith(")") and len(me) > len(f"pid {os.getpid()} ()")
    assert len(me) <= len(f"pid {os.getpid()} ()") + 80
    assert S._describe_pid(2 ** 30) == f"pid {2 ** 30}"


def test_lock_holders_read_from_the_kernel_lock_table(tmp_path):
    import fcntl
    import multiprocessing as mp
    import os

    p = tmp_path / "s.db"
    p.write_text("x")
    assert S._lock_holders(p) == []
    fd = os.open(p, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX)  # this process's own lock is not another's
    assert S._lock_holders(p) == []
    os.close(fd)
    ready, done = mp.get_context("fork").Event(), mp.get_context("fork").Event()

    def hold() -> None:
        f = os.open(p, os.O_RDWR)
        fcntl.lockf(f, fcntl.LOCK_EX)
        ready.set()
        done.wait(30)

    child = mp.get_context("fork").Process(target=hold)
    child.start()
    try:
        assert ready.wait(30)
        assert S._lock_holders(p) == [child.pid]
        assert S._lock_holders(tmp_path / "other") == []
    finally:
        done.set()
        child.join(30)


def test_never_completed():
    assert S._StoreState(set(), 0, None).never_completed
    assert S._StoreState({S.CREATION_MARKER, "runs"}, 0, None).never_completed
    assert not S._StoreState({"runs"}, 0, None).never_completed


def test_read_once(tmp_path):
    p = tmp_path / "s.db"
    con = sqlite3.connect(p)
    con.execute("create table other (x)")
    con.commit()
    state = S._read_once(p, 1.0)
    assert (state.tables, state.runs, state.revision) == ({"other"}, 0, None)
    con.execute("create table runs (x)")
    con.execute("insert into runs values (1), (2)")
    con.execute("create table alembic_version (version_num)")
    con.commit()
    state = S._read_once(p, 1.0)
    assert (state.runs, state.revision) == (2, None)
    con.execute("insert into alembic_version values ('abc')")
    con.commit()
    con.close()
    assert S._read_once(p, 1.0).revision == "abc"
    with pytest.raises(sqlite3.OperationalError):
        S._read_once(tmp_path / "absent.db", 1.0)
    assert not (tmp_path / "absent.db").exists()


def test_waiting_retries_a_busy_store_then_refuses(tmp_path, monkeypatch, capsys):
    p = tmp_path / "s.db"
    monkeypatch.setattr(S, "store_holder", lambda path: f"locked by X of {path.name}")
    clock, sleeps = {"t": 1000.0}, []
    monkeypatch.setattr(S.time, "monotonic", lambda: clock["t"])

    def sleep(s):
        sleeps.append(s)
        clock["t"] += 1.0

    monkeypatch.setattr(S.time, "sleep", sleep)
    timeouts = []

    def busy_twice(timeout):
        timeouts.append(timeout)
        if len(timeouts) < 3:
            raise _err("SQLITE_BUSY")
        return "opened"

    assert S._waiting(p, busy_twice, 10.0) == "opened"
    assert timeouts == [1.0, 1.0, 1.0]
    assert S._waiting(p, lambda timeout: timeout, 0.5) == 0.5

    def always_busy(timeout):
        timeouts.append(timeout)
        raise _err("SQLITE_LOCKED")

    timeouts.clear()
    clock["t"] = 1000.0
    with pytest.raises(S.StoreUnavailable) as exc:
        S._waiting(p, always_busy, 12.0)
    assert str(exc.value) == (f"tracking store {p} is held by another process past the wait (12 s, "
                              "HARNESS_STORE_WAIT): locked by X of s.db; nothing was changed: run the same command again "
                              "once it has let go")
    assert exc.value.__cause__ is None and exc.value.__suppress_context__
    assert len(timeouts) == 13 and timeouts[-1] == 0.05
    err = capsys.readouterr().err.splitlines()
    assert err == [f"waiting for tracking store {p}: locked by X of s.db ({s} s of 12 s)" for s in (5, 10)]
    assert set(sleeps) == {0.05}


def test_waiting_refuses_other_errors_at_once(tmp_path, monkeypatch):
    p = tmp_path / "s.db"
    calls = []

    def corrupt(timeout):
        calls.append(timeout)
        raise _err("SQLITE_CORRUPT")

    with pytest.raises(S.StoreUnavailable) as exc:
        S._waiting(p, corrupt, 10.0)
    assert calls == [1.0]
    assert str(exc.value).startswith(f"tracking store {p} is damaged (boom (SQLITE_CORRUPT))")
    assert exc.value.__cause__ is None and exc.value.__suppress_context__
    monkeypatch.setenv(S.STORE_WAIT_ENV, "0")
    calls.clear()
    with pytest.raises(S.StoreUnavailable, match="past the wait"):
        S._waiting(p, lambda t: calls.append(t) or (_ for _ in ()).throw(_err("SQLITE_BUSY")))
    assert calls == [0.05]


# -- ensure_sqlite_store: created, recreated, kept or refused -----------------------------------------------------
def _tables(p: Path, *tables: str, runs: int = 0, revision: str | None = None) -> Path:
    con = sqlite3.connect(p)
    for t in tables:
        con.execute(f"create table {t} (x)")
    for i in range(runs):
        con.execute("insert into runs values (?)", (i,))
    if revision is not None:
        con.execute("create table alembic_version (version_num)")
        con.execute("insert into alembic_version values (?)", (revision,))
    con.commit()
    con.close()
    return p


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A store the harness created (built once; copied by the tests that need one)."""
    folder = tmp_path_factory.mktemp("built")
    S.ensure_sqlite_store(f"sqlite:///{folder / 'mlflow.db'}", 5.0)
    return folder / "mlflow.db"


def test_an_absent_store_is_created_complete_and_nothing_else_is_left(built):
    assert _left(built.parent) == ["mlflow.db"]
    assert S.store_state(built) == (True, 0)
    assert S.CREATION_MARKER not in S.read_store(built, 1.0).tables


def test_another_uri_is_let_be(tmp_path):
    S.ensure_sqlite_store(f"file://{tmp_path}/mlruns", 1.0)
    S.ensure_sqlite_store("sqlite:///:memory:", 1.0)
    assert _left(tmp_path) == []


def test_a_journal_without_its_store_is_refused(tmp_path):
    p = tmp_path / "mlflow.db"
    for leftover in ("-journal", "-wal"):
        Path(f"{p}{leftover}").write_text("pages")
        with pytest.raises(S.StoreUnavailable) as exc:
            S.ensure_sqlite_store(f"sqlite:///{p}", 1.0)
        assert str(exc.value) == (f"tracking store {p} is missing but its journal mlflow.db{leftover} is there: "
                                  "restore the store beside it (the journal belongs to it), or move the journal "
                                  "aside to start a new store")
        assert _left(tmp_path) == [f"mlflow.db{leftover}"]
        Path(f"{p}{leftover}").unlink()


def test_old_creation_leftovers_are_removed_and_new_ones_kept(tmp_path, monkeypatch):
    import os

    p = _tables(tmp_path / "mlflow.db", "runs", runs=1)
    old, new, other = (tmp_path / ".mlflow.db.a.creating", tmp_path / ".mlflow.db.b.creating",
                       tmp_path / ".other.db.c.creating")
    for f in (old, new, other):
        f.write_text("")
    os.utime(old, (1, 1))
    os.utime(other, (1, 1))
    now = old.stat().st_mtime + 601
    monkeypatch.setattr(S.time, "time", lambda: now)
    os.utime(new, (now - 599, now - 599))
    edge = tmp_path / ".mlflow.db.e.creating"
    edge.write_text("")
    os.utime(edge, (now - 600, now - 600))
    S.ensure_sqlite_store(f"sqlite:///{p}", 1.0)
    assert _left(tmp_path) == [new.name, edge.name, other.name, "mlflow.db"]


def test_a_store_with_runs_or_at_the_tested_schema_is_kept_byte_for_byte(tmp_path):
    from harness.core.store_view import SCHEMA_REVISION

    for name, kw in (("runs.db", {"runs": 2}), ("tested.db", {"revision": SCHEMA_REVISION})):
        p = _tables(tmp_path / name, "runs", **kw)
        before = p.read_bytes()
        S.ensure_sqlite_store(f"sqlite:///{p}", 1.0)
        assert p.read_bytes() == before


@pytest.mark.parametrize("revision, why", [("0ld", "its schema is not at MLflow's head revision"),
                                           (None, "it has no schema revision")])
def test_an_incomplete_store_without_runs_is_refused_unchanged(tmp_path, revision, why):
    p = _tables(tmp_path / "mlflow.db", "runs", "other", revision=revision)
    before = p.read_bytes()
    with pytest.raises(S.StoreUnavailable) as exc:
        S.ensure_sqlite_store(f"sqlite:///{p}", 1.0)
    assert str(exc.value) == (f"tracking store {p} holds no runs but is incomplete ({why}) and was not made by the "
                              f"harness, which changes nothing in it: upgrade it (`mlflow db upgrade sqlite:///{p}`) "
                              "or move it aside to start a new store")
    assert p.read_bytes() == before


@pytest.mark.parametrize("tables, why", [((), "it holds no table"),
                                         ((S.CREATION_MARKER, "runs"), "its creation was cut short")])
def test_a_store_never_completed_is_created_anew(tmp_path, capsys, tables, why):
    p = _tables(tmp_path / "mlflow.db", *tables)
    S.ensure_sqlite_store(f"sqlite:///{p}", 1.0)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"tracking store {p} was never completed ({why}); creating it anew"
    assert S.store_state(p) == (True, 0)
    assert _left(tmp_path) == ["mlflow.db"]


def test_a_complete_store_made_by_mlflow_without_runs_is_kept(built, tmp_path, monkeypatch):
    import shutil

    p = tmp_path / "mlflow.db"
    shutil.copy(built, p)
    monkeypatch.setattr("harness.core.store_view.SCHEMA_REVISION", "another")
    before = p.read_bytes()
    S.ensure_sqlite_store(f"sqlite:///{p}", 1.0)
    assert p.read_bytes() == before


def test_a_store_that_keeps_changing_is_refused_after_twenty_looks(tmp_path, monkeypatch):
    p = _tables(tmp_path / "mlflow.db")
    calls = []
    monkeypatch.setattr(S, "_recreate", lambda path, wait: calls.append(wait) or False)
    with pytest.raises(S.StoreUnavailable) as exc:
        S.ensure_sqlite_store(f"sqlite:///{p}", 3.0)
    assert str(exc.value) == f"tracking store {p} keeps changing while it is opened; run the same command again"
    assert calls == [3.0] * 20


def test_recreate_gives_up_on_a_store_replaced_or_completed_meanwhile(tmp_path, monkeypatch):
    p = _tables(tmp_path / "mlflow.db")
    real = S._waiting

    def replaced(path, attempt, wait=None):
        q = _tables(tmp_path / "new.db")
        q.replace(p)
        return real(path, attempt, wait)

    monkeypatch.setattr(S, "_waiting", replaced)
    assert S._recreate(p, 1.0) is False
    assert S.read_store(p, 1.0).tables == set()
    monkeypatch.setattr(S, "_waiting", real)
    q = _tables(tmp_path / "done.db", "runs")
    assert S._recreate(q, 1.0) is False
    assert S.read_store(q, 1.0).tables == {"runs"}


def test_a_store_another_process_linked_first_wins(tmp_path):
    p = tmp_path / "mlflow.db"
    p.write_bytes(b"theirs")
    S._create_store(p)
    assert p.read_bytes() == b"theirs"
    assert _left(tmp_path) == ["mlflow.db"]


def test_store_runs(tmp_path):
    assert S.store_runs(_tables(tmp_path / "a.db", "runs", runs=3)) == 3
    assert S.store_runs(_tables(tmp_path / "b.db", "other")) == 0


def test_lock_holders_parse_the_lock_table(tmp_path, monkeypatch):
    """Lines as /proc/locks has them (device numbers in hex, a waiting lock's line with ``->``); the store's own
    device taken as 0xab:0x1f so that hex and decimal differ."""
    import os
    import pathlib

    p = tmp_path / "s.db"
    p.write_text("x")
    shm = Path(f"{p}-shm")
    shm.write_text("x")
    ino, shm_ino = p.stat().st_ino, shm.stat().st_ino
    monkeypatch.setattr(S.os, "major", lambda dev: 0xAB)
    monkeypatch.setattr(S.os, "minor", lambda dev: 0x1F)
    table = "\n".join([
        "1: POSIX  ADVISORY  WRITE 77 ab:1f:999 0 EOF",  # another file
        f"2: POSIX  ADVISORY  WRITE 101 ab:1f:{ino} 0 EOF",
        f"2: -> POSIX  ADVISORY  WRITE 102 ab:1f:{ino} 0 EOF",  # waits: not a holder
        "3: garbled",
        f"4: POSIX  ADVISORY  READ {os.getpid()} ab:1f:{ino} 0 EOF",  # this process
        f"5: POSIX  ADVISORY  READ 0 ab:1f:{ino} 0 EOF",
        f"6: POSIX  ADVISORY  READ 103 ab:1f:{shm_ino} 0 EOF",
        f"7: POSIX  ADVISORY  READ 101 ab:1f:{shm_ino} 0 EOF",  # named once
        f"8: POSIX  ADVISORY  READ 104 ab:31:{ino} 0 EOF",  # the minor in decimal: another device
        f"9: POSIX  ADVISORY  READ 105 171:1f:{ino} 0 EOF",
        f"10: POSIX  ADVISORY  READ 1 ab:1f:{ino} 0 EOF",
    ])
    real = pathlib.Path.read_text

    def read_text(self, *a, **k):
        return table if str(self) == "/proc/locks" else real(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "read_text", read_text)
    assert S._lock_holders(p) == [101, 103, 1]
    p.unlink()  # the store gone, its shared-memory file still held
    assert S._lock_holders(p) == [103, 101]

    def unreadable(self, *a, **k):
        raise OSError("no /proc")

    monkeypatch.setattr(pathlib.Path, "read_text", unreadable)
    assert S._lock_holders(shm) == []


def test_a_creation_that_fails_raises_its_own_error_and_leaves_nothing(tmp_path, monkeypatch):
    def fail(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(S, "_build_store", fail)
    with pytest.raises(OSError, match="No space left"):
        S._create_store(tmp_path / "mlflow.db")
    assert _left(tmp_path) == []


def test_recreate_waits_for_a_held_store_only_as_long_as_it_is_told(tmp_path, monkeypatch):
    import time

    p = _tables(tmp_path / "mlflow.db")
    monkeypatch.setenv(S.STORE_WAIT_ENV, "3")
    monkeypatch.setattr(S, "store_holder", lambda path: "locked by X")
    holder = sqlite3.connect(p, isolation_level=None)
    holder.execute("begin exclusive")
    try:
        started = time.monotonic()
        with pytest.raises(S.StoreUnavailable) as exc:
            S._recreate(p, 0.0)
        assert time.monotonic() - started < 2.0  # each try waits for the lock no longer than the wait left
        assert str(exc.value).startswith(f"tracking store {p} is held by another process past the wait (0 s,")
    finally:
        holder.execute("rollback")
        holder.close()
    assert S.read_store(p, 1.0).tables == set()


def test_complete_needs_every_table_and_the_head_revision():
    from mlflow.store.db.utils import Base, _get_latest_schema_revision

    S._complete(S._StoreState(set(), 0, None))  # registers MLflow's tables
    tables, head = set(Base.metadata.tables), _get_latest_schema_revision()
    assert S._complete(S._StoreState(tables, 0, head))
    assert S._complete(S._StoreState(tables | {"alembic_version"}, 0, head))
    assert not S._complete(S._StoreState(tables, 0, "0ld"))
    assert not S._complete(S._StoreState(tables - {"runs"}, 0, head))


def test_a_busy_error_without_a_name_is_no_busy_store(tmp_path):
    calls = []

    def unnamed(timeout):
        calls.append(timeout)
        raise sqlite3.OperationalError("odd")  # no sqlite_errorname (not raised by SQLite)

    with pytest.raises(S.StoreUnavailable, match="cannot be used: odd;"):
        S._waiting(tmp_path / "s.db", unnamed, 10.0)
    assert calls == [1.0]


@pytest.mark.parametrize("read", ["read_store", "ensure_sqlite_store"])
def test_a_held_store_is_waited_for_as_long_as_the_caller_says(tmp_path, monkeypatch, read):
    import time

    p = _tables(tmp_path / "mlflow.db", "runs")
    monkeypatch.setenv(S.STORE_WAIT_ENV, "3")
    holder = sqlite3.connect(p, isolation_level=None)
    holder.execute("begin exclusive")
    try:
        started = time.monotonic()
        with pytest.raises(S.StoreUnavailable) as exc:
            S.read_store(p, 0.0) if read == "read_store" else S.ensure_sqlite_store(f"sqlite:///{p}", 0.0)
        assert time.monotonic() - started < 2.0
        assert str(exc.value).startswith(f"tracking store {p} is held by another process past the wait (0 s,")
    finally:
        holder.execute("rollback")
        holder.close()


class _FakeStore:
    """MLflow's SqlAlchemyStore as _build_store uses it (its tables made elsewhere), fast."""

    _engine_map: dict = {}
    register = True

    def __init__(self, uri, artifacts):
        self.engine = SimpleNamespace(dispose=lambda: None)
        if _FakeStore.register:
            _FakeStore._engine_map[uri] = self.engine


@pytest.mark.parametrize("register", [True, False])
def test_build_store_names_its_file_beside_the_store_and_forgets_its_engine(tmp_path, monkeypatch, register):
    import mlflow.store.tracking.sqlalchemy_store as sa

    monkeypatch.setattr(sa, "SqlAlchemyStore", _FakeStore)
    monkeypatch.setattr(_FakeStore, "register", register)
    monkeypatch.setattr(_FakeStore, "_engine_map", {"other": 1})
    p = tmp_path / "mlflow.db"
    tmp = S._build_store(p)
    assert tmp.parent == tmp_path and tmp.name.startswith(".mlflow.db.") and tmp.name.endswith(".creating")
    assert _FakeStore._engine_map == {"other": 1}
    assert S.read_store(tmp, 1.0).tables == set()  # the creation marker dropped last
    assert _left(tmp_path) == [tmp.name]
