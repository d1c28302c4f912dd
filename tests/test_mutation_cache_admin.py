"""The cache library (:mod:`harness.cache_admin`), function by function, in process, on fabricated homes: what is a
product and of which kind, its size, world and age, which builds may still run, what belongs to a tracking store
(an SQLite file under any name), what ``prune`` selects and what it removes or leaves (a leased, a building, an
SQLite-holding item) and why. A lock or lease "held elsewhere" is held here through another open file, which
``flock`` treats as another holder, as it treats another process. Written to kill the mutants of
scripts/mutation.sh that the command-line tests let live."""

from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import cache_admin as A
from harness.core.cache import DONE, cpt_product_key, lease, lease_file, release_lease
from harness.core.errors import ConfigError
from harness.core.hashing import hash_obj
from harness.core.locks import held, lock_file, release, try_exclusive

DAY = 86400.0


def _product(path: Path, size: int = 1000, marker: dict | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "weights.bin").write_bytes(b"\0" * size)
    if marker is not None:
        (path / DONE).write_text(json.dumps(marker))
    return path


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


def _sqlite(path: Path) -> Path:
    """An SQLite database (its header is all that tells it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    return path


def _set_mtime(path: Path, t: float) -> None:
    """``path`` and everything below it modified at ``t``."""
    for p in [*(path.rglob("*") if path.is_dir() and not path.is_symlink() else []), path]:
        os.utime(p, (t, t), follow_symlinks=False)


@contextmanager
def _leased_elsewhere(path: Path):
    """A reader's shared lease on ``path`` (another open file, as another process's)."""
    fd = os.open(lease_file(path), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        yield
    finally:
        os.close(fd)


@contextmanager
def _built_elsewhere(path: Path):
    """A builder holding the build lock of ``path``."""
    fd = try_exclusive(path)
    assert fd is not None
    try:
        yield
    finally:
        release(fd)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- sizes, ages, units ------------------------------------------------------------------------------------------
def test_tree_size_counts_files_once_and_follows_no_link(tmp_path):
    """A file's size; below a folder every file once (a hard link once), no folder's own size, no link's target."""
    f = _file(tmp_path / "a.bin", 300)
    assert A.tree_size(f) == 300
    d = tmp_path / "d"
    _file(d / "x" / "y" / "b.bin", 1000)
    _file(d / "c.bin", 20)
    os.link(d / "c.bin", d / "x" / "c-again.bin")
    big = _file(tmp_path / "big.bin", 50_000)
    (d / "to-big").symlink_to(big)
    (d / "to-dir").symlink_to(tmp_path / "d" / "x", target_is_directory=True)
    assert A.tree_size(d) == 1020
    link = tmp_path / "link"
    link.symlink_to(d, target_is_directory=True)
    assert A.tree_size(link) == link.lstat().st_size < 1020  # the link itself, not the folder it names
    assert A.tree_size(tmp_path / "absent") == 0


def test_tree_size_passes_over_an_entry_that_vanished(tmp_path, monkeypatch):
    """An entry removed while it is summed (its lstat fails) is passed over; the others are still counted."""
    d = tmp_path / "d"
    for n, size in (("a", 1), ("b", 10), ("c", 100)):
        _file(d / n, size)
    first = next(iter(d.rglob("*")))  # the first entry the walk meets
    real = Path.lstat

    def lstat(self):
        if self == first:
            raise FileNotFoundError(self)
        return real(self)

    monkeypatch.setattr(Path, "lstat", lstat)
    assert A.tree_size(d) == 111 - first.stat().st_size


def test_human_sizes():
    assert [A.human(n) for n in (0, 1023, 1024, 1536, 1024**2 - 1, 1024**2, 5 * 1024**3, 1024**4, -2048)] == [
        "0 B", "1023 B", "1.0 KB", "1.5 KB", "1024.0 KB", "1.0 MB", "5.0 GB", "1024.0 GB", "-2.0 KB"]


def test_parse_age_units_and_refusals():
    assert A.parse_age("7d") == 7 * DAY and A.parse_age(" 12h ") == 12 * 3600 and A.parse_age("30m") == 1800
    assert A.parse_age("2w") == 14 * DAY and A.parse_age("90s") == 90 and A.parse_age("90") == 90
    assert A.parse_age("1.5h") == 5400 and A.parse_age("2 d") == 2 * DAY
    for bad in ("soon", "7x", "", "-1d", "1.d", "d", "7dd"):
        with pytest.raises(ConfigError) as exc:
            A.parse_age(bad)
        assert str(exc.value) == f"--older-than: {bad!r} is not an age such as 7d, 12h, 30m or 2w"


def test_marker_and_mtime_of_what_is_missing_or_damaged(tmp_path):
    p = _product(tmp_path / "p", marker={"created": 5})
    assert A._marker(p) == {"created": 5}
    (p / DONE).write_text("{not json")
    assert A._marker(p) == {}
    assert A._marker(tmp_path / "absent") == {}
    os.utime(p, (1000, 1000))
    assert A._mtime(p) == 1000.0 and A._mtime(tmp_path / "absent") == 0.0
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    os.utime(dangling, (77, 77), follow_symlinks=False)
    assert A._mtime(dangling) == 77.0  # the link's own time: it is not followed


# -- worlds and cells ----------------------------------------------------------------------------------------------
def test_world_names_by_manifest_hash(tmp_path):
    home = tmp_path / "home"
    assert A.world_names(home) == {}
    named = {"name": "toy", "version": 2}
    unnamed = {"version": 3, "langs": ["de"]}
    for folder, manifest in (("folder-v2", named), ("bare-v3", unnamed), ("bare-v12", {"name": "", "v": 1})):
        (home / "worlds" / folder).mkdir(parents=True)
        (home / "worlds" / folder / "manifest.json").write_text(json.dumps(manifest))
    (home / "worlds" / "broken-v1").mkdir()
    (home / "worlds" / "broken-v1" / "manifest.json").write_text("{")
    (home / "worlds" / "empty-v1").mkdir()
    assert A.world_names(home) == {hash_obj(named): "toy", hash_obj(unnamed): "bare",
                                   hash_obj({"name": "", "v": 1}): "bare"}


def _tracking_store(home: Path, runs: list[tuple[str, str, dict[str, str]]]) -> Path:
    """``home/mlflow.db`` with MLflow's ``runs`` and ``tags`` tables: (run id, status, {tag: value})."""
    home.mkdir(parents=True, exist_ok=True)
    db = home / "mlflow.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE runs (run_uuid TEXT PRIMARY KEY, status TEXT)")  # keyed as MLflow keys them
    con.execute("CREATE TABLE tags (key TEXT, value TEXT, run_uuid TEXT, PRIMARY KEY (key, run_uuid))")
    for run, status, tags in runs:
        con.execute("INSERT INTO runs VALUES (?, ?)", (run, status))
        con.executemany("INSERT INTO tags VALUES (?, ?, ?)", [(k, v, run) for k, v in tags.items()])
    con.commit()
    con.close()
    return db


def _cell_tags(cell: str, world: str = "toy", profile: str = "cpu", kind: str = "cell") -> dict[str, str]:
    return {"harness.cell": cell, "harness.world": world, "harness.profile": profile, "harness.kind": kind,
            "harness.other": "x", "mlflow.runName": "n"}


def test_cell_runs_reads_each_cells_world_profile_and_status(tmp_path):
    """One entry per cell run (a task run of the same cell is not one); FINISHED wins over the cell's other runs
    in whichever order they come; the store is read only."""
    home = tmp_path / "home"
    assert A.cell_runs(home) == {}
    db = _tracking_store(home, [
        ("r0", "FINISHED", _cell_tags("t0", kind="task")),
        ("r1", "FAILED", _cell_tags("a", world="w1")),
        ("r2", "FINISHED", _cell_tags("a", world="w2", profile="gpu")),
        ("r3", "FINISHED", _cell_tags("b")),
        ("r4", "KILLED", _cell_tags("b", world="w9")),
        ("r5", "RUNNING", _cell_tags("c")),
        ("r6", "FINISHED", _cell_tags("t", kind="task")),
    ])
    before = db.read_bytes()
    assert A.cell_runs(home) == {
        "a": {"status": "FINISHED", "world": "w2", "profile": "gpu", "kind": "cell"},
        "b": {"status": "FINISHED", "world": "toy", "profile": "cpu", "kind": "cell"},
        "c": {"status": "RUNNING", "world": "toy", "profile": "cpu", "kind": "cell"},
    }
    assert db.read_bytes() == before and sorted(p.name for p in home.iterdir()) == ["mlflow.db"]


@pytest.mark.parametrize("cell_run", ["r2", "r0", "r9"])
def test_cell_runs_a_cells_task_runs_do_not_hide_it(tmp_path, cell_run):
    """A cell's task runs carry its key too (with their own kind): they neither hide the cell run, whichever of
    their ids sorts first, nor lend it their status or tags."""
    home = tmp_path / "home"
    tasks = [r for r in ("r1", "r3", "r5") if r != cell_run]
    _tracking_store(home, [
        (cell_run, "FINISHED", _cell_tags("k", world="toy", profile="cpu")),
        *[(r, "FINISHED", _cell_tags("k", world="elsewhere", profile="gpu", kind="task")) for r in tasks],
        ("r4", "FAILED", _cell_tags("f")),
        ("r6", "FINISHED", _cell_tags("f", world="elsewhere", kind="task")),
    ])
    assert A.cell_runs(home) == {"k": {"status": "FINISHED", "world": "toy", "profile": "cpu", "kind": "cell"},
                                 "f": {"status": "FAILED", "world": "toy", "profile": "cpu", "kind": "cell"}}


def test_cell_runs_of_a_store_it_cannot_read_are_none(tmp_path):
    home = tmp_path / "home"
    _file(home / "mlflow.db", 100)  # not a database
    assert A.cell_runs(home) == {}
    (home / "mlflow.db").unlink()
    sqlite3.connect(home / "mlflow.db").close()  # a database without MLflow's tables
    assert A.cell_runs(home) == {}
    (home / "mlflow.db").unlink()
    (home / "mlflow.db").mkdir()
    assert A.cell_runs(home) == {}


# -- products -----------------------------------------------------------------------------------------------------
def test_product_item_reads_its_marker(tmp_path):
    """Created and world from the marker (the world's hash named by ``hashes``), the lock and lease beside it."""
    p = _product(tmp_path / "init" / "k1", 500, {"created": 1234.5, "inputs": {"world": "h1"}})
    (tmp_path / "init" / "k1.lock").write_text("")
    (tmp_path / "init" / "k1.lease").write_text("")
    i = A.product_item(p, "init", {"h1": "toy"})
    assert (i.kind, i.path, i.created, i.world, i.busy, i.unfinished, i.finished) == (
        "init", p, 1234.5, "toy", False, False, False)
    assert i.bytes == 500 + len((p / DONE).read_bytes())
    assert i.extra == (tmp_path / "init" / "k1.lock", tmp_path / "init" / "k1.lease") and i.guard is None
    assert A.product_item(p, "init").world == "h1"
    q = _product(tmp_path / "cpt" / "k2", 10, {"world": "direct", "inputs": {"world": "ignored"}})
    os.utime(q, (777, 777))
    j = A.product_item(q, "cpt")
    assert (j.world, j.created, j.extra, j.unfinished) == ("direct", 777.0, (), False)
    r = _product(tmp_path / "cpt" / "k3", 10, {"world": ["not", "a", "name"], "created": 0})
    os.utime(r, (888, 888))
    assert (A.product_item(r, "cpt").world, A.product_item(r, "cpt").created) == ("-", 888.0)
    s = _product(tmp_path / "cpt" / "k4", 10, {"inputs": None, "seed": 1})
    assert A.product_item(s, "cpt").world == "-"


def test_product_item_unfinished_builds_and_which_may_run(tmp_path):
    """A product without its marker, a ``.tmp-*``, ``*.work`` or ``*.launch`` folder is unfinished; it may still
    be built while something in it changed within a day or its builder holds its lock, whatever its age."""
    base = tmp_path / "products" / "init"
    t = 1_000_000_000
    done = _product(base / "done", marker={"created": t})
    folders = {name: _product(base / name, marker={"created": t}) for name in (".tmp-a-0000", "x.work", "x.launch")}
    folders["nomarker"] = _product(base / "nomarker")
    folders["file"] = _file(base / "file.bin", 10)
    for p in (done, *folders.values()):
        _set_mtime(p, t)
    assert not A.product_item(done, "init", now=t).unfinished
    for name, p in folders.items():
        fresh = A.product_item(p, "init", now=t + 3600)
        assert fresh.unfinished and fresh.busy, name
        day = A.product_item(p, "init", now=t + A.BUSY_S)
        assert day.unfinished and not day.busy, name  # a day old exactly: no longer presumed running
        assert A.product_item(p, "init", now=t + A.BUSY_S - 1).busy, name
        with _built_elsewhere(p):
            assert A.product_item(p, "init", now=t + 30 * DAY).busy, name
    assert not A.product_item(done, "init", now=t + 1).busy  # a finished product is never a build
    deep = folders["nomarker"] / "a" / "b"
    _file(deep / "new.bin", 1)
    _set_mtime(folders["nomarker"], t)
    os.utime(deep / "new.bin", (t + 5 * DAY, t + 5 * DAY))  # written deep inside, days later
    assert A.product_item(folders["nomarker"], "init", now=t + 5 * DAY + 60).busy


def test_a_build_under_its_temporary_name_is_busy_while_its_builder_holds_the_lock(tmp_path):
    """A ``.tmp-<key>-<id>`` build's lock is its product's (:func:`harness.core.cache.building`)."""
    base = tmp_path / "products" / "init"
    tmp = _product(base / ".tmp-0a1b2c3d4e5f6071-deadbeef")
    _set_mtime(tmp, 1_000_000)
    assert not A.product_item(tmp, "init").busy
    with _built_elsewhere(base / "0a1b2c3d4e5f6071"):
        assert A.product_item(tmp, "init").busy


def test_newest_follows_no_link(tmp_path):
    d = _product(tmp_path / "d")
    target = _product(tmp_path / "elsewhere")
    (d / "link").symlink_to(target, target_is_directory=True)
    _set_mtime(target, 5_000)
    _set_mtime(d, 1_000)
    assert A._newest(d) == 1_000.0
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    os.utime(link, (2_000, 2_000), follow_symlinks=False)
    assert A._newest(link) == 2_000.0
    _set_mtime(target, 9_000)
    os.utime(target / "weights.bin", (3_000, 3_000))
    assert A._newest(target) == 9_000.0  # the folder's own time counts too


def test_beside_is_the_lock_then_the_lease_that_exist(tmp_path):
    p = _product(tmp_path / "k")
    assert A._beside(p) == ()
    (tmp_path / "k.lease").write_text("")
    assert A._beside(p) == (tmp_path / "k.lease",)
    (tmp_path / "k.lock").write_text("")
    assert A._beside(p) == (tmp_path / "k.lock", tmp_path / "k.lease")
    (tmp_path / "k.lock").unlink()
    (tmp_path / "k.lock").mkdir()  # not a file
    assert A._beside(p) == (tmp_path / "k.lease",)


def test_cell_products_are_complete_init_and_cpt_products_with_the_launch_folder(tmp_path):
    home = tmp_path / "home"
    products = home / "products"
    init = _product(products / "init" / "i1", 100, {"created": 1})
    cpt = _product(products / "cpt" / "c1", 200, {"created": 1})
    launch = _product(products / "cpt" / "c1.launch", 30)
    _product(products / "init" / "i2", 5)  # no marker: unfinished
    _file(products / "cpt" / "c2", 7)  # a file, not a product folder
    items = A.cell_products(home, "i1", "c1")
    assert [(i.kind, i.path) for i in items] == [("init", init), ("cpt", cpt)]
    assert items[0].extra == () and items[1].extra == (launch,)
    assert items[1].bytes == A.tree_size(cpt) + 30
    assert [i.path for i in A.cell_products(home, "i1", None)] == [init]
    assert [i.path for i in A.cell_products(str(home), "i2", "c1")] == [cpt]
    assert A.cell_products(home, "i9", "c2") == []
    (products / "cpt" / "c1.launch").rename(products / "cpt" / "c1.lnch")
    _file(products / "cpt" / "c1.launch", 3)  # a file by that name is no launch folder
    assert A.cell_products(home, "nothing", "c1")[0].extra == ()


# -- the whole home ------------------------------------------------------------------------------------------------
def _rel(home: Path, p: Path | None) -> str | None:
    return None if p is None else p.relative_to(home).as_posix()


def _view(home: Path, items: list[A.Item]) -> list[tuple]:
    return [(i.kind, _rel(home, i.path), i.world, i.busy, tuple(_rel(home, e) for e in i.extra), _rel(home, i.guard))
            for i in items]


@pytest.fixture
def home(tmp_path) -> Path:
    """A home with an entry of every kind, old (two days) unless said otherwise."""
    h = tmp_path / "home"
    manifest = {"name": "toy", "version": 2}
    world = _product(h / "worlds" / "toy-v2", 100)
    (world / "manifest.json").write_text(json.dumps(manifest))
    for n in ("toy-v2.lock", "toy-v2.lease"):
        (h / "worlds" / n).write_text("")
    _product(h / "worlds" / ".tmp-toy-v3-0000", 10)
    _product(h / "worlds" / ".tmp-new-v1-0000", 10)  # a world being built now
    _product(h / "worlds" / "plain-v1", 10)
    _product(h / "worlds" / "zz-v1", 10)  # after toy-v2's lock and lease
    wh = hash_obj(manifest)
    _product(h / "products" / "init" / "i1", 1000, {"inputs": {"world": wh}, "created": 5})
    (h / "products" / "init" / "i1.lock").write_text("")
    _product(h / "products" / "init" / ".tmp-i2-0000", 10)
    _product(h / "products" / "corpus" / "k1", 10, {"world": "other", "created": 5})
    _product(h / "products" / "tasks" / "tagger" / "t1", 10, {"world": "toy", "created": 5})
    (h / "products" / "tasks" / "readme.txt").write_text("not a kind")
    ft = h / "cache" / "methods" / "wechsel" / "fasttext"
    _file(ft / "w-abc.bin", 400)
    _file(ft / "w-abc.json", 2)
    _file(ft / "w-abc.bin.lock", 0)
    _product(h / "cache" / "methods" / "clp" / "products" / "helper-model" / "h1", 50,
             {"inputs": {"world": wh}, "created": 5})
    (h / "cache" / "methods" / "clp" / "products" / "helper-model" / "h1.lease").write_text("")
    (h / "cache" / "methods" / "clp" / "products" / "notes.txt").write_text("")
    ofa = h / "cache" / "methods" / "ofa"
    _file(ofa / "sub-abc.npz", 80)
    _file(ofa / "sub-abc.npz.lock", 0)
    _file(ofa / "nested" / "a.npy", 8)
    _file(ofa / "orphan.npz.lock", 0)  # a build that has written nothing yet
    _file(h / "cache" / "methods" / "stray.txt", 1)  # not a method's folder
    _product(h / "cache" / "mappings" / "m1", 20)
    _file(h / "cache" / "boards" / "intervals.json", 30)
    _file(h / "cache" / "other.txt", 1)
    _sqlite(h / "cache" / "runs-store")
    _product(h / "downloads" / "pypi", 40)
    _product(h / "build-envs" / "spacy", 50)
    _product(h / "mlartifacts" / "1", 60)
    _product(h / "leaderboards" / "toy", 70)
    _file(h / "mlflow.db", 90)
    _sqlite(h / "team.db")
    _file(h / "notes.txt", 3)
    for p in h.iterdir():
        _set_mtime(p, time.time() - 2 * DAY)
    _set_mtime(h / "worlds" / ".tmp-new-v1-0000", time.time())
    return h


def test_scan_names_every_entry_of_the_home_by_kind(home):
    """Each product of each kind once, with its world, its lock and lease, whether it may still be built; the
    tracking store and SQLite files as ``tracking``, what the harness does not know as ``other``."""
    with _built_elsewhere(home / "worlds" / "toy-v3"):
        items = A.scan(home)
    assert _view(home, items) == [
        ("corpus", "products/corpus/k1", "other", False, (), None),
        ("init", "products/init/.tmp-i2-0000", "-", False, (), None),
        ("init", "products/init/i1", "toy", False, ("products/init/i1.lock",), None),
        ("tagger", "products/tasks/tagger/t1", "toy", False, (), None),
        ("methods/clp", "cache/methods/clp/products/helper-model/h1", "toy", False,
         ("cache/methods/clp/products/helper-model/h1.lease",), None),
        ("methods/ofa", "cache/methods/ofa/nested/a.npy", "-", False, (), None),
        ("methods/ofa", "cache/methods/ofa/orphan.npz.lock", "-", False, (), "cache/methods/ofa/orphan.npz"),
        ("methods/ofa", "cache/methods/ofa/sub-abc.npz", "-", False, ("cache/methods/ofa/sub-abc.npz.lock",), None),
        ("methods/wechsel", "cache/methods/wechsel/fasttext/w-abc.bin", "-", False,
         ("cache/methods/wechsel/fasttext/w-abc.bin.lock", "cache/methods/wechsel/fasttext/w-abc.json"),
         "cache/methods/wechsel/fasttext/w-abc.bin"),
        ("mappings", "cache/mappings/m1", "-", False, (), None),
        ("boards", "cache/boards/intervals.json", "-", False, (), None),
        ("downloads", "downloads/pypi", "-", False, (), None),
        ("build-envs", "build-envs/spacy", "-", False, (), None),
        ("world", "worlds/.tmp-new-v1-0000", ".tmp-new-v1-0000", True, (), None),
        ("world", "worlds/.tmp-toy-v3-0000", ".tmp-toy-v3-0000", True, (), None),
        ("world", "worlds/plain-v1", "plain", False, (), None),
        ("world", "worlds/toy-v2", "toy", False, ("worlds/toy-v2.lock", "worlds/toy-v2.lease"), None),
        ("world", "worlds/zz-v1", "zz", False, (), None),
        ("tracking", "mlartifacts", "-", False, (), None),
        ("leaderboards", "leaderboards/toy", "toy", False, (), None),
        ("tracking", "mlflow.db", "-", False, (), None),
        ("other", "notes.txt", "-", False, (), None),
        ("tracking", "team.db", "-", False, (), None),
        ("other", "cache/other.txt", "-", False, (), None),
        ("tracking", "cache/runs-store", "-", False, (), None),
    ]
    assert not A.scan(home)[14].busy  # the old build's lock is free now
    sizes = {_rel(home, i.path): i.bytes for i in items}
    assert sizes["cache/methods/wechsel/fasttext/w-abc.bin"] == 402
    assert sizes["worlds/toy-v2"] == A.tree_size(home / "worlds" / "toy-v2") and sizes["mlartifacts"] == 60
    assert sizes["products/init/i1"] == A.tree_size(home / "products" / "init" / "i1")
    for i in items:  # each item's size and age (a product's from its marker)
        assert i.bytes == A.tree_size(i.path) + sum(A.tree_size(e) for e in i.extra if i.kind.startswith("methods/"))
        assert i.created == (5 if i.kind in ("corpus", "init", "tagger", "methods/clp") and not i.unfinished
                             else min(A._mtime(p) for p in (i.path, *(i.extra if i.guard else ()))))
    created = {_rel(home, i.path): i.created for i in items}
    assert created["products/init/i1"] == 5 and created["notes.txt"] == A._mtime(home / "notes.txt")
    assert created["worlds/toy-v2"] == A._mtime(home / "worlds" / "toy-v2") > 5
    assert created["downloads/pypi"] == A._mtime(home / "downloads" / "pypi") > 5
    assert {(i.kind, i.path.name) for i in A.scan(str(home))} == {(i.kind, i.path.name) for i in items}


def test_scan_of_an_empty_or_absent_home(tmp_path):
    assert A.scan(tmp_path / "absent") == []
    (tmp_path / "empty").mkdir()
    assert A.scan(tmp_path / "empty") == []
    _product(tmp_path / "h" / "mlruns" / "0", 5)
    assert [(i.kind, i.path.name, i.bytes) for i in A.scan(tmp_path / "h")] == [("tracking", "mlruns", 5)]


def test_scan_lists_a_link_in_the_products_and_skips_what_is_neither_file_nor_folder(tmp_path):
    h = tmp_path / "h"
    _product(h / "products" / "init" / "i1", 10, {"created": 1})
    (h / "products" / "init" / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(h / "products" / "init" / "fifo")
    (h / "products" / "init" / "i1.lease").write_text("")
    assert [i.path.name for i in A.scan(h)] == ["i1"]


def test_products_of_finished_cells(tmp_path):
    """A tagger's world and finished state are its cell's (its model key "<cell>:<step>"); a CPT product's are
    those of its init product and of the cell named by the init inputs, a profile and the CPT settings; a
    tagger-test's are its tagger's. A cell that did not finish leaves its products unfinished."""
    h = tmp_path / "home"
    settings = {"steps": 10, "lr": 1e-4, "devices": 2}
    cpt = {"steps": 10, "lr": 1e-4}
    runs = []
    for n, (name, status, profile) in enumerate((("done", "FINISHED", "gpu"), ("busy", "RUNNING", "cpu"))):
        inputs = {"world": "wh", "method": name}
        _product(h / "products" / "init" / f"init-{name}", 10, {"inputs": inputs, "created": 1})
        _product(h / "products" / "cpt" / cpt_product_key(f"init-{name}", cpt, 7), 10,
                 {"settings": settings, "seed": 7, "created": 1})
        cell = hash_obj({**inputs, "profile": profile, "cpt": cpt})
        _product(h / "products" / "tasks" / "tagger" / f"tagger-{name}", 10,
                 {"inputs": {"model": f"{cell}:3"}, "created": 1})
        _product(h / "products" / "tasks" / "tagger-test" / f"score-{name}", 10,
                 {"inputs": {"tagger": f"tagger-{name}"}, "created": 1})
        runs.append((f"r{n}", status, _cell_tags(cell, world=f"world-{name}", profile=profile)))
    _product(h / "products" / "cpt" / "stray", 10, {"settings": settings, "seed": 8, "created": 1})
    _product(h / "products" / "corpus" / "c0", 10, {"created": 1})  # a kind before "cpt"
    _product(h / "products" / "tasks" / "tagger" / "tagger-lost", 10, {"inputs": {"model": "nocell:0"}})
    _product(h / "products" / "tasks" / "tagger" / "tagger-none", 10, {"inputs": {"other": 1}})
    _product(h / "products" / "tasks" / "tagger" / "tagger-own", 10,
             {"world": "mine", "inputs": {"model": "nocell:0"}, "created": 1})
    _product(h / "products" / "tasks" / "tagger-test" / "score-orphan", 10, {"inputs": {"tagger": "gone"}})
    _product(h / "products" / "tasks" / "tagger-test" / "score-own", 10,
             {"world": "set", "inputs": {"tagger": "tagger-done"}})
    _tracking_store(h, runs)
    got = {(i.kind, i.path.name): (i.world, i.finished) for i in A.scan(h) if i.kind not in ("tracking",)}
    assert got == {
        ("init", "init-done"): ("wh", True),
        ("init", "init-busy"): ("wh", False),
        ("cpt", cpt_product_key("init-done", cpt, 7)): ("wh", True),
        ("cpt", cpt_product_key("init-busy", cpt, 7)): ("wh", False),
        ("cpt", "stray"): ("-", False),
        ("tagger", "tagger-done"): ("world-done", True),
        ("tagger", "tagger-busy"): ("world-busy", False),
        ("tagger", "tagger-own"): ("mine", False),
        ("tagger", "tagger-lost"): ("-", False),
        ("tagger", "tagger-none"): ("-", False),
        ("corpus", "c0"): ("-", False),
        ("tagger-test", "score-done"): ("world-done", True),
        ("tagger-test", "score-busy"): ("world-busy", False),
        ("tagger-test", "score-orphan"): ("-", False),
        ("tagger-test", "score-own"): ("set", True),
    }


def test_a_cpt_product_keeps_its_own_world_and_takes_the_first_matching_init(tmp_path):
    h = tmp_path / "home"
    cpt = {"steps": 1}
    _product(h / "products" / "init" / "i1", 10, {"inputs": {"world": "w1"}, "created": 1})
    _product(h / "products" / "cpt" / cpt_product_key("i1", cpt, None), 10,
             {"settings": cpt, "world": "own", "created": 1})
    _product(h / "products" / "cpt" / cpt_product_key("i1", {}, None), 10, {"created": 1})
    got = {i.path.name: i.world for i in A.scan(h) if i.kind == "cpt"}
    assert got == {cpt_product_key("i1", cpt, None): "own", cpt_product_key("i1", {}, None): "w1"}


def test_a_run_without_a_profile_names_none(tmp_path):
    """A run that names no profile adds none to those tried (not the empty one) and hides none of the others."""
    h = tmp_path / "home"
    cpt = {"steps": 1}
    inputs = {"world": "w", "m": 2}
    _product(h / "products" / "init" / "i1", 10, {"inputs": inputs, "created": 1})
    _product(h / "products" / "cpt" / cpt_product_key("i1", cpt, 1), 10, {"settings": cpt, "seed": 1, "created": 1})
    bare = _cell_tags(hash_obj({**inputs, "profile": "", "cpt": cpt}))
    del bare["harness.profile"]
    _tracking_store(h, [("r0", "FINISHED", bare), ("r1", "RUNNING", _cell_tags("other", profile="cpu"))])
    assert {i.kind: i.finished for i in A.scan(h) if i.kind in ("init", "cpt")} == {"init": False, "cpt": False}


def test_a_tagger_names_its_world_by_its_hash(tmp_path):
    h = tmp_path / "home"
    manifest = {"name": "toy", "version": 1}
    (h / "worlds" / "folder-v1").mkdir(parents=True)
    (h / "worlds" / "folder-v1" / "manifest.json").write_text(json.dumps(manifest))
    _product(h / "products" / "tasks" / "tagger" / "t1", 10, {"inputs": {"world": hash_obj(manifest)}})
    assert [(i.kind, i.world) for i in A.scan(h) if i.kind == "tagger"] == [("tagger", "toy")]


def test_a_finished_cell_under_any_of_the_homes_profiles(tmp_path):
    """The cell of a CPT product is looked for under each profile that the home's cells ran with."""
    h = tmp_path / "home"
    cpt = {"steps": 1}
    inputs = {"world": "w", "m": 1}
    _product(h / "products" / "init" / "i1", 10, {"inputs": inputs, "created": 1})
    _product(h / "products" / "cpt" / cpt_product_key("i1", cpt, 1), 10, {"settings": cpt, "seed": 1, "created": 1})
    runs = [("r0", "FINISHED", _cell_tags("unrelated", profile="aaa")),
            ("r1", "FINISHED", _cell_tags(hash_obj({**inputs, "profile": "zzz", "cpt": cpt}), profile="zzz")),
            ("r2", "RUNNING", _cell_tags(hash_obj({**inputs, "profile": "mmm", "cpt": cpt}), profile="mmm"))]
    _tracking_store(h, runs)
    assert {i.kind: i.finished for i in A.scan(h) if i.kind in ("init", "cpt")} == {"init": True, "cpt": True}


# -- the method caches ------------------------------------------------------------------------------------------------
def test_fasttext_models_one_item_each_with_what_shares_their_stem(tmp_path):
    """A model (``.npz`` or ``.bin``) with its ``.json``, lock and lease; one being written (a dotted name) is
    busy while fresh or while the model's lock is held; a ``.json`` left alone is unfinished."""
    ft = tmp_path / "fasttext"
    t = 1_000_000_000
    _file(ft / "a-1.json", 2)
    _file(ft / "a-1.npz", 100)
    _file(ft / "a-1.bin.lease", 0)
    _file(ft / "b-2.bin", 50)
    _file(ft / ".c-3.1234abcd.npz", 30)  # being written
    _file(ft / "d-4.json", 1)  # its model is gone
    for n, p in enumerate(sorted(ft.iterdir())):
        os.utime(p, (t + n, t + n))
    items = list(A._fasttext_items("methods/x", ft, t + 3600))
    view = [(i.path.name, tuple(e.name for e in i.extra), i.bytes, i.busy, i.guard.name, i.created) for i in items]
    assert view == [
        (".c-3.1234abcd.npz", (), 30, True, "c-3.bin", t + 0),
        ("a-1.npz", ("a-1.bin.lease", "a-1.json"), 102, False, "a-1.bin", t + 1),
        ("b-2.bin", (), 50, False, "b-2.bin", t + 4),
        ("d-4.json", (), 1, True, "d-4.bin", t + 5),
    ]
    old = list(A._fasttext_items("methods/x", ft, t + 2 * DAY))
    assert [i.busy for i in old] == [False, False, False, False]
    with _built_elsewhere(ft / "c-3.bin"), _built_elsewhere(ft / "a-1.bin"):
        locked = list(A._fasttext_items("methods/x", ft, t + 2 * DAY))
        assert [i.busy for i in locked][:3] == [True, False, False]  # a finished model is no build
    assert {i.kind for i in old} == {"methods/x"}


def test_a_models_stem_loses_only_its_leading_dots(tmp_path):
    ft = tmp_path / "fasttext"
    _file(ft / "Xy-1.npz", 10)
    _file(ft / "Xy-1.json", 1)
    _file(ft / ".Xy-1.77.npz", 1)
    [item] = A._fasttext_items("methods/x", ft, time.time())
    assert item.path.name == "Xy-1.npz" and item.guard == ft / "Xy-1.bin" and len(item.extra) == 2


def test_a_model_in_full_form_beside_its_compact_one(tmp_path):
    ft = tmp_path / "fasttext"
    _file(ft / "m-1.bin", 10)
    _file(ft / "m-1.npz", 5)
    _file(ft / ".m-1.99.npz", 1)
    [item] = A._fasttext_items("methods/x", ft, time.time())
    assert item.path.name == "m-1.bin" and {e.name for e in item.extra} == {"m-1.npz", ".m-1.99.npz"}
    assert item.bytes == 16 and not item.busy


def test_file_items_of_a_method_cache(tmp_path):
    """A file with its lock and lease; each file below a folder; a lock whose file is not there yet is the item
    (guarded as that file), busy while its lock is held; a file being written (a dotted name) is busy while it
    is fresh or its builder holds the lock."""
    m = tmp_path / "m"
    t = 1_000_000_000
    _file(m / "a.npz", 10)
    _file(m / "a.npz.lock", 0)
    _file(m / "a.npz.lease", 0)
    _file(m / "dir" / "sub" / "b.npy", 20)
    _file(m / "c.npz.lease", 0)
    _file(m / ".d.12.npz", 5)
    for p in m.rglob("*"):
        os.utime(p, (t, t))
    items = [i for e in sorted(m.iterdir()) for i in A._file_items("methods/m", e, t + 60)]
    view = [(i.path.relative_to(m).as_posix(), tuple(x.name for x in i.extra), i.bytes, i.busy,
             i.guard and i.guard.name, i.created) for i in items]
    assert view == [
        (".d.12.npz", (), 5, True, None, t),
        ("a.npz", ("a.npz.lock", "a.npz.lease"), 10, False, None, t),
        ("c.npz.lease", (), 0, False, "c.npz", t),
        ("dir/sub/b.npy", (), 20, False, None, t),
    ]
    later = t + 2 * DAY
    assert [i.busy for e in sorted(m.iterdir()) for i in A._file_items("methods/m", e, later)] == [False] * 4
    with _built_elsewhere(m / "c.npz"), _built_elsewhere(m / ".d.12.npz"), _built_elsewhere(m / "a.npz"):
        busy = [i.busy for e in sorted(m.iterdir()) for i in A._file_items("methods/m", e, later)]
    assert busy == [True, False, True, True, False]  # c.npz's lock, made by its builder, is an item too
    link = tmp_path / "link"
    link.symlink_to(m / "dir", target_is_directory=True)
    [item] = A._file_items("methods/m", link, t)
    assert item.path == link and item.bytes == link.lstat().st_size


def test_a_file_being_written_in_a_method_cache_folder_is_busy(tmp_path):
    m = tmp_path / "m"
    _file(m / "dir" / "sub" / ".e.1.npz", 2)
    _file(m / "dir" / "done.npz", 2)
    assert [(i.path.name, i.busy) for i in A._file_items("methods/m", m / "dir", time.time())] == [
        ("done.npz", False), (".e.1.npz", True)]


def test_method_items_a_link_named_like_a_cache_folder_is_one_file(tmp_path):
    """``fasttext`` or ``products`` that is a link is no folder of the cache: the link is one item, its target
    is not walked."""
    outside = tmp_path / "outside"
    _file(outside / "x.npz", 100)
    _product(outside / "kind" / "k", 10, {"created": 1})
    m = tmp_path / "m"
    m.mkdir()
    (m / "fasttext").symlink_to(outside, target_is_directory=True)
    (m / "products").symlink_to(outside, target_is_directory=True)
    items = list(A._method_items(m))
    assert [(i.kind, i.path.name) for i in items] == [("methods/m", "fasttext"), ("methods/m", "products")]
    _file(m / "other" / "y.npz", 1)
    _file(m / "fasttext-not" / "z.npz", 1)
    assert [i.path.name for i in A._method_items(m)] == ["fasttext", "z.npz", "y.npz", "products"]
    assert {i.path.name: i.path.parent.name for i in A._method_items(m)}["z.npz"] == "fasttext-not"


def test_method_products_are_products(tmp_path):
    m = tmp_path / "methods" / "clp"
    h1 = _product(m / "products" / "helper-model" / "h1", 10, {"inputs": {"world": "hash"}, "created": 3})
    _file(m / "products" / "loose.bin", 1)
    items = list(A._method_items(m, {"hash": "toy"}))
    assert [(i.kind, i.path, i.world, i.created, i.unfinished) for i in items] == [
        ("methods/clp", h1, "toy", 3.0, False)]
    assert [i.world for i in A._method_items(m)] == ["hash"]


# -- SQLite stores -----------------------------------------------------------------------------------------------------
def test_is_sqlite_by_its_header_only(tmp_path, monkeypatch):
    db = _sqlite(tmp_path / "any-name.txt")
    assert A.is_sqlite(db)
    assert not A.is_sqlite(_file(tmp_path / "short", 0))
    (tmp_path / "almost").write_bytes(A.SQLITE_HEADER[:-1] + b"X" + b"\0" * 100)
    assert not A.is_sqlite(tmp_path / "almost")
    (tmp_path / "header-only").write_bytes(A.SQLITE_HEADER)
    assert A.is_sqlite(tmp_path / "header-only")
    (tmp_path / "late").write_bytes(b"x" + A.SQLITE_HEADER)
    assert not A.is_sqlite(tmp_path / "late")
    link = tmp_path / "link"
    link.symlink_to(db)
    assert not A.is_sqlite(link)  # a link is not the store (the store is where it points)
    assert not A.is_sqlite(tmp_path) and not A.is_sqlite(tmp_path / "absent")

    def refuse(*a, **k):
        raise PermissionError("no")

    monkeypatch.setattr(A, "open", refuse, raising=False)
    assert not A.is_sqlite(db)


def test_store_file_knows_a_store_its_companions_and_its_lock(tmp_path):
    """The default store's files by name; any SQLite file by its header, its -journal, -wal and -shm files when
    the database is beside them; a store's ``.<name>.runs.lock``. Nothing else."""
    for name in ("mlflow.db", "mlflow.db-wal", "mlflow.db-journal", ".team.db.runs.lock", ".x.runs.lock"):
        assert A.store_file(_file(tmp_path / name, 1)), name
    db = _sqlite(tmp_path / "team")
    assert A.store_file(db)
    for c in ("-journal", "-wal", "-shm"):
        assert A.store_file(_file(tmp_path / f"team{c}", 1)), c
        assert not A.store_file(_file(tmp_path / f"other{c}", 1)), c  # no database beside it
        assert not A.store_file(_file(tmp_path / f"team{c}x", 1)), c
    _file(tmp_path / "plain", 10)
    for name in ("plain-wal", "team.db.runs.lock", "runs.lock", ".team.db.runs.locked", "mlflow.d", "a-mlflow.db",
                 "plain"):
        assert not A.store_file(_file(tmp_path / name, 1) if not (tmp_path / name).exists() else tmp_path / name), name


def test_holds_store_looks_below_a_folder_but_not_through_links(tmp_path):
    d = tmp_path / "cache-entry"
    _file(d / "a" / "data.bin", 10)
    assert A.holds_store(d) is None
    (d / "a" / "mlflow.db-old").mkdir()  # a folder so named is no store's file
    _file(d / "a" / "mlflow.db-old" / "x", 1)
    assert A.holds_store(d) is None
    db = _sqlite(d / "a" / "b" / "log")
    assert A.holds_store(d) == db
    assert A.holds_store(db) == db
    link = tmp_path / "link"
    link.symlink_to(d, target_is_directory=True)
    assert A.holds_store(link) is None
    assert A.holds_store(_file(tmp_path / "x.bin", 1)) is None


# -- what prune selects --------------------------------------------------------------------------------------------
def _item(kind: str, name: str = "x", created: float = 0.0, world: str = "-", **kw) -> A.Item:
    return A.Item(kind, Path("/nowhere") / name, 1, created, world, **kw)


def test_summarize_sums_per_kind_and_world_largest_first():
    items = [A.Item("init", Path("a"), 10, 0, "w1"), A.Item("init", Path("b"), 5, 0, "w1"),
             A.Item("init", Path("c"), 15, 0, "w2"), A.Item("cpt", Path("d"), 30, 0, "w1"),
             A.Item("boards", Path("e"), 15, 0, "-"), A.Item("boards", Path("f"), 15, 0, "a")]
    assert A.summarize(items) == [
        {"kind": "cpt", "world": "w1", "items": 1, "bytes": 30},
        {"kind": "boards", "world": "-", "items": 1, "bytes": 15},
        {"kind": "boards", "world": "a", "items": 1, "bytes": 15},
        {"kind": "init", "world": "w1", "items": 2, "bytes": 15},
        {"kind": "init", "world": "w2", "items": 1, "bytes": 15},
    ]
    assert A.summarize(items, by_world=False) == [
        {"kind": "boards", "world": "", "items": 2, "bytes": 30},
        {"kind": "cpt", "world": "", "items": 1, "bytes": 30},
        {"kind": "init", "world": "", "items": 3, "bytes": 30},
    ]
    assert A.summarize([]) == []


def test_kind_matches():
    assert A.kind_matches("init", ["cpt", "init"]) and not A.kind_matches("init", ["cpt"])
    assert A.kind_matches("methods/clp", ["methods"]) and A.kind_matches("methods/clp", ["methods/clp"])
    assert not A.kind_matches("methods/clp", ["methods/omp"]) and not A.kind_matches("methods/clp", ["method"])
    assert not A.kind_matches("methodsx", ["methods"]) and not A.kind_matches("methods", ["methods/clp"])
    assert A.kind_matches("tagger-test", ["tagger"]) and A.kind_matches("tagger", ["tagger"])
    assert not A.kind_matches("tagger", ["tagger-test"]) and not A.kind_matches("init", ["tagger"])
    assert not A.kind_matches("init", []) and not A.kind_matches("cpt", ["methods"])


def test_select_never_takes_results_builds_or_the_unknown():
    kinds = ("tracking", "leaderboards", "other", "init", "world", "downloads", "build-envs", "methods/clp",
             "mappings", "boards", "corpus")
    items = [_item(k, k.replace("/", "-")) for k in kinds]
    items.append(_item("cpt", "busy", busy=True))
    names = [i.path.name for i in A.select(items, None, None, None, now=0.0)]
    assert names == ["init", "methods-clp", "mappings", "boards", "corpus"]  # without --kind: no world, no inputs
    picked = A.select(items, ["world", "downloads", "build-envs", "tracking", "leaderboards", "other", "cpt"], None,
                      None, now=0.0)
    assert [i.path.name for i in picked] == ["world", "downloads", "build-envs"]
    assert [i.path.name for i in A.select(items, ["methods"], None, None, now=0.0)] == ["methods-clp"]
    assert [i.path.name for i in A.select(items, [], None, None, now=0.0)] == names


def test_select_by_world_age_and_finished_cells():
    items = [_item("init", "a", created=100.0, world="w1", finished=True),
             _item("init", "b", created=50.0, world="w2"),
             _item("cpt", "c", created=40.0, world="w1")]
    assert [i.path.name for i in A.select(items, None, "w1", None, now=0.0)] == ["a", "c"]
    assert [i.path.name for i in A.select(items, None, "", None, now=0.0)] == ["a", "b", "c"]
    # older than 50 s at t=100: created at or before t=50
    assert [i.path.name for i in A.select(items, None, None, 50.0, now=100.0)] == ["b", "c"]
    assert [i.path.name for i in A.select(items, None, None, 0.0, now=100.0)] == ["a", "b", "c"]
    assert [i.path.name for i in A.select(items, ["init"], None, None, now=0.0, finished=True)] == ["a"]
    assert [i.path.name for i in A.select(items, None, None, None, finished=True)] == ["a"]
    fresh = [_item("init", "new", created=time.time() - 10)]
    assert A.select(fresh, None, None, 3600.0) == [] and A.select(fresh, None, None, 1.0) == fresh


def test_known_kinds_are_the_harness_kinds_and_those_in_the_home():
    base = ["boards", "build-envs", "corpus", "cpt", "downloads", "init", "mappings", "methods", "tagger",
            "tagger-test", "world"]
    assert A.known_kinds([]) == base
    assert A.known_kinds([_item("methods/clp"), _item("init"), _item("zz")]) == sorted([*base, "methods/clp", "zz"])


# -- leases, locks, what prune leaves ------------------------------------------------------------------------------
def test_leased_and_in_use(tmp_path):
    home = tmp_path / "home"
    p = _product(home / "products" / "init" / "k", marker={})
    item = A.product_item(p, "init")
    assert A.leased(item, home) and A.leased(item, str(home)) and not A.in_use(item, home)
    with _leased_elsewhere(p):
        assert A.in_use(item, home) and A._lease_held(p)
    assert not A.in_use(item, home) and not A._lease_held(p)
    with _built_elsewhere(p):
        assert A.in_use(item, home)
    outside = _product(tmp_path / "outside" / "k")
    far = A.product_item(outside, "init")
    assert not A.leased(far, home)
    with _leased_elsewhere(outside), _built_elsewhere(outside):
        assert not A.in_use(far, home)  # not the home's
    link = home / "products" / "init" / "link"
    link.symlink_to(p, target_is_directory=True)
    linked = A.Item("init", link, 0, 0)
    assert not A.leased(linked, home)
    with _leased_elsewhere(link):
        assert not A.in_use(linked, home)


def test_lease_held_without_fcntl_or_lease_file(tmp_path, monkeypatch):
    p = _product(tmp_path / "k")
    assert not A._lease_held(p) and not lease_file(p).exists()  # nothing made to tell
    with _leased_elsewhere(p):
        monkeypatch.setattr(A, "fcntl", None)
        assert not A._lease_held(p)


def test_kept_says_why_an_item_stays(tmp_path):
    home = tmp_path / "home"
    p = _product(home / "products" / "init" / "k", marker={})
    item = A.product_item(p, "init")
    assert A.kept(item, home) == ""
    with _leased_elsewhere(p):
        assert A.kept(item, home) == "in use" and A.kept(item, home, force=True) == ""
    with _built_elsewhere(p):
        assert A.kept(item, home) == "being built" and A.kept(item, home, force=True) == "being built"
    with _leased_elsewhere(p), _built_elsewhere(p):
        assert A.kept(item, home) == "being built"
    _sqlite(p / "inside.db")  # a product's own tree is the harness's: not looked into
    assert A.kept(item, home) == ""
    for kind in ("mappings", "boards", "methods/clp"):
        d = _product(home / "cache" / kind / "e")
        _sqlite(d / "deep" / "store")
        assert A.kept(A.Item(kind, d, 0, 0), home, force=True) == "an SQLite store", kind
        _file(d / "deep" / "store", 5)
        assert A.kept(A.Item(kind, d, 0, 0), home) == "", kind
        _sqlite(d / "deep" / "store-x")
        assert A.kept(A.Item(kind, _file(d.parent / "f", 1), 0, 0, extra=(d,)), home) == "an SQLite store", kind
        (d / "deep" / "store-x").unlink()
    db = _sqlite(home / "downloads" / "pkg.db")
    assert A.kept(A.Item("downloads", db, 0, 0), home) == "an SQLite store"
    wal = _file(home / "downloads" / "pkg.db-wal", 1)
    assert A.kept(A.Item("downloads", _file(home / "downloads" / "x", 1), 0, 0, extra=(wal,)), home) == (
        "an SQLite store")
    model = _file(home / "cache" / "methods" / "m" / "fasttext" / "a.npz", 5)
    guarded = A.Item("methods/m", model, 5, 0, guard=model.with_name("a.bin"))
    with _built_elsewhere(model.with_name("a.bin")):
        assert A.kept(guarded, home) == "being built"
    with _leased_elsewhere(model.with_name("a.bin")):
        assert A.kept(guarded, home) == "in use"
    link = home / "products" / "init" / "link"
    link.symlink_to(p, target_is_directory=True)
    with _leased_elsewhere(link):
        assert A.kept(A.Item("init", link, 0, 0), home) == ""  # a link is no product anyone leases


# -- remove ------------------------------------------------------------------------------------------------------------
def test_remove_takes_the_product_with_its_lock_and_lease(tmp_path):
    home = tmp_path / "home"
    base = home / "products" / "init"
    p = _product(base / "k", 300, {"created": 1})
    (base / "k.lock").write_text("")
    (base / "k.lease").write_text("")
    other = _product(base / "k2", 10, {"created": 1})
    item = A.product_item(p, "init")
    fds = _open_fds()
    skipped: list[A.Item] = []
    assert A.remove([item], home, skipped=skipped) == item.bytes > 300
    assert not p.exists() and sorted(x.name for x in base.iterdir()) == ["k2"] and skipped == []
    assert _open_fds() == fds  # the lock and lease it took are let go
    assert not held(p) and other.is_dir()
    assert A.remove([], home) == 0


def test_remove_drops_this_process_own_lease_first(tmp_path):
    home = tmp_path / "home"
    p = _product(home / "products" / "init" / "k", 10, {})
    lease(p)
    try:
        assert A.remove([A.product_item(p, "init")], str(home)) > 0
        assert not p.exists() and not lease_file(p).exists()
    finally:
        release_lease(p)


def test_remove_leaves_what_is_read_built_or_a_store_and_says_why(tmp_path):
    home = tmp_path / "home"
    base = home / "products" / "init"
    read, built = _product(base / "read", 10, {}), _product(base / "built", 20, {})
    mapping = _product(home / "cache" / "mappings" / "m")
    _sqlite(mapping / "store")
    free = _product(base / "free", 40, {})
    items = [A.product_item(read, "init"), A.product_item(built, "init"), A.Item("mappings", mapping, 9, 0),
             A.product_item(free, "init")]
    skipped: list[A.Item] = []
    fds = _open_fds()
    with _leased_elsewhere(read), _built_elsewhere(built):
        assert A.remove(items, home, skipped=skipped) == items[3].bytes
        assert [(i.path.name, i.why) for i in skipped] == [("read", "in use"), ("built", "being built"),
                                                            ("m", "an SQLite store")]
        assert read.is_dir() and built.is_dir() and (mapping / "store").is_file() and not free.exists()
        assert lease_file(read).is_file() and lock_file(built).is_file()
        assert A.remove(items[:3], home) == 0  # without a list for them, they are left all the same
        for i in items:
            i.why = ""
        assert A.remove(items[:3], home, force=True, skipped=skipped) == items[0].bytes
        assert not read.exists() and built.is_dir() and (mapping / "store").is_file()
        assert [i.why for i in items[:3]] == ["", "being built", "an SQLite store"]
    assert _open_fds() == fds


def test_remove_refuses_anything_outside_the_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    outside = _product(tmp_path / "outside", 10, {})
    for item in (A.Item("init", outside, 1, 0), A.Item("init", home, 1, 0),
                 A.Item("init", _product(home / "in"), 1, 0, extra=(outside,)),
                 A.Item("init", home / ".." / "outside", 1, 0)):
        with pytest.raises(ConfigError) as exc:
            A.remove([item], home)
        assert str(exc.value).startswith("refusing to remove ") and str(home.resolve()) in str(exc.value)
        assert "is not inside the harness home" in str(exc.value)
    assert outside.is_dir() and home.is_dir() and (home / "in").is_dir()


def test_remove_a_method_files_group_under_its_guard(tmp_path):
    """A fastText model goes with its ``.json``, and the lock and lease of its ``.bin`` name; a lock left alone
    goes as its item."""
    home = tmp_path / "home"
    ft = home / "cache" / "methods" / "m" / "fasttext"
    _file(ft / "a.npz", 10)
    _file(ft / "a.json", 1)
    _file(ft / "b.npz.lock", 0)
    items = list(A._fasttext_items("methods/m", ft, time.time()))
    with _leased_elsewhere(ft / "a.bin"):
        skipped: list[A.Item] = []
        assert A.remove(items[:1], home, skipped=skipped) == 0 and skipped[0].why == "in use"
    assert A.remove(items[:1], home) == 11
    assert sorted(p.name for p in ft.iterdir()) == ["b.npz.lock"]
    orphan = list(A._file_items("methods/m", ft / "b.npz.lock", time.time()))
    assert A.remove(orphan, home) == 0 and list(ft.iterdir()) == []


def test_remove_leaves_the_lock_while_a_part_of_the_item_stays(tmp_path, monkeypatch):
    """When the item's path is still there after removal (another process made it again), its lock and lease
    stay: they are that product's."""
    home = tmp_path / "home"
    p = _product(home / "products" / "init" / "k", 10, {})
    real = A._delete

    def delete_and_rebuild(path: Path) -> None:
        real(path)
        if path == p:
            _product(p, 1, {})

    monkeypatch.setattr(A, "_delete", delete_and_rebuild)
    item = A.product_item(p, "init")
    assert item.extra == ()  # the lock and lease are made by the removal itself
    A.remove([item], home)
    assert p.is_dir() and lease_file(p).is_file() and lock_file(p).is_file()
    monkeypatch.setattr(A, "_delete", real)
    A.remove([item], home, skipped=[])  # once removed for good, they go with it
    assert sorted(x.name for x in p.parent.iterdir()) == []


def test_guard_takes_the_lock_then_the_lease(tmp_path):
    home = tmp_path / "home"
    p = _product(home / "products" / "init" / "k", 10, {})
    item = A.product_item(p, "init")
    why, fds = A._guard(item, home, False)
    try:
        assert why == "" and len(fds) == 2 and held(p) and A._lease_held(p)
    finally:
        for fd in fds:
            os.close(fd)
    assert not held(p) and not A._lease_held(p)
    with _built_elsewhere(p):
        assert A._guard(item, home, True) == ("being built", [])
    with _leased_elsewhere(p):
        assert A._guard(item, home, False) == ("in use", [])
        assert not held(p)  # the lock it took is let go
        why, fds = A._guard(item, home, True)
        assert why == "" and len(fds) == 1 and held(p)
        os.close(fds[0])
    link = home / "products" / "init" / "link"
    link.symlink_to(p, target_is_directory=True)
    assert A._guard(A.Item("init", link, 0, 0), home, False) == ("", [])
    assert not lock_file(link).exists()
    gone = A.Item("init", home / "products" / "cpt" / "k", 0, 0)
    assert A._guard(gone, home, False) == ("", []) and not (home / "products" / "cpt").exists()


def test_delete_moves_a_folder_away_first_and_follows_no_link(tmp_path, monkeypatch):
    d = _product(tmp_path / "d", 10)
    target = _product(tmp_path / "target", 10)
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    A._delete(link)
    assert not link.is_symlink() and (target / "weights.bin").is_file()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    A._delete(dangling)
    assert not dangling.is_symlink()
    f = _file(tmp_path / "f", 1)
    A._delete(f)
    assert not f.exists()
    A._delete(tmp_path / "absent")
    seen = []
    real = A.shutil.rmtree

    def rmtree(path, onerror=None):
        seen.append(Path(path).name)
        assert not d.exists() and Path(path).is_dir()  # out of the way before it is emptied
        onerror(os.unlink, str(path), (FileNotFoundError, FileNotFoundError("gone"), None))  # vanished meanwhile
        real(path, onerror=onerror)

    monkeypatch.setattr(A.shutil, "rmtree", rmtree)
    A._delete(d)
    assert not d.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["target"]
    assert len(seen) == 1 and re.fullmatch(r"\.tmp-removed-d-[0-9a-f]{8}", seen[0])


def test_gone_already_passes_over_only_a_vanished_entry():
    A._gone_already(os.unlink, "x", (FileNotFoundError, FileNotFoundError("x"), None))
    with pytest.raises(PermissionError):
        A._gone_already(os.unlink, "x", (PermissionError, PermissionError("x"), None))
