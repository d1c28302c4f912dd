"""The SQLite store view (:mod:`harness.core.store_view`) answers every read the harness makes of a SQLite store as
MLflow's client answers it: the same experiments, the same runs in the same order (ties of start time included),
the same latest metrics (NaN, infinities, a value logged for an earlier step after a later one), params and tags,
the same pages and metric histories. What it does not parse goes to the client. It is written for the locked MLflow's
schema, and a store at another revision is read by the client. A command that only reads imports no MLflow."""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.core.store_open import ensure_sqlite_store
from harness.core.store_view import (
    SCHEMA_REVISION,
    SqliteStoreView,
    Unsupported,
    parse_filter,
    run_order,
    store_view,
)
from harness.core.tracking import Tracker

REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000


def test_the_view_is_written_for_the_schema_of_the_locked_mlflow():
    from mlflow.store.db.utils import _get_latest_schema_revision

    assert _get_latest_schema_revision() == SCHEMA_REVISION  # a new MLflow: check the view's SQL, then move this


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store written through MLflow's client: three experiments (one deleted), runs with tied start times, every
    status, a deleted run, metrics at several steps (NaN, infinities, a step logged out of order), params, tags
    whose values hold quotes' neighbours (`` and ``, unicode)."""
    folder = tmp_path_factory.mktemp("store-view")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    ensure_sqlite_store(uri)
    client = MlflowClient(uri)
    one = client.create_experiment("exp one", tags={"mlflow.experimentKind": "custom_model_development", "k": "v"})
    two = client.create_experiment("exp two")
    gone = client.create_experiment("gone")
    client.delete_experiment(gone)
    runs = []
    starts = [T0 + 5, T0 + 1, T0 + 5, T0 + 3, T0 + 5, T0 + 2, T0 + 4]  # three runs share a start time
    for i, start in enumerate(starts):
        tags = {"harness.kind": "cell" if i % 2 == 0 else "task", "harness.cell": f"key{i % 3}",
                "harness.note": "a and b" if i == 1 else "naïve — ✓", "mlflow.runName": f"r{i}"}
        run = client.create_run(one, start_time=start, tags=tags, run_name=f"r{i}")
        rid = run.info.run_id
        runs.append(rid)
        client.log_param(rid, "method", f"m{i % 2}")
        client.log_param(rid, "long", "x" * 500)
        client.log_metric(rid, "loss", 1.0 / (i + 1), timestamp=T0 + 10, step=2)
        client.log_metric(rid, "loss", 9.0, timestamp=T0 + 20, step=1)  # an earlier step, logged later
        client.log_metric(rid, "loss", 0.5, timestamp=T0 + 10, step=2)  # a tie of timestamp and step
        client.log_metric(rid, "odd", [math.nan, math.inf, -math.inf, 0.25][i % 4], timestamp=T0 + 30, step=0)
        if i % 3 == 0:
            client.set_terminated(rid, status="FINISHED", end_time=start + 100)
        elif i % 3 == 1:
            client.set_terminated(rid, status="FAILED")
    client.delete_run(runs[5])
    for j in range(2):
        client.create_run(two, start_time=T0 + j, tags={"harness.kind": "cell", "harness.cell": "key0"})
    return {"uri": uri, "client": client, "one": one, "two": two, "gone": gone, "runs": runs,
            "path": folder / "mlflow.db"}


def _float(v: float) -> str:
    return repr(float(v))


def _run(r) -> tuple:
    i = r.info
    return (i.run_id, str(i.experiment_id), i.run_name, i.user_id, i.status, i.start_time, i.end_time,
            i.lifecycle_stage, i.artifact_uri, {k: _float(v) for k, v in r.data.metrics.items()},
            dict(r.data.params), dict(r.data.tags))


def _exp(e) -> tuple:
    return (str(e.experiment_id), e.name, e.artifact_location, e.lifecycle_stage, dict(e.tags or {}),
            e.creation_time, e.last_update_time)


class _Counted:
    """The client factory the view is given, counting how often the view turned to it."""

    def __init__(self, client):
        self.client, self.calls = client, 0

    def __call__(self):
        self.calls += 1
        return self.client


@pytest.fixture
def view(store):
    made = _Counted(store["client"])
    v = store_view(store["uri"], made)
    assert isinstance(v, SqliteStoreView)
    v.made = made
    yield v
    v.close()


FILTERS = ["", "tags.`harness.kind` = 'cell'", "tags.`harness.kind` = 'task' and tags.`harness.cell` = 'key1'",
           "attributes.status = 'RUNNING'", "attributes.status = 'FINISHED' AND tags.`harness.kind` = 'cell'",
           "tags.`harness.note` = 'a and b'", "tags.`harness.note` = 'naïve — ✓'", "tags.`harness.cell` = 'nope'",
           "tags.harness.kind = 'cell'", "attributes.run_name = 'r1'", "attributes.run_id = 'x'"]
ORDERS = [None, ["attributes.start_time ASC"], ["attributes.start_time DESC"], ["attributes.start_time"]]


@pytest.mark.parametrize("flt", FILTERS)
@pytest.mark.parametrize("order", ORDERS)
def test_searches_give_the_clients_runs_in_the_clients_order(store, view, flt, order):
    client = store["client"]
    for ids in ([store["one"]], [store["one"], store["two"]], [store["two"]]):
        want = client.search_runs(ids, filter_string=flt, max_results=1000, order_by=order)
        got = view.search_runs(ids, filter_string=flt, max_results=1000, order_by=order)
        assert [_run(r) for r in got] == [_run(r) for r in want]
        assert got.token is None
    assert view.made.calls == 0  # every one answered by the view itself


def test_pages_of_a_search_add_up_to_the_clients_runs(store, view):
    want = store["client"].search_runs([store["one"]], "", max_results=1000)
    got, token = [], None
    while True:
        page = view.search_runs([store["one"]], "", max_results=2, page_token=token)
        assert len(page) <= 2
        got.extend(page)
        token = page.token
        if not token:
            break
    assert [_run(r) for r in got] == [_run(r) for r in want] and len(want) == 6  # (the deleted run is not there)


def test_runs_histories_and_experiments_are_the_clients(store, view):
    client = store["client"]
    for rid in store["runs"]:
        assert _run(view.get_run(rid)) == _run(client.get_run(rid))
        for key in ("loss", "odd", "absent"):
            want = [(m.key, _float(m.value), m.timestamp, m.step) for m in client.get_metric_history(rid, key)]
            assert [(m.key, _float(m.value), m.timestamp, m.step) for m in view.get_metric_history(rid, key)] == want
    assert view.get_run(store["runs"][0]).data.metrics["loss"] == 1.0  # the latest step: of its tie, the larger
    for name in ("exp one", "exp two", "gone", "Default", "absent"):
        want = client.get_experiment_by_name(name)
        got = view.get_experiment_by_name(name)
        assert (got is None and want is None) or _exp(got) == _exp(want)
    for exp_id in (store["one"], store["gone"]):
        assert _exp(view.get_experiment(exp_id)) == _exp(client.get_experiment(exp_id))
    assert sorted(map(_exp, view.search_experiments())) == sorted(map(_exp, client.search_experiments()))
    assert view.made.calls == 0


@pytest.mark.parametrize("flt", ["params.method = 'm1'", "metrics.loss > 0.1", "tags.`harness.cell` != 'key0'",
                                 "tags.`harness.cell` LIKE 'key%'", r"tags.`harness.note` = 'a\'b'",
                                 "attributes.start_time >= 0"])
def test_what_the_view_does_not_parse_the_client_answers(store, view, flt):
    with pytest.raises(Unsupported):
        parse_filter(flt)
    want = store["client"].search_runs([store["one"]], filter_string=flt, max_results=1000)
    got = view.search_runs([store["one"]], filter_string=flt, max_results=1000)
    assert [_run(r) for r in got] == [_run(r) for r in want]
    assert view.made.calls == 1


def test_a_store_at_another_schema_revision_is_read_by_the_client(store, tmp_path):
    other = tmp_path / "mlflow.db"
    shutil.copyfile(store["path"], other)
    con = sqlite3.connect(other)
    con.execute("update alembic_version set version_num = 'an0ther'")
    con.commit()
    con.close()
    assert store_view(f"sqlite:///{other}", lambda: None) is None
    assert store_view(store["uri"], lambda: None) is not None
    assert store_view("http://127.0.0.1:5000", lambda: None) is None


def test_a_tracker_reads_without_importing_mlflow_and_writes_through_it(store):
    code = ("import sys; from harness.core.tracking import Tracker; t = Tracker(sys.argv[1]); "
            "runs = t.find_runs(sys.argv[2], {'kind': 'cell'}); "
            "print(len(runs), 'mlflow' in sys.modules); "
            "t.set_tags(runs[0].info.run_id, {'seen': 'yes'}); print('mlflow' in sys.modules, "
            "t.tags(runs[0].info.run_id)['seen'])")
    out = subprocess.run([sys.executable, "-c", code, store["uri"], store["one"]], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True).stdout.split("\n")
    want = len(store["client"].search_runs([store["one"]], "tags.`harness.kind` = 'cell'"))
    assert out[:2] == [f"{want} False", "True yes"]  # read with sqlite3 alone; the write made the client
    assert isinstance(Tracker(store["uri"]).reader, SqliteStoreView)


def test_the_views_order_breaks_ties_of_start_time_by_run_id(store, tmp_path):
    """The order the view's SQL uses (read from the code: :func:`run_order`), applied to rows stored so that the
    file's own order is the reverse of the run ids' among runs started in the same millisecond: the runs come out
    in the client's order (start time, then run id) only through the tie-break. Drop ``run_uuid`` from it and
    SQLite returns the tied runs in the file's order, and this fails."""
    con = sqlite3.connect(":memory:")
    con.execute("create table runs (run_uuid text, start_time integer)")
    tied = sorted(f"{i:02x}{'ab' * 15}" for i in range(12))
    con.executemany("insert into runs values (?, ?)", [(rid, T0) for rid in reversed(tied)] + [("ff", T0 + 1)])
    for direction, want in (("asc", [*tied, "ff"]), ("desc", ["ff", *tied])):
        got = [r[0] for r in con.execute(f"select run_uuid from runs order by {run_order(direction)}")]
        assert got == want
    con.close()


NOT_MLFLOWS = ["attributes.lifecycle_stage = 'active'", "TAGS.`a` = 'b'", "Tags.`a` = 'b'", "ATTRIBUTES.status = 'x'",
               "tags.a-b = 'x'", "attributes.nope = 'x'"]
MLFLOWS = FILTERS + ["tag.`a` = 'b'", "run.status = 'RUNNING'", "attr.user_id = 'u'", "attribute.artifact_uri = 'x'",
                     "tags.`a`='b'and tags.`c`='d'", "tags.`a b` = 'c'", "tags.x_1.y = 'z'", "tags.`a` = ''"]


@pytest.mark.parametrize("flt", NOT_MLFLOWS + MLFLOWS)
def test_the_view_parses_a_filter_only_as_mlflows_parser_does(flt):
    """What the view answers itself, MLflow's parser (SearchUtils, which the client and a tracking server use)
    reads the same way: same clauses, keys and values; a form MLflow refuses is never answered by the view."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchUtils

    try:
        theirs = [(c["type"], c["key"], c["comparator"], c["value"]) for c in SearchUtils.parse_search_filter(flt)]
    except MlflowException:
        theirs = None
    try:
        ours = parse_filter(flt)
    except Unsupported:
        ours = None
    if flt in NOT_MLFLOWS:
        assert theirs is None and ours is None
    if ours is not None:
        columns = {"status": "status", "run_uuid": "run_id", "name": "run_name", "user_id": "user_id",
                   "artifact_uri": "artifact_uri"}
        assert theirs == [(kind, key if kind == "tag" else columns[key], "=", value) for kind, key, value in ours]


def test_workspaces_on_leave_the_reads_to_the_client(store, monkeypatch):
    monkeypatch.setenv("MLFLOW_ENABLE_WORKSPACES", "true")
    assert store_view(store["uri"], lambda: None) is None
    monkeypatch.setenv("MLFLOW_ENABLE_WORKSPACES", "false")
    assert store_view(store["uri"], lambda: None) is not None


def test_a_run_is_read_in_one_snapshot(store, tmp_path):
    """The statements that answer one read (the runs, then their metrics, params and tags) see one state of the
    store: a writer that tries to commit between two of them waits for the read to end (SQLite's shared lock of
    the view's one read transaction) instead of mixing its commit into the answer."""
    db = tmp_path / "mlflow.db"
    shutil.copyfile(store["path"], db)
    view = SqliteStoreView(db, lambda: None)
    rid = store["runs"][0]
    before = view.get_run(rid).data.metrics
    real, seen = view._rows, []

    def rows_then_write(sql, args=()):
        out = real(sql, args)
        if sql.lstrip().startswith("select run_uuid, experiment_id") and not seen:
            con = sqlite3.connect(db, timeout=0.2, isolation_level=None)
            try:
                con.execute("update latest_metrics set value = value + 100 where run_uuid = ?", (rid,))
                seen.append("committed")
            except sqlite3.OperationalError as exc:
                seen.append(str(exc))
            finally:
                con.close()
        return out

    view._rows = rows_then_write
    try:
        got = view.get_run(rid).data.metrics
    finally:
        view._rows = real
        view.close()
    assert seen == ["database is locked"]  # the writer waited for the read
    assert got == before
