"""Adding to a built world the sources that carry their own identity (:mod:`harness.worlds.adding`), in process on
a tiny world made up here (a few small files and a builder of a few lines, no world build): what is added and where,
that every file the world had is kept, that a failure leaves the world as it was, that a kill between the commit's
renames is finished by the next open, and the one-line refusals. Written to kill the mutants of
scripts/mutation.sh's module 'adding' (the tests that build the synthetic world are too slow to run per mutant)."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import ConfigError, MissingResourceError
from harness.worlds import WORLDS, check_world_files, write_checksums
from harness.worlds.adding import add_sources, finish_pending, journal_path, missing_sources
from harness.worlds.base import ManifestView

NAME = "tiny-adding"
NOTES = ["world tiny-adding: adding source dec", "world tiny-adding: adding source dec2"]


class _Sketch(ManifestView):
    """What the builder declares today: its sources' manifest entries (an own-identity source says so)."""

    def __init__(self, sources: dict[str, Any]):
        self.name, self.manifest, self.languages = NAME, {"sources": sources}, {}


class Tiny:
    """A world builder that declares an encoder (``enc``, in the world's identity), a source a build before this
    version made already (``old``) and two it did not (``dec``, ``dec2``), all three with their own identity."""

    name, description, version = NAME, "a world of a few files", "1"
    build_inputs = ("downloads/tiny",)

    def __init__(self) -> None:
        self.calls: list[tuple[str, Path, Path, Path]] = []
        self.fail: BaseException | None = None

    def declare(self) -> _Sketch:
        return _Sketch({"enc": {"arch": "enc"}, "old": {"own_identity": True},
                        "dec": {"own_identity": True}, "dec2": {"own_identity": True}})

    def build_source(self, name: str, out: Path, work: Path, *, root: Path) -> dict[str, Any]:
        """The source made from what the built world holds (its encoder's vocabulary), through a work folder."""
        from harness.core.locks import held

        assert held(root)  # staged under the world's lock
        self.calls.append((name, out, work, root))
        vocab = (root / "sources" / "enc" / "vocab.txt").read_text(encoding="utf-8")
        work.mkdir(parents=True, exist_ok=True)
        (work / "download.tmp").write_bytes(b"w" * 50)
        if self.fail is not None:
            raise self.fail
        (out / "tokenizer").mkdir(parents=True)
        (out / "model.bin").write_bytes(f"{name}:{vocab}".encode() * 7)
        (out / "tokenizer" / "vocab.txt").write_text(f"{vocab}\n{name}", encoding="utf-8")
        return {"own_identity": True, "objective": "clm", "made_from": vocab, "name": name}


@pytest.fixture
def builder(monkeypatch) -> Tiny:
    WORLDS.names()  # the built-in worlds registered first
    made = Tiny()
    monkeypatch.setitem(WORLDS._items, NAME, made)
    return made


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _make_world(root: Path, *, digests: bool = True) -> Path:
    """A built world that lacks ``dec`` and ``dec2``: an encoder with a non-ASCII vocabulary, an old decoder, a
    resource; its manifest and record as a build writes them."""
    (root / "sources" / "enc").mkdir(parents=True)
    (root / "sources" / "enc" / "vocab.txt").write_text("ā b c", encoding="utf-8")
    (root / "sources" / "old").mkdir()
    (root / "sources" / "old" / "model.bin").write_bytes(b"o" * 30)
    (root / "resources").mkdir()
    (root / "resources" / "text.txt").write_text("words\n", encoding="utf-8")
    manifest = {"pivot_language": "eng_Latn", "note": "é",
                "sources": {"enc": {"arch": "enc"}, "old": {"own_identity": True, "objective": "clm"}}}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    write_checksums(root, digests=digests)
    return root


@pytest.fixture
def world(home, builder) -> Path:
    return _make_world(home / "worlds" / f"{NAME}-v1")


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _beside(root: Path) -> list[str]:
    """What is beside the world in its parent folder (a journal, a staging folder, a lock file)."""
    return sorted(p.name for p in root.parent.iterdir() if p != root and not p.name.endswith(".lock"))


def _record(root: Path) -> dict[str, Any]:
    return json.loads((root / "checksums.json").read_text())


def _added_files(name: str) -> dict[str, bytes]:
    return {f"sources/{name}/model.bin": f"{name}:ā b c".encode() * 7,
            f"sources/{name}/tokenizer/vocab.txt": f"ā b c\n{name}".encode()}


def _sound(root: Path) -> None:
    check = check_world_files(root, full=True)
    assert check.problems == [] and check.unlisted == []


def test_the_missing_sources_are_added_and_nothing_else_moves(world, builder):
    """Each own-identity source the world lacks is made (from the world, under its lock) and put in place; every
    file the world had keeps its bytes but the manifest (the new entries beside the old ones) and the record (the new
    files' sizes, sha256 and times, the manifest's new sha256), written as a build writes it; nothing is left beside
    the world; a second addition finds nothing to add."""
    from harness.core.hashing import sha256_file

    before = _files(world)
    old_record = _record(world)
    notes: list[str] = []
    assert add_sources(NAME, note=notes.append) == ["dec", "dec2"]
    assert notes == NOTES
    assert [(n, out, work, root) for n, out, work, root in builder.calls] == [
        (n, builder.calls[0][2].parent / "sources" / n, builder.calls[0][2].parent / "work", world)
        for n in ("dec", "dec2")]
    assert re.fullmatch(rf"\.tmp-{NAME}-v1-add-[0-9a-f]{{8}}", builder.calls[0][2].parent.name)
    assert builder.calls[0][2].parent.parent == world.parent
    after = _files(world)
    assert {rel for rel in before if before[rel] != after.get(rel)} == {"manifest.json", "checksums.json"}
    assert {rel: after[rel] for rel in after if rel not in before} == {**_added_files("dec"), **_added_files("dec2")}
    manifest = json.loads((world / "manifest.json").read_text(encoding="utf-8"))
    old = json.loads(before["manifest.json"].decode())
    assert manifest == {**old, "sources": {**old["sources"], "dec": {"own_identity": True, "objective": "clm",
                                                                     "made_from": "ā b c", "name": "dec"},
                                           "dec2": {"own_identity": True, "objective": "clm",
                                                    "made_from": "ā b c", "name": "dec2"}}}
    record = _record(world)
    text = (world / "checksums.json").read_text()
    assert text == json.dumps(record, indent=0, sort_keys=True)  # as every build writes it
    assert set(record) == {"sizes", "sha256", "files"}
    assert set(record["sizes"]) == set(after) - {"checksums.json"} == set(record["files"])
    for rel in after:
        if rel != "checksums.json":
            assert record["sizes"][rel] == len(after[rel])
            assert record["files"][rel]["sha256"] == sha256_file(world / rel)
            st = (world / rel).stat()
            assert record["files"][rel]["mtime_ns"] == st.st_mtime_ns
            if rel != "manifest.json":
                assert record["files"][rel]["ctime_ns"] == st.st_ctime_ns
            if rel in before and rel != "manifest.json":
                assert record["files"][rel] == old_record["files"][rel]
    assert record["sha256"] == {"manifest.json": sha256_file(world / "manifest.json")}
    _sound(world)
    assert _beside(world) == []
    assert add_sources(NAME, note=notes.append) == [] and notes == NOTES


def test_an_addition_to_a_world_recorded_by_sizes_only(home, builder):
    """A world built before the record held every file's digest (sizes and the manifest's sha256 only) gains the
    sources with their sizes and the manifest's new sha256, and its record stays of that kind."""
    from harness.core.hashing import sha256_file

    world = _make_world(home / "worlds" / f"{NAME}-v1", digests=False)
    assert "files" not in _record(world)
    assert add_sources(NAME, note=lambda _: None) == ["dec", "dec2"]
    record = _record(world)
    assert "files" not in record
    assert record["sha256"] == {"manifest.json": sha256_file(world / "manifest.json")}
    added = {**_added_files("dec"), **_added_files("dec2")}
    assert {rel: record["sizes"][rel] for rel in added} == {rel: len(b) for rel, b in added.items()}
    _sound(world)


def test_missing_sources_are_the_declared_own_identity_ones_the_manifest_lacks(world, builder, monkeypatch):
    """In the order the builder declares them; none where it declares nothing; an encoder (in the world's
    identity) is never one of them, nor a source the world has."""
    assert missing_sources(world, builder) == ["dec", "dec2"]
    manifest = json.loads((world / "manifest.json").read_text(encoding="utf-8"))
    del manifest["sources"]["enc"], manifest["sources"]["old"]
    manifest["sources"]["dec2"] = {"own_identity": True}
    (world / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    assert missing_sources(world, builder) == ["old", "dec"]
    monkeypatch.setattr(Tiny, "declare", None)
    assert missing_sources(world, builder) == []


def test_a_manifest_without_sources_lacks_every_declared_one(world, builder):
    (world / "manifest.json").write_text(json.dumps({"pivot_language": "eng_Latn"}), encoding="utf-8")
    assert missing_sources(world, builder) == ["old", "dec", "dec2"]


def test_a_world_not_built_is_refused_in_one_line(home, builder):
    with pytest.raises(ConfigError) as exc:
        add_sources(NAME, note=lambda _: None)
    assert str(exc.value) == (f"world {NAME!r} is not built yet: `harness world build {NAME}` builds it with every "
                              f"source")
    assert builder.calls == []


def test_a_damaged_world_gains_no_source(world, builder):
    (world / "resources" / "text.txt").write_text("other\n", encoding="utf-8")
    before = _files(world)
    with pytest.raises(MissingResourceError) as exc:
        add_sources(NAME, note=lambda _: None)
    assert str(exc.value) == (f"world {NAME!r} at {world} is damaged (resources/text.txt does not match its sha256 "
                              f"(changed since the world was built)): sources are added to a sound world only; "
                              f"`harness world build {NAME} --force` builds it again")
    assert _files(world) == before and builder.calls == [] and _beside(world) == []


def test_a_world_holding_a_file_its_record_does_not_list_gains_no_source(world, builder):
    (world / "sources" / "enc" / "stray.txt").write_text("x", encoding="utf-8")
    before = _files(world)
    with pytest.raises(MissingResourceError, match="^" + re.escape(f"world {NAME!r} at {world} holds "
                                                                   f"sources/enc/stray.txt, which its build")):
        add_sources(NAME, note=lambda _: None)
    assert _files(world) == before and builder.calls == []


def test_a_builder_that_cannot_add_a_source_is_refused_in_one_line(world, builder, monkeypatch):
    monkeypatch.delattr(Tiny, "build_source")
    before = _files(world)
    with pytest.raises(ConfigError) as exc:
        add_sources(NAME, note=lambda _: None)
    assert str(exc.value) == (f"world {NAME!r}: its builder cannot add a source to a built world (dec, dec2); "
                              f"`harness world build {NAME} --force` builds it again")
    assert _files(world) == before and _beside(world) == []


def test_a_builder_that_declares_nothing_to_add_writes_nothing(world, builder, monkeypatch):
    monkeypatch.setattr(Tiny, "build_source", None)
    monkeypatch.setattr(Tiny, "declare", lambda self: _Sketch({"enc": {}, "old": {"own_identity": True}}))
    before = _files(world)
    assert add_sources(NAME, note=lambda _: None) == []
    assert _files(world) == before and _beside(world) == []


@pytest.mark.parametrize("where", ["before the source", "in the work folder", "full disk"])
def test_a_failure_while_staging_leaves_the_world_as_it_was(world, builder, monkeypatch, where):
    """The error itself is raised (not one of the clean-up's); the world keeps every byte; nothing is left beside
    it; the next addition adds."""
    error = OSError(errno.ENOSPC, "No space left on device") if where == "full disk" else RuntimeError("killed")
    before = _files(world)
    if where == "before the source":
        def failing(self, name, out, work, *, root):
            raise error
        monkeypatch.setattr(Tiny, "build_source", failing)
    else:
        builder.fail = error
    with pytest.raises(type(error)) as exc:
        add_sources(NAME, note=lambda _: None)
    assert exc.value is error
    assert _files(world) == before and _beside(world) == []
    monkeypatch.undo()
    monkeypatch.setenv("HARNESS_HOME", str(world.parents[1]))
    monkeypatch.setitem(WORLDS._items, NAME, Tiny())
    assert add_sources(NAME, note=lambda _: None) == ["dec", "dec2"]


def test_a_source_made_without_a_work_folder(world, builder, monkeypatch):
    def direct(self, name, out, work, *, root):
        out.mkdir(parents=True)
        (out / "model.bin").write_bytes(name.encode())
        return {"own_identity": True}

    monkeypatch.setattr(Tiny, "build_source", direct)
    assert add_sources(NAME, note=lambda _: None) == ["dec", "dec2"]
    assert (world / "sources" / "dec2" / "model.bin").read_bytes() == b"dec2"
    _sound(world)
    assert _beside(world) == []


def test_a_full_disk_when_the_journal_is_written_leaves_the_world_as_it_was(world, builder, monkeypatch):
    before = _files(world)
    real = Path.write_text

    def full(self, *a, **k):
        if self.name.startswith(journal_path(world).name):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space left"):
        add_sources(NAME, note=lambda _: None)
    monkeypatch.setattr(Path, "write_text", real)
    assert _files(world) == before and _beside(world) == []


def _kill_in_commit(world: Path, monkeypatch, renames_done: int) -> str:
    """An addition killed after ``renames_done`` of its commit's renames; what its journal names as its staging."""
    real = os.replace
    calls = {"n": 0}

    def dying(src, dst):
        if str(src).startswith(str(world.parent / ".tmp-")):
            if calls["n"] == renames_done:
                raise KeyboardInterrupt
            calls["n"] += 1
        return real(src, dst)

    monkeypatch.setattr(os, "replace", dying)
    with pytest.raises(KeyboardInterrupt):
        add_sources(NAME, note=lambda _: None)
    monkeypatch.setattr(os, "replace", real)
    plan = json.loads(journal_path(world).read_text(encoding="utf-8"))
    assert plan["sources"] == ["dec", "dec2"]
    return plan["staging"]


@pytest.mark.parametrize("renames_done", [0, 1, 2, 3])
def test_a_kill_between_the_renames_is_finished_by_the_next_open(world, builder, monkeypatch, renames_done):
    """The journal names the staging folder relative to the world's folder; the staged files are all there until
    the commit ends; the next open finishes the renames, and the world has every file it had and every new one."""
    before = _files(world)
    staging = _kill_in_commit(world, monkeypatch, renames_done)
    assert re.fullmatch(rf"\.\./\.tmp-{NAME}-v1-add-[0-9a-f]{{8}}", staging)
    assert _beside(world) == sorted([journal_path(world).name, staging[3:]])
    # what the builder worked with was removed before the journal: the staging holds what the commit moves only
    left = {p.relative_to(world / staging).as_posix() for p in (world / staging).rglob("*") if p.is_file()}
    moved = [{*_added_files("dec"), *_added_files("dec2")}, {*_added_files("dec2")}, set(), set()][renames_done]
    assert left == moved | ({"manifest.json"} if renames_done < 3 else set()) | {"checksums.json"}
    assert finish_pending(world) is True
    after = _files(world)
    assert {rel for rel in before if before[rel] != after.get(rel)} == {"manifest.json", "checksums.json"}
    assert set(after) - set(before) == {*_added_files("dec"), *_added_files("dec2")}
    _sound(world)
    assert _beside(world) == []


def test_the_next_addition_finishes_a_killed_one_first(world, builder, monkeypatch):
    _kill_in_commit(world, monkeypatch, 1)
    assert add_sources(NAME, note=lambda _: None) == []
    assert set(_files(world)) >= {*_added_files("dec"), *_added_files("dec2")}
    _sound(world)
    assert _beside(world) == []


def test_a_staging_killed_before_its_journal_is_removed_and_others_are_kept(world, builder, home, tmp_path):
    """A staging folder of this world with no journal (killed while staging) is removed by the next addition; one
    that cannot be removed does not stop it; another world's staging folder is not touched."""
    dead = world.parent / f".tmp-{NAME}-v1-add-dead0000"
    (dead / "sources" / "dec").mkdir(parents=True)
    (dead / "sources" / "dec" / "half.bin").write_bytes(b"h")
    other = world.parent / ".tmp-other-v1-add-live0000"
    other.mkdir()
    (tmp_path / "target").mkdir()
    link = world.parent / f".tmp-{NAME}-v1-add-link0000"
    link.symlink_to(tmp_path / "target")
    assert add_sources(NAME, note=lambda _: None, keep_inputs=True) == ["dec", "dec2"]
    assert not dead.exists() and other.is_dir() and link.is_symlink()
    assert _beside(world) == [other.name, link.name]


def test_the_build_inputs_are_removed_once_the_sources_are_in_place_unless_kept(world, builder, home):
    inputs = home / "downloads" / "tiny"
    inputs.mkdir(parents=True)
    (inputs / "weights.bin").write_bytes(b"w")
    assert add_sources(NAME, note=lambda _: None, keep_inputs=True) == ["dec", "dec2"]
    assert inputs.is_dir()
    (world / "sources" / "dec").rename(world.parent / "dec-away")
    manifest = json.loads((world / "manifest.json").read_text(encoding="utf-8"))
    del manifest["sources"]["dec"]
    (world / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    write_checksums(world)
    assert add_sources(NAME, note=lambda _: None) == ["dec"]
    assert not inputs.exists() and (home / "downloads").is_dir()


def test_a_builder_without_build_inputs_removes_nothing(world, builder, home, monkeypatch):
    monkeypatch.delattr(Tiny, "build_inputs")
    kept = home / "downloads" / "tiny"
    kept.mkdir(parents=True)
    assert add_sources(NAME, note=lambda _: None) == ["dec", "dec2"]
    assert kept.is_dir()


def test_each_source_is_said_as_it_is_added(world, builder, capsys):
    assert add_sources(NAME) == ["dec", "dec2"]
    assert capsys.readouterr().out.splitlines() == NOTES


def test_the_world_is_locked_while_a_source_is_added(world, builder, monkeypatch):
    """The addition holds the world's lock (a build of it waits), and says why it waits where another holds it."""
    import harness.core.locks as locks

    real = locks.exclusive
    taken: list[tuple[Path, str | None]] = []

    def exclusive(path, waiting=None):
        taken.append((path, waiting))
        return real(path, waiting=waiting)

    monkeypatch.setattr(locks, "exclusive", exclusive)
    assert add_sources(NAME, note=lambda _: None) == ["dec", "dec2"]
    assert taken == [(world, f"world {NAME}: in use by another build")]


def test_the_world_s_text_is_read_as_utf8_whatever_the_locale(world, builder):
    """A manifest holds text in any script (written as UTF-8): read as such in a process whose locale is ASCII."""
    import locale

    was = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        assert missing_sources(world, builder) == ["dec", "dec2"]
        assert add_sources(NAME, note=lambda _: None) == ["dec", "dec2"]
    finally:
        locale.setlocale(locale.LC_CTYPE, was)
    assert json.loads((world / "manifest.json").read_text(encoding="utf-8"))["note"] == "é"
    _sound(world)
