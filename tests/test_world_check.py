"""World integrity: the build records every file's sha256, modification time and status-change time; loading
re-hashes a file whose times changed, so an edited file (same size, even with its modification time set back) is
reported and the world built again, never used; a copied world is hashed once and kept; ``harness world check``
re-hashes every file; a world built before the digests were recorded is still read, and ``world check`` says what
it cannot check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = "target_tokenizer/tokenizer.json"


@pytest.fixture
def world_root(built_world, tmp_path, monkeypatch) -> Path:
    root = tmp_path / "home" / "worlds" / built_world.name
    shutil.copytree(built_world, root)  # copy2: the modification times are kept
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    return root


def _flip_one_byte(path: Path) -> bytes:
    """Change one byte of ``path`` in place (same size); returns the original bytes."""
    data = path.read_bytes()
    i = data.index(b'"', len(data) // 2) + 1  # inside a JSON string: still the same length
    path.write_bytes(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:])
    assert path.stat().st_size == len(data)
    return data


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARNESS_HOME": str(home), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)


def test_build_records_every_file(world_root):
    from harness.core.hashing import sha256_file
    from harness.worlds import CHECKSUMS

    record = json.loads((world_root / CHECKSUMS).read_text())
    files = [p for p in world_root.rglob("*") if p.is_file() and p.name != CHECKSUMS]
    assert sorted(record["files"]) == sorted(p.relative_to(world_root).as_posix() for p in files)
    for p in files:
        rec = record["files"][p.relative_to(world_root).as_posix()]
        assert rec["sha256"] == sha256_file(p) and rec["mtime_ns"] == p.stat().st_mtime_ns
    # what earlier versions read is still there
    assert set(record["sha256"]) == {"manifest.json", "languages.json"} and len(record["sizes"]) == len(files)


def test_an_edited_file_is_reported_and_the_world_built_again(world_root, caplog):
    from harness.core.errors import MissingResourceError
    from harness.worlds import get_world

    tok = world_root / TOKENIZER
    original = _flip_one_byte(tok)  # an edit: the size stays, the modification time moves
    with pytest.raises(MissingResourceError, match=f"damaged.*{TOKENIZER}.*sha256"):
        get_world("synthetic", build=False)  # a worker never uses it
    with caplog.at_level("WARNING", logger="harness.worlds"):
        world = get_world("synthetic")
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and TOKENIZER in warned[0] and "\n" not in warned[0], warned
    assert world.root == world_root and tok.read_bytes() == original  # built again, the same bytes
    caplog.clear()
    get_world("synthetic")
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_world_that_cannot_be_built_again_is_refused(world_root, monkeypatch):
    from harness.core.errors import MissingResourceError
    from harness.worlds import WORLDS, get_world

    _flip_one_byte(world_root / TOKENIZER)

    def offline(out: Path) -> None:
        raise ConnectionError("no network here\nsecond line")

    monkeypatch.setattr(WORLDS.get("synthetic"), "build", offline)
    with pytest.raises(MissingResourceError) as info:
        get_world("synthetic")
    msg = str(info.value)
    assert TOKENIZER in msg and "could not be built again (no network here)" in msg and "--force" in msg
    assert "\n" not in msg
    assert (world_root / "manifest.json").is_file()  # the damaged world stays for the user to look at, unused


def test_same_bytes_with_new_times_are_hashed_once(world_root):
    from harness.worlds import check_world_files, get_world

    for p in world_root.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))  # a copy without -p
    first = check_world_files(world_root)
    assert first.problems == [] and first.hashed == first.files
    assert check_world_files(world_root).hashed == 0  # the new times were recorded
    get_world("synthetic", build=False)


def _edit_keeping_size_and_time(path: Path) -> None:
    """A one-byte change of the same size, the modification time set back to what it was."""
    st = path.stat()
    _flip_one_byte(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def test_a_change_that_kept_size_and_time_is_found_by_loading_and_by_check(world_root):
    from harness.worlds import check_world_files, verify_world

    assert check_world_files(world_root).problems == []  # the copy's new times recorded: nothing left to hash
    time.sleep(0.05)  # past the file system's clock tick: the edit's status-change time is a later one
    _edit_keeping_size_and_time(world_root / TOKENIZER)
    res = check_world_files(world_root)
    assert res.hashed == 1 and res.problems == [f"{TOKENIZER} does not match its sha256 (changed since the world "
                                                f"was built)"]
    assert TOKENIZER in verify_world(world_root)
    proc = _cli("world", "check", "synthetic", home=world_root.parents[1])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"damaged: {TOKENIZER} does not match its sha256" in proc.stdout
    assert "world build synthetic --force" in proc.stdout and "Traceback" not in proc.stderr


def test_harness_run_does_not_use_a_change_that_kept_size_and_time(world_root):
    """`harness run` reports the edited file and builds the world again before anything uses it (here the rebuild
    is stopped at its start, SIGTERM: the run ends there, exit 143, and nothing of it ran)."""
    home = world_root.parents[1]
    assert _cli("world", "check", "synthetic", home=home).returncode == 0  # the copy's new times recorded
    time.sleep(0.05)
    _edit_keeping_size_and_time(world_root / TOKENIZER)
    env = {**os.environ, "HARNESS_HOME": str(home), "OMP_NUM_THREADS": "1", "COLUMNS": "200",
           "HARNESS_FAULT_AT": "harness.worlds:_build_again", "HARNESS_FAULT_SIGNAL": "TERM"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", "random",
                           "--tasks", "mlm"], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert proc.returncode == 143, proc.stderr
    damaged = [ln for ln in proc.stderr.splitlines() if "is damaged" in ln]
    assert len(damaged) == 1 and f"{TOKENIZER} does not match its sha256" in damaged[0], proc.stderr
    assert "building it again" in damaged[0] and "cell" not in proc.stderr.split(damaged[0])[1].lower()


def test_a_copied_world_is_hashed_once_and_kept(world_root):
    """A world copied with its times kept (``cp -a``: every status-change time is new) is hashed once, its new
    times recorded, and used: not built again. A record written before the status-change time was recorded is
    completed the same way."""
    from harness.worlds import CHECKSUMS, check_world_files, get_world

    inode = (world_root / "manifest.json").stat().st_ino
    first = check_world_files(world_root)
    assert first.problems == [] and first.hashed == first.files
    record = json.loads((world_root / CHECKSUMS).read_text())
    for rel, rec in record["files"].items():
        assert rec["ctime_ns"] == (world_root / rel).stat().st_ctime_ns
    assert check_world_files(world_root).hashed == 0
    for rec in record["files"].values():
        del rec["ctime_ns"]  # as an earlier version recorded it
    (world_root / CHECKSUMS).write_text(json.dumps(record))
    assert check_world_files(world_root).hashed == first.files
    assert check_world_files(world_root).hashed == 0
    get_world("synthetic", build=False)
    assert (world_root / "manifest.json").stat().st_ino == inode  # the same files: nothing was built again


def test_world_check_of_a_sound_world(world_root):
    proc = _cli("world", "check", "synthetic", home=world_root.parents[1])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "files match the sha256 its build recorded" in proc.stdout


def test_a_world_built_before_the_digests_is_read_and_check_says_so(world_root):
    from harness.worlds import CHECKSUMS, get_world

    path = world_root / CHECKSUMS
    record = json.loads(path.read_text())
    path.write_text(json.dumps({"sha256": record["sha256"], "sizes": record["sizes"]}))  # an older build's record
    get_world("synthetic", build=False)
    proc = _cli("world", "check", "synthetic", home=world_root.parents[1])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "built before file digests were recorded" in proc.stdout
    assert "harness world build synthetic --force" in proc.stdout
    assert "files" not in json.loads(path.read_text())  # nothing is trusted after the fact


def test_world_check_of_a_world_not_built(tmp_path):
    proc = _cli("world", "check", "synthetic", home=tmp_path / "home")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not built here" in proc.stdout and "harness world build synthetic" in proc.stdout
    assert not (tmp_path / "home").exists()  # checking makes nothing
