"""A read-only view of a SQLite MLflow store through :mod:`sqlite3` alone.

Every harness command starts by reading the store: which cells are finished, what the board shows. Through MLflow's
client that costs importing MLflow and its SQL store (about 2.5 s) and a SQLAlchemy session a search (tens of
milliseconds each, about 60 of them for the main job's 30 cells); a run with nothing to compute spent most of its
time there. :class:`SqliteStoreView` answers the client's read calls the harness makes -- experiments by name or
all of them, runs searched by equality on tags and attributes, a run, a metric's history -- with plain SQL on the
same file, and gives what the client gives: the same runs in the same order, the same latest metrics, params and
tags (:mod:`tests.test_store_view` compares the two on a store the harness wrote). Writes always go through
MLflow's client (:class:`harness.core.tracking.Tracker` opens it at its first write).

The view is used only on a store at the schema revision it was checked against (:data:`SCHEMA_REVISION`, the locked
MLflow's head: a test fails when the lock moves MLflow's schema); any other store, any filter or ordering it does
not parse and any call it does not define go to MLflow's client, so a caller can never get another answer from
the view than from the client -- only a faster one.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the alembic revision of the locked MLflow's SQL schema (mlflow.store.db.utils._get_latest_schema_revision()):
# the schema this view's SQL was written for and tested against
SCHEMA_REVISION = "dc11669786a5"
DEFAULT_WORKSPACE = "default"

# the filters the view answers itself: ``kind.key = 'value'`` clauses joined by AND, each form one that MLflow's own
# parser (mlflow.utils.search_utils.SearchUtils.parse_search_filter) reads the same way -- its entity names exactly
# as it spells them (``TAGS.`a``` is refused there), keys of ASCII words or backquoted, values single-quoted without
# quotes or backslashes inside; anything else goes to the client (tests.test_store_view checks both parsers agree)
_SPACE = "[ \t\r\n]*"
_CLAUSE = re.compile(_SPACE + r"(?P<kind>tags|tag|attributes|attribute|attr|run)\."
                     r"(?:`(?P<quoted>[^`]+)`|(?P<plain>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*))"
                     + _SPACE + "=" + _SPACE + r"'(?P<value>[^'\\]*)'" + _SPACE)
_AND = re.compile(r"and\b", re.IGNORECASE)
_ORDER = re.compile(r"^\s*(?:attributes|attribute|attr|run)\.(?:`start_time`|start_time)(?:\s+(?P<dir>(?i:ASC|DESC)))?"
                    r"\s*$")
# the run attributes MLflow searches by string equality (RunInfo.get_searchable_attributes() less the times), as
# the columns of its runs table; ``lifecycle_stage`` is not one (MLflow's parser refuses it)
_ATTRIBUTES = {"status": "status", "run_id": "run_uuid", "run_name": "name", "user_id": "user_id",
               "artifact_uri": "artifact_uri"}
# the order of a search's runs, as MLflow's SQL store sorts them: the ordered column (start time, NULLs last, in the
# asked direction), then the run id -- the tie-break that makes the order of runs started in the same millisecond
# one order (tests.test_store_view builds its expected order from this)
RUN_TIEBREAK = "run_uuid"


def run_order(direction: str) -> str:
    """The ``order by`` of a search of runs by start time (``asc`` or ``desc``)."""
    return f"start_time is null, start_time {direction}, {RUN_TIEBREAK}"


class Unsupported(Exception):
    """A call the view does not answer itself (MLflow's client answers it)."""


# -- what the client's entities carry that the harness reads ---------------------------------------------------
@dataclass(frozen=True)
class RunInfo:
    run_id: str
    experiment_id: str
    run_name: str | None
    user_id: str | None
    status: str
    start_time: int | None
    end_time: int | None
    lifecycle_stage: str
    artifact_uri: str | None


@dataclass(frozen=True)
class RunData:
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    info: RunInfo
    data: RunData


@dataclass(frozen=True)
class Experiment:
    experiment_id: str
    name: str
    artifact_location: str | None
    lifecycle_stage: str
    tags: dict[str, str]
    creation_time: int | None
    last_update_time: int | None


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    timestamp: int
    step: int


class PagedList(list):
    """A page of results and the token of the next page (None: the last page), as the client returns them."""

    def __init__(self, items: list[Any], token: str | None):
        super().__init__(items)
        self.token = token


def _value(value: float, is_nan: Any) -> float:
    return math.nan if is_nan else float(value)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI (None: another store, or an in-memory one)."""
    if not uri.startswith("sqlite:///") or uri[len("sqlite:///"):] in {"", ":memory:"}:
        return None
    return Path(uri[len("sqlite:///"):])


def schema_revision(path: Path) -> str | None:
    """The alembic revision a SQLite MLflow store's schema is at (None: no store, or not one MLflow made)."""
    if not path.is_file():
        return None
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = con.execute("select version_num from alembic_version").fetchone()
        return str(row[0]) if row else None
    except sqlite3.Error:
        return None
    finally:
        con.close()


def parse_filter(flt: str | None) -> list[tuple[str, str, str]]:
    """``tags.`k` = 'v' and attributes.status = 'v' ...`` as ``[(kind, key, value)]`` (kind ``tag`` or
    ``attribute``); :class:`Unsupported` for anything else (another comparator, params, metrics, quotes or
    backslashes inside a value), which MLflow's client then parses."""
    out: list[tuple[str, str, str]] = []
    text, pos = (flt or "").strip(), 0
    while pos < len(text):
        if out:
            m = _AND.match(text, pos)
            if m is None:
                raise Unsupported(flt)
            pos = m.end()
        m = _CLAUSE.match(text, pos)
        if m is None:
            raise Unsupported(flt)
        key = m.group("quoted") or m.group("plain")
        if m.group("kind") in ("tags", "tag"):
            out.append(("tag", key, m.group("value")))
        elif key in _ATTRIBUTES:
            out.append(("attribute", _ATTRIBUTES[key], m.group("value")))
        else:
            raise Unsupported(flt)
        pos = m.end()
    return out


def _or_client(method: Callable[..., Any]) -> Callable[..., Any]:
    """A read of the view that MLflow's client answers instead when SQLite raises anything (a journal a killed
    writer left, which a read-only connection cannot roll back: "attempt to write a readonly database"; a lock held
    past the wait; a table missing): the client opens the store read-write and recovers it as it does."""
    name = method.__name__

    @functools.wraps(method)
    def read(self: SqliteStoreView, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error:
            self.close()
            return getattr(self.client, name)(*args, **kwargs)

    return read


def _in_snapshot(method: Callable[..., Any]) -> Callable[..., Any]:
    """A method whose statements all read one snapshot of the store (:meth:`SqliteStoreView._snapshot`)."""

    @functools.wraps(method)
    def read(self: SqliteStoreView, *args: Any, **kwargs: Any) -> Any:
        with self._snapshot():
            return method(self, *args, **kwargs)

    return read


class SqliteStoreView:
    """Read-only answers to the MLflow client's read calls on the SQLite store at ``path`` (see the module's
    docstring); ``client`` makes MLflow's client, which answers what the view does not (it is made only then)."""

    def __init__(self, path: Path, client: Callable[[], Any]):
        self.path = Path(path)
        self._client_factory = client
        self._lock = threading.RLock()
        self._depth = 0
        self._con: sqlite3.Connection | None = None
        self._pid = 0

    # -- plumbing ------------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        return self._client_factory()

    def __getattr__(self, name: str) -> Any:  # every call the view does not define: MLflow's client
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.client, name)

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction around what runs inside it (nested: the outermost one): the statements of one
        answer see one state of the store, never two commits of a writer mixed."""
        with self._lock:
            if self._con is None or self._pid != os.getpid():  # (a connection is not carried over a fork)
                # autocommit outside a snapshot: each answer sees what was committed before it began
                self._con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30,
                                            isolation_level=None, check_same_thread=False)
                self._pid = os.getpid()
                self._depth = 0
            con = self._con
            if self._depth == 0:
                con.execute("begin")
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and con.in_transaction:
                    try:
                        con.execute("commit")
                    except sqlite3.Error:
                        self._drop()

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._snapshot():
            assert self._con is not None
            return self._con.execute(sql, args).fetchall()

    def _drop(self) -> None:
        if self._con is not None and self._pid == os.getpid():
            try:
                self._con.close()
            except sqlite3.Error:
                pass
        self._con = None
        self._depth = 0

    def close(self) -> None:
        with self._lock:
            self._drop()

    # -- experiments ---------------------------------------------------------------------------------------
    @_in_snapshot
    def _experiments(self, where: str, args: tuple[Any, ...]) -> list[Experiment]:
        rows = self._rows("select experiment_id, name, artifact_location, lifecycle_stage, creation_time, "
                          f"last_update_time from experiments where workspace = ? and ({where}) "
                          "order by experiment_id", (DEFAULT_WORKSPACE, *args))
        tags: dict[str, dict[str, str]] = {}
        if rows:
            marks = ",".join("?" * len(rows))
            for key, value, exp_id in self._rows(f"select key, value, experiment_id from experiment_tags "
                                                 f"where experiment_id in ({marks})", tuple(r[0] for r in rows)):
                tags.setdefault(str(exp_id), {})[key] = value
        return [Experiment(str(r[0]), r[1], r[2], r[3], tags.get(str(r[0]), {}), r[4], r[5]) for r in rows]

    @_or_client
    def get_experiment_by_name(self, name: str) -> Experiment | None:
        found = self._experiments("name = ?", (name,))
        return found[0] if found else None

    @_or_client
    def get_experiment(self, experiment_id: str) -> Experiment:
        found = self._experiments("experiment_id = ?", (int(experiment_id),))
        if not found:
            return self.client.get_experiment(experiment_id)  # (MLflow's error for an unknown id)
        return found[0]

    @_or_client
    def search_experiments(self, view_type: Any = None, max_results: int | None = None, filter_string: Any = None,
                           order_by: Any = None, page_token: Any = None) -> Any:
        """The active experiments (ordered by id; the harness sorts them itself); any argument but
        ``max_results`` goes to the client."""
        if view_type is not None or filter_string or order_by or page_token:
            return self.client.search_experiments(view_type=view_type, max_results=max_results or 1000,
                                                  filter_string=filter_string, order_by=order_by,
                                                  page_token=page_token)
        found = self._experiments("lifecycle_stage = 'active'", ())
        if max_results is not None and len(found) > max_results:
            return self.client.search_experiments(max_results=max_results)
        return PagedList(found, None)

    # -- runs ----------------------------------------------------------------------------------------------
    @_in_snapshot
    def _runs(self, where: str, args: tuple[Any, ...], order: str) -> list[Run]:
        rows = self._rows("select run_uuid, experiment_id, name, user_id, status, start_time, end_time, "
                          f"lifecycle_stage, artifact_uri from runs where {where} order by {order}", args)
        if not rows:
            return []
        ids = tuple(r[0] for r in rows)
        metrics: dict[str, dict[str, float]] = {i: {} for i in ids}
        params: dict[str, dict[str, str]] = {i: {} for i in ids}
        tags: dict[str, dict[str, str]] = {i: {} for i in ids}
        for start in range(0, len(ids), 500):  # (SQLite's bound-parameter limit)
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for key, value, is_nan, run in self._rows(
                    f"select key, value, is_nan, run_uuid from latest_metrics where run_uuid in ({marks})", chunk):
                metrics[run][key] = _value(value, is_nan)
            for key, value, run in self._rows(f"select key, value, run_uuid from params where run_uuid in ({marks})",
                                              chunk):
                params[run][key] = value
            for key, value, run in self._rows(f"select key, value, run_uuid from tags where run_uuid in ({marks})",
                                              chunk):
                tags[run][key] = value
        return [Run(RunInfo(r[0], str(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], r[8]),
                    RunData(metrics[r[0]], params[r[0]], tags[r[0]])) for r in rows]

    @_or_client
    def search_runs(self, experiment_ids: list[str] | str, filter_string: str = "", run_view_type: Any = None,
                    max_results: int = 1000, order_by: list[str] | None = None, page_token: str | None = None) -> Any:
        """The active runs of the experiments that match ``filter_string``, in the client's order (start time
        descending, or as ``order_by`` names it, then run id); pages of ``max_results``."""
        ids = [experiment_ids] if isinstance(experiment_ids, str) else list(experiment_ids)
        try:
            clauses = parse_filter(filter_string)
            if run_view_type is not None:
                raise Unsupported("run_view_type")
            direction = "desc"
            for clause in order_by or []:
                m = _ORDER.match(clause)
                if m is None or len(order_by or []) > 1:
                    raise Unsupported(clause)
                direction = (m.group("dir") or "asc").lower()
            offset = int(page_token) if page_token else 0
        except (Unsupported, ValueError):
            return self.client.search_runs(ids, filter_string=filter_string,
                                           **({"run_view_type": run_view_type} if run_view_type is not None else {}),
                                           max_results=max_results, order_by=order_by, page_token=page_token)
        if not ids:
            return PagedList([], None)
        where = [f"experiment_id in ({','.join('?' * len(ids))})", "lifecycle_stage = 'active'"]
        args: list[Any] = [int(i) for i in ids]
        for kind, key, value in clauses:
            if kind == "tag":
                where.append("run_uuid in (select run_uuid from tags where key = ? and value = ?)")
                args += [key, value]
            else:
                where.append(f"{key} = ?")
                args.append(value)
        # (start_time is never NULL in a run MLflow created; the client sorts NULLs last, as SQLite's DESC does)
        runs = self._runs(" and ".join(where), tuple(args),
                          f"{run_order(direction)} limit {int(max_results) + 1} offset {offset}")
        if len(runs) > max_results:
            return PagedList(runs[:max_results], str(offset + max_results))
        return PagedList(runs, None)

    @_or_client
    def get_run(self, run_id: str) -> Run:
        found = self._runs("run_uuid = ?", (run_id,), "run_uuid")
        if not found:
            return self.client.get_run(run_id)  # (MLflow's error for an unknown run)
        return found[0]

    @_or_client
    def get_metric_history(self, run_id: str, key: str) -> list[Metric]:
        """Every logged value of a run's metric, in the client's order (timestamp, step, value)."""
        with self._snapshot():
            rows = self._rows("select key, value, is_nan, timestamp, step from metrics where run_uuid = ? and "
                              "key = ? order by timestamp, step, value", (run_id, key))
            known = bool(rows) or bool(self._rows("select 1 from runs where run_uuid = ?", (run_id,)))
        if not known:
            return self.client.get_metric_history(run_id, key)  # (MLflow's error for an unknown run)
        return [Metric(r[0], _value(r[1], r[2]), int(r[3]), int(r[4])) for r in rows]


def workspaces_enabled() -> bool:
    """Whether MLflow's workspaces are on (``MLFLOW_ENABLE_WORKSPACES``, read as MLflow reads a boolean setting):
    the client then scopes every read to the active workspace, which the view does not know, so the client reads.
    A value MLflow would not take as false counts as on (the client then says what is wrong with it)."""
    value = os.environ.get("MLFLOW_ENABLE_WORKSPACES")
    return value is not None and value.lower() not in ("false", "0")


def store_view(uri: str, client: Callable[[], Any]) -> SqliteStoreView | None:
    """The view of the store at ``uri`` when it is a SQLite store at :data:`SCHEMA_REVISION` and MLflow's
    workspaces are off (None otherwise: the client reads it). ``HARNESS_STORE_VIEW=0`` turns the view off."""
    if os.environ.get("HARNESS_STORE_VIEW", "1") == "0" or workspaces_enabled():
        return None
    path = sqlite_path(uri)
    if path is None or schema_revision(path) != SCHEMA_REVISION:
        return None
    return SqliteStoreView(path, client)
