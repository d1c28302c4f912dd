import pytest

from harness.cache import DONE, ProductCache


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


def test_failed_build_leaves_nothing(tmp_path):
    cache = ProductCache(tmp_path)

    def build(d):
        (d / "partial").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        cache.get_or_build("thing", {"a": 1}, build)
    assert cache.lookup("thing", {"a": 1}) is None
    assert list((tmp_path / "products" / "thing").iterdir()) == []


def test_unfinished_folder_without_marker_is_rebuilt_and_stale_tmp_cleaned(tmp_path):
    cache = ProductCache(tmp_path)
    key, path = cache.path_for("thing", {"a": 1})
    path.mkdir(parents=True)
    (path / "junk").write_text("half")
    stale = path.parent / ".tmp-dead-0000"
    stale.mkdir()
    assert cache.clean_stale(older_than_s=0) == 1 and not stale.exists()
    p = cache.get_or_build("thing", {"a": 1}, lambda d: (d / "ok").write_text("y") and None)
    assert (p.path / DONE).is_file() and (p.path / "ok").is_file() and not (p.path / "junk").exists()
