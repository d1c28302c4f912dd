"""The reproducible install: both README commands and CI install from the lock, and the lock covers every
requirement of pyproject.toml at a version inside its range. Installs nothing."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO

LOCK = REPO / "constraints.txt"


def _lock() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, ver = line.partition("==")
        assert sep and ver, f"constraints.txt: {line!r} is not an exact pin"
        pins[canonicalize_name(name)] = Version(ver)
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra, items in project["optional-dependencies"].items():
        if extra == "gpu":  # replaces faiss-cpu on a CUDA machine; not part of the CPU lock
            continue
        reqs += [Requirement(r) for r in items]
    return reqs


def test_every_requirement_is_locked_inside_its_range():
    pins = _lock()
    reqs = _requirements()
    assert len(reqs) > 20
    for req in reqs:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is required by pyproject.toml but not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject's range {req.specifier}")


def test_the_lock_pins_nothing_twice_and_has_no_local_build_labels():
    names = [canonicalize_name(line.split("==")[0]) for line in LOCK.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(names) == len(set(names))
    # a "+cpu" label would refuse the CUDA build of the same torch version
    assert not re.search(r"==\S*\+", LOCK.read_text())


def test_readme_commands_and_ci_install_from_the_lock():
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    run_cmd, test_cmd = blocks[0].strip(), blocks[1].strip()
    for cmd in (run_cmd, test_cmd):
        installs = re.findall(r"pip install ([^&]*)", cmd)
        assert len(installs) == 2 and all("-c constraints.txt" in i for i in installs), cmd
        assert installs[0].split()[-1] == "torch==2.13.0"  # torch first: the CPU build
    assert "harness run --methods all --tasks sr-t,ner" in run_cmd
    ci = (REPO / ".ci" / "run").read_text()
    assert test_cmd in ci, ".ci/run must run the README's test command verbatim"


def test_the_main_job_benchmark_runs_readme_command_1_verbatim():
    """bench_main_job --fresh-clone times README command 1 in two parts; joined, they are the README's command."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_main_job", REPO / "benchmarks" / "bench_main_job.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    install, run = bench.readme_command_1()
    readme = (REPO / "README.md").read_text()
    assert f"{install} && {run}" == re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)[0].strip()
    assert "pip install" in install and "harness run" not in install and run.startswith(".venv/bin/harness run")
