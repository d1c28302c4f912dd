"""``harness world derive`` and the user's data: each model file read once to hash it, a full disk refused in one
line with nothing left, a derivation killed before its commit leaving only its staging (removed by the next)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests import test_world_derive as derive
from tests.test_world_derive import _cli, _listing, _refused, _target

models, worlds = derive.models, derive.worlds  # the same fixtures: tiny models of each family, the synthetic world's folder


def test_each_stored_file_is_hashed_once_and_the_record_holds_its_bytes(models, worlds, tmp_path, capsys,
                                                                        monkeypatch):
    """A derivation reads each model file once to hash it (a model of gigabytes is not read twice): the world's
    checksum record takes the digests the staging computed, and they are the stored files' bytes."""
    import collections

    from harness.core import hashing
    from harness.worlds import CHECKSUMS, get_world

    calls: collections.Counter[str] = collections.Counter()
    real = hashing.sha256_file

    def counted(path, *a, **k):
        calls[Path(path).name] += 1
        return real(path, *a, **k)

    from harness.worlds import derived_inputs

    monkeypatch.setattr(hashing, "sha256_file", counted)
    monkeypatch.setattr(derived_inputs, "sha256_file", counted)  # (bound there when imported)
    tok = _target(models, "file", "unigram", tmp_path)
    rc, _, err = _cli(capsys, "world", "derive", "d-hashed", "--from", "synthetic", "--source",
                      str(models["llama-bpe"]), "--target-tokenizer", tok, "--donor", str(models["xlmr-unigram"]))
    assert rc == 0, err
    assert calls["model.safetensors"] == 2, calls  # the source's and the donor's, once each
    monkeypatch.undo()
    world = get_world("d-hashed", build=False)
    files = json.loads((world.root / CHECKSUMS).read_text())["files"]
    assert {"sources/llama-bpe/model.safetensors", "donor/model.safetensors", "target_tokenizer/tokenizer.json"} \
        <= set(files)
    for rel, entry in files.items():
        assert entry["sha256"] == real(world.root / rel), rel


def test_a_full_disk_is_one_line_and_leaves_nothing(models, worlds, capsys, monkeypatch):
    """A disk that fills while the derived world's files are copied: exit 2 in one line that says why, and no world
    folder, no staging left behind."""
    import errno
    import shutil

    from harness.worlds import derived_inputs

    real = shutil.copyfile

    def full(src, dst, *a, **k):
        if str(dst).endswith(".safetensors"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(derived_inputs.shutil, "copyfile", full)
    line = _refused(capsys, worlds, "d-full", "--from", "synthetic", "--source", str(models["llama-bpe"]), "--copy")
    assert "could not be written (No space left on device" in line and "nothing was written" in line


def test_a_derivation_killed_midway_leaves_no_world_and_the_next_one_finishes(models, worlds, tmp_path, capsys):
    """A derivation killed (SIGKILL) after every file was staged and before its commit: no world of that name, its
    staging folder is removed by the next derivation, which makes the world."""
    import subprocess
    import sys

    from harness.worlds import get_world

    before = _listing(worlds)
    env = {**os.environ, "HARNESS_FAULT_AT": "harness.worlds.derived:_commit@1", "OMP_NUM_THREADS": "1"}
    args = ["world", "derive", "d-killed", "--from", "synthetic", "--source", str(models["llama-bpe"])]
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    left = [n for n in _listing(worlds) if n not in before]
    assert len(left) == 1 and left[0].startswith(".tmp-") and "derive" in left[0]  # only its staging
    rc, _, err = _cli(capsys, *args)
    assert rc == 0, err
    assert sorted(n for n in _listing(worlds) if n not in before) == [get_world("d-killed", build=False).root.name]


def test_the_source_kind_is_given_or_carried_from_the_base_worlds_own_model(models, worlds, tmp_path, capsys):
    """HyperOFA's temperature follows whether the source is multilingual: ``--source-kind`` says it; without it a
    source whose weights are the base world's own model's bytes takes that model's word; else it stays unknown."""
    from types import SimpleNamespace

    from harness.worlds import get_world
    from harness.worlds.derived import _source_languages
    from methods.hyperofa import detect_source_kind

    rc, _, err = _cli(capsys, "world", "derive", "d-kind", "--from", "synthetic", "--source",
                      str(models["llama-bpe"]), "--source-kind", "multi")
    assert rc == 0, err
    world = get_world("d-kind", build=False)
    assert world.manifest["sources"]["llama-bpe"]["multilingual"] is True
    assert detect_source_kind(world, SimpleNamespace(name_or_path=str(world.source_dir("llama-bpe"))))[0] == "multi"
    rc, _, err = _cli(capsys, "world", "derive", "d-nokind", "--from", "synthetic", "--source",
                      str(models["llama-bpe"]))
    assert rc == 0, err
    assert "multilingual" not in get_world("d-nokind", build=False).manifest["sources"]["llama-bpe"]
    # the base world's own model (the same weights' bytes) carries its word over
    base = tmp_path / "base"
    base.mkdir()
    (base / "checksums.json").write_text(json.dumps({"files": {
        "sources/eng/model.safetensors": {"sha256": "a" * 64}, "sources/many/model.safetensors": {"sha256": "b" * 64}}}))
    fake = SimpleNamespace(root=base, manifest={"sources": {"eng": {"multilingual": False},
                                                            "many": {"multilingual": True}}})
    notes: list[str] = []
    for sha, want in (("a" * 64, False), ("b" * 64, True)):
        entry = {"sha256": {"model.safetensors": sha, "config.json": "c" * 64}}
        _source_languages(fake, entry, None, notes.append)
        assert entry["multilingual"] is want
    entry = {"sha256": {"model.safetensors": "d" * 64}}
    _source_languages(fake, entry, None, notes.append)
    assert "multilingual" not in entry
    entry = {"sha256": {"model.safetensors": "a" * 64}}
    _source_languages(fake, entry, "multi", notes.append)  # the flag wins
    assert entry["multilingual"] is True
