"""Tests that each fail under one deliberate break of the identity and data-safety code, where the suite had stayed
green under it:

* the local executor re-running the cells of a pool whose worker died two at a time instead of one at a time
  (:class:`harness.executors.ProcessExecutor`);
* a decoder's own identity dropped from its init product's inputs (:func:`harness.spec.init_inputs`);
* the guard against a journal whose store was moved away disabled (:func:`harness.core.store_open.ensure_sqlite_store`:
  a new store would be created beside the journal, and SQLite would roll the old store's pages into it).

This module is imported by the executor's worker processes too (its cells run there): its top level stays light.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

PEER_WAIT_S = 30.0  # how long a cell run again waits for the one whose worker process runs beside it to start


# -- the local executor: after a worker died, its pool's cells run again one at a time ------------------------
@dataclass(frozen=True)
class _Cell:
    label: str
    source: str = "src"
    method: str = "fake"
    dim: int | None = None
    seed: int = 1


@dataclass(frozen=True)
class _Spec:
    folder: str  # where the cells leave their marks

    def experiment(self, source: str) -> str:
        return f"fake/{source}"


def _timed_cell(spec: _Spec, cell: _Cell, num_cpus: float, label_lines: bool = False) -> dict:
    """A cell as a worker runs it (in place of :func:`harness.executors._run_cell_in_worker`). The first attempts
    of ``a`` and ``b``, side by side, each kill their process once the other has started (the pool breaks, taking
    both; both die, since the pool may watch only one of its two workers' deaths at first: a worker spawned while
    its manager thread waits is watched from the thread's next wake-up on).
    Run again: the first to start, while another worker process of its pool lives beside its own, waits until that
    one's cell starts too (so that two cells run again side by side are seen to be); each says when it ran and in
    which process."""
    folder = Path(spec.folder)
    first = not (folder / f"{cell.label}.tried").exists()
    (folder / f"{cell.label}.tried").touch()
    if first:
        other = folder / ("b.tried" if cell.label == "a" else "a.tried")
        deadline = time.monotonic() + PEER_WAIT_S
        while not other.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    others = [p for p in folder.glob("*.start") if p.stem != cell.label]
    (folder / f"{cell.label}.start").write_text(repr(start))
    if not others and _sibling_workers():
        while time.monotonic() - start < PEER_WAIT_S:
            if any(p.stem != cell.label for p in folder.glob("*.start")):
                break
            time.sleep(0.02)
    return {"cell": cell.label, "pid": os.getpid(), "start": start, "end": time.monotonic()}


def _sibling_workers() -> int:
    """The other worker processes (spawned) of this process's parent, alive (Linux: read from /proc)."""
    me, parent, found = os.getpid(), os.getppid(), 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        found += ppid == parent and b"spawn_main" in command
    return found


class _Tracker:
    """The run's tracker, as far as the executor asks it (every other call does nothing)."""

    uri = "sqlite:///unused-by-these-cells.db"

    def experiment(self, name: str) -> str:
        return name

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def test_the_cells_of_a_dead_pool_run_again_one_process_at_a_time(tmp_path, monkeypatch):
    """A worker dies under two cells running side by side: both run again, each in a fresh process of its own, and
    never two at once (a cell that OOMed its worker must not share the machine with another on its second try)."""
    from types import SimpleNamespace

    from harness import executors

    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(executors, "_run_cell_in_worker", _timed_cell)
    folder = tmp_path / "marks"
    folder.mkdir()
    said: list[str] = []
    runner = SimpleNamespace(spec=_Spec(str(folder)), tracker=_Tracker(), say=said.append)
    cells = [_Cell("a"), _Cell("b")]
    done, failed = executors.ProcessExecutor(2, threads=1).run(runner, cells)
    assert failed == [] and any("running them again one at a time" in s for s in said), (failed, said)
    runs = sorted(done, key=lambda r: r["start"])
    assert sorted(r["cell"] for r in runs) == ["a", "b"]  # each cell of the dead pool, run again once
    assert len({r["pid"] for r in runs}) == 2 and os.getpid() not in {r["pid"] for r in runs}
    for before, after in zip(runs, runs[1:], strict=False):
        assert before["end"] <= after["start"], f"cells run again side by side: {runs}"


# -- a decoder's init product is keyed by the source's own identity ---------------------------------------------
def test_decoders_that_differ_only_in_their_own_identity_have_other_init_products():
    """Two builds of a decoder source under one name (its identity is its own, outside the world's hash): their
    cells' init products (and so their CPT products) are other products, never taken for each other's."""
    from harness.cpt_spec import CptSpec
    from harness.plan import Cell
    from harness.spec import cell_identity, init_inputs, product_keys

    fields = {"world_hash": "0123456789abcdef", "profile": "cpu", "eval_precision": "fp32", "cpu_kernels": "avx2",
              "method_params": {"random": {}}, "cpt": CptSpec({"steps": 2, "block_size": 32, "lr": 1e-4})}
    cell = Cell("dec", "random", None, 1)
    one, two = (cell_identity({**fields, "source_identity": {"dec": own}}, cell) for own in ("1" * 16, "2" * 16))
    assert {k: v for k, v in one.items() if k != "source_identity"} == \
        {k: v for k, v in two.items() if k != "source_identity"}  # nothing else differs
    for code in (None, "method-code-digest"):
        (init_one, cpt_one), (init_two, cpt_two) = product_keys(one, code), product_keys(two, code)
        assert init_one != init_two and cpt_one != cpt_two, code
    assert init_inputs(one).get("source_identity") == "1" * 16
    # a source the world's hash covers has no identity of its own: its init inputs are what they were
    plain = cell_identity(fields, Cell("src", "random", None, 1))
    assert "source_identity" not in plain and "source_identity" not in init_inputs(plain)


# -- a journal whose store was moved away --------------------------------------------------------------------
def test_a_journal_left_behind_by_a_moved_store_is_never_given_a_new_store(tmp_path):
    """A store with a hot journal (its writer killed mid-transaction) is moved away, its journal left behind: the
    harness refuses in one line and creates no store there (SQLite would take the journal for the new store's,
    roll its pages into it and delete it, and the moved store, half-updated, would still pass integrity_check).
    Put back beside its journal, the store is rolled back whole."""
    import sqlite3

    from harness.core.store_open import StoreUnavailable, ensure_sqlite_store
    from tests._store_fault_helpers import _integrity, _raw_killed_writer

    db = tmp_path / "mlflow.db"
    _raw_killed_writer(db)  # 5000 rows committed, then an update of all of them killed before its commit
    journal = Path(f"{db}-journal")
    held = journal.read_bytes()
    moved = tmp_path / "elsewhere" / "mlflow.db"
    moved.parent.mkdir()
    db.rename(moved)
    with pytest.raises(StoreUnavailable) as err:
        ensure_sqlite_store(f"sqlite:///{db}")
    assert "\n" not in str(err.value) and "journal" in str(err.value) and str(db) in str(err.value)
    assert not db.exists() and journal.read_bytes() == held  # no store made, the journal as it was
    moved.rename(db)
    con = sqlite3.connect(db)  # a read-write open rolls the hot journal back
    try:
        assert con.execute("select count(*), min(v), max(v) from junk").fetchone() == (5000, "x" * 200, "x" * 200)
    finally:
        con.close()
    assert not journal.exists() and _integrity(db) == "ok"
