"""Nothing in use, and nothing that is not the harness's product, is deleted by ``harness cache prune`` or by a run's
start (issue 60): a method cache's product that a reader leases (the CLP / OMP helper model), a tracking store under
any name, a build whose builder still runs however old its folder, a file of a method's cache being read or written.
Each reader or builder is another process (forked), as in a real home: prune passes over its own process's leases."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sqlite3
import threading
import time
from pathlib import Path

from harness.core.cache import DONE, ProductCache, lease, release_lease
from harness.core.locks import exclusive, lock_file, release, try_exclusive

DAY = 86400.0
FORK = mp.get_context("fork")


def _cli(capsys, *argv: str) -> str:
    """``harness cache ...`` as a user runs it (in this process, HARNESS_HOME set by the test); its output."""
    from harness.cli import build_parser

    capsys.readouterr()
    args = build_parser().parse_args(["cache", *argv])
    assert args.func(args) == 0
    return capsys.readouterr().out


def _age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything below it ``seconds`` old."""
    t = time.time() - seconds
    for p in [path, *(path.rglob("*") if path.is_dir() else [])]:
        os.utime(p, (t, t))


def _hold_in_child(how: str, path: Path, ready, done) -> None:
    """Another process: hold the lease (``how="lease"``) or the build lock (``"lock"``) of ``path`` until ``done``."""
    fd = None
    if how == "lease":
        lease(path)
    elif how == "lookup":  # a reader of a cached product, as every reader finds one (it leases it)
        root, kind, inputs = path
        assert ProductCache(root).lookup(kind, inputs) is not None
    else:
        fd = try_exclusive(path)
        assert fd is not None
    ready.set()
    done.wait(120)
    release(fd)


class _Holder:
    """A forked process holding a lease or a lock while the ``with`` block runs."""

    def __init__(self, how: str, path):
        self.ready, self.done = FORK.Event(), FORK.Event()
        self.proc = FORK.Process(target=_hold_in_child, args=(how, path, self.ready, self.done), daemon=True)

    def __enter__(self) -> _Holder:
        self.proc.start()
        assert self.ready.wait(60), "the holder did not start"
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.proc.join(60)
        assert self.proc.exitcode == 0


# -- 1. the helper model of CLP / OMP, leased by a cell that reads it ---------------------------------------------
def _helper_model(home: Path) -> tuple[Path, dict, Path]:
    """A helper model as :func:`methods.helper_model.helper_tables` caches it: (its cache root, inputs, folder)."""
    from methods.helper_model import HELPER_KIND, helper_cache_root

    root = helper_cache_root(home / "cache" / "methods" / "clp")
    inputs = {"v": 2, "tokenizer": "0123456789abcdef", "settings": {"steps": 400}}

    def build(folder: Path) -> dict:
        (folder / "model").mkdir()
        (folder / "model" / "config.json").write_text("{}")
        (folder / "model" / "model.safetensors").write_bytes(b"\0" * 4096)
        (folder / "curve.json").write_text(json.dumps({"loss": [[0, 9.0]]}))
        return {}

    prod = ProductCache(root).get_or_build(HELPER_KIND, inputs, build)
    release_lease(prod.path)  # this process is done with it: only the reader below holds it
    return root, inputs, prod.path


def test_a_helper_model_a_reader_leases_survives_prune(tmp_path, monkeypatch, capsys):
    """A cell of CLP or OMP reads the helper model under ``cache/methods/helper/products/``; ``prune --kind
    methods``, ``prune --kind methods/helper`` and a plain ``prune`` leave it, saying so; once the reader is gone,
    prune removes it with its lock and lease files."""
    from methods.helper_model import HELPER_KIND

    home = tmp_path / "home"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    root, inputs, helper = _helper_model(home)
    with _Holder("lookup", (root, HELPER_KIND, inputs)):
        for argv in (("--kind", "methods"), ("--kind", "methods/helper"), ()):
            out = _cli(capsys, "prune", *argv)
            assert f"skipped 1 product(s) in use: methods/helper {helper.name}" in out, (argv, out)
            assert (helper / DONE).is_file() and (helper / "model" / "model.safetensors").is_file(), argv
        assert "would skip 1 product(s) in use" in _cli(capsys, "prune", "--dry-run")
    out = _cli(capsys, "prune", "--kind", "methods")
    assert "freed" in out and "skipped" not in out, out
    assert not helper.exists() and list(helper.parent.iterdir()) == []  # its lock and lease went with it


# -- 2. a tracking store under any name -------------------------------------------------------------------------
def _store(path: Path) -> sqlite3.Connection:
    """An SQLite tracking store with a run in it, open in WAL mode (its -wal and -shm files beside it, as while a
    run writes to it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE runs (run_uuid TEXT, status TEXT)")
    con.execute("INSERT INTO runs VALUES ('r1', 'RUNNING')")
    con.commit()
    return con


def test_a_tracking_store_under_any_name_survives_prune(tmp_path, monkeypatch, capsys):
    """``--tracking-uri sqlite:///$HARNESS_HOME/team.db`` (or a store without a suffix, in the home or in its
    cache) is no product: ``prune --kind other`` is refused, a plain prune and ``prune --kind methods --force``
    leave every SQLite file, its -wal and -shm files and its ``.runs.lock``; ``du`` lists them as tracking."""
    from harness.cache_admin import scan
    from harness.core.errors import ConfigError

    home = tmp_path / "home"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    notes = home / "cache" / "methods" / "notes"
    stores = [home / "team.db", home / "cache" / "runs-store", notes / "log"]
    cons = [_store(p) for p in stores]
    (home / ".team.db.runs.lock").write_text("")
    (home / "my-notes.txt").write_text("a user's file")
    (notes / "subwords-abc.npz").write_bytes(b"\0" * 100)  # a cached file of that method: it goes
    try:
        companions = [p.with_name(p.name + c) for p in stores for c in ("-wal", "-shm")]
        assert all(p.is_file() for p in companions)
        refused = None
        try:
            _cli(capsys, "prune", "--kind", "other")
        except ConfigError as exc:
            refused = str(exc)
        _cli(capsys, "prune")
        out = _cli(capsys, "prune", "--kind", "methods", "--force")
        for p in (*stores, *companions, home / ".team.db.runs.lock", home / "my-notes.txt"):
            assert p.is_file(), p
        assert refused is not None and "never pruned" in refused
        assert "holding an SQLite store: methods/notes log" in out, out
        assert not (notes / "subwords-abc.npz").exists()
        kinds = {i.path.name: i.kind for i in scan(home)}
        assert {kinds[n] for n in ("team.db", "team.db-wal", "team.db-shm", ".team.db.runs.lock",
                                   "runs-store", "runs-store-wal")} == {"tracking"}
        for p, con in zip(stores, cons, strict=True):
            assert con.execute("SELECT status FROM runs").fetchall() == [("RUNNING",)]
            con.execute("UPDATE runs SET status = 'FINISHED'")  # the run goes on writing to it
            con.commit()
            assert sqlite3.connect(p).execute("SELECT status FROM runs").fetchall() == [("FINISHED",)]
    finally:
        for con in cons:
            con.close()


# -- 3. a build in progress, however old its folder --------------------------------------------------------------
def _build_in_child(home: str, started, finish, out) -> None:
    """Another ``harness run``: builds an init product slowly (a long initialization)."""
    def build(folder: Path) -> None:
        (folder / "first").write_text("x")
        started.set()
        finish.wait(120)
        (folder / "second").write_text("y")  # FileNotFoundError if its folder was removed meanwhile

    prod = ProductCache(Path(home)).get_or_build("init", {"m": "slow"}, build)
    out.put(sorted(p.name for p in prod.path.iterdir()))


def test_a_build_older_than_an_hour_survives_a_runs_start_and_prune(tmp_path, monkeypatch, capsys):
    """A run starting beside a long build (``Runner.run`` cleans the home's stale builds first) leaves its
    ``.tmp-*`` folder, two days old, while the builder holds its lock, and so does ``prune``; the build then
    finishes. Folders whose builder's lock is free go at that start, however fresh: under ``products/``, a
    tagger's, a method cache's."""
    home = tmp_path / "home"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    started, finish, out = FORK.Event(), FORK.Event(), FORK.Queue()
    child = FORK.Process(target=_build_in_child, args=(str(home), started, finish, out), daemon=True)
    child.start()
    try:
        assert started.wait(60)
        [building] = list((home / "products" / "init").glob(".tmp-*"))
        _age(building, 2 * DAY)
        dead = [home / "products" / "init" / ".tmp-0a1b2c3d4e5f6071-deadbeef",
                home / "products" / "tasks" / "tagger" / ".tmp-1122334455667788-0000aaaa",
                home / "cache" / "methods" / "helper" / "products" / "helper-model" / ".tmp-99aa-11112222"]
        for d in dead:
            d.mkdir(parents=True)
            (d / "half").write_text("z")
        _age(dead[0], 2 * 3600)
        n = ProductCache().clean_stale()  # what a run's start calls (harness.runner.Runner.run)
        assert building.is_dir() and (building / "first").is_file()
        assert not any(d.exists() for d in dead) and n == 3
        out_ = _cli(capsys, "prune")
        assert building.is_dir() and "freed 0 B" in out_, out_
        finish.set()
        assert out.get(timeout=60) == [DONE, "_VERIFIED.json", "first", "second"]
    finally:
        finish.set()
        child.join(60)
    assert child.exitcode == 0
    assert ProductCache().clean_stale() == 0 and not list((home / "products" / "init").glob(".tmp-*"))


def test_files_of_a_method_cache_being_read_or_written_survive_prune(tmp_path, monkeypatch, capsys):
    """A fastText model another process is loading (it holds ``<model>.bin.lease``), arrays another process is
    writing (``.<stem>.<id>.npz`` under ``<stem>.npz.lock``, two days old) and a world being built (``.tmp-*``
    under the world's lock) are left by prune; once those processes are done, prune removes them."""
    home = tmp_path / "home"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    ft = home / "cache" / "methods" / "focus" / "fasttext"
    ft.mkdir(parents=True)
    model = ft / "focus-tokens-abc.npz"
    model.write_bytes(b"\0" * 1000)
    (ft / "focus-tokens-abc.json").write_text("{}")
    ofa = home / "cache" / "methods" / "ofa"
    ofa.mkdir(parents=True)
    writing = ofa / ".subwords-abc.1234abcd.npz"
    writing.write_bytes(b"\0" * 500)
    world = home / "worlds" / ".tmp-toy-v1-5678ef90"
    (world / "sources").mkdir(parents=True)
    for p in (writing, world):
        _age(p, 2 * DAY)
    with _Holder("lease", ft / "focus-tokens-abc.bin"), _Holder("lock", ofa / "subwords-abc.npz"), \
            _Holder("lock", home / "worlds" / "toy-v1"):
        out = _cli(capsys, "prune", "--kind", "methods")
        assert "skipped 1 product(s) in use: methods/focus focus-tokens-abc.npz" in out, out
        _cli(capsys, "prune", "--kind", "world")
        assert model.is_file() and writing.is_file() and world.is_dir()
    _cli(capsys, "prune", "--kind", "methods,world")
    assert not model.exists() and not writing.exists() and not world.exists()
    assert sorted(p.name for p in ft.iterdir()) == [] and sorted(p.name for p in ofa.iterdir()) == []


# -- prune removes a lock file while it holds it: a process waiting on it takes the new one ------------------------
def test_a_lock_removed_with_its_product_is_never_held_twice(tmp_path):
    """Prune removes a product's lock file holding the lock. A builder that waited on the removed file must not go
    on as if it held the lock while another process holds the new file's: it waits for that one."""
    product = tmp_path / "products" / "init" / "k"
    first = try_exclusive(product)  # prune, removing the product
    inside = threading.Event()

    def builder() -> None:
        with exclusive(product):
            inside.set()

    t = threading.Thread(target=builder, daemon=True)
    t.start()
    time.sleep(0.3)  # the builder waits on the lock file
    lock_file(product).unlink()
    second = try_exclusive(product)  # another builder, which finds no lock file and makes one
    assert second is not None
    release(first)  # the prune is done
    assert not inside.wait(0.5), "two processes held the product's lock at once"
    release(second)
    assert inside.wait(10)
    t.join(10)
