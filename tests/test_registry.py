import sys
import textwrap

import pytest

from harness.core.errors import HarnessError, UnknownNameError
from harness.core.registry import METHODS, TASKS, Registry


def test_decorator_registers_and_get_returns_the_object():
    reg = Registry("thing", "harness.test-things")

    @reg.register("alpha")
    class Alpha:
        pass

    assert reg.get("alpha") is Alpha
    assert reg.names() == ["alpha"]
    assert "alpha" in reg


def test_registering_a_different_object_twice_fails():
    reg = Registry("thing", "harness.test-things")
    reg.register("a", object())
    with pytest.raises(HarnessError, match="registered twice"):
        reg.register("a", object())


def test_unknown_name_suggests_the_closest():
    reg = Registry("method", "harness.test-things")
    reg.register("hyperofa", object())
    reg.register("random", object())
    with pytest.raises(UnknownNameError) as ei:
        reg.get("hyperof")
    assert "Did you mean 'hyperofa'" in str(ei.value)
    assert ei.value.exit_code == 2


def test_lazy_placeholder_is_imported_only_on_get(tmp_path, monkeypatch):
    mod = tmp_path / "lazy_plugin_mod.py"
    mod.write_text("IMPORTED = True\nclass Plugin:\n    name = 'lazy'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("thing", "harness.test-things")
    reg.register_lazy("lazy", "lazy_plugin_mod:Plugin")
    assert "lazy_plugin_mod" not in sys.modules
    assert reg.names() == ["lazy"]
    assert "lazy_plugin_mod" not in sys.modules
    assert reg.get("lazy").name == "lazy"
    assert "lazy_plugin_mod" in sys.modules


def test_declared_facts_the_source_cannot_tell_come_from_the_class(tmp_path, monkeypatch):
    """A placeholder whose class's facts its source states exactly is read without importing it; one whose source
    cannot tell them (a value computed at import) is imported and read from the class, never answered empty."""
    (tmp_path / "told_plugin_mod.py").write_text("class Plugin:\n    headline = 'acc'\n")
    (tmp_path / "computed_plugin_mod.py").write_text("HEAD = 'f' + '1'\nclass Plugin:\n    headline = HEAD\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("thing", "harness.test-things", builtin_modules=())
    reg.register_lazy("told", "told_plugin_mod:Plugin")
    reg.register_lazy("computed", "computed_plugin_mod:Plugin")
    assert reg.declared("told", ("headline",)) == {"headline": "acc"}
    assert "told_plugin_mod" not in sys.modules
    assert reg.declared("computed", ("headline",)) == {"headline": "f1"}


def test_entry_points_are_discovered_lazily(tmp_path, monkeypatch):
    # a real installed-distribution layout on sys.path: importlib.metadata reads its entry_points.txt
    dist = tmp_path / "outside_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[harness.test-eps]\nfancy = outside_plugin_mod:Fancy\n")
    (tmp_path / "outside_plugin_mod.py").write_text(textwrap.dedent("""
        class Fancy:
            name = "fancy"
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("thing", "harness.test-eps")
    assert "fancy" in reg.names()
    assert "outside_plugin_mod" not in sys.modules
    assert reg.get("fancy").name == "fancy"


def test_broken_plugin_names_itself():
    reg = Registry("thing", "harness.test-things")
    reg.register_lazy("broken", "no_such_module_xyz:Thing")
    assert reg.names() == ["broken"]
    with pytest.raises(HarnessError, match="could not be loaded from 'no_such_module_xyz:Thing'"):
        reg.get("broken")


def test_resolve_list_all_and_unknown():
    reg = Registry("thing", "harness.test-things")
    reg.register("a", 1)
    reg.register("b", 2)
    assert reg.resolve_list("all") == ["a", "b"]
    assert reg.resolve_list("b, a,b") == ["b", "a"]
    with pytest.raises(UnknownNameError):
        reg.resolve_list("a,c")
    with pytest.raises(HarnessError):
        reg.resolve_list("")


def test_builtin_registries_have_the_foundation_entries():
    assert "random" in METHODS.names()
    assert "mlm" in TASKS.names()
    task = TASKS.get("mlm")
    assert task.headline in task.metrics


@pytest.mark.parametrize("registry,package", [(METHODS, "methods"), (TASKS, "tasks")])
def test_the_builtin_listing_is_the_classes_own(registry, package):
    """What `harness list` shows of a built-in without importing it is what its class declares, read from its
    source; every built-in is listed, and its ``module:Class`` is the class registered under its name."""
    import importlib

    builtin = importlib.import_module(package).BUILTIN
    for name, target in builtin.items():
        mod, _, attr = target.partition(":")
        from harness.core.declarations import declared

        read = declared(target, registry.listing_fields)
        cls = getattr(importlib.import_module(mod), attr)
        assert registry.get(name) is cls, name
        own = {f: getattr(cls, f) for f in registry.listing_fields if hasattr(cls, f)}
        assert read == own, f"{target}: read from the source {read!r}; the class says {own!r}"
    registered = {n for n in registry.names() if registry.get(n).__module__.partition(".")[0] == package}
    assert registered == set(builtin)


def test_a_placeholder_lists_without_being_imported(tmp_path, monkeypatch):
    (tmp_path / "listed_plugin_mod.py").write_text(
        "class Plugin:\n    description = 'from the class'\n    requires = ('x',)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("thing", "harness.test-things", listing_fields=("description", "requires"))
    reg.register_lazy("listed", "listed_plugin_mod:Plugin", listing={"description": "from the table",
                                                                      "requires": ("x",)})
    reg.register_lazy("unlisted", "listed_plugin_mod:Plugin")
    assert reg.listing("listed") == {"description": "from the table", "requires": ("x",)}
    assert "listed_plugin_mod" not in sys.modules
    # read from the class's source, still without importing it (harness.core.declarations)
    assert reg.listing("unlisted") == {"description": "from the class", "requires": ("x",)}
    assert "listed_plugin_mod" not in sys.modules
    assert reg.listing("listed")["description"] == "from the table"  # still a placeholder
    reg.get("listed")
    assert reg.listing("listed")["description"] == "from the class"  # once looked up, the object's own


TORCH_FREE = """
import runpy, sys
sys.argv = ["harness", *sys.argv[1:]]
try:
    runpy.run_module("harness.cli", run_name="__main__")
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
heavy = sorted(m for m in ("torch", "transformers", "methods.ofa", "tasks.mlm") if m in sys.modules)
print("HEAVY:" + ",".join(heavy))
"""


@pytest.mark.parametrize("argv", [["list"], ["leaderboard", "--help"], ["--help"]])
def test_start_up_commands_import_no_torch(argv, harness_home):
    """`harness list` and `harness leaderboard --help` (and `harness --help`) import no torch, transformers,
    method or task: the built-ins are lazy and listed from their table."""
    import os
    import subprocess

    from tests.conftest import REPO

    env = {**os.environ, "HARNESS_HOME": str(harness_home), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", TORCH_FREE, *argv], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY:\n" in proc.stdout, proc.stdout[-500:]
