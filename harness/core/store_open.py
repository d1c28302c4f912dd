"""The SQLite tracking store opened safely: created atomically (under a temporary name, then linked into place),
waited for while another process holds it (saying what holds it), recreated only when provably never completed, and
never deleted or truncated once it may hold anything; every SQLite error on it is one line,
:class:`StoreUnavailable` (exit 2).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.paths import default_artifact_root

# a store is waited for this long (seconds) while another process holds it (a lock, a journal being rolled back)
STORE_WAIT_ENV = "HARNESS_STORE_WAIT"
STORE_WAIT_DEFAULT = 120.0
STORE_SAY_EVERY = 5.0  # a line on stderr this often while waiting
# the table the harness's creation of a store writes first and drops last, before the store is linked into place:
# a file that holds it is a creation that never completed (nothing else ever writes it)
CREATION_MARKER = "harness_store_creating"
# what SQLite says (the extended result codes' names, sqlite3.Error.sqlite_errorname) of a store held by another
# process: a lock, or a journal that another connection is rolling back
_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")


class StoreUnavailable(HarnessError):
    """The tracking store cannot be used now (held by another process past the wait, damaged, unwritable, a disk
    full): one line naming the file and the cause; nothing in it was changed by the harness."""


def store_wait() -> float:
    """Seconds a command waits for a store another process holds (``HARNESS_STORE_WAIT``, default 120)."""
    raw = os.environ.get(STORE_WAIT_ENV, "")
    try:
        return max(0.0, float(raw)) if raw.strip() else STORE_WAIT_DEFAULT
    except ValueError:
        raise HarnessError(f"{STORE_WAIT_ENV}={raw!r}: give the seconds to wait for a tracking store another "
                           "process holds (a number, e.g. 120)") from None


def sqlite_error(exc: BaseException | None) -> Any:
    """The :class:`sqlite3.Error` behind an exception (MLflow's and SQLAlchemy's wrap it), or None."""
    import sqlite3

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, sqlite3.Error):
            return exc
        orig = getattr(exc, "orig", None)
        if isinstance(orig, sqlite3.Error):
            return orig
        exc = exc.__cause__ or exc.__context__
    return None


def _lock_holders(path: Path) -> list[int]:
    """The processes (other than this one) holding a POSIX lock on the store or its shared-memory file, from the
    kernel's lock table (Linux); empty where it cannot be read."""
    ids = set()
    for p in (path, Path(f"{path}-shm")):
        try:
            st = p.stat()
        except OSError:
            continue
        ids.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    pids: list[int] = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return pids
    for line in lines:
        parts = line.split()
        if "->" in parts:  # a lock that waits for another one
            continue
        try:
            pid = int(parts[4])
            major, minor, ino = parts[5].split(":")
            key = (int(major, 16), int(minor, 16), int(ino))
        except (IndexError, ValueError):
            continue
        if key in ids and pid != os.getpid() and pid > 0 and pid not in pids:
            pids.append(pid)
    return pids


def _describe_pid(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    return f"pid {pid} ({cmd[:80]})" if cmd else f"pid {pid}"


def store_holder(path: Path) -> str:
    """What holds the store, in words: the processes that lock it, and a journal a writer left."""
    pids = _lock_holders(path)
    who = ", ".join(_describe_pid(p) for p in pids[:3]) if pids else "another process"
    journal = [p.name for p in (Path(f"{path}-journal"), Path(f"{path}-wal")) if p.exists()]
    return f"locked by {who}" + (f" ({' and '.join(journal)} present)" if journal else "")


def describe_store_error(path: Path, err: Any, doing: str = "") -> str:
    """One line for a SQLite error on the store: the file, what SQLite said, what to do."""
    name = getattr(err, "sqlite_errorname", "") or ""
    said = f"{err} ({name})" if name else str(err)
    at = f" {doing}" if doing else ""
    if name.startswith(_BUSY):
        return (f"tracking store {path} is busy{at}: {store_holder(path)}; let that process finish (or stop it), "
                f"then run the same command again (it waits up to {STORE_WAIT_ENV} seconds)")
    if name in ("SQLITE_READONLY_ROLLBACK", "SQLITE_READONLY_RECOVERY") or (
            name.startswith("SQLITE_READONLY") and Path(f"{path}-journal").exists()):
        return (f"tracking store {path} has a journal left by a writer that was killed ({path.name}-journal) and "
                f"SQLite can roll it back only with write access to {path.parent}: make it writable and run the "
                f"same command again; nothing was changed (keep the journal: it holds the pages to restore)")
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")):
        return (f"tracking store {path} cannot be written{at}: {said}; fix the permissions of it and of "
                f"{path.parent} (or give another --tracking-uri), then run the same command again")
    if name.startswith("SQLITE_FULL") or "disk is full" in str(err):
        return (f"tracking store {path}: the disk is full{at} ({said}); the write was rolled back and nothing "
                f"logged before is lost: free space, then run the same command again to resume")
    if name.startswith("SQLITE_IOERR"):
        return (f"tracking store {path} could not be written{at} ({said}: the disk is full, a file-size limit "
                f"was reached or the disk fails); SQLite rolls the write back and nothing logged before is lost: "
                f"free space or fix the disk, then run the same command again to resume")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return (f"tracking store {path} is damaged ({said}); the harness changes nothing in it: keep a copy, then "
                f"recover it (`sqlite3 {path.name} .recover`) or restore a backup")
    return (f"tracking store {path} cannot be used{at}: {said}; nothing was changed in it; run the same command "
            f"again once the cause is fixed")


class _StoreState:
    """What a read of the store's catalogue found."""

    def __init__(self, tables: set[str], runs: int, revision: str | None):
        self.tables, self.runs, self.revision = tables, runs, revision

    @property
    def never_completed(self) -> bool:
        """Provably never completed: no table at all, or the harness's creation marker still in it."""
        return not self.tables or CREATION_MARKER in self.tables


def _read_once(path: Path, timeout: float) -> _StoreState:
    """The store's tables, runs and schema revision, in one read transaction of a read-write connection: a hot
    journal a killed writer left is rolled back by SQLite as it opens (what MLflow's client does too)."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=timeout, isolation_level=None)
    try:
        con.execute("begin")
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        runs = int(con.execute("select count(*) from runs").fetchone()[0]) if "runs" in tables else 0
        revision = None
        if "alembic_version" in tables:
            row = con.execute("select version_num from alembic_version").fetchone()
            revision = str(row[0]) if row else None
        con.execute("commit")
        return _StoreState(tables, runs, revision)
    finally:
        con.close()


def _waiting(path: Path, attempt: Any, wait: float | None = None) -> Any:
    """``attempt(timeout)`` until it does not fail on a store another process holds (SQLite's busy/locked), saying
    so on stderr every :data:`STORE_SAY_EVERY` seconds; past the wait, :class:`StoreUnavailable` in one line.
    Any other SQLite error is :class:`StoreUnavailable` at once (a damaged store, no write access)."""
    import sqlite3
    import sys

    wait = store_wait() if wait is None else wait
    started = time.monotonic()
    said = 0
    while True:
        waited = time.monotonic() - started
        try:
            return attempt(max(0.05, min(1.0, wait - waited)))
        except sqlite3.Error as exc:
            name = getattr(exc, "sqlite_errorname", "") or ""
            if not name.startswith(_BUSY):
                raise StoreUnavailable(describe_store_error(path, exc)) from None
            waited = time.monotonic() - started
            if waited >= wait:
                raise StoreUnavailable(f"tracking store {path} is held by another process past the wait "
                                       f"({wait:.0f} s, {STORE_WAIT_ENV}): {store_holder(path)}; nothing was "
                                       "changed: run the same command again once it has let go") from None
            if waited >= (said + 1) * STORE_SAY_EVERY:
                said = int(waited // STORE_SAY_EVERY)
                print(f"waiting for tracking store {path}: {store_holder(path)} ({waited:.0f} s of "
                      f"{wait:.0f} s)", file=sys.stderr, flush=True)
            time.sleep(0.05)


def read_store(path: Path, wait: float | None = None) -> _StoreState:
    """The state of the SQLite store at ``path``, waited for while another process holds it."""
    return _waiting(path, lambda timeout: _read_once(path, timeout), wait)


def store_runs(path: Path) -> int:
    """The rows of a SQLite MLflow store's runs table (0 when it has none), read with sqlite3 alone (waited for
    while another process holds it); :class:`StoreUnavailable` when it cannot be read -- never "no runs"."""
    return read_store(path).runs


def store_state(path: Path) -> tuple[bool, int]:
    """(complete, runs) of a SQLite MLflow store: complete when every table MLflow expects exists and its schema is
    at MLflow's head revision; runs counts the rows of its runs table (0 when there is none). An unreadable
    store raises :class:`StoreUnavailable` (it is never taken for an empty one)."""
    state = read_store(path)
    return _complete(state), state.runs


def _complete(state: _StoreState) -> bool:
    import mlflow.store.model_registry.dbmodels.models  # noqa: F401 - registers the registry's tables
    import mlflow.store.tracking.dbmodels.models  # noqa: F401 - registers the tracking tables
    from mlflow.store.db.utils import Base, _get_latest_schema_revision

    return set(Base.metadata.tables) <= state.tables and state.revision == _get_latest_schema_revision()


def _build_store(path: Path) -> Path:
    """A complete store under a temporary name in ``path``'s folder: the creation marker first, MLflow's tables
    and migrations, the marker dropped last. Returns the temporary file."""
    import sqlite3

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".creating", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    con = sqlite3.connect(tmp, isolation_level=None)
    try:
        con.execute(f"create table {CREATION_MARKER} (pid integer, started real)")
        con.execute(f"insert into {CREATION_MARKER} values (?, ?)", (os.getpid(), time.time()))
    finally:
        con.close()
    tmp_uri = f"sqlite:///{tmp}"
    store = SqlAlchemyStore(tmp_uri, default_artifact_root().as_uri())
    store.engine.dispose()
    SqlAlchemyStore._engine_map.pop(tmp_uri, None)
    con = sqlite3.connect(tmp, isolation_level=None)
    try:
        con.execute(f"drop table {CREATION_MARKER}")
    finally:
        con.close()
    return tmp


def _create_store(path: Path) -> None:
    """Create and migrate a store under a temporary name in the same folder, then link it into place (never over
    an existing file: a store another process created first wins)."""
    tmp = None
    try:
        tmp = _build_store(path)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        if tmp is not None:  # (the harness's own temporary copy, never linked or linked already)
            for p in (tmp, Path(f"{tmp}-journal")):
                p.unlink(missing_ok=True)


def _recreate(path: Path, wait: float) -> bool:
    """Replace a store that was never completed by a new one, holding SQLite's exclusive lock on it while it is
    checked again and replaced (so no other process writes it or replaces it meanwhile). False when it changed
    under us (another process completed or replaced it): the caller looks again."""
    import sqlite3
    import sys

    before = path.stat()

    def lock(timeout: float) -> Any:
        con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=timeout, isolation_level=None)
        try:
            con.execute("begin exclusive")
        except BaseException:
            con.close()
            raise
        return con

    con = _waiting(path, lock, wait)
    try:
        now = path.stat()
        if (now.st_ino, now.st_dev) != (before.st_ino, before.st_dev):
            return False
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        state = _StoreState(tables, 0, None)
        if not state.never_completed:
            return False
        why = "its creation was cut short" if tables else "it holds no table"
        print(f"tracking store {path} was never completed ({why}); creating it anew", file=sys.stderr, flush=True)
        tmp = _build_store(path)
        try:
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return True
    finally:
        try:
            con.execute("rollback")
        except sqlite3.Error:
            pass
        con.close()


def ensure_sqlite_store(uri: str, wait: float | None = None) -> None:
    """The SQLite tracking store of ``uri``, ready for MLflow's client, without ever deleting or truncating one that
    may hold anything.

    * absent: created atomically (under a temporary name, then linked into place);
    * held by another process (a lock, a journal being rolled back): waited for, saying so every 5 s, then refused
      in one line naming the file and what holds it (:class:`StoreUnavailable`, exit 2);
    * a hot journal left by a killed writer: rolled back by SQLite when the store is opened read-write, as MLflow's
      client does (the harness never deletes a journal);
    * provably never completed (no table at all, or the harness's creation marker in it): recreated, in one line;
    * damaged, unwritable, or with tables but no runs and not at MLflow's schema: refused in one line, unchanged.
    A store with runs is MLflow's to judge (and to upgrade)."""
    from harness.core.store_view import SCHEMA_REVISION, sqlite_path

    path = sqlite_path(uri)
    if path is None:
        return
    wait = store_wait() if wait is None else wait
    for leftover in path.parent.glob(f".{path.name}.*.creating"):  # a creation killed before its link
        try:
            if time.time() - leftover.stat().st_mtime > 600:
                leftover.unlink()
        except OSError:
            pass
    for _ in range(20):
        if not path.exists():
            journals = [p for p in (Path(f"{path}-journal"), Path(f"{path}-wal")) if p.exists()]
            if journals:
                raise StoreUnavailable(f"tracking store {path} is missing but its journal {journals[0].name} is "
                                       "there: restore the store beside it (the journal belongs to it), or move "
                                       "the journal aside to start a new store")
            _create_store(path)
            return
        state = read_store(path, wait)
        if state.runs:
            return  # runs in it: MLflow's to judge (its schema revisions are not even read: that takes a second)
        if state.never_completed:
            if _recreate(path, wait):
                return
            continue  # changed meanwhile: look again
        if "runs" in state.tables and state.revision == SCHEMA_REVISION:
            return  # the schema the harness was tested with (a missing table MLflow's client creates itself)
        if _complete(state):
            return
        missing = "its schema is not at MLflow's head revision" if state.revision else "it has no schema revision"
        raise StoreUnavailable(f"tracking store {path} holds no runs but is incomplete ({missing}) and was not made "
                               f"by the harness, which changes nothing in it: upgrade it (`mlflow db upgrade "
                               f"sqlite:///{path}`) or move it aside to start a new store")
    raise StoreUnavailable(f"tracking store {path} keeps changing while it is opened; run the same command again")

