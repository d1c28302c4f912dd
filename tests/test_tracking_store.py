"""The SQLite tracking store survives a kill at any moment: it is created under a temporary name and linked into
place; a half-created store that holds no runs is recreated (saying so); a store with runs is never deleted."""

from __future__ import annotations

import sqlite3

import pytest

from harness.core.tracking import Tracker, store_state


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


@pytest.mark.parametrize("damage", ["drop-table", "no-schema-version", "some-tables-only", "not-a-database"])
def test_half_created_store_without_runs_is_recreated(home, capsys, damage):
    db = home / "mlflow.db"
    if damage == "some-tables-only":  # what a kill during create_all leaves
        con = sqlite3.connect(db)
        con.execute("create table experiments (experiment_id integer primary key, name varchar(256))")
        con.execute("create table model_version_tags (key varchar(250))")
        con.commit()
        con.close()
    elif damage == "not-a-database":
        db.write_bytes(b"SQLite format 3\x00" + b"\x01" * 200)
    else:
        Tracker(_uri(db))
        con = sqlite3.connect(db)
        if damage == "drop-table":
            con.execute("drop table metrics")
        else:
            con.execute("delete from alembic_version")
        con.commit()
        con.close()
    assert store_state(db)[0] is False
    capsys.readouterr()
    tr = Tracker(_uri(db))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "half-created" in ln]
    assert len(lines) == 1 and str(db) in lines[0]
    exp = tr.experiment("recovered")
    run_id, existed = tr.get_or_create_run(exp, {"cell": "a"}, "a")
    assert not existed
    tr.finish(run_id)
    assert store_state(db) == (True, 1)


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
    assert "half-created" not in capsys.readouterr().err
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
