"""scripts/wheelhouse.sh: the offline wheelhouse for a machine that has torch and no package index.

The end-to-end test builds the wheelhouse for this Python (it needs the registry, as CI has), then, with pip's
configuration and every PIP_* variable out of the way and --no-index, installs the harness from it into a fresh venv
whose only package besides pip is this environment's torch (with setuptools, which torch requires), linked in through
a .pth file, and runs a synthetic-world cell there, from a folder outside the checkout. A few minutes: about half of
it is pip installing some 120 wheels."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "wheelhouse.sh"

# `pip freeze` of an offline GPU node (Python 3.12, CUDA torch): the versions that were measured there, and for the
# packages it had at an unrecorded version, one other than the lock's (mostly the lock's minus one minor)
NODE_FREEZE = """\
torch==2.11.0+cu130
transformers==5.17.0
tokenizers==0.23.2
huggingface_hub==1.33.0
numpy==2.5.2
pyarrow==25.0.1
accelerate==1.14.0
safetensors==0.7.0
sentencepiece==0.2.1
scipy==1.16.1
scikit-learn==1.8.1
pandas==3.0.1
matplotlib==3.10.2
rich==14.0.0
PyYAML==6.0.3
regex==2026.10.19
requests==2.33.2
tqdm==4.69.1
importlib_metadata==10.0.0
"""


def _wheelhouse(out: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(SCRIPT), str(out), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _wheels(folder: Path) -> dict[str, str]:
    return {canonicalize_name(parse_wheel_filename(p.name)[0]): p.name for p in folder.glob("*.whl")}


def _offline_env(**extra: str) -> dict[str, str]:
    """This environment without pip's settings (the machine's find-links and extra indexes), PYTHONPATH, or the
    harness's and MLflow's locations; no index."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "MLFLOW_", "HARNESS_", "HF_")) and k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "OMP_NUM_THREADS": "1", **extra}


def _link_installed(dist_name: str, into: Path) -> None:
    """Symlink the top-level folders/files and the .dist-info of an installed distribution of this environment."""
    dist = importlib.metadata.distribution(dist_name)
    for top in sorted({Path(str(f)).parts[0] for f in dist.files or []} - {".."}):
        src = Path(dist.locate_file(top))
        if src.exists() and not top.endswith(".pth"):
            (into / top).symlink_to(src)


def test_bad_arguments_exit_2_with_a_usage_line(tmp_path):
    for args in ([], ["--bogus", str(tmp_path / "w")], [str(tmp_path / "w"), "--python", "3"],
                 [str(tmp_path / "w"), "--have", str(tmp_path / "absent.txt")], ["a", "b"],
                 [str(tmp_path / "w"), "--missing-only"], [str(tmp_path / "w"), "--skinny", "--missing-only"]):
        r = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert "usage: bash scripts/wheelhouse.sh OUT_DIR" in r.stderr, (args, r.stderr)
        if "--missing-only" in args:
            assert "--missing-only needs --have" in r.stderr, r.stderr
    assert not (tmp_path / "w").exists()
    r = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("usage:")


def test_the_scripts_torch_requirements_are_the_installed_torchs():
    listed = re.search(r"^TORCH_DEPS = \[(.*)\]$", SCRIPT.read_text(), flags=re.M).group(1)
    listed = {canonicalize_name(n.strip().strip('"')) for n in listed.split(",")}
    reqs = [Requirement(r) for r in importlib.metadata.requires("torch") or []]
    torch_needs = {canonicalize_name(r.name) for r in reqs
                   if r.marker is None or r.marker.evaluate({"extra": ""})}
    torch_needs = {n for n in torch_needs if n != "setuptools" and not n.startswith(("nvidia-", "cuda-"))
                   and n != "triton"}
    assert listed == torch_needs


def test_offline_install_from_the_wheelhouse_runs_the_harness(tmp_path):
    t0 = time.monotonic()
    wheels = tmp_path / "wheels"
    r = _wheelhouse(wheels)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^size: \S+ \(\d+ bytes\)", r.stdout, flags=re.M), r.stdout
    built = time.monotonic()

    have = _wheels(wheels)
    assert "vocab-init-harness" in have and "mlflow" in have and "seqeval" in have
    assert have["seqeval"].endswith("-py3-none-any.whl")  # built from its sdist: no wheel is published
    assert not {n for n in have if n in {"torch", "triton"} or n.startswith("nvidia-")}
    assert not {"pytest", "ruff", "ray"} & set(have)  # the test extra only with --with-test
    assert "importlib-metadata" in have and "-9.1.0-" in have["importlib-metadata"]
    shipped_lock = (wheels / "constraints.txt").read_text()
    assert not re.search(r"^torch==", shipped_lock, flags=re.M) and "seqeval==1.2.2" in shipped_lock
    assert "pip install --no-index --find-links wheels -c wheels/constraints.txt" in (wheels / "README.txt").read_text()

    # a fresh venv in which torch is preinstalled: this environment's torch (and the setuptools it requires) linked in
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    env = _offline_env()
    subprocess.run([py, "-m", "pip", "uninstall", "--yes", "--quiet", "setuptools"], env=env, check=True, timeout=120)
    preinstalled = tmp_path / "preinstalled"
    preinstalled.mkdir()
    _link_installed("torch", preinstalled)
    _link_installed("setuptools", preinstalled)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "preinstalled-torch.pth").write_text(f"{preinstalled}\n")
    listed = subprocess.run([py, "-m", "pip", "list", "--format=freeze"], env=env, capture_output=True, text=True,
                            check=True).stdout.split()
    assert sorted(n.split("==")[0].lower() for n in listed) == ["pip", "setuptools", "torch"], listed

    r = subprocess.run(["bash", str(wheels / "install.sh")], env={**env, "PYTHON": py}, cwd=tmp_path,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    installed = time.monotonic()

    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    home = tmp_path / "home"
    run_env = _offline_env(HARNESS_HOME=str(home), HF_HOME=str(home / "hf"), HF_HUB_OFFLINE="1",
                           HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    where = subprocess.run([py, "-c", "import harness, torch; print(harness.__file__); print(torch.__version__)"],
                           env=run_env, cwd=run_dir, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(site) and where[1].startswith("2.13.0"), where
    r = subprocess.run([py, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", "random", "--tasks", "mlm",
                        "--cpt-steps", "1", "--workers", "1"], env=run_env, cwd=run_dir, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "cells: done 1/1" in r.stdout + r.stderr, r.stderr[-3000:]
    con = sqlite3.connect(home / "mlflow.db")
    try:
        metrics = {k for (k,) in con.execute("select distinct key from metrics")}
        statuses = [s for (s,) in con.execute("select status from runs")]
    finally:
        con.close()
    assert any(k.startswith("mlm/loss/") for k in metrics), sorted(metrics)
    assert statuses and set(statuses) == {"FINISHED"}, statuses
    print(f"\nwheelhouse {built - t0:.0f} s, offline install {installed - built:.0f} s, "
          f"run {time.monotonic() - installed:.0f} s")


def test_have_leaves_out_what_the_target_has_at_the_locked_version_and_skinny_drops_mlflow(tmp_path):
    lock = dict(line.split("==", 1) for line in (REPO / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    freeze = tmp_path / "target-freeze.txt"
    freeze.write_text(f"torch==2.11.0+cu130\nnumpy=={lock['numpy']}\npandas==2.0.0\n"
                      f"PyYAML=={lock['PyYAML']}\nsomething @ file:///x/something.whl\n")
    wheels = tmp_path / "w"
    r = _wheelhouse(wheels, "--have", str(freeze), "--skinny")
    assert r.returncode == 0, r.stdout + r.stderr
    have = _wheels(wheels)
    assert "numpy" not in have and "pyyaml" not in have  # there at the locked version
    assert "pandas" in have  # there, but not at the locked version
    assert "mlflow" not in have and {"mlflow-skinny", "mlflow-tracing", "sqlalchemy", "alembic"} <= set(have)
    assert "flask" not in have  # the UI server's
    assert "numpy==" in r.stdout and "left out" in r.stdout
    requirements = (wheels / "requirements.txt").read_text()
    assert "mlflow-skinny" in requirements and not re.search(r"^mlflow\b(?!-)", requirements, flags=re.M)
    install = (wheels / "install.sh").read_text()
    assert "--no-deps" in install and "-r \"$here/requirements.txt\"" in install


def test_missing_only_ships_what_a_gpu_node_lacks_in_under_64_mb(tmp_path):
    """--missing-only on the node of NODE_FREEZE: what the node has stays out at any version (its own is used),
    importlib_metadata ships at the locked version over the node's 10.x, and the rest fits the 64 MB that can be
    carried there."""
    lock = {canonicalize_name(n): v for n, v in (line.split("==", 1) for line in
            (REPO / "constraints.txt").read_text().splitlines() if "==" in line and not line.startswith("#"))}
    node = {canonicalize_name(n): v for n, v in (line.split("==", 1) for line in NODE_FREEZE.split())}
    assert all(node[n] != lock[n] for n in node if n not in {"pyarrow", "torch"}), "the node's versions are other"
    freeze = tmp_path / "node-freeze.txt"
    freeze.write_text(NODE_FREEZE)
    wheels = tmp_path / "w"
    r = _wheelhouse(wheels, "--have", str(freeze), "--missing-only", "--skinny", "--python", "3.12")
    assert r.returncode == 0, r.stdout + r.stderr

    have = _wheels(wheels)
    assert not set(node) - {"importlib-metadata"} & set(have), sorted(set(node) & set(have))
    assert not {"sympy", "networkx", "mpmath"} & set(have)  # torch's own: the node's torch brings them
    assert "-9.1.0-" in have["importlib-metadata"]  # over the node's 10.0.0
    assert {"vocab-init-harness", "mlflow-skinny", "mlflow-tracing", "seqeval", "faiss-cpu", "datasets", "evaluate",
            "fasttext-numpy2-wheel", "platformdirs", "sqlalchemy", "alembic"} <= set(have)
    assert "mlflow" not in have
    assert all(f"-{lock[n]}-" in have[n] for n in have if n != "vocab-init-harness")  # the rest at the lock
    size = sum(p.stat().st_size for p in wheels.iterdir())
    print(f"\n--missing-only --skinny for the node, CPython 3.12: {size / 1e6:.1f} MB in {len(have)} wheels")
    assert size < 64e6, size

    readme = (wheels / "README.txt").read_text()
    for text in (r.stdout, readme):
        assert "NOT THE LOCKED VERSIONS" in text
        assert "transformers 5.17.0 (lock 5.24.0)" in text and "numpy 2.5.2 (lock 2.4.6)" in text
        assert "importlib_metadata 9.1.0 over the target's 10.0.0" in text
        assert "vocab-init-harness 0.1.0 requires torch==2.13.0, the target has 2.11.0" in text
    assert "pip install --no-index --no-deps --find-links w w/*.whl" in readme
    assert "pip install --no-index --no-deps --find-links w --target /tmp/site w/*.whl" in readme
    install = (wheels / "install.sh").read_text()
    assert '-m pip install --no-index --no-deps --find-links "$here"' in install and '"$here"/*.whl' in install
    assert not (wheels / "requirements.txt").exists()


def test_the_harness_installs_with_no_deps_beside_another_torch(tmp_path):
    """pyproject pins torch==2.13.0; --missing-only's install (--no-deps) goes in beside a node's 2.11.0 all the
    same, and only `pip check` names the pin."""
    src = tmp_path / "src"  # a copy: a build in the checkout would leave build/ there
    src.mkdir()
    for item in ["pyproject.toml", "README.md", "harness", "methods", "tasks", "leaderboard"]:
        if (REPO / item).is_dir():
            shutil.copytree(REPO / item, src / item, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / item, src / item)
    built = tmp_path / "built"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w",
                        str(built), str(src)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = built.glob("vocab_init_harness-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dist_info = Path(site, "torch-2.11.0+cu130.dist-info")
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\n")
    env = _offline_env()
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(built),
                        str(wheel)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torch" not in r.stderr, r.stderr  # no conflict warnings under --no-deps
    r = subprocess.run([py, "-m", "pip", "check"], env=env, capture_output=True, text=True, timeout=300)
    assert "requirement torch==2.13.0, but you have torch 2.11.0+cu130" in r.stdout, r.stdout
