"""What ``prune`` of the cache library (:mod:`harness.cache_admin`) may touch, in process, on fabricated homes: the
method caches as items (a model with what shares its stem, a file being written), what belongs to a tracking store
(an SQLite file under any name), what ``prune`` selects, and what it removes or leaves (a leased, a building, an
SQLite-holding item) and why. A lock or lease "held elsewhere" is held here through another open file, which
``flock`` treats as another holder, as it treats another process. Written to kill the mutants of
scripts/mutation.sh that the command-line tests let live."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from harness import cache_admin as A
from harness.core.cache import lease, lease_file, release_lease
from harness.core.errors import ConfigError
from harness.core.locks import held, lock_file
from tests._mutation_cache_admin_helpers import (
    DAY,
    _built_elsewhere,
    _file,
    _leased_elsewhere,
    _open_fds,
    _product,
    _sqlite,
)


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
