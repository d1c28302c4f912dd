import pytest

from harness.core.cache import DONE, ProductCache
from tests.conftest import in_two_children


def test_builds_once_then_finds_it(tmp_path):
    cache = ProductCache(tmp_path)
    calls = []

    def build(d):
        calls.append(d)
        (d / "x.txt").write_text("hello")
        return {"n": 1}

    p1 = cache.get_or_build("thing", {"a": 1}, build)
    p2 = cache.get_or_build("thing", {"a": 1}, build)
    assert len(calls) == 1
    assert not p1.cached and p2.cached
    assert p1.path == p2.path and (p2.path / "x.txt").read_text() == "hello"
    assert p2.info["n"] == 1 and p2.info["inputs"] == {"a": 1}
    p3 = cache.get_or_build("thing", {"a": 2}, build)
    assert p3.path != p1.path and len(calls) == 2


def _get_in_child(root, out) -> None:
    import time

    def build(d):
        time.sleep(1.0)  # both processes are past their first look-up before either has finished
        (d / "x.txt").write_text("x")

    out.put(ProductCache(root).get_or_build("init", {"a": 1}, build).cached)


def test_two_processes_needing_one_product_build_it_once(tmp_path):
    flags = in_two_children(_get_in_child, tmp_path)
    assert flags == [False, True]  # one built it, the other waited and found it finished
    found = ProductCache(tmp_path).lookup("init", {"a": 1})
    assert found is not None and (found.path / "x.txt").read_text() == "x"
    assert not list((tmp_path / "products" / "init").glob(".tmp-*"))


def _arrays_in_child(root, out) -> None:
    import time

    import numpy as np

    from harness.core.cache import cached_arrays

    def compute():
        with open(root / "computed.log", "a") as f:
            f.write("x\n")
        time.sleep(1.0)  # the other process looks before this one has written the file
        return {"u": np.arange(6, dtype=np.float32).reshape(2, 3), "counts": np.array([4, 5])}

    z = cached_arrays(root / "cache" / "subwords-k.npz", compute)
    out.put((z["u"].tolist(), z["counts"].tolist()))


def test_cached_arrays_are_computed_once_by_two_processes(tmp_path):
    got = in_two_children(_arrays_in_child, tmp_path)
    assert got == [([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], [4, 5])] * 2  # the waiting one read the other's file
    assert (tmp_path / "computed.log").read_text() == "x\n"
    # beside the arrays: their build lock, and the lease each reader held while it read them
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["subwords-k.npz", "subwords-k.npz.lease",
                                                                     "subwords-k.npz.lock"]


def test_failed_build_leaves_nothing(tmp_path):
    cache = ProductCache(tmp_path)

    def build(d):
        (d / "partial").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        cache.get_or_build("thing", {"a": 1}, build)
    assert cache.lookup("thing", {"a": 1}) is None
    left = list((tmp_path / "products" / "thing").iterdir())
    assert [p.suffix for p in left] == [".lock"] and left[0].stat().st_size == 0  # only its empty lock file


def test_unfinished_folder_without_marker_is_rebuilt_and_stale_tmp_cleaned(tmp_path):
    cache = ProductCache(tmp_path)
    key, path = cache.path_for("thing", {"a": 1})
    path.mkdir(parents=True)
    (path / "junk").write_text("half")
    stale = path.parent / ".tmp-dead-0000"
    stale.mkdir()
    assert cache.clean_stale() == 1 and not stale.exists()  # nobody holds its builder's lock
    p = cache.get_or_build("thing", {"a": 1}, lambda d: (d / "ok").write_text("y") and None)
    assert (p.path / DONE).is_file() and (p.path / "ok").is_file() and not (p.path / "junk").exists()


# -- damaged products are detected, reported and recomputed, never used ----------------------------------------
def _model_like(d):
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (d / "config.json").write_text('{"a": 1}')


def _built(tmp_path):
    cache = ProductCache(tmp_path)
    calls = []

    def build(d):
        calls.append(d)
        _model_like(d)

    p = cache.get_or_build("init", {"m": 1}, build)
    return cache, build, calls, p


@pytest.mark.parametrize("damage", ["truncated", "flipped", "missing-file", "marker-unreadable", "no-marker"])
def test_damaged_product_is_reported_and_rebuilt(tmp_path, caplog, damage):
    cache, build, calls, p = _built(tmp_path)
    weights = p.path / "model.safetensors"
    good = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(good[: len(good) // 2])
    elif damage == "flipped":
        weights.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    elif damage == "missing-file":
        weights.unlink()
    elif damage == "marker-unreadable":
        (p.path / DONE).write_text('{"kind": "init", "files": {')
    else:
        (p.path / DONE).unlink()
    with caplog.at_level("WARNING", logger="harness.core.cache"):
        again = cache.get_or_build("init", {"m": 1}, build)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and str(p.path) in warned[0]
    assert ("no completion marker" if damage == "no-marker" else "damaged") in warned[0]
    assert len(calls) == 2 and not again.cached  # computed again, not used
    assert (again.path / "model.safetensors").read_bytes() == good
    assert cache.lookup("init", {"m": 1}) is not None  # and the rebuilt one is sound
    assert not [x for x in again.path.parent.iterdir() if x.name.startswith(".tmp-")]


def test_sound_product_is_used_and_its_marker_lists_every_file(tmp_path, caplog):
    cache, build, calls, p = _built(tmp_path)
    assert set(p.info["files"]) == {"model.safetensors", "config.json"}
    with caplog.at_level("WARNING"):
        again = cache.get_or_build("init", {"m": 1}, build)
    assert again.cached and len(calls) == 1 and not caplog.records


def test_marker_from_before_the_checks_is_trusted(tmp_path):
    import json

    cache, build, calls, p = _built(tmp_path)
    marker = json.loads((p.path / DONE).read_text())
    del marker["files"]
    (p.path / DONE).write_text(json.dumps(marker))
    assert cache.lookup("init", {"m": 1}) is not None


# -- cached fastText models -----------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncated", "flipped", "json-missing", "json-unreadable"])
def test_damaged_fasttext_model_is_reported_and_trained_again(tmp_path, caplog, damage):
    import numpy as np

    from methods.fasttext_util import cached_model
    from tests.test_fasttext_prefetch import _job

    job = _job("dd")
    first = cached_model(tmp_path, job.kind, job.inputs, job.settings, job.write_corpus)
    assert not first.cached and first.path.is_file()
    meta = first.path.with_suffix(".json")
    assert "sha256" in meta.read_text()
    good = first.path.read_bytes()
    if damage == "truncated":
        first.path.write_bytes(good[: len(good) // 3])
    elif damage == "flipped":
        first.path.write_bytes(good[:-50] + bytes([good[-50] ^ 0xFF]) + good[-49:])
    elif damage == "json-missing":
        meta.unlink()
    else:
        meta.write_text("{not json")
    with caplog.at_level("WARNING", logger="methods.fasttext_util"):
        again = cached_model(tmp_path, job.kind, job.inputs, job.settings, job.write_corpus)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "damaged" in warned[0] and str(first.path) in warned[0]
    assert not again.cached  # trained again, the damaged file never loaded
    assert first.path.read_bytes() == good  # training is deterministic: the same model is back
    assert np.array_equal(again.model.get_input_matrix(), first.model.get_input_matrix())
    caplog.clear()
    assert cached_model(tmp_path, job.kind, job.inputs, job.settings, job.write_corpus).cached
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_prefetch_retrains_a_damaged_model(tmp_path):
    from methods.fasttext_util import model_path, prefetch_models, stored_file
    from tests.test_fasttext_prefetch import _job

    jobs = [_job(x) for x in ("ee", "ff")]
    assert prefetch_models(tmp_path, jobs, workers=2) == 2
    path = stored_file(model_path(tmp_path, jobs[0].kind, jobs[0].inputs, jobs[0].settings)[1])
    good = path.read_bytes()
    path.write_bytes(good[:1000])
    other = stored_file(model_path(tmp_path, jobs[1].kind, jobs[1].inputs, jobs[1].settings)[1])
    other.write_bytes(other.read_bytes()[:1000])
    assert prefetch_models(tmp_path, jobs, workers=2) == 2
    assert path.read_bytes() == good


# -- worlds ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built_worlds(tmp_path_factory):
    """The synthetic world built once; each test damages its own copy."""
    import os

    from harness.worlds import get_world

    home = tmp_path_factory.mktemp("world-template")
    old = os.environ.get("HARNESS_HOME")
    os.environ["HARNESS_HOME"] = str(home)
    try:
        get_world("synthetic")
    finally:
        if old is None:
            os.environ.pop("HARNESS_HOME", None)
        else:
            os.environ["HARNESS_HOME"] = old
    return home / "worlds"


@pytest.mark.parametrize("damage", ["manifest-garbled", "manifest-edited", "file-truncated", "file-missing",
                                    "checksums-unreadable"])
def test_damaged_world_is_reported_and_built_again(tmp_path, monkeypatch, caplog, damage, built_worlds):
    import json
    import shutil

    from harness.worlds import CHECKSUMS, get_world, world_dir

    shutil.copytree(built_worlds, tmp_path / "worlds")
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    world = get_world("synthetic")
    root, ident = world.root, world.hash
    assert root == world_dir("synthetic") and (root / CHECKSUMS).is_file()
    manifest = root / "manifest.json"
    some_file = sorted((root / "resources").rglob("*.txt"))[0]
    if damage == "manifest-garbled":
        manifest.write_text(manifest.read_text()[:40])
    elif damage == "manifest-edited":  # still valid JSON of the same size: only the sha256 tells
        m = json.loads(manifest.read_text())
        text = manifest.read_text()
        m["pivot_language"] = m["pivot_language"][::-1]
        edited = json.dumps(m)
        edited += " " * (len(text) - len(edited))
        manifest.write_text(edited)
        assert manifest.stat().st_size == len(text)
    elif damage == "file-truncated":
        some_file.write_text(some_file.read_text()[:10])
    elif damage == "file-missing":
        some_file.unlink()
    else:
        (root / CHECKSUMS).write_text("{")
    from harness.core.errors import MissingResourceError

    with pytest.raises(MissingResourceError, match="damaged"):
        get_world("synthetic", build=False)  # a worker never loads it
    with caplog.at_level("WARNING", logger="harness.worlds"):
        again = get_world("synthetic")
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "damaged" in warned[0] and str(root) in warned[0]
    assert again.hash == ident and again.manifest == json.loads(manifest.read_text())
    caplog.clear()
    get_world("synthetic")
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_corpora_left_by_a_killed_training_are_removed(tmp_path):
    """A corpus whose model's lock is free was left by a killed training: removed, however fresh; one whose model's
    lock a process holds waits for its training: kept, however old."""
    import os
    import time

    from harness.core.locks import release, try_exclusive
    from methods.fasttext_util import cached_model
    from tests.test_fasttext_prefetch import _job

    folder = tmp_path / "fasttext"
    folder.mkdir()
    dead, waiting = folder / ".corpus-x-dead-0123abcd.txt", folder / ".corpus-x-live-4567cdef.txt"
    for f in (dead, waiting):
        f.write_text("a b\n")
    os.utime(waiting, (time.time() - 7200, time.time() - 7200))
    fd = try_exclusive(folder / "x-live.bin")  # its training (another process's, as far as the lock tells)
    try:
        job = _job("gg")
        cached_model(tmp_path, job.kind, job.inputs, job.settings, job.write_corpus)
        assert not dead.exists() and waiting.exists()
    finally:
        release(fd)


# -- verified once, then trusted by stat ------------------------------------------------------------------------
def _counting(monkeypatch):
    from harness.core import cache as cache_mod

    hashed = []
    real = cache_mod.sha256_file

    def counting(path, *a, **k):
        hashed.append(path.name)
        return real(path, *a, **k)

    monkeypatch.setattr(cache_mod, "sha256_file", counting)
    return hashed


def _as_a_new_process():
    from harness.core import cache as cache_mod

    cache_mod._CHECKED.clear()  # what this process checked: a later process starts without it


def test_a_product_is_hashed_once_then_trusted_by_its_stats(tmp_path, monkeypatch):
    """The first verification is recorded (_VERIFIED.json); a later process compares stats only; a file whose stats
    moved (a touch, same bytes) is hashed again, and only that one."""
    import os
    import time

    cache, build, calls, p = _built(tmp_path)
    hashed = _counting(monkeypatch)
    time.sleep(0.05)  # past the clock tick the build recorded in (a file changed in that tick is hashed again)
    _as_a_new_process()
    assert cache.lookup("init", {"m": 1}) is not None  # the build's files, racily clean, hashed once more at most
    hashed.clear()
    for _ in range(3):
        _as_a_new_process()
        assert cache.lookup("init", {"m": 1}) is not None
    assert hashed == []  # stats only
    weights = p.path / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns - 10**10))  # same bytes, new stats
    time.sleep(0.05)
    _as_a_new_process()
    assert cache.lookup("init", {"m": 1}) is not None and hashed == ["model.safetensors"]
    hashed.clear()
    _as_a_new_process()
    assert cache.lookup("init", {"m": 1}) is not None and hashed == []  # its new stats recorded


def test_a_changed_file_is_hashed_again_and_caught(tmp_path, monkeypatch, caplog):
    """Same size, one byte changed after the product was trusted: its stats moved, so it is hashed and found
    damaged (and the product built again)."""
    import time

    cache, build, calls, p = _built(tmp_path)
    time.sleep(0.05)
    _as_a_new_process()
    assert cache.lookup("init", {"m": 1}) is not None
    hashed = _counting(monkeypatch)
    weights = p.path / "model.safetensors"
    good = weights.read_bytes()
    with open(weights, "r+b") as f:  # in place: same inode, same size
        f.seek(100)
        f.write(bytes([good[100] ^ 1]))
    _as_a_new_process()
    with caplog.at_level("WARNING", logger="harness.core.cache"):
        assert cache.lookup("init", {"m": 1}) is None
    assert hashed == ["model.safetensors"] and "does not match its sha256" in caplog.text
    assert not p.path.exists()


def test_cache_verify_hashes_everything_again(tmp_path, monkeypatch, run_cli):
    """A change that keeps a file's stats (bit rot under the record) passes the stat check; ``harness cache verify``
    hashes every file and exits 2 naming the product."""
    import json
    import time

    from harness.core.cache import VERIFIED, file_stat

    home = tmp_path / "home"
    cache, build, calls, p = _built(home)
    sound = cache.get_or_build("init", {"m": 2}, build)
    r = run_cli("cache", "verify", env={"HARNESS_HOME": str(home)})
    assert r.returncode == 0 and "verified 2 product(s)" in r.stdout, r.stdout + r.stderr
    weights = p.path / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    time.sleep(0.05)
    record = json.loads((p.path / VERIFIED).read_text())  # the record rewritten to the changed file's stats
    record["files"]["model.safetensors"] = file_stat(weights.stat())
    (p.path / VERIFIED).write_text(json.dumps(record))
    _as_a_new_process()
    assert cache.lookup("init", {"m": 1}) is not None  # trusted by its stats
    r = run_cli("cache", "verify", env={"HARNESS_HOME": str(home)})
    assert r.returncode == 2 and f"init {p.path.name}" in r.stderr and "1 of 2 product(s)" in r.stderr, r.stderr
    assert sound.path.name not in r.stderr and "Traceback" not in r.stderr
    assert weights.read_bytes() != good  # verify removes nothing


def test_a_product_found_or_built_is_leased_by_this_process(tmp_path):
    """The process that builds or finds a product holds its lease (so a prune elsewhere leaves it) until it drops
    it; a lease held elsewhere is seen through its own open of the file, as another process's is."""
    from harness.cache_admin import in_use, product_item
    from harness.core.cache import lease_file, release_lease

    cache, build, calls, p = _built(tmp_path)
    item = product_item(p.path, "init")
    assert lease_file(p.path).is_file() and in_use(item, tmp_path)
    release_lease(p.path)
    assert not in_use(item, tmp_path)
    assert cache.lookup("init", {"m": 1}) is not None and in_use(item, tmp_path)
    release_lease(p.path)
    assert not in_use(item, tmp_path)
