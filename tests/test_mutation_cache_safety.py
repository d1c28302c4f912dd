"""The product cache's data safety, in process and on temporary folders (no world build, no subprocess), where
other processes are at work: a product in use (its shared lease held) is never claimed by a prune, a temporary
entry whose builder still holds its lock is never cleaned, a world build's inputs stay while another build
runs, and cached arrays are computed once, written atomically and read under their lease. Another process's
lease or lock is stood in for by another open file description of the same file (``flock`` locks belong to the
open description).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import time
import types
from pathlib import Path

import numpy as np
import pytest

from harness.core import cache as cache_mod
from harness.core.cache import (
    DONE,
    ProductCache,
    builders_of,
    building,
    cached_arrays,
    claim,
    discard_build_inputs,
    discard_damaged,
    lease,
    lease_file,
    release_lease,
)
from harness.core.locks import lock_file, try_exclusive, try_lock
from tests._mutation_cache_helpers import (
    LOGGER,
    _Clock,
    _failing_rmtree,
    _foreign_shared,
    _fresh_process,  # noqa: F401
    _product,
    _prunable,
)


# -- leases ------------------------------------------------------------------------------------------------------
def test_a_lease_is_a_shared_lock_on_a_file_beside_the_product(tmp_path):
    """<product>.lease; while this process leases it, no prune can claim it, and other readers can lease it too;
    leasing twice holds one descriptor; once released, a prune can claim it."""
    path = tmp_path / "abc"
    assert lease_file(path) == tmp_path / "abc.lease" and lease_file(str(path)) == tmp_path / "abc.lease"
    lease(path)
    fd = cache_mod._LEASES[str(path)]
    lease(str(path))
    assert cache_mod._LEASES == {str(path): fd}
    assert not _prunable(path)
    other = _foreign_shared(path)  # another reader is not kept out
    os.close(other)
    release_lease(str(path))
    assert cache_mod._LEASES == {} and _prunable(path)
    release_lease(path)  # none held: nothing happens


def test_no_lease_where_its_file_cannot_be_made_or_without_flock(tmp_path, monkeypatch):
    lease(tmp_path / "missing" / "abc")
    assert cache_mod._LEASES == {}
    monkeypatch.setattr(cache_mod, "fcntl", None)
    lease(tmp_path / "abc")
    assert cache_mod._LEASES == {} and not lease_file(tmp_path / "abc").exists()


def test_a_lease_file_removed_by_a_prune_while_waiting_is_taken_again(tmp_path, monkeypatch):
    """A prune that held the lease file removes it (with the product) while this process waits on it: the lease
    is taken on the new file, the one a later prune locks, not on the removed one."""
    path = tmp_path / "abc"
    calls = []

    def flock(fd, op):
        calls.append(op)
        if len(calls) == 1:
            lease_file(path).unlink()  # the prune removed it while this waited
        fcntl.flock(fd, op)

    monkeypatch.setattr(cache_mod, "fcntl", types.SimpleNamespace(flock=flock, LOCK_SH=fcntl.LOCK_SH,
                                                                  LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB))
    lease(path)
    assert calls == [fcntl.LOCK_SH, fcntl.LOCK_SH]
    assert os.fstat(cache_mod._LEASES[str(path)]).st_ino == lease_file(path).stat().st_ino
    assert not _prunable(path)


def test_claim_takes_a_product_nobody_else_leases_and_refuses_one_in_use(tmp_path):
    """claim drops this process's own lease first and locks the lease file exclusively; a lease held by another
    reader (or a folder gone) makes it refuse."""
    path = tmp_path / "abc"
    lease(path)
    fd = claim(path)
    assert fd is not None and str(path) not in cache_mod._LEASES
    assert try_lock(lease_file(path)) is None  # held by the claim
    os.close(fd)
    other = _foreign_shared(path)
    try:
        assert claim(path) is None
    finally:
        os.close(other)
    assert claim(tmp_path / "gone" / "abc") is None


def test_discard_damaged_keeps_and_leases_a_sound_product_and_moves_a_damaged_one(tmp_path, caplog):
    p = _product(tmp_path, {"a.bin": b"12345"})
    assert discard_damaged(p, "cpt") is False
    assert str(p) in cache_mod._LEASES and not _prunable(p) and p.is_dir()
    cache_mod._CHECKED.clear()
    (p / "a.bin").write_bytes(b"12")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert discard_damaged(p, "cpt") is True
    assert (f"cpt product at {p} is damaged (a.bin has 2 bytes, 5 expected); removing it and computing it again"
            in caplog.messages)
    assert not p.exists() and str(p) not in cache_mod._LEASES
    assert [x.name for x in tmp_path.iterdir()] == ["prod.lease"]


# -- temporary folders: removed only when their builder's lock is free ---------------------------------------------
def test_builders_of_reads_every_temporary_name():
    d = Path("/h/products/init")
    assert builders_of(d / "abc.work") == [d / "abc"]
    assert builders_of(d / "abc.launch") == [d / "abc"]
    assert builders_of(d / ".tmp-abc-12345678") == [d / "abc", d / "abc-12345678"]
    assert builders_of(d / ".tmp-abc-def-1") == [d / "abc", d / "abc-def", d / "abc-def-1"]
    assert builders_of(d / ".tmp-removed-abc-1") == [d / "removed", d / "removed-abc", d / "removed-abc-1",
                                                     d / "abc", d / "abc-1"]
    assert builders_of(d / ".tmp-damaged-abc-1") == [d / "damaged", d / "damaged-abc", d / "damaged-abc-1",
                                                     d / "abc", d / "abc-1"]
    assert builders_of(d / ".tmp-removed-abc.work-1") == [d / "removed", d / "removed-abc.work",
                                                          d / "removed-abc.work-1", d / "abc.work",
                                                          d / "abc.work-1", d / "removed-abc", d / "abc"]
    assert builders_of(d / ".tmp-removed-abc.launch-1")[-1] == d / "abc"
    assert builders_of(d / ".corpus-model-ab12.txt") == [d / "model.bin", d / "model-ab12.bin"]
    assert builders_of(str(d / ".subwords-k.1a2b3c4d.npz")) == [d / "subwords-k.npz", d / "subwords-k.bin"]
    assert builders_of(d / ".model.1a2b3c4d.bin") == [d / "model.bin"]
    for name in ("abc", ".abc", ".a.b", ".x.work", "abc.lease", ".lease"):
        assert builders_of(d / name) == [], name


def test_building_is_whether_a_builders_lock_is_held(tmp_path):
    tmp = tmp_path / ".tmp-abc-12345678"
    assert not building(tmp)
    fd = try_exclusive(tmp_path / "abc")
    try:
        assert building(tmp) and building(tmp_path / "abc.work")
        assert not building(tmp_path / ".tmp-abd-1") and not building(tmp_path / "plain")
    finally:
        os.close(fd)
    assert not building(tmp) and lock_file(tmp_path / "abc").exists()


def test_clean_stale_removes_only_temporary_entries_whose_builder_is_gone(tmp_path, monkeypatch):
    """Dead builds' .tmp-* entries go (folders, files, links: a link never followed); a running build's stays
    however old; folders of kinds, of tasks/<kind> and of the method caches' products are all looked at; hidden
    folders and anything not .tmp-* are let be."""
    home = tmp_path / "home"
    products = home / "products"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.bin").write_text("precious")
    entries = {
        products / "init" / ".tmp-dead-1": "dir",
        products / "init" / ".tmp-alive-1": "dir",
        products / "init" / ".tmp-file-1": "file",
        products / "init" / ".tmp-link-1": "link",
        products / "init" / "finished": "dir",
        products / "tasks" / "ner" / ".tmp-dead-2": "dir",
        products / "tasks" / ".tmp-dead-3": "dir",
        products / "tasks" / ".hidden" / ".tmp-dead-4": "dir",
        products / ".cache" / ".tmp-dead-5": "dir",
        home / "cache" / "methods" / "clp" / "products" / "helper" / ".tmp-dead-6": "dir",
    }
    for p, what in entries.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        if what == "dir":
            p.mkdir()
            (p / "f").write_text("x")
        elif what == "file":
            p.write_text("x")
        else:
            p.symlink_to(outside)
    (products / "tasks" / "notes.txt").write_text("x")
    (products / "README").write_text("x")
    cache = ProductCache(home)
    assert cache._build_folders() == [products / "init", products / "tasks", products / "tasks" / "ner",
                                      home / "cache" / "methods" / "clp" / "products" / "helper"]
    fd = try_exclusive(products / "init" / "alive")
    try:
        assert cache.clean_stale() == 6
    finally:
        os.close(fd)
    left = {p for p in entries if p.exists() or p.is_symlink()}
    assert left == {products / "init" / ".tmp-alive-1", products / "init" / "finished",
                    products / "tasks" / ".hidden" / ".tmp-dead-4", products / ".cache" / ".tmp-dead-5"}
    assert (outside / "keep.bin").read_text() == "precious"
    assert ProductCache(tmp_path / "empty").clean_stale() == 0


def test_clean_stale_counts_only_what_it_removed(tmp_path, monkeypatch):
    stale = tmp_path / "products" / "init" / ".tmp-dead-1"
    stale.mkdir(parents=True)
    monkeypatch.setattr(cache_mod.shutil, "rmtree", _failing_rmtree)
    assert ProductCache(tmp_path).clean_stale() == 0 and stale.is_dir()


# -- a world build's inputs -------------------------------------------------------------------------------------
def _inputs(home: Path) -> Path:
    d = home / "downloads"
    (d / "sub").mkdir(parents=True)
    (d / "a.bin").write_bytes(b"x" * (3 * 2**20))
    (d / "sub" / "b.bin").write_bytes(b"y" * 100)
    (home / "big.bin").write_bytes(b"z" * 5000)
    (d / "link.bin").symlink_to(home / "big.bin")  # not counted, not followed
    return d


def _aged(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_build_inputs_are_removed_and_their_bytes_counted(tmp_path, caplog):
    """The folders named go (their real files' bytes counted, a link inside not followed); a missing one and a link
    to a folder are let be."""
    home = tmp_path
    d = _inputs(home)
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "f").write_text("keep")
    (home / "linked").symlink_to(kept)
    (home / "venv" / "lib").mkdir(parents=True)
    (home / "venv" / "lib" / "x.so").write_bytes(b"v" * 1000)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        freed = discard_build_inputs(home, ("absent", "linked", "downloads", "venv"))
    assert freed == 3 * 2**20 + 100 + 1000 and not (home / "venv").exists()
    assert not d.exists() and (home / "big.bin").stat().st_size == 5000 and (kept / "f").read_text() == "keep"
    assert f"removed {d} (3 MB): the world build's inputs, fetched again by a later build" in caplog.messages


def test_build_inputs_stay_while_another_world_build_runs(tmp_path, caplog):
    """A .tmp-* under worlds/ younger than a day, or whose builder holds its lock however old: nothing removed."""
    home = tmp_path
    d = _inputs(home)
    worlds = home / "worlds"
    (worlds / ".tmp-w1-1234").mkdir(parents=True)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert discard_build_inputs(home, ["downloads", "more"]) == 0
    assert d.is_dir() and caplog.messages == [
        "another world build is under way; its build inputs (downloads, more) are kept"]
    _aged(worlds / ".tmp-w1-1234", 23 * 3600)
    assert discard_build_inputs(home, ["downloads"]) == 0 and d.is_dir()
    _aged(worlds / ".tmp-w1-1234", 25 * 3600)
    fd = try_exclusive(worlds / "w1")
    try:
        assert discard_build_inputs(home, ["downloads"]) == 0 and d.is_dir()
    finally:
        os.close(fd)
    assert discard_build_inputs(home, ["downloads"], busy_s=26 * 3600) == 0 and d.is_dir()
    assert discard_build_inputs(home, ["downloads"]) == 3 * 2**20 + 100 and not d.exists()


def test_build_inputs_not_removed_are_not_counted(tmp_path, monkeypatch):
    d = _inputs(tmp_path)
    monkeypatch.setattr(cache_mod.shutil, "rmtree", _failing_rmtree)
    assert discard_build_inputs(tmp_path, ["downloads"]) == 0 and d.is_dir()


# -- cached arrays --------------------------------------------------------------------------------------------------
def _arrays() -> dict:
    return {"u": np.arange(6, dtype=np.float32).reshape(2, 3), "counts": np.array([4, 5])}


def test_cached_arrays_are_computed_once_and_written_atomically(tmp_path, monkeypatch):
    """The first call computes and writes .<stem>.<8 hex>.npz (a name whose builder is the .npz's lock), renamed
    into place; the next reads the file; no lease is kept once read, one held before stays."""
    path = tmp_path / "new" / "sub" / "subwords-k.npz"
    saved = []
    real_savez = np.savez

    def savez(file, **arrays):
        saved.append(Path(file))
        real_savez(file, **arrays)

    monkeypatch.setattr(np, "savez", savez)
    z = cached_arrays(path, _arrays)
    assert z["u"].tolist() == [[0, 1, 2], [3, 4, 5]] and z["counts"].tolist() == [4, 5]
    assert re.fullmatch(r"\.subwords-k\.[0-9a-f]{8}\.npz", saved[0].name) and saved[0].parent == path.parent
    assert builders_of(saved[0])[0] == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["subwords-k.npz", "subwords-k.npz.lock"]

    def never():
        raise AssertionError("computed again")

    z = cached_arrays(path, never)
    assert sorted(z) == ["counts", "u"] and z["u"].dtype == np.float32 and z["counts"].tolist() == [4, 5]
    assert cache_mod._LEASES == {} and _prunable(path)
    lease(path)
    cached_arrays(path, never)
    assert str(path) in cache_mod._LEASES


def test_cached_arrays_are_read_under_their_lease(tmp_path, monkeypatch):
    path = tmp_path / "a.npz"
    np.savez(path, **_arrays())
    real_load = np.load
    leased = []

    def load(*a, **k):
        leased.append(not _prunable(path))
        return real_load(*a, **k)

    monkeypatch.setattr(np, "load", load)
    cached_arrays(path, _arrays)
    assert leased == [True] and _prunable(path)


def test_cached_arrays_a_waiting_process_reads_the_file_the_first_one_wrote(tmp_path, monkeypatch):
    """The lock taken, the file is looked for again: written meanwhile by the process that held the lock, it is
    read, not computed a second time; the wait shows the step given."""
    path = tmp_path / "a.npz"
    real_exclusive = cache_mod.exclusive
    waits = []

    def exclusive(p, waiting=None):
        waits.append((p, waiting))
        np.savez(path, **_arrays())  # the other process finished while this one waited
        return real_exclusive(p, waiting)

    monkeypatch.setattr(cache_mod, "exclusive", exclusive)

    def never():
        raise AssertionError("computed twice")

    z = cached_arrays(path, never, waiting="subword tables")
    assert z["counts"].tolist() == [4, 5] and waits == [(path, "subword tables")]


def test_cached_arrays_pruned_before_the_lease_are_computed_again(tmp_path, monkeypatch):
    path = tmp_path / "a.npz"
    np.savez(path, u=np.zeros(1))
    real = cache_mod.lease

    def lease_after_prune(p):
        Path(p).unlink(missing_ok=True)
        real(p)

    monkeypatch.setattr(cache_mod, "lease", lease_after_prune)
    z = cached_arrays(path, _arrays)
    assert z["counts"].tolist() == [4, 5] and cache_mod._LEASES == {}


def test_cached_arrays_never_unpickle(tmp_path):
    """A file holding pickled objects is refused, not unpickled."""
    path = tmp_path / "a.npz"
    np.savez(path, o=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        cached_arrays(path, _arrays)
    assert cache_mod._LEASES == {}


def test_build_inputs_are_kept_until_the_other_build_is_busy_s_old(tmp_path, monkeypatch):
    """A build folder exactly busy_s old counts as left behind; one a moment younger as under way."""
    d = _inputs(tmp_path)
    tmp = tmp_path / "worlds" / ".tmp-w1-1234"
    tmp.mkdir(parents=True)
    os.utime(tmp, (1000, 1000))
    monkeypatch.setattr(cache_mod, "time", _Clock(1099.5))
    assert discard_build_inputs(tmp_path, ["downloads"], busy_s=100) == 0 and d.is_dir()
    monkeypatch.setattr(cache_mod, "time", _Clock(1100.0))
    assert discard_build_inputs(tmp_path, ["downloads"], busy_s=100) > 0 and not d.exists()


def test_a_failed_build_raises_its_own_error_even_where_deleting_fails(tmp_path, monkeypatch):
    """The caller sees the build's error, not one of the clean-up that follows it."""
    monkeypatch.setattr(cache_mod.shutil, "rmtree", _failing_rmtree)

    def build(d):
        raise RuntimeError("the build's own error")

    with pytest.raises(RuntimeError, match="the build's own error"):
        ProductCache(tmp_path).get_or_build("init", {"a": 1}, build)


def test_the_marker_is_written_for_people_too(tmp_path):
    """_DONE.json is read by people as well as by the cache: one entry a line (indented by one space) and
    non-ASCII inputs written as they are."""
    p = ProductCache(tmp_path).get_or_build("init", {"name": "é"}, lambda d: None)
    text = (p.path / DONE).read_text(encoding="utf-8")
    assert text.startswith('{\n "kind": "init",\n "key": ') and '"name": "é"' in text


def test_a_stale_entry_another_cleaner_removed_first_is_no_error(tmp_path, monkeypatch):
    """Two runs starting at once both clean: an entry the other removed between the listing and the delete is
    not an error."""
    stale = tmp_path / "products" / "init" / ".tmp-dead-1"
    stale.parent.mkdir(parents=True)
    stale.write_text("x")

    def building(p):
        Path(p).unlink()  # the other cleaner was first
        return False

    monkeypatch.setattr(cache_mod, "building", building)
    assert ProductCache(tmp_path).clean_stale() == 1


def test_a_lease_file_is_readable_by_all_and_writable_by_its_owner(tmp_path):
    old = os.umask(0o022)
    try:
        lease(tmp_path / "abc")
    finally:
        os.umask(old)
    assert lease_file(tmp_path / "abc").stat().st_mode & 0o777 == 0o644
