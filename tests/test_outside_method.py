"""A method from an outside package: the ``my-fvt`` package of ``docs/adding-a-method.md`` is written to a temporary
folder, built and installed by pip offline into a temporary target folder (never into this environment), found
through its ``harness.methods`` entry point and run through the CLI in a subprocess."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.core.registry import METHODS
from methods.base import Provenance
from tests.conftest import REPO
from tests.test_focus import synthetic_ctx

DOC = REPO / "docs" / "adding-a-method.md"


def doc_package(root: Path) -> Path:
    """Write every file of the doc's package (fenced blocks whose first line is ``# my-fvt/<path>``) under ``root``."""
    blocks = re.findall(r"```(?:toml|python)\n(# (my-fvt/[\w./-]+)\n.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    files = {path: text for text, path in blocks}
    assert set(files) == {"my-fvt/pyproject.toml", "my-fvt/my_fvt.py"}, f"the doc's package files: {sorted(files)}"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root / "my-fvt"


def pip_install_to(package: Path, target: Path) -> None:
    """``pip install`` offline (no index, no build isolation, no cache) into ``target`` only."""
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--no-cache-dir", "--target", str(target), str(package)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"


def can_build_wheels_offline() -> bool:
    """setuptools builds wheels by itself from 70.1 on; older versions need the ``wheel`` package."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    from packaging.version import Version

    return (Version(importlib.metadata.version("setuptools")) >= Version("70.1")
            or importlib.util.find_spec("wheel") is not None)


def test_the_docs_outside_package_installs_and_runs(run_cli, synthetic_world, tmp_path):
    if not can_build_wheels_offline():
        pytest.skip("building the package offline needs setuptools >= 70.1 (or setuptools and wheel) here")
    package = doc_package(tmp_path / "src")
    target = tmp_path / "site"
    pip_install_to(package, target)
    (dist,) = target.glob("my_fvt-*.dist-info")
    assert "[harness.methods]\nmy-fvt = my_fvt:FVT" in (dist / "entry_points.txt").read_text()
    env = {"PYTHONPATH": os.pathsep.join([str(target), str(REPO)])}

    listed = run_cli("list", env=env, check=True)
    assert re.search(r"│ my-fvt +│", listed.stdout)

    out = tmp_path / "model"
    run_cli("init", "--world", "synthetic", "--method", "my-fvt", "--seed", "5", "--out", str(out), env=env,
            check=True)
    rep = json.loads((out / "init_report.json").read_text())
    prov = np.load(out / "provenance.npy")
    assert rep["method"] == "my-fvt" and rep["overlap_rule"] == "ofa"
    assert sum(rep["counts"].values()) == len(prov) == rep["target_vocab_size"]
    assert rep["counts"]["copied"] == rep["overlap"]["copied"] > 0
    assert rep["counts"]["method"] > 0 and rep["counts"]["random"] > 0
    assert rep["method_stats"]["mean_source_pieces"] > 1

    # the doc's package is the repository's fvt: the same rows and provenance for the same inputs and seed
    from harness.initialize import load_model

    res = METHODS.get("fvt")().initialize(synthetic_ctx(synthetic_world, tmp_path / "cache", seed=5))
    assert np.array_equal(res.provenance, prov)
    assert rep["counts"] == {p.name.lower(): int((res.provenance == p).sum()) for p in Provenance}
    assert torch.equal(load_model(out).get_input_embeddings().weight.detach(), res.matrix)

    # nothing was installed into this environment
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("my-fvt")
    assert "my-fvt" not in METHODS.names()
