"""The SQLite tracking store survives a kill at any moment: it is created under a temporary name and linked into
place; only a store that provably never completed (no table, or the harness's creation marker in it) is recreated,
saying so; any other store is never deleted, and one the harness cannot use is refused in one line, unchanged.
(The faults of a store in use -- killed writers, locks, full disks -- are tests/test_store_faults*.py.)"""

from __future__ import annotations

import sqlite3

import pytest

from harness.core.errors import HarnessError
from harness.core.store_open import CREATION_MARKER, StoreUnavailable, store_state
from harness.core.tracking import Tracker


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def _uri(path):
    return f"sqlite:///{path}"


def test_fresh_store_is_complete_and_leaves_no_temporary_file(home):
    db = home / "mlflow.db"
    Tracker(_uri(db)).experiment("e")
    assert store_state(db) == (True, 0)
    assert [p.name for p in home.iterdir() if "creating" in p.name] == []


@pytest.mark.parametrize("kind", ["no-tables", "creation-marker"])
def test_a_store_never_completed_is_recreated(home, capsys, kind):
    """Only a store that provably never completed is made again: a database without a single table, or one
    that still holds the creation marker the harness writes first and drops last."""
    db = home / "mlflow.db"
    con = sqlite3.connect(db)
    if kind == "no-tables":
        con.execute("pragma user_version = 7")  # a valid database file, one page, no table
    else:
        con.execute("create table experiments (experiment_id integer primary key, name varchar(256))")
        con.execute(f"create table {CREATION_MARKER} (pid integer, started real)")
    con.commit()
    con.close()
    capsys.readouterr()
    tr = Tracker(_uri(db))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "never completed" in ln]
    assert len(lines) == 1 and str(db) in lines[0]
    exp = tr.experiment("recovered")
    run_id, existed = tr.get_or_create_run(exp, {"cell": "a"}, "a")
    assert not existed
    tr.finish(run_id)
    assert store_state(db) == (True, 1)


@pytest.mark.parametrize("damage", ["no-schema-version", "some-tables-only", "not-a-database", "damaged-page"])
def test_a_store_that_may_hold_anything_is_refused_unchanged(home, capsys, damage):
    """A store with tables that the harness did not leave half-made, or a damaged file, is never recreated: one
    line naming the file, exit 2 (StoreUnavailable is the CLI's user error), every byte as it was."""
    db = home / "mlflow.db"
    if damage == "some-tables-only":  # what a kill during MLflow's own create_all leaves (not the harness's)
        con = sqlite3.connect(db)
        con.execute("create table experiments (experiment_id integer primary key, name varchar(256))")
        con.execute("create table model_version_tags (key varchar(250))")
        con.commit()
        con.close()
    elif damage == "not-a-database":
        db.write_bytes(b"SQLite format 3\x00" + b"\x01" * 200)
    else:
        Tracker(_uri(db)).experiment("kept")
        con = sqlite3.connect(db)
        if damage == "no-schema-version":
            con.execute("delete from alembic_version")
            con.commit()
            con.close()
        else:
            con.close()
            con = sqlite3.connect(db)
            size = con.execute("pragma page_size").fetchone()[0]
            roots = [r[0] for r in con.execute("select rootpage from sqlite_master where tbl_name = 'runs'")]
            con.close()
            data = bytearray(db.read_bytes())
            for root in roots:  # the root pages of the runs table and of its indexes
                data[size * (root - 1):size * (root - 1) + 64] = b"\xff" * 64
            db.write_bytes(bytes(data))
    before = db.read_bytes()
    capsys.readouterr()
    with pytest.raises(StoreUnavailable) as err:
        Tracker(_uri(db))
    msg = str(err.value)
    assert "\n" not in msg and str(db) in msg and err.value.exit_code == 2
    assert isinstance(err.value, HarnessError)
    assert "never completed" not in capsys.readouterr().err
    assert db.read_bytes() == before
    assert [p.name for p in home.iterdir() if p.name.startswith("mlflow.db")] == ["mlflow.db"]


def test_store_with_runs_is_never_deleted(home, capsys):
    db = home / "mlflow.db"
    tr = Tracker(_uri(db))
    run_id, _ = tr.get_or_create_run(tr.experiment("kept"), {"cell": "a"}, "a")
    con = sqlite3.connect(db)
    con.execute("delete from alembic_version")  # damaged, but it holds a run
    con.commit()
    con.close()
    try:
        Tracker(_uri(db))
    except Exception:  # noqa: BLE001 - MLflow may refuse the damaged schema; what matters is the file is kept
        pass
    assert "never completed" not in capsys.readouterr().err
    con = sqlite3.connect(db)
    assert con.execute("select run_uuid from runs").fetchall() == [(run_id,)]
    con.close()


def test_empty_file_is_replaced(home):
    db = home / "mlflow.db"
    db.touch()
    Tracker(_uri(db))
    assert store_state(db) == (True, 0)


def test_kill_during_creation_leaves_no_store_and_the_next_start_creates_it(home):
    """SIGKILL in the middle of MLflow's migrations (where the issue's store broke for good)."""
    import os
    import subprocess
    import sys

    db = home / "mlflow.db"
    code = ("import os, signal, mlflow.store.db.utils as u\n"
            "real = u._upgrade_db\n"
            "def killed(engine):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "u._upgrade_db = killed\n"
            "from harness.core.tracking import Tracker\n"
            f"Tracker({_uri(db)!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    assert not db.exists()
    assert [p for p in home.iterdir() if p.name.endswith(".creating")]  # the half-made copy, never the store
    Tracker(_uri(db)).experiment("after-kill")
    assert store_state(db) == (True, 0)
