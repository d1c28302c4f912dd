"""A world is exactly what its record lists: a file dropped into one of its folders after the build (which the
methods' globs would read, with the products cached under the world's hash reused) is refused in one line naming
it, by ``harness run`` before anything is made and by ``harness world check``. ``harness world info`` prints a
digest of every file the build produced, so two homes compare their worlds in one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# every folder a run reads by listing it (resources by glob, tasks by their meta.json), and the world's top
DROPPED = ["resources/text/zzz_Latn.txt", "resources/cpt/zzz_Latn.txt", "resources/dictionaries/eng-zzz.tsv",
           "resources/extra_vectors.vec", "tasks/extra/meta.json", "tasks/sr-t/zzz_Latn.jsonl", "notes.txt"]


@pytest.fixture
def world_root(built_world, tmp_path, monkeypatch) -> Path:
    from harness.worlds import check_world_files

    root = tmp_path / "home" / "worlds" / built_world.name
    shutil.copytree(built_world, root)
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    assert check_world_files(root).problems == []  # the copy's new times recorded once
    return root


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARNESS_HOME": str(home), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)


def _tree(home: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(home).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in home.rglob("*") if p.is_file()}


def _drop(root: Path, rel: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"languages": {}}' if rel.endswith("meta.json") else "hello\tworld\n", encoding="utf-8")


@pytest.mark.parametrize("rel", DROPPED)
def test_a_file_not_in_the_record_is_refused_by_loading_and_by_building(world_root, rel):
    from harness.core.errors import MissingResourceError
    from harness.worlds import build_world, check_world_files, get_world

    _drop(world_root, rel)
    res = check_world_files(world_root)
    assert res.unlisted == [rel] and res.problems == []
    for load in (lambda: get_world("synthetic"), lambda: get_world("synthetic", build=False),
                 lambda: build_world("synthetic")):
        with pytest.raises(MissingResourceError) as info:
            load()
        msg = str(info.value)
        assert "\n" not in msg and rel in msg and "remove the file" in msg and "--force" in msg, msg
    assert (world_root / rel).is_file()  # the user's file is left where it is: refused, not built over
    (world_root / rel).unlink()
    assert get_world("synthetic", build=False).root == world_root


@pytest.mark.parametrize("rel", DROPPED[:4] + ["tasks/extra/meta.json"])
def test_harness_run_and_world_check_refuse_a_file_not_in_the_record(world_root, rel):
    """`harness run` refuses the world before its plan, store or any product is made, in one line; `harness world
    check` says which file and exits 1."""
    home = world_root.parents[1]
    _drop(world_root, rel)
    before = _tree(home)
    proc = _cli("run", "--world", "synthetic", "--methods", "random,focus,wechsel", "--tasks", "sr-t,mlm",
                home=home)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and rel in errors[0] and "remove the file" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "cell" not in proc.stderr.lower()
    assert _tree(home) == before  # no store, no product, the world's record untouched
    proc = _cli("world", "check", "synthetic", home=home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("not in the record:"))
    assert rel in line and "harness world build synthetic --force" in line
    assert "files match" not in proc.stdout


def _digest(home: Path) -> str:
    proc = _cli("world", "info", "synthetic", home=home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.findall(r"^world synthetic digest: ([0-9a-f]{64}) ", proc.stdout, re.M)
    assert len(found) == 1, proc.stdout
    return found[0]


def test_world_info_prints_a_digest_of_every_file_the_build_produced(world_root, built_world):
    """Two homes with the same build print the same digest; a build that produced one different byte (here a
    source model's weights, heads included, recorded as its build would record it) prints another."""
    from harness.worlds import CHECKSUMS, world_digest, write_checksums

    home = world_root.parents[1]
    digest = _digest(home)
    assert digest == world_digest(built_world)[0]
    # what a build says of itself (its timings) differs at every build, and is no part of the world
    stats = world_root / "build_info.json"
    stats.write_text(json.dumps({"seconds": {"sources": 41.2}}))
    write_checksums(world_root)
    assert _digest(home) == digest
    stats.unlink()
    write_checksums(world_root)
    weights = sorted((world_root / "sources").rglob("*.safetensors"))[0]
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # the last byte of the last tensor
    weights.write_bytes(bytes(data))
    write_checksums(world_root)  # what a build that produced these bytes records
    assert (world_root / CHECKSUMS).is_file()
    other = _digest(home)
    assert other != digest
    # any produced file counts, each by its content and its path
    for rel in ("languages.json", "target_tokenizer/tokenizer.json"):
        again = _digest_after(world_root, rel)
        assert again not in (digest, other)


def _digest_after(root: Path, rel: str) -> str:
    from harness.worlds import world_digest, write_checksums

    path = root / rel
    data = path.read_bytes()
    path.write_bytes(data + b" ")
    write_checksums(root)
    try:
        return world_digest(root)[0]
    finally:
        path.write_bytes(data)
        write_checksums(root)
