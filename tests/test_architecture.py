"""The floors of the code and the direction of their imports (docs/architecture.md), read from the source.

Every import counts, at module level or inside a function: a lazy import is still an arrow. A module may import its
own floor and the floors below it, never one above; ``methods``, ``tasks`` and ``leaderboard`` stand side by side
and do not import each other; no set of modules imports itself round in a circle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("harness", "methods", "tasks", "leaderboard")

FLOORS = {"kernel": 0, "worlds": 1, "methods": 2, "tasks": 2, "leaderboard": 2, "application": 3}


def floor(module: str) -> str:
    if module in ("harness", "harness.core") or module.startswith("harness.core."):
        return "kernel"  # the kernel: shared by every floor, imports nothing of ours above it
    if module == "harness.worlds" or module.startswith("harness.worlds."):
        return "worlds"
    top = module.split(".")[0]
    return top if top != "harness" else "application"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (``from pkg import sub`` names the submodule ``pkg.sub``)."""
    files = {_module_of(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in files.items():
        graph[mod]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                           for a in node.names]
            for t in targets:
                if t.split(".")[0] in PACKAGES and t != mod:
                    graph[mod].add(t)
    return graph


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} ({floor(a)}) -> {b} ({floor(b)})" for a, bs in graph.items() for b in bs
                  if FLOORS[floor(b)] > FLOORS[floor(a)]
                  or (FLOORS[floor(b)] == FLOORS[floor(a)] == 2 and floor(a) != floor(b)))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_a_floor_above_its_own_or_a_neighbour():
    arrows = upward_arrows(import_graph())
    assert not arrows, "imports against the floors (docs/architecture.md):\n" + "\n".join(arrows)


def test_no_import_circles_lazy_ones_included():
    found = circles(import_graph())
    assert not found, "modules that import each other round in a circle:\n" + "\n".join(map(str, found))


def test_the_checks_catch_an_upward_arrow_a_neighbour_and_a_circle():
    graph = import_graph()
    assert "harness.runner" in graph["harness.executors"]  # lazy imports are read too
    assert upward_arrows({"harness.core.errors": {"harness.runner"}}) == [
        "harness.core.errors (kernel) -> harness.runner (application)"]
    assert upward_arrows({"methods.ofa": {"tasks.base"}}) == ["methods.ofa (methods) -> tasks.base (tasks)"]
    assert upward_arrows({"harness.runner": {"tasks.base", "harness.core.errors"}}) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
