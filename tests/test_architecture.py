"""The floors of the code and the direction of their imports (docs/architecture.md), read from the source.

Every import counts, at module level or inside a function: a lazy import is still an arrow. A module may import its
own floor and the floors below it, never one above; ``methods``, ``tasks`` and ``leaderboard`` stand side by side
and do not import each other; no set of modules imports itself round in a circle. No Python file is longer than
``MAX_LINES`` lines, data tables excepted; no function is longer than ``MAX_FUNCTION_LINES`` lines.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("harness", "methods", "tasks", "leaderboard")

# the folders whose Python files are held to MAX_LINES
SIZED = ("harness", "methods", "tasks", "leaderboard", "benchmarks", "tests", "scripts")
MAX_LINES = 600
# Files allowed to be longer, with the reason. Only data tables belong here (a module that is mostly literal data:
# a table of languages, codes or published figures), never code: code over the limit is split along its seams.
# An entry whose file is gone or no longer too long fails the test, so the list stays true.
LONG_DATA_TABLES: dict[str, str] = {}

# the folders whose functions are held to MAX_FUNCTION_LINES, counted from ``def`` to the function's last line
# (docstring included, decorators not)
FUNCTION_SIZED = PACKAGES
MAX_FUNCTION_LINES = 80

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


def long_files(root: Path, folders: tuple[str, ...], limit: int) -> dict[str, int]:
    """The ``.py`` files under ``root/<folder>`` with more than ``limit`` lines: path (relative, with ``/``) ->
    lines."""
    out = {}
    for folder in folders:
        for p in sorted((root / folder).rglob("*.py")):
            n = len(p.read_text(encoding="utf-8").splitlines())
            if n > limit:
                out[p.relative_to(root).as_posix()] = n
    return out


def long_functions(root: Path, folders: tuple[str, ...], limit: int) -> list[tuple[str, int, str, int]]:
    """The functions and methods (nested ones too) of the ``.py`` files under ``root/<folder>`` longer than
    ``limit`` lines, from ``def`` to their last line: (path relative with ``/``, line of the ``def``, name,
    lines)."""
    out = []
    for folder in folders:
        for p in sorted((root / folder).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), str(p))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > limit:
                        out.append((rel, node.lineno, node.name, n))
    return sorted(out)


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
    assert floor("harness.commands.run") == floor("harness.cli") == "application"
    assert upward_arrows({"leaderboard.publish": {"harness.commands.leaderboard"}}) == [
        "leaderboard.publish (leaderboard) -> harness.commands.leaderboard (application)"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_python_file_is_longer_than_the_limit_data_tables_excepted():
    found = long_files(REPO, SIZED, MAX_LINES)
    over = {p: n for p, n in found.items() if p not in LONG_DATA_TABLES}
    assert not over, (f"files over {MAX_LINES} lines (split them along their seams; only data tables may go in "
                      f"LONG_DATA_TABLES):\n" + "\n".join(f"{p}: {n} lines" for p, n in sorted(over.items())))
    stale = sorted(set(LONG_DATA_TABLES) - set(found))
    assert not stale, "LONG_DATA_TABLES names files that are gone or no longer too long: " + ", ".join(stale)


def test_the_length_check_finds_a_long_file(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "long.py").write_text("x = 1\n" * 11)
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * 10)
    (tmp_path / "pkg" / "notes.txt").write_text("x\n" * 50)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "long.py").write_text("x = 1\n" * 50)
    assert long_files(tmp_path, ("pkg",), 10) == {"pkg/sub/long.py": 11}


def test_no_function_is_longer_than_the_limit():
    over = [f"{path}:{line} {name} {n} lines" for path, line, name, n in
            long_functions(REPO, FUNCTION_SIZED, MAX_FUNCTION_LINES)]
    assert not over, "\n".join([f"functions over {MAX_FUNCTION_LINES} lines (split each into named steps):", *over])


def test_the_length_check_finds_a_long_function(tmp_path):
    (tmp_path / "pkg").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(9))
    (tmp_path / "pkg" / "a.py").write_text(
        f"def short():\n{body}\n\nclass C:\n    @staticmethod\n    async def long(y):\n        \"\"\"Doc.\"\"\"\n"
        + body.replace("    ", "        ") + "\n        def inner():\n            return y\n        return inner\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "b.py").write_text(f"def long():\n{body}{body}")
    assert long_functions(tmp_path, ("pkg",), 10) == [("pkg/a.py", 15, "long", 15)]
    assert long_functions(tmp_path, ("pkg",), 9) == [("pkg/a.py", 1, "short", 10), ("pkg/a.py", 15, "long", 15)]


def test_each_subcommand_lives_in_its_own_module():
    """``harness/cli.py`` holds the entry point and the parser; every subcommand's work is done in its own module
    of ``harness/commands/`` (``harness cache`` in ``harness/cache_admin.py``)."""
    from harness.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    homes = {name: p.get_default("func").__module__ for name, p in sub.choices.items() if p.get_default("func")}
    homes["cache"] = "harness.cache_admin"  # its own subcommands (du, prune) carry the functions
    expected = {"list": "harness.commands.listing", "cache": "harness.cache_admin"}
    assert homes == {name: expected.get(name, f"harness.commands.{name}") for name in sub.choices}
