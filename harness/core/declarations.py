"""A plug-in class's declarations, read from its source without importing it.

``harness list``, ``harness --help`` and the leaderboard import no method or task (nor torch); what they show of a
built-in one -- its description, what it requires, its metrics -- is what its class declares as literal class
attributes (``description: ClassVar[str] = "..."``). This module reads those attributes from the module's source
with :mod:`ast`, following the class's bases (in the same module or imported by name from another one), so the
declaration is written once, on the class, and never copied into a table. Values must be literals: strings,
numbers, booleans, None, tuples, lists, dicts, and ``frozenset(...)`` / ``set(...)`` / ``tuple(...)`` of one.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Any

_MISSING = object()


@functools.lru_cache(maxsize=128)
def _module_tree(module: str) -> tuple[ast.Module, str] | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8")), module


_MAKERS = {"frozenset": frozenset, "set": set, "tuple": tuple, "list": list, "dict": dict}


def _literal(node: ast.AST, module: str = "", depth: int = 0) -> Any:
    """The value of a literal expression: constants, tuples, lists, sets, dicts, ``frozenset(...)`` / ``set`` /
    ``tuple`` / ``list`` / ``dict`` of one literal, and a name bound at module level to a literal (in ``module``,
    or imported by name from another module of the harness). Anything else raises ValueError."""
    if depth > 8:
        raise ValueError("literal nested too deep")
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _literal(node.operand, module, depth + 1)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("a sign on a non-number")
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_literal(e, module, depth + 1) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else (items if isinstance(node, ast.List) else set(items))
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("a ** in a dict")
        return {_literal(k, module, depth + 1): _literal(v, module, depth + 1) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) <= 1 and not node.keywords:
        make = _MAKERS.get(node.func.id)
        if make is not None:
            return make(_literal(node.args[0], module, depth + 1)) if node.args else make()
    if isinstance(node, ast.Name) and module:
        return _module_constant(module, node.id, depth + 1)
    raise ValueError(f"not a literal: {ast.dump(node)[:60]}")


def _module_constant(module: str, name: str, depth: int) -> Any:
    """The literal a module binds ``name`` to at its top level (its last such binding), or what it imports as
    ``name`` from another module that can be read; ValueError where neither."""
    found = _module_tree(module)
    if found is None:
        raise ValueError(f"module {module} not readable")
    tree, _ = found
    value = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            value = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            value = stmt.value
    if value is not None:
        return _literal(value, module, depth)
    origin = _imported(tree, module, name)
    if origin is not None and _module_tree(origin[0]) is not None:
        return _module_constant(origin[0], origin[1], depth)
    raise ValueError(f"{name} is not a literal of {module}")


def _class_node(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _source_module(node: ast.ImportFrom, module: str) -> str:
    """The absolute name of the module a ``from ... import`` in ``module`` reads from (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")[: -node.level]
    return ".".join([*parts, *([node.module] if node.module else [])]) or module.rpartition(".")[0]


def _imported(tree: ast.Module, module: str, name: str) -> tuple[str, str] | None:
    """Where a name imported by ``from X import name`` in the module comes from."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _source_module(node, module), alias.name
    return None


_UNREADABLE = object()  # an attribute assigned a value that is not a literal: known only by importing
_UNRESOLVED = "<a base class not read>"
_PLAIN_BASES = frozenset({"object", "Protocol", "Generic", "ABC"})  # bases that declare none of a plug-in's facts


def _chain(module: str, cls: str) -> dict[str, Any]:
    """The class attributes of ``module:cls`` and of its bases (the class's own win), without importing: each a
    literal value, :data:`_UNREADABLE` (assigned something else) or, for a function defined in the class body, the
    ``"module:Class"`` that defines it."""
    found = _module_tree(module)
    if found is None:
        return {}
    tree, _ = found
    node = _class_node(tree, cls)
    if node is None:
        return {}
    out: dict[str, Any] = {}
    for base in node.bases:
        name = base.id if isinstance(base, ast.Name) else None
        if name in _PLAIN_BASES:
            continue
        if name is not None and _class_node(tree, name) is not None:
            out.update(_chain(module, name))
        elif name is not None and (origin := _imported(tree, module, name)) is not None and _module_tree(origin[0]):
            out.update(_chain(*origin))
        else:  # a base whose source is not read here (another library's class, an expression)
            out[_UNRESOLVED] = _UNREADABLE
    for stmt in node.body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[stmt.name] = _Defined(f"{module}:{cls}")
            continue
        if target is None or value is None:
            continue
        try:
            out[target] = _literal(value, module)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            out[target] = _UNREADABLE
    return out


class _Defined(str):
    """Where a function attribute of a class is defined (``"module:Class"``)."""


def class_declarations(module: str, cls: str) -> dict[str, Any]:
    """The literal class attributes of ``module:cls`` and of its bases (the class's own win), without importing."""
    return {k: v for k, v in _chain(module, cls).items()
            if k != _UNRESOLVED and v is not _UNREADABLE and not isinstance(v, _Defined)}


def exact_declarations(target: str, fields: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any] | None:
    """``fields`` of the class at ``"module:Class"`` exactly as importing it would give them (``defaults`` for those
    it does not declare), read from its source; None where its source cannot tell (the class is not found, or one
    of ``fields`` is assigned something other than a literal or defined as a function): import it then."""
    module, _, cls = target.partition(":")
    found = _module_tree(module)
    if found is None or _class_node(found[0], cls) is None:
        return None
    chain = _chain(module, cls)
    if _UNRESOLVED in chain:
        return None
    out: dict[str, Any] = {}
    for f in fields:
        v = chain.get(f, _MISSING)
        if v is _UNREADABLE or isinstance(v, _Defined):
            return None
        out[f] = defaults.get(f) if v is _MISSING else v
    return out


def defined_in(target: str, function: str) -> str | None:
    """The ``"module:Class"`` whose body defines ``function`` for the class at ``target`` (itself or a base it
    names), read from its source; None where no class of its chain defines it (or the source cannot tell)."""
    module, _, cls = target.partition(":")
    v = _chain(module, cls).get(function)
    return str(v) if isinstance(v, _Defined) else None


def declared(target: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """``fields`` of the class at ``"module:Class"`` as its source declares them (those it declares)."""
    module, _, cls = target.partition(":")
    decl = class_declarations(module, cls)
    return {f: decl[f] for f in fields if f in decl}


def _imports_within(tree: ast.Module, module: str, top: str) -> set[str]:
    """The modules of the package ``top`` that ``module`` imports (any depth of ``from``/``import``, lazy ones too)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.partition(".")[0] == top)
        elif isinstance(node, ast.ImportFrom):
            base = _source_module(node, module)
            if base.partition(".")[0] != top:
                continue
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # a submodule imported by name
    return out


def code_digest(module: str) -> dict[str, str]:
    """``{file: sha256[:12]}`` of the source of ``module`` and of every module of its own top-level package that it
    imports, directly or through another (a method's implementation: ``methods/ofa.py`` with ``methods/combine.py``,
    ``methods/subwords.py``, ...). Files are named relative to the package's parent folder."""
    top = module.partition(".")[0]
    top_spec = importlib.util.find_spec(top)
    if top_spec is None or not top_spec.origin:
        return {}
    origin = Path(top_spec.origin)
    base = origin.parent.parent if top_spec.submodule_search_locations else origin.parent
    seen: dict[str, str] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        entry, imports = _module_entry(str(base), name, top)
        seen[name] = entry
        todo.extend(imports - set(seen))
    return dict(sorted(entry.split("=", 1) for entry in seen.values() if entry))


def _module_entry(base: str, name: str, top: str) -> tuple[str, frozenset[str]]:
    """``("file=sha256[:12]", the modules of ``top`` it imports)`` for module ``name`` found under ``base`` (on
    disk, nothing imported); ``("", {})`` for a name that is no module. A file is read and parsed once a process
    while its size and modification time stay (the methods of a run share most of their modules)."""
    root = Path(base)
    stem = root.joinpath(*name.split("."))
    path = stem.with_suffix(".py") if stem.with_suffix(".py").is_file() else stem / "__init__.py"
    try:
        st = path.stat()
    except OSError:  # a name imported from a module, not a module
        return "", frozenset()
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    digest, imports = _parsed(str(path), st.st_size, st.st_mtime_ns, name, top)
    return f"{rel}={digest}", imports


@functools.cache
def _parsed(path: str, size: int, mtime_ns: int, name: str, top: str) -> tuple[str, frozenset[str]]:
    import hashlib

    source = Path(path).read_bytes()
    return hashlib.sha256(source).hexdigest()[:12], frozenset(_imports_within(ast.parse(source), name, top))


def changed_files(recorded: dict[str, str] | None, code: dict[str, str]) -> list[str]:
    """The files of a method's code that differ between what a run recorded and now (added or removed ones too)."""
    if recorded is None:
        return []
    return sorted(f for f in set(recorded) | set(code) if recorded.get(f) != code.get(f))
