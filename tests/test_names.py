"""One name for each thing, each name meaning one thing, and nothing imported for show (docs/architecture.md,
"Names"): no module of the product re-exports another's names (a module-level import kept only so that others can
import it from there, ``# noqa: F401``), and no two classes of the product share a name."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("harness", "methods", "tasks", "leaderboard")


def _modules():
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8")


def reexports(source: str) -> list[int]:
    """The lines of the module-level imports that the module itself marks as unused (``noqa: F401``)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            text = "\n".join(lines[node.lineno - 1:node.end_lineno])
            if "F401" in text:
                out.append(node.lineno)
    return out


def shared_class_names(modules: list[tuple[str, str]]) -> dict[str, list[str]]:
    where: dict[str, list[str]] = collections.defaultdict(list)
    for path, source in modules:
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(path)
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_module_re_exports_another_modules_names():
    found = [f"{path}:{line}" for path, source in _modules() for line in reexports(source)]
    assert not found, "imported only to be imported from here (import it from its home instead): " + ", ".join(found)


def test_the_re_export_check_finds_one():
    assert reexports("import os\nfrom a import (  # noqa: F401 - importable from here\n    b,\n)\n") == [2]
    assert reexports("def f():\n    import torch  # noqa: F401 - loaded first\n") == []  # a library loaded first


def test_no_two_classes_of_the_product_share_a_name():
    assert shared_class_names(list(_modules())) == {}


def test_the_class_name_check_finds_two():
    assert shared_class_names([("a.py", "class Run:\n    pass\n"), ("b.py", "class Run:\n    x = 1\n")]) == \
        {"Run": ["a.py", "b.py"]}
