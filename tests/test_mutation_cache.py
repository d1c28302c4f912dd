"""The product cache's data safety, in process and on temporary folders (no world build, no subprocess).

What is protected: a product's key and folder are the hash of its inputs; a product is published whole (built in a
``.tmp-<key>-<id>`` sibling, renamed into place with its marker) or not at all; a damaged or unfinished product is
caught, moved away in one rename and never used; once checked, a file is trusted by its stats only where they were
recorded after its last change. Another process's lease is stood in for by another open file description
of the same file: ``flock`` locks belong to the open description, so this process sees it exactly as it would see
another process's. Leases, temporary folders, a world build's inputs and cached arrays: test_mutation_cache_safety.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from harness.core import cache as cache_mod
from harness.core.cache import (
    DONE,
    VERIFIED,
    Product,
    ProductCache,
    builders_of,
    cpt_product_key,
    file_digests,
    file_stat,
    lease_file,
    release_lease,
    verify_product,
)
from harness.core.hashing import hash_obj, stable_json
from tests._mutation_cache_helpers import (
    LOGGER,
    _Clock,
    _foreign_shared,
    _fresh_process,  # noqa: F401
    _model_like,
    _open_fds,
    _product,
    _prunable,
    _sha,
)


# -- keys and paths -----------------------------------------------------------------------------------------------
def test_a_products_key_and_folder_are_the_hash_of_its_inputs(tmp_path, monkeypatch):
    """The key is hash_obj of the inputs (16 hex digits, key order irrelevant), the folder products/<kind>/<key>
    of the home (HARNESS_HOME when no root is given)."""
    cache = ProductCache(tmp_path)
    assert cache.root == tmp_path / "products"
    key, path = cache.path_for("init", {"n": 2, "model": "xlmr"})
    assert key == hash_obj({"model": "xlmr", "n": 2}) == "292a10842fdf7c0a"
    assert path == tmp_path / "products" / "init" / key
    assert cache.path_for("init", {"model": "xlmr", "n": 3})[0] != key
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    assert ProductCache().root == (tmp_path / "home").resolve() / "products"


def test_a_cpt_products_key_hashes_its_init_key_settings_and_seed():
    """The CPT product's folder name: the hash of {init, cpt, seed}, each of them part of it."""
    settings = {"steps": 10, "lr": 0.001}
    key = cpt_product_key("0123456789abcdef", settings, 3)
    assert key == hash_obj({"init": "0123456789abcdef", "cpt": settings, "seed": 3}) == "c1a6aba3c942ad2d"
    assert cpt_product_key("0123456789abcdef", settings, 4) != key
    assert cpt_product_key("0123456789abcdee", settings, 3) != key
    assert cpt_product_key("0123456789abcdef", {"steps": 11, "lr": 0.001}, 3) != key


# -- building and publishing --------------------------------------------------------------------------------------
def test_a_product_is_built_in_a_temporary_sibling_and_published_whole(tmp_path, monkeypatch):
    """The build writes into .tmp-<key>-<8 hex> beside the product, where nothing reads it; the product appears
    at once with its marker (kind, key, canonical inputs, duration, files' sizes and sha256s, the build's extra);
    no temporary folder is left; the builder holds its lease."""
    monkeypatch.setattr(cache_mod, "time", _Clock(100.0, 102.34567, 103.5, 104.0))
    cache = ProductCache(tmp_path / "fresh")
    inputs = {"model": Path("/m"), "lr": 0.5, "langs": ("fr", "de"), "name": "é"}
    key, path = cache.path_for("init", inputs)
    seen = []

    def build(d: Path) -> dict:
        seen.append(d)
        assert d.parent == path.parent and re.fullmatch(rf"\.tmp-{key}-[0-9a-f]{{8}}", d.name), d.name
        assert d.is_dir() and not path.exists()
        _model_like(d)
        return {"extra": 7}

    p = cache.get_or_build("init", inputs, build)
    assert p == Product("init", key, path, cached=False)
    assert not seen[0].exists() and sorted(x.name for x in path.parent.iterdir()) == sorted(
        [key, f"{key}.lease", f"{key}.lock"])
    marker = json.loads((path / DONE).read_text(encoding="utf-8"))
    assert p.info == marker
    data = (bytes(range(256)) * 4, b'{"a": 1}')
    assert marker == {"kind": "init", "key": key, "inputs": json.loads(stable_json(inputs)), "seconds": 2.346,
                      "created": 103.5, "extra": 7,
                      "files": {"model.bin": {"size": 1024, "sha256": _sha(data[0])},
                                "sub/config.json": {"size": 8, "sha256": _sha(data[1])}}}
    assert marker["inputs"] == {"langs": ["fr", "de"], "lr": "0.5", "model": "/m", "name": "é"}
    assert str(path) in cache_mod._LEASES and not _prunable(path)
    assert verify_product(path) is None


def test_a_build_that_returns_nothing_and_a_second_product_of_the_kind(tmp_path):
    """A build may return None (no extra info); a second product of the same kind builds beside the first."""
    cache = ProductCache(tmp_path)
    a = cache.get_or_build("init", {"a": 1}, lambda d: (d / "x").write_text("1") and None)
    b = cache.get_or_build("init", {"a": 2}, lambda d: (d / "x").write_text("2") and None)
    assert (a.path / "x").read_text() == "1" and (b.path / "x").read_text() == "2"
    assert set(a.info) == {"kind", "key", "inputs", "seconds", "created", "files"}


def test_a_finished_product_is_found_and_leased_not_built_again(tmp_path, caplog):
    """A second get_or_build finds it (cached=True, same folder), leased by this process, without building."""
    cache = ProductCache(tmp_path)
    built = cache.get_or_build("init", {"a": 1}, _model_like)
    release_lease(built.path)
    assert _prunable(built.path)

    def never(d):
        raise AssertionError("built again")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        found = cache.get_or_build("init", {"a": 1}, never)
    assert found == Product("init", built.key, built.path, cached=True)
    assert not _prunable(found.path)
    assert f"init {built.key}: cached at {built.path}" in caplog.messages


def test_a_product_built_by_another_process_while_this_one_waited_is_used(tmp_path, monkeypatch, caplog):
    """The look-up under the build lock finds the product another builder finished meanwhile: no second build."""
    cache = ProductCache(tmp_path)
    built = cache.get_or_build("init", {"a": 1}, _model_like)
    release_lease(built.path)
    real = ProductCache.lookup
    looks = []

    def lookup(self, kind, inputs):
        looks.append(kind)
        return None if len(looks) == 1 else real(self, kind, inputs)  # not there yet at the first look

    waits = []
    real_exclusive = cache_mod.exclusive

    def exclusive(path, waiting=None):
        waits.append((path, waiting))
        return real_exclusive(path, waiting)

    monkeypatch.setattr(ProductCache, "lookup", lookup)
    monkeypatch.setattr(cache_mod, "exclusive", exclusive)

    def never(d):
        raise AssertionError("built twice")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        found = cache.get_or_build("init", {"a": 1}, never)
    assert found.cached and found.path == built.path and len(looks) == 2
    assert waits == [(built.path, f"init {built.key}: another process is building it, waiting for it")]
    assert f"init {built.key}: built by another process, at {built.path}" in caplog.messages


class _Killed(BaseException):
    """A build stopped from outside (as by Ctrl-C): not an Exception."""


@pytest.mark.parametrize("error", [RuntimeError, _Killed])
def test_a_failed_build_leaves_no_folder_no_lease_and_no_descriptor(tmp_path, error):
    """A build that fails (or is interrupted) leaves neither its temporary folder, nor a product, nor a lease file,
    nor an open descriptor: only the build's empty lock file."""
    cache = ProductCache(tmp_path)
    key, path = cache.path_for("init", {"a": 1})
    seen = []

    def build(d):
        seen.append(d)
        (d / "partial").write_text("x")
        raise error("boom")

    before = _open_fds()
    with pytest.raises(error):
        cache.get_or_build("init", {"a": 1}, build)
    assert not seen[0].exists() and not path.exists() and not lease_file(path).exists()
    assert [p.name for p in path.parent.iterdir()] == [f"{key}.lock"]
    assert str(path) not in cache_mod._LEASES and _open_fds() == before


def test_a_failed_build_keeps_the_lease_file_another_process_holds(tmp_path):
    """Should another process lease the product being built, the failed build leaves that lease file alone."""
    cache = ProductCache(tmp_path)
    key, path = cache.path_for("init", {"a": 1})
    path.parent.mkdir(parents=True)
    other = _foreign_shared(path)
    try:
        with pytest.raises(RuntimeError):
            cache.get_or_build("init", {"a": 1}, lambda d: (_ for _ in ()).throw(RuntimeError("boom")))
        assert lease_file(path).exists() and str(path) not in cache_mod._LEASES
    finally:
        os.close(other)


def test_an_unfinished_folder_in_the_way_is_replaced_by_the_finished_product(tmp_path, monkeypatch):
    """A folder without a marker at the product's place (an older layout, one that could not be moved away) is
    replaced by the finished product, not merged with it."""
    cache = ProductCache(tmp_path)
    key, path = cache.path_for("init", {"a": 1})
    path.mkdir(parents=True)
    (path / "junk").write_text("half")
    monkeypatch.setattr(cache_mod, "_remove", lambda p: None)  # it could not be moved away
    p = cache.get_or_build("init", {"a": 1}, lambda d: (d / "ok").write_text("y") and None)
    assert sorted(x.name for x in p.path.iterdir()) == [DONE, VERIFIED, "ok"]


# -- look-up: damaged or unfinished products are never used -------------------------------------------------------
def test_nothing_found_creates_nothing(tmp_path):
    cache = ProductCache(tmp_path)
    assert cache.lookup("init", {"a": 1}) is None
    assert not (tmp_path / "products").exists() and cache_mod._LEASES == {}


def test_a_damaged_product_is_reported_moved_away_and_not_leased(tmp_path, caplog):
    """A product whose file no longer matches its marker: one warning naming it and what is wrong, the folder
    gone (no .tmp-damaged- left), no lease kept on it."""
    cache = ProductCache(tmp_path)
    p = cache.get_or_build("init", {"a": 1}, _model_like)
    release_lease(p.path)
    (p.path / "model.bin").write_bytes(b"short")
    cache_mod._CHECKED.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert cache.lookup("init", {"a": 1}) is None
    assert (f"init product {p.key} at {p.path} is damaged (model.bin has 5 bytes, 1024 expected); "
            "removing it and computing it again") in caplog.messages
    assert not p.path.exists() and str(p.path) not in cache_mod._LEASES
    assert sorted(x.name for x in p.path.parent.iterdir()) == [f"{p.key}.lease", f"{p.key}.lock"]
    assert _prunable(p.path)


def test_a_folder_without_marker_is_reported_and_removed(tmp_path, caplog):
    cache = ProductCache(tmp_path)
    key, path = cache.path_for("init", {"a": 1})
    path.mkdir(parents=True)
    (path / "half").write_text("x")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert cache.lookup("init", {"a": 1}) is None
    assert f"init product {key} at {path} has no completion marker ({DONE}); computing it again" in caplog.messages
    assert not path.exists() and list(path.parent.iterdir()) == []


def test_a_product_pruned_before_its_lease_was_taken_is_not_found(tmp_path, monkeypatch):
    """The marker checked, then a prune removes the product before the lease is taken: the look-up finds nothing
    (it does not use a folder that is gone) and keeps no lease."""
    cache = ProductCache(tmp_path)
    p = cache.get_or_build("init", {"a": 1}, _model_like)
    release_lease(p.path)
    real = cache_mod.lease

    def lease_after_prune(path):
        shutil.rmtree(path)
        real(path)

    monkeypatch.setattr(cache_mod, "lease", lease_after_prune)
    assert cache.lookup("init", {"a": 1}) is None
    assert str(p.path) not in cache_mod._LEASES and _prunable(p.path)


def test_removing_a_damaged_product_is_one_rename_then_a_delete_that_never_raises(tmp_path, monkeypatch):
    """The damaged folder is first renamed to .tmp-damaged-<name>-<8 hex> (no reader sees it half-deleted, and
    clean_stale knows the name), then deleted; a delete that fails does not raise; a folder gone already is let be."""
    path = tmp_path / "init" / "abc"
    path.mkdir(parents=True)
    (path / "f").write_text("x")
    deleted = []

    def failing_rmtree(p, ignore_errors=False):
        deleted.append(Path(p))
        assert not path.exists() and Path(p).is_dir()  # moved away before the delete starts
        if not ignore_errors:
            raise PermissionError(p)

    monkeypatch.setattr(cache_mod.shutil, "rmtree", failing_rmtree)
    cache_mod._remove(path)
    assert len(deleted) == 1 and deleted[0].parent == path.parent
    assert re.fullmatch(r"\.tmp-damaged-abc-[0-9a-f]{8}", deleted[0].name), deleted[0].name
    assert path in builders_of(deleted[0])  # its product's build lock guards it
    cache_mod._remove(tmp_path / "init" / "gone")  # nothing there: nothing done, nothing raised
    assert len(deleted) == 1


# -- verification: caught once, then trusted by stats -------------------------------------------------------------
@pytest.mark.parametrize(("marker", "problem"), [
    (None, f"its marker {DONE} is unreadable: FileNotFoundError"),
    ("{not json", f"its marker {DONE} is unreadable: JSONDecodeError"),
    ("[1, 2]", f"its marker {DONE} is not an object"),
    ('{"files": [1]}', f"its marker {DONE} lists no files"),
    ('{"files": null}', None),  # from before the file lists: trusted
    ('{"kind": "init"}', None),
])
def test_an_unreadable_or_odd_marker(tmp_path, marker, problem):
    p = tmp_path / "prod"
    p.mkdir()
    if marker is not None:
        (p / DONE).write_text(marker)
    assert verify_product(p) == problem
    assert verify_product(p, full=True) == problem


@pytest.mark.parametrize("full", [False, True])
def test_a_missing_short_or_changed_file_is_caught(tmp_path, full):
    """Missing (or a folder in its place), another size, the same size but other bytes: each is named."""
    p = _product(tmp_path, {"a.bin": b"12345", "d/b.bin": b"abc"})
    assert verify_product(p, full=full) is None
    for damage, problem in [
        (lambda: (p / "a.bin").unlink(), "a.bin is missing"),
        (lambda: ((p / "a.bin").unlink(), (p / "a.bin").mkdir()), "a.bin is missing"),
        (lambda: (p / "a.bin").write_bytes(b"123"), "a.bin has 3 bytes, 5 expected"),
        (lambda: (p / "d" / "b.bin").write_bytes(b"abd"), "d/b.bin does not match its sha256"),
    ]:
        if (p / "a.bin").is_dir():
            (p / "a.bin").rmdir()
        (p / "a.bin").write_bytes(b"12345")
        (p / "d" / "b.bin").write_bytes(b"abc")
        cache_mod._CHECKED.clear()
        damage()
        assert verify_product(p, full=full) == problem
        assert str(p) not in cache_mod._CHECKED


def test_a_product_checked_by_this_process_is_checked_again_only_when_its_marker_changes(tmp_path):
    """Checked once a process (by the marker's mtime); a new marker is checked again; full checks every time."""
    p = _product(tmp_path, {"a.bin": b"12345"})
    assert verify_product(p) is None
    assert cache_mod._CHECKED == {str(p): (p / DONE).stat().st_mtime_ns}
    (p / "a.bin").write_bytes(b"1")
    assert verify_product(p) is None  # checked already in this process
    assert verify_product(p, full=True) == "a.bin has 1 bytes, 5 expected"
    st = (p / DONE).stat()
    os.utime(p / DONE, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert verify_product(p) == "a.bin has 1 bytes, 5 expected"


def _record(p: Path, rel: str, record_ns: int, stats: list[int] | None = None) -> None:
    """The stat record of ``p`` saying ``rel`` has ``stats`` (default: its stats now), written at ``record_ns``."""
    (p / VERIFIED).write_text(json.dumps({"files": {rel: stats or file_stat((p / rel).stat())}}))
    os.utime(p / VERIFIED, ns=(record_ns, record_ns))


def _rotted(tmp_path: Path, mtime_ns: int | None = None) -> tuple[Path, Path]:
    """A product whose file changed (same size) under the marker; its mtime set to ``mtime_ns`` (default: an
    hour ago)."""
    p = _product(tmp_path, {"w.bin": b"good-bytes"})
    f = p / "w.bin"
    f.write_bytes(b"evil-bytes")
    t = mtime_ns if mtime_ns is not None else time.time_ns() - 3600 * 10**9
    os.utime(f, ns=(t, t))
    return p, f


def test_a_file_is_trusted_by_stats_recorded_after_its_last_change(tmp_path):
    """A file whose stats are those recorded, changed before the record was written, is not hashed again (bit rot
    under the record passes); ``full`` hashes it and catches the change."""
    p, f = _rotted(tmp_path)
    _record(p, "w.bin", f.stat().st_ctime_ns + 10**9)
    assert verify_product(p) is None
    assert verify_product(p, full=True) == "w.bin does not match its sha256"


def test_stats_other_than_those_recorded_are_hashed_again(tmp_path):
    p, f = _rotted(tmp_path)
    stats = file_stat(f.stat())
    _record(p, "w.bin", f.stat().st_ctime_ns + 10**9, [*stats[:3], stats[3] + 1])  # another inode
    assert verify_product(p) == "w.bin does not match its sha256"


def test_no_record_means_every_file_is_hashed(tmp_path):
    p, f = _rotted(tmp_path)
    assert verify_product(p) == "w.bin does not match its sha256"
    (p / VERIFIED).write_text("{broken")
    assert verify_product(p) == "w.bin does not match its sha256"


def test_a_file_modified_in_the_records_clock_tick_is_hashed_again(tmp_path):
    """Racily clean: a file whose mtime (or ctime) is the record's own time may have changed after the record in
    the same tick, so it is hashed again."""
    future = time.time_ns() + 3600 * 10**9
    p, f = _rotted(tmp_path, mtime_ns=future)  # mtime in the record's tick, ctime long before it
    _record(p, "w.bin", future)
    assert f.stat().st_ctime_ns < future
    assert verify_product(p) == "w.bin does not match its sha256"
    cache_mod._CHECKED.clear()
    p2, f2 = _rotted(tmp_path / "2")  # mtime long before, ctime in the record's tick
    _record(p2, "w.bin", f2.stat().st_ctime_ns)
    assert f2.stat().st_mtime_ns < f2.stat().st_ctime_ns
    assert verify_product(p2) == "w.bin does not match its sha256"


def _hashing(monkeypatch, after=None) -> list[str]:
    """The files the cache hashes, in order (``after(path)`` runs once each is hashed)."""
    hashed = []
    real = cache_mod.sha256_file

    def counting(path, *a, **k):
        out = real(path, *a, **k)
        hashed.append(Path(path).name)
        if after:
            after(Path(path))
        return out

    monkeypatch.setattr(cache_mod, "sha256_file", counting)
    return hashed


def test_the_record_keeps_the_stats_of_files_hashed_and_trusted(tmp_path, monkeypatch):
    """After a check the record holds every file's stats: those trusted and those hashed again; only the moved
    ones are hashed; a check that hashes nothing leaves the record as it is."""
    p = _product(tmp_path, {"a.bin": b"aaaa", "b.bin": b"bbbb"})
    old = time.time_ns() - 3600 * 10**9
    for rel in ("a.bin", "b.bin"):
        os.utime(p / rel, ns=(old, old))
    hashed = _hashing(monkeypatch)
    assert verify_product(p) is None and hashed == ["a.bin", "b.bin"]
    rec = json.loads((p / VERIFIED).read_text())
    assert rec["files"] == {rel: file_stat((p / rel).stat()) for rel in ("a.bin", "b.bin")}
    assert abs(rec["verified"] - time.time()) < 60
    later = time.time_ns() + 3600 * 10**9
    os.utime(p / VERIFIED, ns=(later, later))  # written after every change
    os.utime(p / "b.bin", ns=(old + 10**9, old + 10**9))  # b's stats move (same bytes)
    cache_mod._CHECKED.clear()
    hashed.clear()
    assert verify_product(p) is None and hashed == ["b.bin"]
    rec = json.loads((p / VERIFIED).read_text())
    assert rec["files"] == {rel: file_stat((p / rel).stat()) for rel in ("a.bin", "b.bin")}
    os.utime(p / VERIFIED, ns=(later, later))
    cache_mod._CHECKED.clear()
    hashed.clear()
    assert verify_product(p) is None and hashed == []
    assert (p / VERIFIED).stat().st_mtime_ns == later  # nothing hashed: the record is not written again


def test_a_file_that_moves_while_it_is_hashed_is_not_trusted_later(tmp_path, monkeypatch):
    """A file touched (or removed) during its hash is left out of the record, so the next process hashes it."""
    p = _product(tmp_path, {"a.bin": b"aaaa", "b.bin": b"bbbb"})

    def touch_b(path):
        if path.name == "b.bin":
            os.utime(path, ns=(1, 1))

    _hashing(monkeypatch, touch_b)
    assert verify_product(p) is None
    assert list(json.loads((p / VERIFIED).read_text())["files"]) == ["a.bin"]


def test_a_file_removed_while_it_is_hashed_is_not_trusted_later(tmp_path, monkeypatch):
    p = _product(tmp_path, {"a.bin": b"aaaa", "b.bin": b"bbbb"})
    _hashing(monkeypatch, lambda path: path.unlink() if path.name == "b.bin" else None)
    assert verify_product(p) is None
    assert list(json.loads((p / VERIFIED).read_text())["files"]) == ["a.bin"]


def test_file_digests_lists_every_file_but_the_records_and_records_their_stats(tmp_path, monkeypatch):
    """{relative posix path: size, sha256} of every file below, the marker and stat record left out (at any
    depth); the stats of each file hashed go into _VERIFIED.json, but not those of a file written meanwhile."""
    d = tmp_path / "p"
    (d / "x" / "y").mkdir(parents=True)
    (d / "a.bin").write_bytes(b"aa")
    (d / "x" / "y" / "b.txt").write_bytes(b"bbb")
    (d / "x" / DONE).write_text("{}")
    (d / "x" / VERIFIED).write_text("{}")
    (d / "c.bin").write_bytes(b"c")
    assert file_digests(d) == {"a.bin": {"size": 2, "sha256": _sha(b"aa")}, "c.bin": {"size": 1, "sha256": _sha(b"c")},
                               "x/y/b.txt": {"size": 3, "sha256": _sha(b"bbb")}}
    rec = json.loads((d / VERIFIED).read_text())
    assert rec["files"] == {rel: file_stat((d / rel).stat()) for rel in ("a.bin", "c.bin", "x/y/b.txt")}
    _hashing(monkeypatch, lambda path: path.write_bytes(b"CC") if path.name == "c.bin" else None)
    assert file_digests(d)["c.bin"] == {"size": 1, "sha256": _sha(b"c")}
    assert sorted(json.loads((d / VERIFIED).read_text())["files"]) == ["a.bin", "x/y/b.txt"]


def test_file_stat_is_size_mtime_ctime_and_inode(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"12345")
    st = f.stat()
    assert file_stat(st) == [5, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


@pytest.mark.parametrize(("content", "expected"), [
    (None, ({}, 0)),
    ("{bad", ({}, 0)),
    ("[1]", ({}, 0)),
    ('{"files": [1]}', ({}, 7)),
    ('{"verified": 1}', ({}, 7)),
    ('{"files": {"a": [1, 2, 3, 4]}}', ({"a": [1, 2, 3, 4]}, 7)),
])
def test_a_missing_or_odd_stat_record_trusts_nothing(tmp_path, content, expected):
    """The recorded stats and the record's own mtime_ns; nothing (and time 0) when there is no readable record."""
    if content is not None:
        (tmp_path / VERIFIED).write_text(content)
        os.utime(tmp_path / VERIFIED, ns=(5, 7))
    assert cache_mod._read_verified(tmp_path) == expected


def test_the_stat_record_is_replaced_atomically_and_a_failed_write_leaves_nothing(tmp_path):
    cache_mod._write_verified(tmp_path, {"a": [1, 2, 3, 4]})
    assert json.loads((tmp_path / VERIFIED).read_text())["files"] == {"a": [1, 2, 3, 4]}
    assert sorted(p.name for p in tmp_path.iterdir()) == [VERIFIED]
    (tmp_path / VERIFIED).unlink()
    (tmp_path / VERIFIED).mkdir()  # cannot be replaced
    (tmp_path / VERIFIED / "x").write_text("x")
    cache_mod._write_verified(tmp_path, {"a": [1, 2, 3, 4]})
    assert sorted(p.name for p in tmp_path.iterdir()) == [VERIFIED]
    cache_mod._write_verified(tmp_path / "gone", {})  # a folder that cannot be written to: nothing raised
