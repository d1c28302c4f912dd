"""MLflow tracking: one experiment per world and source model, one parent run per model variant (a *cell*:
source, method, dim, seed) with nested runs per task.

Runs are found again by their tags, so a killed run that is started again continues the same MLflow runs instead
of creating duplicates; every (task, step) evaluation is marked done on its run and never logged twice.
Metric keys: ``{task}/{metric}/{lang}`` and ``{task}/{metric}/avg`` with MLflow's step = CPT step.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.core.paths import default_artifact_root, default_tracking_uri
from harness.core.processes import pid_alive
from harness.core.record import TAG, done_tag, tag
from harness.core.store_open import StoreUnavailable, describe_store_error, ensure_sqlite_store, sqlite_error
from harness.core.versions import run_tags

# MLflow 3's UI opens an experiment on the page of its kind: a model-training experiment opens on the runs table
# (an experiment without the tag opens on the GenAI overview, "Traces 0")
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# a saved view of the runs table: the experiment tag ``mlflow.sharedViewState.<key>`` holds its name and state (the
# columns, sort and filter) that ``#/experiments/<id>/runs?viewStateShareKey=<key>`` opens with; MLflow 3 lists it by
# name under the runs table's **Views** menu. ``harness leaderboard`` saves one view per task,
# ``harness-results-<task>``, and one of every task, ``harness-results`` (leaderboard.publish)
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
RESULTS_VIEW = "harness-results"


# the loggers MLflow configures when it is imported (each with a handler of its own to stderr, at INFO: "INFO
# mlflow.store.db.utils: Creating initial MLflow database tables...", alembic's migrations) -- not the harness's
# output, so they are held to warnings unless the command runs with --debug
MLFLOW_LOG_ENV = "MLFLOW_LOGGING_LEVEL"
MLFLOW_LOGGERS = ("mlflow", "alembic", "huey")


def quiet_mlflow_logs(debug: bool = False) -> None:
    """MLflow's own INFO lines off the harness's output (``debug``: on). Through ``MLFLOW_LOGGING_LEVEL``, which
    MLflow reads when it is imported, in this process and in the processes it starts (cell workers); on its loggers
    directly where it is imported already. A level the user set in that variable is kept (unless ``debug``)."""
    import logging
    import sys

    if debug:
        os.environ[MLFLOW_LOG_ENV] = "INFO"
    else:
        os.environ.setdefault(MLFLOW_LOG_ENV, "WARNING")
    if "mlflow" in sys.modules:
        level = os.environ[MLFLOW_LOG_ENV].upper()
        for name in MLFLOW_LOGGERS:
            logging.getLogger(name).setLevel(level)


def _owner() -> dict[str, str]:
    """The process that works on a run now (a run RUNNING whose process is gone was killed)."""
    import socket

    return {"pid": str(os.getpid()), "host": socket.gethostname()}


def _owner_gone(run: Any) -> bool:
    """Whether the process that owns a RUNNING run is a process of this machine that is no longer alive."""
    tags = run.data.tags
    pid, host = tags.get(tag("pid")), tags.get(tag("host"))
    return bool(pid and pid.isdigit() and host == _owner()["host"] and not pid_alive(int(pid)))


def _quote(v: str) -> str:
    return "'" + str(v).replace("'", "\\'") + "'"


class StoreClient:
    """MLflow's client on a SQLite store, every call as the client makes it; an error SQLite raised underneath
    (the store held by another process past MLflow's own wait, a full disk, no write access, a damaged file) is
    raised again as :class:`StoreUnavailable`, one line naming the file and the cause."""

    def __init__(self, client: Any, path: Path):
        self._client, self._path = client, path

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except Exception as exc:
                err = sqlite_error(exc)
                if err is None or getattr(err, "sqlite_errorname", None) is None:
                    raise
                raise StoreUnavailable(describe_store_error(self._path, err, f"in MLflow's {name}")) from exc

        call.__name__ = name
        return call


class Tracker:
    """The run record's store. ``client`` is MLflow's client, made at its first use (importing MLflow and its SQL
    store takes seconds); ``reader`` answers reads: on a SQLite store, :mod:`harness.core.store_view` (the same
    answers through sqlite3 alone), else the client. Every write goes through the client."""

    def __init__(self, uri: str | None = None):
        from harness.core.store_view import store_view

        self.uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
        ensure_sqlite_store(self.uri)
        self._client: Any = None
        self._view = store_view(self.uri, lambda: self.client)

    @property
    def client(self) -> Any:
        """MLflow's client (made at the first use); on a SQLite store, an error of the store itself (held past
        MLflow's wait, a full disk, no write access, damage) is :class:`StoreUnavailable`: one line, exit 2."""
        if self._client is None:
            import mlflow
            from mlflow.tracking import MlflowClient

            from harness.core.store_view import sqlite_path

            mlflow.set_tracking_uri(self.uri)
            path = sqlite_path(self.uri)
            client = MlflowClient(self.uri)
            self._client = client if path is None else StoreClient(client, path)
        return self._client

    @property
    def reader(self) -> Any:
        """What reads the store: the SQLite view where there is one, else MLflow's client."""
        return self._view if self._view is not None else self.client

    # -- experiments ---------------------------------------------------------------------------------------
    def experiment(self, name: str) -> str:
        """The experiment's id, created when absent; either way a model-training experiment (its kind tag is set on
        an experiment created before the tag was, the first time it is used again)."""
        exp = self.reader.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(exp.experiment_id)
            if EXPERIMENT_KIND_TAG not in (exp.tags or {}):
                self.client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return exp.experiment_id
        artifact_root = None
        if self.uri.startswith("sqlite:"):
            artifact_root = (default_artifact_root() / re.sub(r"[^\w.-]", "_", name)).as_uri()
        return self.client.create_experiment(name, artifact_location=artifact_root,
                                             tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})

    def save_runs_view(self, experiment_id: str, *, columns: list[str], order_by: str | None = None,
                       ascending: bool = False, search_filter: str = "", key: str = RESULTS_VIEW,
                       name: str | None = None) -> str:
        """Save a view of the experiment's runs table (``columns`` as the UI names them, e.g.
        ``metrics.`final/avg```, ``params.`task```) under ``key``, named ``name`` (default: the key) in the UI's
        **Views** menu; :func:`runs_table_url` opens it. Saving it again updates it and keeps its creation time.

        The tag holds MLflow 3's saved-view envelope, ``{"name", "createdAt", "updatedAt", "state"}`` with the
        runs table's state as a JSON string: the locked MLflow's UI (3.17) opens it from the share link and lists it
        under **Views**; a UI from before saved views reads only a plain state."""
        state = {"searchFilter": search_filter, "orderByKey": order_by or "attributes.start_time",
                 "orderByAsc": bool(ascending), "lifecycleFilter": "Active", "datasetsFilter": [],
                 "modelVersionFilter": "All Runs", "startTime": "ALL", "selectedColumns": list(columns),
                 "runsPinned": [], "runsHidden": [], "runsExpanded": {}, "runListHidden": False,
                 "viewMaximized": False}
        tag_key = SHARED_VIEW_PREFIX + key
        now = int(time.time() * 1000)
        created = now
        old = (self.client.get_experiment(experiment_id).tags or {}).get(tag_key)
        if old:
            try:
                created = int(json.loads(old)["createdAt"])
            except (ValueError, KeyError, TypeError):  # a plain state saved before the envelope
                pass
        envelope = {"name": name or key, "createdAt": created, "updatedAt": now, "state": json.dumps(state)}
        self.client.set_experiment_tag(experiment_id, tag_key, json.dumps(envelope))
        return key

    # -- runs ----------------------------------------------------------------------------------------------
    def find_runs(self, experiment_id: str, tags: dict[str, str]) -> list[Any]:
        flt = " and ".join(f"tags.`{tag(k)}` = {_quote(v)}" for k, v in tags.items())
        return self.reader.search_runs([experiment_id], filter_string=flt, max_results=1000,
                                       order_by=["attributes.start_time ASC"])

    def get_or_create_run(self, experiment_id: str, tags: dict[str, str], name: str,
                          parent_run_id: str | None = None) -> tuple[str, bool]:
        """The run with exactly these identity tags (created if absent). Returns (run_id, existed). On a SQLite
        store the look-up and the creation hold a lock beside the store, so two commands started together in one
        home find one run instead of creating two."""
        with self._creating():
            return self._get_or_create_run(experiment_id, tags, name, parent_run_id)

    @contextmanager
    def _creating(self) -> Iterator[None]:
        from harness.core.store_view import sqlite_path

        path = sqlite_path(self.uri)
        if path is None:
            yield
            return
        import fcntl

        try:
            f = open(path.parent / f".{path.name}.runs.lock", "a")  # noqa: SIM115 - closed below
        except OSError:  # a folder this process cannot write: MLflow's write says so (one line) in a moment
            yield
            return
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _get_or_create_run(self, experiment_id: str, tags: dict[str, str], name: str,
                           parent_run_id: str | None) -> tuple[str, bool]:
        found = self.find_runs(experiment_id, tags)
        if found:
            run = found[0]
            if run.info.status != "RUNNING":
                self.client.update_run(run.info.run_id, status="RUNNING")
            self.set_tags(run.info.run_id, _owner())
            return run.info.run_id, True
        all_tags = {tag(k): str(v) for k, v in {**run_tags(), **tags, **_owner()}.items()}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(experiment_id, tags=all_tags, run_name=name)
        return run.info.run_id, False

    def mark_orphans_killed(self, experiment_ids: list[str]) -> int:
        """Runs left RUNNING by a process of this machine that is gone (killed, crashed) become KILLED, so the
        status tells the truth; a run this command will resume becomes RUNNING again when its cell starts.
        Runs of a live process, of another machine or without an owner are left alone. Returns how many."""
        if not experiment_ids:
            return 0
        n = 0
        for run in self.reader.search_runs(experiment_ids, filter_string="attributes.status = 'RUNNING'",
                                           max_results=5000):
            if not _owner_gone(run):
                continue
            pid = run.data.tags[tag("pid")]
            self.client.set_tag(run.info.run_id, tag("error"), f"its process (pid {pid}) died before it finished")
            self.client.set_terminated(run.info.run_id, status="KILLED")
            n += 1
        return n

    def live_runs(self, tags: dict[str, str]) -> list[Any]:
        """The RUNNING runs, in any experiment, with these tags, but those whose process of this machine is gone
        (a run another command may be working on now)."""
        ids: list[str] = []
        token = None
        while True:
            page = self.reader.search_experiments(max_results=1000, page_token=token)
            ids.extend(e.experiment_id for e in page)
            token = page.token
            if not token:
                break
        flt = " and ".join(["attributes.status = 'RUNNING'",
                            *(f"tags.`{tag(k)}` = {_quote(v)}" for k, v in tags.items())])
        found = self.reader.search_runs(ids, filter_string=flt, max_results=1000) if ids else []
        return [run for run in found if not _owner_gone(run)]

    def finish(self, run_id: str) -> None:
        self.client.set_terminated(run_id, status="FINISHED")

    def fail(self, run_id: str, error: BaseException | str) -> None:
        msg = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self.client.set_tag(run_id, tag("error"), msg[:4900])
        self.client.set_terminated(run_id, status="FAILED")

    # -- data ----------------------------------------------------------------------------------------------
    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        existing = self.reader.get_run(run_id).data.params
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        for i in range(0, len(new), 100):
            self.client.log_batch(run_id, params=new[i: i + 100])

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, int(step)) for k, v in metrics.items()]
        for i in range(0, len(items), 500):
            self.client.log_batch(run_id, metrics=items[i: i + 500])

    def log_series(self, run_id: str, key: str, points: list[tuple[int, float]]) -> None:
        """A whole metric curve (step, value) in a few batched calls."""
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(key, float(v), ts, int(st)) for st, v in points]
        for i in range(0, len(items), 500):
            self.client.log_batch(run_id, metrics=items[i: i + 500])

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        for k, v in tags.items():
            self.client.set_tag(run_id, tag(k), str(v))

    def tags(self, run_id: str) -> dict[str, str]:
        return {k[len(TAG):]: v for k, v in self.reader.get_run(run_id).data.tags.items() if k.startswith(TAG)}

    def is_done(self, run_id: str, what: str) -> bool:
        return self.reader.get_run(run_id).data.tags.get(done_tag(what)) == "1"

    def mark_done(self, run_id: str, what: str) -> None:
        self.client.set_tag(run_id, done_tag(what), "1")

    def log_dict(self, run_id: str, obj: Any, artifact_file: str) -> None:
        with tempfile.TemporaryDirectory() as td:
            p = Path(td) / Path(artifact_file).name
            p.write_text(json.dumps(obj, indent=1, ensure_ascii=False, default=str))
            sub = str(Path(artifact_file).parent)
            self.client.log_artifact(run_id, str(p), None if sub == "." else sub)

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)


def column(kind: str, name: str) -> str:
    """A runs-table column as the MLflow UI names it: ``metrics.`final/avg```, ``params.`task```."""
    return f"{kind}.`{name}`"


# the UI's side bar switches between GenAI and model-training pages; a browser that never chose starts on GenAI
WORKFLOW = "workflowType=machine_learning"


def experiment_url(base: str, experiment_id: str) -> str:
    """The UI's page of an experiment (a model-training experiment opens on its runs table)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}?{WORKFLOW}"


def runs_table_url(base: str, experiment_id: str, view: str | None = None) -> str:
    """The UI's runs table of an experiment (``view``: a saved view, :meth:`Tracker.save_runs_view`)."""
    from urllib.parse import quote

    url = f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{WORKFLOW}"
    return f"{url}&viewStateShareKey={quote(view)}" if view else url


def run_url(base: str, experiment_id: str, run_id: str, tab: str = "") -> str:
    """The UI's page of a run (``tab``: ``model-metrics``, ``artifacts`` ...)."""
    tail = f"/{tab}" if tab else ""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}{tail}?{WORKFLOW}"


def artifact_url(base: str, experiment_id: str, run_id: str, path: str) -> str:
    """The UI's view of one artifact of a run (an HTML file is shown as the page)."""
    return run_url(base, experiment_id, run_id, f"artifactPath/{path}")


# -- checks before anything is created ---------------------------------------------------------------------
_SCHEMES = {"sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks", "databricks-uc", "uc"}


def check_tracking_uri(uri: str | None) -> str:
    """The tracking URI this command will use, checked cheaply before any store is created.

    A scheme MLflow does not know, a malformed URI, or a SQLite/file store whose folder is missing, not a folder or
    not writable raise :class:`HarnessError` (one line: the problem and what to do).
    """
    from urllib.parse import urlparse

    from harness.core.errors import HarnessError

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    hint = "give --tracking-uri sqlite:///PATH/mlflow.db, a file: folder or an http(s):// MLflow server"
    if "://" not in uri and ":" not in uri:
        target = Path(uri)  # a plain local path: MLflow's file store
        scheme = "file"
    else:
        scheme = urlparse(uri).scheme.lower()
        if scheme not in _SCHEMES:
            raise HarnessError(f"tracking URI {uri!r}: unknown scheme {scheme + '://' if scheme else '(none)'}; "
                               f"{hint}")
        target = None
    if scheme == "sqlite":
        if not uri.startswith("sqlite:///"):
            raise HarnessError(f"tracking URI {uri!r} is malformed; {hint}")
        path = uri[len("sqlite:///"):]
        if path in {"", ":memory:"}:
            raise HarnessError(f"tracking URI {uri!r} names no database file; {hint}")
        target = Path(path)
        if target.is_dir():
            raise HarnessError(f"tracking URI {uri!r}: {target} is a folder, not a database file; {hint}")
        folder = target.parent
    elif scheme == "file":
        if target is None:
            target = Path(urlparse(uri).path)
        if target.exists() and not target.is_dir():
            raise HarnessError(f"tracking URI {uri!r}: {target} is a file, not a folder; {hint}")
        folder = target if target.exists() else target.parent
    elif scheme in {"http", "https"}:
        parsed = urlparse(uri)
        try:
            _ = parsed.port
        except ValueError:
            raise HarnessError(f"tracking URI {uri!r} has a bad port; {hint}") from None
        if not parsed.hostname:
            raise HarnessError(f"tracking URI {uri!r} names no host; {hint}")
        return uri
    else:
        return uri
    if not folder.is_dir():
        raise HarnessError(f"tracking URI {uri!r}: folder {folder} does not exist; create it or {hint}")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise HarnessError(f"tracking URI {uri!r}: {target if target.exists() else folder} is not writable; "
                           f"fix its permissions or {hint}")
    return uri


def check_tracking_reachable(uri: str, timeout: float = 5.0) -> None:
    """An http(s) tracking server must answer before a run starts (a run that cannot log is lost work)."""
    import urllib.request

    from harness.core.errors import HarnessError

    if not uri.startswith(("http://", "https://")):
        return
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout).close()
    except Exception as exc:  # noqa: BLE001 - any failure to connect means the same thing to the user
        reason = getattr(exc, "reason", exc)
        raise HarnessError(f"tracking server {uri} does not answer ({reason}); start it (`harness ui` serves "
                           "one on 127.0.0.1) or give another --tracking-uri") from None
