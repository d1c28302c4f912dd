"""A world built before a source that carries its own identity (the bible world before its decoders) gains it with
``harness world build <world> --add-sources``: every file it had is kept, its identity (so every cell's key) is
the same, the new source is the one the build makes, and a kill, a full disk or a failure at any point leaves either
the world as it was or an addition that the next load finishes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _without_decoder(root: Path) -> None:
    """Make the world at ``root`` what a build before its decoder wrote: no folder, no manifest entry, a record of
    the rest."""
    from harness.worlds import CHECKSUMS

    shutil.rmtree(root / "sources" / "dec")
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    del manifest["sources"]["dec"]
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    from harness.worlds import write_checksums

    write_checksums(root)
    assert (root / CHECKSUMS).is_file()


@pytest.fixture
def old_world(built_world, tmp_path, monkeypatch) -> Path:
    root = tmp_path / "home" / "worlds" / built_world.name
    shutil.copytree(built_world, root)
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    _without_decoder(root)
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_missing_decoder_is_added_and_nothing_else_moves(old_world, built_world):
    from harness.worlds import check_world_files, get_world
    from harness.worlds.adding import add_sources, journal_path

    before = _files(old_world)
    old = get_world("synthetic")
    assert "dec" not in old.sources
    assert add_sources("synthetic", note=lambda _: None) == ["dec"]
    after = _files(old_world)
    # every file it had is there with its bytes, but the manifest (an entry more) and the record
    changed = {rel for rel in before if before[rel] != after.get(rel)}
    assert changed == {"manifest.json", "checksums.json"}
    assert {rel for rel in after if rel not in before} == {f"sources/dec/{p.name}" for p in
                                                            (built_world / "sources" / "dec").iterdir()}
    check = check_world_files(old_world, full=True)
    assert check.problems == [] and check.unlisted == []
    new = get_world("synthetic")
    assert new.hash == old.hash  # the world's identity, so every encoder cell's key, unchanged
    assert "dec" in new.sources and new.source_objective("dec") == "clm"
    # the decoder is the one the world's build makes
    built = json.loads((built_world / "manifest.json").read_text())["sources"]["dec"]
    assert new.manifest["sources"]["dec"] == built
    assert new.source_identity("dec") == get_world_identity(built_world)
    assert not journal_path(old_world).exists() and not list(old_world.parent.glob(".tmp-*"))
    assert add_sources("synthetic", note=lambda _: None) == []  # nothing left to add


def get_world_identity(root: Path) -> str | None:
    from harness.worlds.base import load_world_dir

    return load_world_dir("synthetic", root).source_identity("dec")


@pytest.mark.parametrize("where", ["build", "full disk"])
def test_a_failure_while_staging_leaves_the_world_as_it_was(old_world, monkeypatch, where):
    from harness.worlds import WORLDS, check_world_files
    from harness.worlds.adding import add_sources, journal_path

    before = _files(old_world)
    builder = WORLDS.get("synthetic")

    def failing(name, out, work, *, root):
        out.mkdir(parents=True)
        (out / "half.bin").write_bytes(b"x" * 1000)
        if where == "full disk":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError("killed")

    monkeypatch.setattr(builder, "build_source", failing, raising=False)
    with pytest.raises((OSError, RuntimeError)):
        add_sources("synthetic", note=lambda _: None)
    assert _files(old_world) == before
    assert not journal_path(old_world).exists() and not list(old_world.parent.glob(".tmp-*"))
    assert check_world_files(old_world).problems == []


@pytest.mark.parametrize("renames_done", [0, 1, 2])
def test_an_addition_killed_in_its_commit_is_finished_by_the_next_load(old_world, monkeypatch, renames_done):
    """The commit is three renames after the journal: killed after 0, 1 or 2 of them, the next load finishes it
    (it is never taken for a damaged world, which would be built again)."""
    from harness.worlds import check_world_files, get_world
    from harness.worlds.adding import journal_path

    _kill_in_commit(old_world, monkeypatch, renames_done)
    import harness.worlds as worlds

    monkeypatch.setattr(worlds, "_build_locked", lambda *a, **k: pytest.fail("the world was built again"))
    world = get_world("synthetic")
    assert "dec" in world.sources
    assert not journal_path(old_world).exists() and not list(old_world.parent.glob(".tmp-*"))
    check = check_world_files(old_world, full=True)
    assert check.problems == [] and check.unlisted == []


def test_a_killed_process_s_addition_is_finished_and_the_cli_adds_and_says_so(old_world):
    """A real process killed (SIGKILL) once its journal is written; then the CLI: the next `world build
    --add-sources` finishes it and says every source is there; --force with it is refused."""
    home = old_world.parents[1]
    env = {**os.environ, "HARNESS_HOME": str(home), "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    script = ("import os, signal, harness.worlds.adding as a\n"
              "real = os.replace\n"
              "def r(s, d):\n"
              "    real(s, d)\n"
              "    if os.path.basename(d).startswith('.add-') and str(d).endswith('.json'):\n"
              "        os.kill(os.getpid(), signal.SIGKILL)\n"
              "os.replace = r\n"
              "a.add_sources('synthetic')\n")
    hint = subprocess.run([sys.executable, "-m", "harness.cli", "world", "build", "synthetic"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert hint.returncode == 0 and ("world synthetic lacks dec (built before this version declared them): "
                                     "`harness world build synthetic --add-sources` adds them") in hint.stdout
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -9, proc.stderr
    from harness.worlds.adding import journal_path

    assert journal_path(old_world).is_file()
    out = subprocess.run([sys.executable, "-m", "harness.cli", "world", "build", "synthetic", "--add-sources"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "world synthetic: has every source this version declares" in out.stdout
    again = subprocess.run([sys.executable, "-m", "harness.cli", "world", "build", "synthetic"], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "lacks" not in again.stdout
    assert (old_world / "sources" / "dec" / "model.safetensors").is_file()
    refused = subprocess.run([sys.executable, "-m", "harness.cli", "world", "build", "synthetic", "--add-sources",
                              "--force"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "give one of them" in refused.stdout


def test_a_damaged_world_gains_no_source(old_world):
    from harness.core.errors import MissingResourceError
    from harness.worlds.adding import add_sources

    vec = old_world / "resources" / "word_vectors.vec"
    vec.write_bytes(vec.read_bytes()[:-10])
    before = _files(old_world)
    with pytest.raises(MissingResourceError, match=r"is damaged \(resources/word_vectors.vec has .* bytes"):
        add_sources("synthetic", note=lambda _: None)
    assert _files(old_world) == before


def test_an_encoder_cannot_be_added(old_world, monkeypatch):
    """Only a source with its own identity is added: an encoder's heads are part of the world's identity."""
    from harness.worlds import WORLDS
    from harness.worlds.adding import missing_sources
    from harness.worlds.base import builder_sketch

    builder = WORLDS.get("synthetic")
    manifest = json.loads((old_world / "manifest.json").read_text())
    del manifest["sources"]["src"]
    (old_world / "manifest.json").write_text(json.dumps(manifest))
    assert "src" in builder_sketch(builder).sources
    assert missing_sources(old_world, builder) == ["dec"]


def test_a_world_seen_damaged_but_sound_under_the_lock_is_not_built_again(old_world, monkeypatch):
    """A load that saw an addition's renames half done (before its journal could be read) takes the world for
    damaged; under the world's lock, once the addition has finished, the world is sound and is kept."""
    import harness.worlds as worlds

    monkeypatch.setattr(worlds, "_build_locked", lambda *a, **k: pytest.fail("the world was built again"))
    worlds._build_again("synthetic", old_world, "manifest.json does not match its sha256")
    assert worlds.check_world_files(old_world).problems == []


def test_a_full_disk_when_the_journal_is_written_leaves_the_world_as_it_was(old_world, monkeypatch):
    from harness.worlds import check_world_files
    from harness.worlds.adding import add_sources, journal_path

    before = _files(old_world)
    real = Path.write_text

    def full(self, *a, **k):
        if self.name.startswith(journal_path(old_world).name):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space left"):
        add_sources("synthetic", note=lambda _: None)
    monkeypatch.setattr(Path, "write_text", real)
    assert _files(old_world) == before
    assert not journal_path(old_world).exists() and not list(old_world.parent.glob(".tmp-*"))
    assert not list(old_world.parent.glob(".add-*"))
    assert check_world_files(old_world).problems == []


def test_an_addition_waits_for_another_process_holding_the_world(old_world):
    """Another process holds the world's lock (a build of it): the addition writes nothing until it is released."""
    import time

    from harness.core.locks import lock_file
    from harness.worlds.adding import add_sources

    before = _files(old_world)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock_file(old_world))!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(4)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        added = add_sources("synthetic", note=lambda _: None)
        waited = time.monotonic() - t0
    finally:
        holder.wait(timeout=30)
    assert added == ["dec"] and waited > 2.5  # it began only once the holder had let go
    assert {rel for rel in before if before[rel] != _files(old_world).get(rel)} == {"manifest.json",
                                                                                     "checksums.json"}


def _kill_in_commit(old_world: Path, monkeypatch, renames_done: int) -> None:
    """An addition killed after ``renames_done`` of its commit's renames (the journal written)."""
    from harness.worlds.adding import add_sources, journal_path

    real = os.replace
    calls = {"n": 0}

    def dying(src, dst):
        if str(src).startswith(str(old_world.parent / ".tmp-")):  # a commit's rename
            if calls["n"] == renames_done:
                raise KeyboardInterrupt  # the kill
            calls["n"] += 1
        return real(src, dst)

    monkeypatch.setattr(os, "replace", dying)
    with pytest.raises(KeyboardInterrupt):
        add_sources("synthetic", note=lambda _: None)
    monkeypatch.setattr(os, "replace", real)
    assert journal_path(old_world).is_file()


def _finished_without_a_build(root: Path, monkeypatch) -> None:
    """The next load finishes the addition at ``root``: the world is not built again, it has the decoder, nothing
    of the addition is left and its files are as its record says."""
    import harness.worlds as worlds
    from harness.worlds.adding import journal_path

    monkeypatch.setattr(worlds, "_build_locked", lambda *a, **k: pytest.fail("the world was built again"))
    world = worlds.get_world("synthetic")
    assert world.root == root and "dec" in world.sources
    assert not journal_path(root).exists() and not list(root.parent.glob(".tmp-*"))
    check = worlds.check_world_files(root, full=True)
    assert check.problems == [] and check.unlisted == []


@pytest.mark.parametrize("renames_done", [0, 1, 2])
def test_a_home_moved_after_a_kill_in_the_commit_is_finished_not_built_again(old_world, tmp_path, monkeypatch,
                                                                             renames_done):
    """The journal names the staging folder relative to the world's folder: the whole home renamed after the kill,
    the next load finds the staging folder and finishes the renames."""
    from harness.worlds.adding import journal_path

    _kill_in_commit(old_world, monkeypatch, renames_done)
    named = json.loads(journal_path(old_world).read_text(encoding="utf-8"))["staging"]
    home = old_world.parents[1]
    moved = home.rename(tmp_path / "moved-home")
    monkeypatch.setenv("HARNESS_HOME", str(moved))
    _finished_without_a_build(moved / "worlds" / old_world.name, monkeypatch)
    assert not Path(named).is_absolute() and Path(named).name.startswith(f".tmp-{old_world.name}-add-")


@pytest.mark.parametrize("moved", [False, True], ids=["in place", "home moved"])
def test_a_journal_naming_an_absolute_staging_folder_is_still_finished(old_world, tmp_path, monkeypatch, moved):
    """A journal an earlier version wrote names the staging folder by its absolute path: read where that path
    exists, and beside the world where the home was moved since."""
    from harness.worlds.adding import journal_path

    _kill_in_commit(old_world, monkeypatch, 1)
    journal = journal_path(old_world)
    plan = json.loads(journal.read_text(encoding="utf-8"))
    plan["staging"] = str((old_world / plan["staging"]).resolve())
    journal.write_text(json.dumps(plan), encoding="utf-8")
    root = old_world
    if moved:
        root = old_world.parents[1].rename(tmp_path / "moved-home") / "worlds" / old_world.name
        monkeypatch.setenv("HARNESS_HOME", str(root.parents[1]))
    _finished_without_a_build(root, monkeypatch)


def test_a_journal_naming_a_folder_elsewhere_is_refused(old_world, monkeypatch):
    """A journal whose staging folder is not an addition's beside the world is not followed (nothing is moved from
    nor removed at what it names): the load says so in one line."""
    from harness.core.errors import MissingResourceError
    from harness.worlds import get_world
    from harness.worlds.adding import journal_path

    elsewhere = old_world.parent / "elsewhere"
    (elsewhere / "sources" / "dec").mkdir(parents=True)
    journal_path(old_world).write_text(json.dumps({"staging": "../elsewhere", "sources": ["dec"]}))
    with pytest.raises(MissingResourceError, match="journal of an addition of sources.* is unreadable"):
        get_world("synthetic")
    assert (elsewhere / "sources" / "dec").is_dir() and not (old_world / "sources" / "dec").exists()


def test_the_staged_files_their_folders_and_the_journal_are_fsynced_before_the_renames(old_world, monkeypatch):
    """Every staged file and folder, then the journal and its folder, are on the disk before the first rename of
    the commit; the folder each rename writes into is fsynced after it."""
    from harness.worlds.adding import add_sources, journal_path

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name what an fsync'd descriptor is")
    events: list[tuple[str, Path, Path | None]] = []
    staged: set[Path] = set()
    real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename
    prefix = str(old_world.parent / f".tmp-{old_world.name}-add-")

    def fsync(fd):
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}")), None))
        return real_fsync(fd)

    def moving(real):
        def move(src, dst):
            if str(src).startswith(prefix) and not staged:  # the commit's first rename: what was staged
                staging = Path(prefix + str(src)[len(prefix):].split(os.sep)[0])
                staged.update(p.resolve() for p in [staging, *staging.rglob("*")])
            events.append(("rename", Path(src).resolve(), Path(dst).resolve()))
            return real(src, dst)
        return move

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", moving(real_replace))
    monkeypatch.setattr(os, "rename", moving(real_rename))
    assert add_sources("synthetic", note=lambda _: None) == ["dec"]
    renames = [i for i, e in enumerate(events) if e[0] == "rename"]
    journal = journal_path(old_world).resolve()
    at_journal = next(i for i in renames if events[i][2] == journal)
    commit = [i for i in renames if str(events[i][1]).startswith(str(Path(prefix).resolve()))]
    assert len(commit) == 3 and at_journal < commit[0]
    synced_first = {e[1] for e in events[:at_journal] if e[0] == "fsync"}
    assert staged and staged <= synced_first, sorted(map(str, staged - synced_first))
    assert events[at_journal][1] in synced_first  # the journal's own bytes before it is put in place
    assert ("fsync", journal.parent, None) in events[at_journal:commit[0]]  # its folder before the first rename
    for n, i in enumerate(commit):
        until = commit[n + 1] if n + 1 < len(commit) else len(events)
        assert ("fsync", events[i][2].parent, None) in events[i:until], events[i]
