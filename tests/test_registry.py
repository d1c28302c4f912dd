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
