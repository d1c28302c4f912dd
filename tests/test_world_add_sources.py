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
    import harness.worlds.adding as adding
    from harness.worlds import check_world_files, get_world
    from harness.worlds.adding import add_sources, journal_path

    real = os.replace
    calls = {"n": 0}

    def dying(src, dst):
        if str(src).startswith(str(old_world.parent / ".tmp-")):  # a commit's rename
            if calls["n"] == renames_done:
                raise KeyboardInterrupt  # the kill
            calls["n"] += 1
        return real(src, dst)

    monkeypatch.setattr(adding.os, "replace", dying)
    with pytest.raises(KeyboardInterrupt):
        add_sources("synthetic", note=lambda _: None)
    monkeypatch.setattr(adding.os, "replace", real)
    assert journal_path(old_world).is_file()
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
              "real = a.os.replace\n"
              "def r(s, d):\n"
              "    real(s, d)\n"
              "    if os.path.basename(d).startswith('.add-') and str(d).endswith('.json'):\n"
              "        os.kill(os.getpid(), signal.SIGKILL)\n"
              "a.os.replace = r\n"
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
