"""The journal of an addition of sources (:mod:`harness.worlds.journal`), function by function, in process: what
each writes, reads, renames and fsyncs, and what it refuses. Written to kill the mutants of scripts/mutation.sh
that the end-to-end additions let live (a sync dropped, a refusal loosened, a path named differently)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from harness.core.errors import MissingResourceError
from harness.worlds import journal as J


@pytest.fixture
def synced(monkeypatch) -> list[Path]:
    """The paths fsynced, in order (each still really fsynced); every descriptor opened is closed."""
    paths: list[Path] = []
    real_fsync, real_close, open_fds = os.fsync, os.close, set()
    real_open = os.open

    def fsync(fd: int) -> None:
        paths.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def opened(path, flags, *a, **k):
        fd = real_open(path, flags, *a, **k)
        open_fds.add(fd)
        return fd

    def close(fd: int) -> None:
        open_fds.discard(fd)
        real_close(fd)

    monkeypatch.setattr(J.os, "fsync", fsync)
    monkeypatch.setattr(J.os, "open", opened)
    monkeypatch.setattr(J.os, "close", close)
    yield paths
    assert not open_fds, "a descriptor was left open"


def _world(tmp_path: Path) -> Path:
    root = tmp_path / "home" / "worlds" / "w"
    (root / "sources" / "a").mkdir(parents=True)
    (root / "manifest.json").write_text('{"old": 1}', encoding="utf-8")
    return root


def _staged(root: Path, sources: list[str], suffix: str = "x1") -> Path:
    staging = root.parent / f"{J.staging_prefix(root)}{suffix}"
    (staging / "sources").mkdir(parents=True)
    for name in sources:
        (staging / "sources" / name).mkdir()
        (staging / "sources" / name / "f.txt").write_text(name, encoding="utf-8")
    (staging / J.MANIFEST).write_text('{"new": 1}', encoding="utf-8")
    (staging / J.CHECKSUMS).write_text('{"sums": 1}', encoding="utf-8")
    return staging


def test_names_beside_the_world(tmp_path):
    root = tmp_path / "worlds" / "w"
    assert J.journal_path(root) == tmp_path / "worlds" / ".add-w.json"
    assert J.staging_prefix(root) == ".tmp-w-add-"


def test_sync_lets_be_only_a_folder_that_cannot_be_synced(tmp_path, monkeypatch):
    folder, file = tmp_path / "d", tmp_path / "f"
    folder.mkdir()
    file.write_text("x")
    for code in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
        monkeypatch.setattr(J.os, "fsync", lambda fd, c=code: (_ for _ in ()).throw(OSError(c, "no")))
        J.sync(folder)
        with pytest.raises(OSError):
            J.sync(file)
    monkeypatch.setattr(J.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "io")))
    with pytest.raises(OSError):
        J.sync(folder)


def test_sync_syncs_the_path_and_closes(tmp_path, synced):
    file = tmp_path / "f"
    file.write_text("x")
    J.sync(file)
    J.sync(tmp_path)
    assert synced == [file, tmp_path]


def test_sync_tree_syncs_files_then_folders_deepest_first_then_the_parent(tmp_path, synced):
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f1").write_text("1")
    (top / "f2").write_text("2")
    (top / "link").symlink_to(top / "f2")
    J.sync_tree(top)
    assert synced[:2] == [top / "a" / "b" / "f1", top / "f2"]
    assert synced[2:] == [top / "a" / "b", top / "a", top, tmp_path]


def test_write_journal_writes_relative_staging_and_syncs(tmp_path, synced):
    root = _world(tmp_path)
    staging = root.parent / ".tmp-w-add-1"
    J.write_journal(root, staging, ["b", "c"])
    journal = J.journal_path(root)
    assert json.loads(journal.read_text(encoding="utf-8")) == {"staging": "../.tmp-w-add-1", "sources": ["b", "c"]}
    assert len(synced) == 2 and synced[0].parent == root.parent
    assert synced[0].name.startswith(".add-w.json.") and len(synced[0].name) == len(".add-w.json.") + 8
    assert synced[1] == root.parent
    assert sorted(p.name for p in root.parent.iterdir()) == [".add-w.json", "w"]


def test_write_journal_leaves_nothing_when_it_fails(tmp_path, monkeypatch):
    root = _world(tmp_path)

    def fail(*a, **k):
        raise OSError(errno.ENOSPC, "full")

    monkeypatch.setattr(J.os, "replace", fail)
    with pytest.raises(OSError):
        J.write_journal(root, root.parent / ".tmp-w-add-1", ["b"])
    assert sorted(p.name for p in root.parent.iterdir()) == ["w"]


def test_staging_relative_absolute_and_refused(tmp_path):
    root = _world(tmp_path)
    beside = root.parent / ".tmp-w-add-9"
    assert J._staging(root, "../.tmp-w-add-9") == beside
    beside.mkdir()
    assert J._staging(root, str(beside)) == beside
    moved = tmp_path / "elsewhere" / ".tmp-w-add-9"
    assert J._staging(root, str(moved)) == beside  # an absolute path that is gone: taken beside the world
    moved.mkdir(parents=True)
    assert J._staging(root, str(moved)) == moved
    for named in ("../../.tmp-w-add-9", ".tmp-w-add-9", "../x/.tmp-w-add-9"):
        with pytest.raises(ValueError, match="is not beside the world"):
            J._staging(root, named)
    with pytest.raises(ValueError, match="is no staging folder of an addition"):
        J._staging(root, "../.tmp-v-add-9")
    with pytest.raises(ValueError, match="is no staging folder"):
        J._staging(root, str(tmp_path / "elsewhere" / "other"))


def test_finish_pending_without_a_journal(tmp_path):
    assert J.finish_pending(_world(tmp_path)) is False


def test_finish_pending_commits_and_cleans(tmp_path, synced):
    root = _world(tmp_path)
    staging = _staged(root, ["b", "c"])
    J.write_journal(root, staging, ["b", "c"])
    del synced[:]
    assert J.finish_pending(root) is True
    assert (root / "sources" / "b" / "f.txt").read_text() == "b"
    assert (root / "sources" / "c" / "f.txt").read_text() == "c"
    assert (root / "manifest.json").read_text() == '{"new": 1}'
    assert (root / J.CHECKSUMS).read_text() == '{"sums": 1}'
    assert not J.journal_path(root).exists() and not staging.exists()
    assert synced == [root / "sources", root / "sources", root, root]


def test_finish_pending_whose_staging_folder_is_gone(tmp_path):
    """Every rename done and the staging folder removed, the journal still there: the journal goes, nothing else
    moves."""
    root = _world(tmp_path)
    J.write_journal(root, root.parent / ".tmp-w-add-1", ["a"])
    assert J.finish_pending(root) is True
    assert not J.journal_path(root).exists()
    assert (root / "manifest.json").read_text() == '{"old": 1}'


def test_write_journal_failing_before_its_file_exists_raises_that_failure(tmp_path, monkeypatch):
    root = _world(tmp_path)

    def fail(*a, **k):
        raise RuntimeError("cannot encode")

    monkeypatch.setattr(J.json, "dumps", fail)
    with pytest.raises(RuntimeError, match="cannot encode"):
        J.write_journal(root, root.parent / ".tmp-w-add-1", ["b"])
    assert sorted(p.name for p in root.parent.iterdir()) == ["w"]


def test_commit_makes_the_sources_folder_and_skips_what_is_done(tmp_path, synced):
    root = tmp_path / "worlds" / "w"
    root.mkdir(parents=True)
    staging = _staged(root, ["b", "c"])
    (root / "sources").mkdir()
    (root / "sources" / "c").mkdir()  # renamed already before a kill
    (staging / J.CHECKSUMS).unlink()
    J._commit(root, staging, ["b", "c"])
    assert (staging / "sources" / "c").is_dir() and not (root / "sources" / "c" / "f.txt").exists()
    assert (root / "sources" / "b" / "f.txt").is_file()
    assert not (root / J.CHECKSUMS).exists()
    assert synced == [root / "sources", root]
    other = tmp_path / "worlds" / "v"
    other.mkdir()
    del synced[:]
    J._commit(other, _staged(other, []), [])
    assert (other / "sources").is_dir()
    assert synced == [other, other, other]


@pytest.mark.parametrize("plan, error", [
    ("not json", "JSONDecodeError"),
    (json.dumps({"sources": ["b"]}), "KeyError"),
    (json.dumps({"staging": "../.tmp-w-add-1"}), "KeyError"),
    (json.dumps({"staging": "../.tmp-w-add-1", "sources": ["a/b"]}), "ValueError"),
    (json.dumps({"staging": "../.tmp-w-add-1", "sources": [".."]}), "ValueError"),
    (json.dumps({"staging": "../.tmp-w-add-1", "sources": ["."]}), "ValueError"),
    (json.dumps({"staging": "../.tmp-w-add-1", "sources": [""]}), "ValueError"),
    (json.dumps({"staging": "../.tmp-w-add-1", "sources": 3}), "TypeError"),
    (json.dumps({"staging": "../elsewhere", "sources": ["b"]}), "ValueError"),
])
def test_finish_pending_refuses_an_unreadable_journal(tmp_path, plan, error):
    root = _world(tmp_path)
    journal = J.journal_path(root)
    journal.write_text(plan, encoding="utf-8")
    with pytest.raises(MissingResourceError) as exc:
        J.finish_pending(root)
    message = str(exc.value)
    assert message.startswith(f"world at {root}: the journal of an addition of sources, {journal}, is unreadable ({error}")
    assert message.endswith("); move it away and run `harness world check`")
    assert journal.read_text(encoding="utf-8") == plan
    assert sorted(p.name for p in (root / "sources").iterdir()) == ["a"]
