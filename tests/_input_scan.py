"""The inputs a cell can depend on, enumerated from the code (tests/test_input_account.py holds them against the
account, :mod:`harness.inputs`): RunConfig's fields, the options of ``harness run``, the ``[cpt]`` keys a run
accepts, RunSpec's fields, and the environment variables the harness, the methods, the tasks and the leaderboard
read."""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("harness", "methods", "tasks", "leaderboard")

# -- the inputs, enumerated from the code ---------------------------------------------------------------------
def run_config_fields() -> list[str]:
    from harness.config import RunConfig

    return [f.name for f in dataclasses.fields(RunConfig)]


def run_options() -> dict[str, str]:
    """{the longest option string: its dest} of every option of ``harness run`` and of ``harness`` itself."""
    from harness.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions = [*parser._actions, *sub.choices["run"]._actions]
    return {max(a.option_strings, key=len): a.dest for a in actions if a.option_strings}


def cpt_keys() -> set[str]:
    """The ``[cpt]`` keys a run accepts: those it checks the values of and the profiles' (what
    :func:`harness.spec.cpt_settings` names as known when it refuses another, which is checked to agree)."""
    from harness.config import make_config
    from harness.core.errors import ConfigError
    from harness.core.profiles import PROFILES
    from harness.spec import _cpt_rules, cpt_settings, profile_of

    keys = set(_cpt_rules()) | {k for p in PROFILES.values() for k in p["cpt"]}
    cfg = make_config({"cpt": {"no_such_cpt_setting": 1}})
    with pytest.raises(ConfigError) as refused:
        cpt_settings(cfg, profile_of(cfg))
    said = str(refused.value).rpartition("known: ")[2]
    assert set(said.split(", ")) == keys, "the [cpt] keys the run accepts are not those enumerated here"
    return keys


def run_spec_fields() -> list[str]:
    from harness.spec import RunSpec

    return [f.name for f in dataclasses.fields(RunSpec)]


def _constants(tree: ast.Module) -> dict[str, Any]:
    """A module's top-level constants: strings, and collections of strings (tuples, lists, sets, dict keys)."""
    out: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if not isinstance(target, ast.Name) or node.value is None:
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, SyntaxError, TypeError):
            continue
        if isinstance(value, str):
            out[target.id] = value
        elif isinstance(value, (tuple, list, set, frozenset, dict)) and all(isinstance(v, str) for v in value):
            out[target.id] = sorted(value)
    return out


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def _read_name(node: ast.AST) -> ast.AST | None:
    """The expression naming the variable ``node`` reads from the environment, or None when it reads none."""
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        return node.slice
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        f = node.func
        if _is_environ(f.value) and f.attr in ("get", "setdefault", "pop"):
            return node.args[0]
        if f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os":
            return node.args[0]
    if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn) and \
            any(_is_environ(c) for c in node.comparators):
        return node.left
    return None


def _loop_values(tree: ast.Module, name: str, consts: dict[str, Any]) -> list[str] | None:
    """The names a loop variable ``name`` takes where a loop of the module binds it to a module collection's
    elements (``for k in NAMES``, ``for k, v in TABLE.items()``, comprehensions alike); None where none does."""
    found: list[str] = []
    for node in ast.walk(tree):
        loops = [(node.target, node.iter)] if isinstance(node, ast.For) else \
            [(g.target, g.iter) for g in getattr(node, "generators", [])]
        for target, it in loops:
            first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target
            if not (isinstance(first, ast.Name) and first.id == name):
                continue
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "keys"):
                it = it.func.value
            if isinstance(it, ast.Name) and isinstance(consts.get(it.id), list):
                found += consts[it.id]
    return found or None


def scan_environment(sources: dict[str, str]) -> tuple[dict[str, set[str]], list[str]]:
    """({variable: the files that read it}, the reads whose variable could not be named) of ``sources``
    ({file: its text})."""
    trees = {path: ast.parse(text) for path, text in sources.items()}
    consts = {path: _constants(tree) for path, tree in trees.items()}
    shared: dict[str, set[str]] = {}  # a module's constant read through another module (processes.MAIN_PID_ENV)
    for table in consts.values():
        for k, v in table.items():
            if isinstance(v, str):
                shared.setdefault(k, set()).add(v)
    found: dict[str, set[str]] = {}
    unnamed: list[str] = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            arg = _read_name(node)
            if arg is None:
                continue
            names = _names_of(arg, tree, consts[path], shared)
            if names is None:
                unnamed.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
            for name in names or []:
                found.setdefault(name, set()).add(path)
    return found, unnamed


def _names_of(arg: ast.AST, tree: ast.Module, local: dict[str, Any], shared: dict[str, set[str]]) -> list[str] | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    ident = arg.id if isinstance(arg, ast.Name) else arg.attr if isinstance(arg, ast.Attribute) else None
    if ident is None:
        return None
    if isinstance(arg, ast.Name) and isinstance(local.get(ident), str):
        return [local[ident]]
    if len(shared.get(ident, ())) == 1:
        return sorted(shared[ident])
    return _loop_values(tree, ident, local) if isinstance(arg, ast.Name) else None


def environment_reads() -> tuple[dict[str, set[str]], list[str]]:
    files = sorted(p for root in SCANNED for p in (REPO / root).rglob("*.py"))
    return scan_environment({str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in files})
