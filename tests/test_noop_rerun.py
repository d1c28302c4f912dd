"""A run with nothing left to do is fast: it imports no method, no task and no torch.

What planning asks of a built-in method or task (what it requires, its factorized support, its untied-output
support, its product family, its profile's settings, a task's objectives and languages) is read from the class's
source (:func:`harness.core.declarations.exact_declarations`) where the source tells it exactly, and the CPU kernels'
label from the record an earlier process measured under the same conditions (:func:`harness.core.kernels.
conditions`). These tests hold the reading to what importing gives, and the record to what a cell measures.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from harness.core.declarations import defined_in, exact_declarations
from harness.core.registry import TASKS, Registry
from tests.conftest import REPO, pinned_labels


# -- what planning reads from a class's source is what importing it gives ----------------------------------------
def test_every_builtin_methods_planning_facts_are_read_from_source_as_the_class_has_them():
    from harness.core.profiles import MethodProfileParams
    from harness.plan import METHOD_FACTS

    builtin = importlib.import_module("methods").BUILTIN
    for name, target in builtin.items():
        fields = (*METHOD_FACTS, "cache_name")
        read = exact_declarations(target, fields, {**METHOD_FACTS, "cache_name": None})
        assert read is not None, f"{target}: its planning facts are not literals: planning would import it (torch)"
        mod, _, attr = target.partition(":")
        cls = getattr(importlib.import_module(mod), attr)
        assert read == {f: getattr(cls, f, {**METHOD_FACTS, "cache_name": None}[f]) for f in fields}, target
        assert defined_in(target, "profile_defaults") == "methods.base:Method", target
        profiles = exact_declarations(target, ("profiles",), {"profiles": {}})
        assert profiles is not None, f"{target}: its profiles are not literals: planning would import it (torch)"
        for profile in ("cpu", "paper"):
            assert profiles["profiles"].get(profile, {}) == cls.profile_defaults(profile), (target, profile)
            if cls.profile_defaults(profile):
                assert MethodProfileParams(profile)[name] == cls.profile_defaults(profile)


def test_every_builtin_tasks_languages_are_read_from_source_as_the_task_gives_them(synthetic_world):
    from harness.plan import task_languages
    from tasks.base import DeclaredLanguages

    builtin = importlib.import_module("tasks").BUILTIN
    for name, target in builtin.items():
        assert defined_in(target, "languages") == "tasks.base:DeclaredLanguages", target
        read = exact_declarations(target, ("name", "language_data", "pivot_queries", "objectives"),
                                  {"language_data": None, "pivot_queries": False, "objectives": None})
        assert read is not None, target
        cls = TASKS.get(name)
        assert issubclass(cls, DeclaredLanguages)
        assert read == {"name": cls.name, "language_data": cls.language_data, "pivot_queries": cls.pivot_queries,
                        "objectives": getattr(cls, "objectives", None)}, target
        assert task_languages(name, synthetic_world) == cls().languages(synthetic_world), name
    # the retrieval tasks leave the pivot out (it gives the queries); the others keep every language with data
    assert synthetic_world.pivot not in task_languages("sr-t", synthetic_world)
    assert synthetic_world.pivot in task_languages("ner", synthetic_world)


def test_a_class_whose_source_cannot_tell_is_imported(tmp_path, monkeypatch):
    (tmp_path / "facts_plugin_base.py").write_text("LIMIT = 7\nPROFILE = {'cpu': {'k': LIMIT, 'xs': (1, -2)}}\n"
                                                   "class Base:\n    supports_factorized = True\n")
    (tmp_path / "facts_plugin.py").write_text(
        "import collections\n"
        "from facts_plugin_base import Base, PROFILE\n"
        "def compute():\n    return frozenset({'x'})\n"
        "class Literal(Base):\n    profiles = {'cpu': dict(PROFILE['cpu']) if False else dict(PROFILE)}\n"
        "class FromConstant(Base):\n    profiles = dict(PROFILE)\n    requires = frozenset({'cpt_text'})\n"
        "class Computed(Base):\n    requires = compute()\n"
        "class Method(Base):\n    def requires(self):\n        return ()\n"
        "class Foreign(collections.OrderedDict):\n    supports_factorized = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    got = exact_declarations("facts_plugin:FromConstant", ("profiles", "requires", "supports_factorized"), {})
    assert got == {"profiles": {"cpu": {"k": 7, "xs": (1, -2)}}, "requires": frozenset({"cpt_text"}),
                   "supports_factorized": True}
    assert exact_declarations("facts_plugin:Literal", ("profiles",), {}) is None  # a conditional expression
    assert exact_declarations("facts_plugin:Computed", ("requires",), {}) is None  # a call
    assert exact_declarations("facts_plugin:Method", ("requires",), {}) is None  # a function
    assert exact_declarations("facts_plugin:Foreign", ("supports_factorized",), {}) is None  # another library's base
    assert exact_declarations("facts_plugin:Missing", ("requires",), {}) is None
    assert "facts_plugin" not in sys.modules
    # a third-party entry is imported for its facts (and by the name check: a broken plug-in names itself)
    reg = Registry("thing", "harness.test-things", builtin_modules=())
    reg.register_lazy("computed", "facts_plugin:Computed")
    assert reg.facts("computed", ("requires", "other"), {"other": 3}) == {"requires": frozenset({"x"}), "other": 3}
    assert "facts_plugin" in sys.modules
    reg.register_lazy("broken", "facts_plugin:Nowhere")
    with pytest.raises(Exception, match="could not be loaded"):
        reg.check("broken")


# -- the no-op rerun -------------------------------------------------------------------------------------------
NOOP = """
import sys
from harness.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "transformers", "methods.random_init", "tasks.retrieval") if m in sys.modules)
print("HEAVY:" + ",".join(heavy))
sys.exit(code)
"""
CONDITIONS = "from harness.core import kernels; print(kernels.conditions(False))"


def test_a_rerun_with_nothing_to_do_imports_no_torch_and_a_stale_kernel_record_is_refused(tmp_path):
    """The second run of a job finds its cells finished without loading torch (the kernels' label read from the
    record the first run's measurement left under the same conditions) and prints the same board. A record that
    says other than what a cell measures cannot mislabel a cell: the cell measures before it computes, refuses,
    and records what it measured."""
    home = tmp_path / "home"
    env = {**os.environ, "HARNESS_HOME": str(home), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    job = ["run", "--world", "synthetic", "--methods", "random", "--tasks", "sr-t"]

    def harness(*argv: str, script: str = NOOP) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=600)

    first = harness(*job)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "torch" in first.stdout.split("HEAVY:")[1]  # it built the world and computed a cell
    again = harness(*job)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.split("HEAVY:")[1].strip() == "", again.stdout[-500:]
    assert "finished, every evaluation logged: random" in again.stdout + again.stderr

    key = harness(script=CONDITIONS).stdout.strip()
    labels = home / "cache" / "kernels.json"
    assert json.loads(labels.read_text()) == {key: pinned_labels()[0]}
    labels.write_text(json.dumps({key: "native:0badf00d"}))  # a record that says other than the kernels compute
    stale = harness(*job)  # planned under the recorded label: another identity, so its cell is computed: refused
    assert stale.returncode != 0
    assert "the run with native:0badf00d" in stale.stdout + stale.stderr
    assert json.loads(labels.read_text())[key] != "native:0badf00d"  # what the cell measured replaced it
    once_more = harness(*job)
    assert once_more.returncode == 0 and once_more.stdout.split("HEAVY:")[1].strip() == "", once_more.stderr[-2000:]

    def board(out: str) -> list[str]:
        return [line for line in out.split("HEAVY:")[0].splitlines() if "│" in line or "|" in line]

    assert board(again.stdout) and board(again.stdout) == board(first.stdout)


def test_the_kernel_record_is_keyed_by_what_the_label_depends_on(tmp_path, monkeypatch):
    from harness.core import kernels

    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    base = kernels.conditions(False)
    assert kernels.conditions(False) == base != kernels.conditions(True)
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    assert kernels.conditions(False) != base
    monkeypatch.delenv("MKL_CBWR")
    monkeypatch.setenv("ONEDNN_VERBOSE", "0")
    assert kernels.conditions(False) != base
    monkeypatch.delenv("ONEDNN_VERBOSE")
    monkeypatch.setattr(kernels, "_cpu_identity", lambda: ["x86_64", "Linux", "flags : avx2 fma avx512f"])
    assert kernels.conditions(False) != base
    monkeypatch.undo()
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    assert kernels.conditions(False) == base
    # a record is read back under the same conditions only; a damaged file is no record
    kernels._record_label(False, "native:12345678")
    assert kernels._recorded_label(False) == "native:12345678" and kernels._recorded_label(True) is None
    (tmp_path / "cache" / kernels.LABELS_FILE).write_text("{not json")
    assert kernels._recorded_label(False) is None
    kernels._record_label(False, "avx2")
    assert kernels._recorded_label(False) == "avx2"


def test_auto_resolves_to_the_cpu_from_a_cpu_build_of_torch_without_importing_it():
    import torch

    from harness.config import _torch_has_gpu_build, resolve_device

    assert _torch_has_gpu_build() == (torch.version.cuda is not None or torch.version.hip is not None)
    if not _torch_has_gpu_build():
        assert resolve_device("auto") == "cpu" and not torch.cuda.is_available()


@pytest.mark.parametrize("cuda, hip, gpu", [("None", "None", False), ("'12.4'", "None", True),
                                            ("None", "'6.2'", True), ("compute()", "None", True)])
def test_a_gpu_build_of_torch_is_asked_and_a_cpu_build_is_not(tmp_path, monkeypatch, cuda, hip, gpu):
    """``auto`` asks torch whether a GPU is there only where torch was built with CUDA or ROCm; a ``version.py``
    that cannot be read as literals counts as a GPU build (torch is asked)."""
    import importlib.machinery
    import importlib.util

    from harness import config

    (tmp_path / "version.py").write_text(f"from typing import Optional\ncuda: Optional[str] = {cuda}\nhip = {hip}\n")
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "torch" else real(name, *a))
    assert config._torch_has_gpu_build() is gpu
    asked = []
    fake_torch = type(sys)("torch")
    fake_torch.cuda = type("cuda", (), {"is_available": staticmethod(lambda: asked.append(1) or True)})
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert config.resolve_device("auto") == ("cuda" if gpu else "cpu")
    assert asked == ([1] if gpu else [])
