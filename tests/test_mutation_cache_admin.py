"""The cache library (:mod:`harness.cache_admin`), function by function, in process, on fabricated homes: what is a
product and of which kind, its size, world and age, which builds may still run, which world each cell ran in and how
it ended, and the whole home scanned entry by entry into items of each kind. Written to kill the mutants of
scripts/mutation.sh that the command-line tests let live; what ``prune`` selects and removes is in
test_mutation_cache_admin_prune.py."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from harness import cache_admin as A
from harness.core.cache import DONE, cpt_product_key
from harness.core.errors import ConfigError
from harness.core.hashing import hash_obj
from tests._mutation_cache_admin_helpers import DAY, _built_elsewhere, _file, _product, _set_mtime, _sqlite


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
