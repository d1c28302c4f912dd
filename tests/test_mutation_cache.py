"""The product cache's data safety, in process and on temporary folders (no world build, no subprocess).

What is protected: a product's key and folder are the hash of its inputs; a product is published whole (built in a
``.tmp-<key>-<id>`` sibling, renamed into place with its marker) or not at all; a damaged product is caught, moved
away in one rename and never used; a product in use (its shared lease held) is never claimed by a prune, and a
temporary entry whose builder still holds its lock is never cleaned. Another process's lease or lock is stood in for
by another open file description of the same file: ``flock`` locks belong to the open description, so this process
sees it exactly as it would see another process's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
import types
from pathlib import Path

import numpy as np
import pytest

from harness.core import cache as cache_mod
from harness.core.cache import (
    DONE,
    VERIFIED,
    Product,
    ProductCache,
    builders_of,
    building,
    cached_arrays,
    claim,
    cpt_product_key,
    discard_build_inputs,
    discard_damaged,
    file_digests,
    file_stat,
    lease,
    lease_file,
    release_lease,
    verify_product,
)
from harness.core.hashing import hash_obj, stable_json
from harness.core.locks import lock_file, try_exclusive, try_lock

LOGGER = "harness.core.cache"


@pytest.fixture(autouse=True)
def _fresh_process():
    """Each test starts as a new process would: nothing checked, no lease held (and leaves none behind)."""
    cache_mod._CHECKED.clear()
    yield
    for fd in cache_mod._LEASES.values():
        os.close(fd)
    cache_mod._LEASES.clear()
    cache_mod._CHECKED.clear()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _foreign_shared(path: Path) -> int:
    """Another reader's lease on ``path``: a shared lock on its lease file through a description of its own."""
    fd = os.open(lease_file(path), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def _prunable(path: Path) -> bool:
    """Whether a prune could take ``path``'s lease now (nobody, this process included, leases it)."""
    fd = try_lock(lease_file(path))
    if fd is None:
        return False
    os.close(fd)
    return True


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _failing_rmtree(path, ignore_errors=False):
    """shutil.rmtree on a file system where deleting fails (it deletes nothing)."""
    if not ignore_errors:
        raise PermissionError(path)


def _model_like(d: Path) -> None:
    (d / "model.bin").write_bytes(bytes(range(256)) * 4)
    (d / "sub").mkdir()
    (d / "sub" / "config.json").write_text('{"a": 1}')


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
class _Clock:
    """time.time() for the cache module: the given values, then the last one again."""

    def __init__(self, *values: float):
        self.values = list(values)

    def time(self) -> float:
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


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
def _product(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """A finished product folder written by hand: ``files`` and a marker listing them."""
    p = tmp_path / "prod"
    p.mkdir(parents=True)
    for rel, data in files.items():
        (p / rel).parent.mkdir(parents=True, exist_ok=True)
        (p / rel).write_bytes(data)
    marker = {"files": {rel: {"size": len(d), "sha256": _sha(d)} for rel, d in files.items()}}
    (p / DONE).write_text(json.dumps(marker))
    return p


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
