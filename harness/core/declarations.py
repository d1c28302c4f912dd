"""A plug-in class's declarations, read from its source without importing it.

``harness list``, ``harness --help`` and the leaderboard import no method or task (nor torch); what they show of a
built-in one -- its description, what it requires, its metrics -- and what planning asks of it is what its class
declares as literal class attributes (``description: ClassVar[str] = "..."``). This module reads those attributes
from the module's source with :mod:`ast`, following the class's single chain of bases (in its module or imported by
name from another one), so the declaration is written once, on the class, and never copied into a table.

The reading answers only where the source tells exactly; otherwise None (planning then imports the class). It
reads a chain of classes each with at most one base, no keywords (a metaclass) and no decorator but a harness
registry's ``@METHODS.register("name")`` / ``@TASKS.register("name")``, whose bodies hold only docstrings, ``pass``,
functions and ``name = value`` / ``name: T = value`` assignments (no dunder name); a base's
``__init_subclass__`` may only set ``cls.<name> = ...`` (those names, and those it reads of ``cls``, are then
unknown). A value is a literal: a constant, a tuple, list, set or dict of literals, ``frozenset`` / ``set`` /
``tuple`` / ``list`` / ``dict`` of one, or a module constant bound to one (in the module or imported by name).
Every class and constant read must be *plain* in its module (:func:`_plain`): bound once, and used elsewhere only
as a base of a plain class, an annotation, or within the literal value of a plain constant or class attribute; a
module that calls ``globals``, ``vars``, ``exec``, ``eval`` or ``__import__`` or imports ``*`` has none.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Any

_MISSING = object()
_UNREADABLE = object()  # an attribute assigned a value that is not a literal: known only by importing
_MAKERS = {"frozenset": frozenset, "set": set, "tuple": tuple, "list": list, "dict": dict}
_HAZARDS = frozenset({"globals", "vars", "exec", "eval", "__import__"})  # may change any name of the module
_REGISTRIES = ("METHODS.register", "TASKS.register")  # their ``register(name)`` hands the class back unchanged
_REGISTRY = "harness.core.registry"


class _Defined(str):
    """Where a function attribute of a class is defined (``"module:Class"``)."""


@functools.lru_cache(maxsize=128)
def _module_tree(module: str) -> tuple[ast.Module, str] | None:
    """The parsed source of ``module`` and its package (what its relative imports start from)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8")), spec.parent


def _source_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module a ``from ... import`` in a module of ``package`` reads from."""
    if not node.level:
        return str(node.module)
    base = package.rsplit(".", node.level - 1)[0]
    return f"{base}.{node.module}" if node.module else base


def _imported(tree: ast.Module, package: str, name: str) -> tuple[str, str] | None:
    """``(module, name there)`` of a name the module's top level imports by ``from module import name``."""
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    return _source_module(stmt, package), alias.name
    return None


def _target(stmt: ast.AST) -> str | None:
    """The name a plain ``name = value`` or ``name: T [= value]`` binds; None for any other statement."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
    elif isinstance(stmt, ast.AnnAssign):
        target = stmt.target
    else:
        return None
    return target.id if isinstance(target, ast.Name) else None


def _role(node: ast.Name, parents: dict[ast.AST, ast.AST]) -> tuple[str, str | None]:
    """What an occurrence of a name does: ``bind`` it, ``read`` it (an annotation), have it ``held`` by the name
    of the second item (a subclass, or the constant or class whose value may take it or a part of it in: through
    displays, items, conditional expressions and ``frozenset``/``dict``/... copies), or ``other``."""
    if not isinstance(node.ctx, ast.Load):
        return "bind", None
    parent = parents[node]
    if node is getattr(parent, "annotation", None) or node is getattr(parent, "returns", None):
        return "read", None
    if isinstance(parent, ast.ClassDef) and node in parent.bases:
        return "held", parent.name
    child = node
    while isinstance(parent, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.IfExp, ast.Subscript)) and isinstance(
            getattr(parent, "ctx", ast.Load()), ast.Load) or (isinstance(parent, ast.Call) and child in parent.args
                                                              and ast.unparse(parent.func) in _MAKERS):
        child, parent = parent, parents[parent]
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and child is parent.value:
        holder = parents[parent]  # a class attribute is reached through its class; ``a = b = x``'s through None
        return "held", holder.name if isinstance(holder, ast.ClassDef) else _target(parent)
    return "other", None


@functools.lru_cache(maxsize=128)
def _uses(module: str) -> dict[str, list[tuple[str, str | None]]]:
    """Every occurrence of each name in the source of ``module`` (:func:`_role`); a star import as a binding of
    ``*``."""
    found = _module_tree(module)
    if found is None:
        return {}
    tree = found[0]
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    uses: dict[str, list[tuple[str, str | None]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            uses.setdefault(node.id, []).append(_role(node, parents))
        elif isinstance(node, ast.alias):
            uses.setdefault((node.asname or node.name).partition(".")[0], []).append(("bind", None))
        elif isinstance(getattr(node, "name", None), str):  # a def, a class, an ``except ... as name``
            uses.setdefault(node.name, []).append(("bind", None))  # type: ignore[attr-defined]
    return uses


def _plain(module: str, name: str, seen: tuple[str, ...] = ()) -> bool:
    """``name`` is bound once in ``module``, and each other occurrence reads it (an annotation) or is held by a
    plain name (a subclass; a constant or class whose literal value takes it in), in a module that changes no name
    in ways not written with it (``globals()``, ``exec``, a star import, ...)."""
    uses = _uses(module)
    if name in seen or "*" in uses or not _HAZARDS.isdisjoint(uses):
        return False
    roles = uses.get(name, [])
    return [role for role, _ in roles].count("bind") == 1 and all(
        role in ("bind", "read") or (role == "held" and _plain(module, str(holder), (*seen, name)))
        for role, holder in roles)


def _definition(module: str, name: str, seen: tuple[str, ...] = ()) -> tuple[str, ast.stmt] | None:
    """The module that defines the plain ``name`` of ``module`` and the top-level statement that does (a class,
    a function or an assignment), following ``from x import name``; None where it is not found or not plain."""
    found = _module_tree(module)
    if found is None or f"{module}:{name}" in seen or not _plain(module, name):
        return None  # (a name met again: modules that import each other's names, classes that derive from each other)
    tree, package = found
    stmt = next((s for s in tree.body if getattr(s, "name", None) == name or _target(s) == name), None)
    if stmt is not None:
        return module, stmt
    origin = _imported(tree, package, name)
    return None if origin is None else _definition(*origin, (*seen, f"{module}:{name}"))


def _literal(node: ast.AST | None, module: str) -> Any:
    """The value of a literal expression of ``module`` (see the module's docstring); ValueError where none."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_literal(e, module) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else (items if isinstance(node, ast.List) else set(items))
    if isinstance(node, ast.Dict) and None not in node.keys:
        return dict(map(lambda k, v: (_literal(k, module), _literal(v, module)), node.keys, node.values))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _MAKERS and not node.keywords:
        return _MAKERS[node.func.id](*(_literal(a, module) for a in node.args))  # TypeError for two or more
    if isinstance(node, ast.Name) and (found := _definition(module, node.id)) is not None:
        return _literal(getattr(found[1], "value", None), found[0])
    raise ValueError


def _hook_sets(fn: ast.FunctionDef) -> frozenset[str] | None:
    """The attributes an ``__init_subclass__`` sets on a subclass or reads of it (``cls.x = f(cls.y)``: x and y),
    or None where it does more than that and call ``super().__init_subclass__(**kwargs)``."""
    if fn.decorator_list or not fn.args.args:
        return None
    cls = fn.args.args[0].arg
    for stmt in fn.body:
        if not (ast.unparse(stmt) == "super().__init_subclass__(**kwargs)" or _docstring(stmt) or (
                isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Attribute)
                and len(stmt.targets) == 1 and ast.unparse(stmt.targets[0].value) == cls)):
            return None
    attrs = [n for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
             and n.value.id == cls]
    if sum(isinstance(n, ast.Name) and n.id == cls for n in ast.walk(fn)) != len(attrs):
        return None  # the class itself is handed on: anything may be done to it
    return frozenset(n.attr for n in attrs)


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def _body(module: str, node: ast.ClassDef) -> dict[str, Any] | None:
    """The attributes the body of class ``node`` binds: a literal, :data:`_UNREADABLE` or, for a function, its
    :class:`_Defined`; None where the body holds another statement (see the module's docstring)."""
    out: dict[str, Any] = {}
    for stmt in node.body:
        name = _target(stmt)
        if isinstance(stmt, ast.FunctionDef):
            out[stmt.name] = _Defined(f"{module}:{node.name}")
        elif name is not None and not name.startswith("__"):
            if stmt.value is None:  # type: ignore[attr-defined]  # an annotation alone binds nothing
                continue
            try:  # (a name the class body binds is bound twice in the module: not a constant read)
                out[name] = _literal(stmt.value, module)  # type: ignore[attr-defined]
            except (ValueError, TypeError):
                out[name] = _UNREADABLE
        elif not (isinstance(stmt, ast.Pass) or _docstring(stmt)):
            return None
    return out


def _chain(target: str, seen: tuple[str, ...] = ()) -> tuple[dict[str, Any], frozenset[str]] | None:
    """The class attributes of the class at ``"module:Class"`` and of its bases (the class's own win; those its or
    a base's ``__init_subclass__`` sets or reads :data:`_UNREADABLE`), and the names those hooks set or read; None
    where the source cannot tell (see the module's docstring)."""
    module, _, cls = target.partition(":")
    found = _definition(module, cls, seen)
    if found is None or not isinstance(found[1], ast.ClassDef):
        return None
    module, node = found
    if len(node.bases) > 1 or node.keywords or not all(_registers(module, d) for d in node.decorator_list):
        return None
    attrs: dict[str, Any] = {}
    hooked: frozenset[str] = frozenset()
    if node.bases:
        first = node.bases[0]
        base = _chain(f"{module}:{first.id}", (*seen, f"{module}:{node.name}")) if isinstance(first, ast.Name) else None
        if base is None:
            return None
        attrs, hooked = base
    own = _body(module, node)
    if own is None:
        return None
    hook = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init_subclass__"), None)
    sets = frozenset() if hook is None else _hook_sets(hook)
    if sets is None:
        return None
    hooked |= sets  # what a hook reads of a subclass may be its base's, and what it hands on may be changed
    return {**attrs, **own, **dict.fromkeys(hooked, _UNREADABLE)}, hooked


def _registers(module: str, deco: ast.expr) -> bool:
    """A decorator ``@METHODS.register("name")`` or ``@TASKS.register("name")`` of the harness's registries,
    imported by that name and bound once."""
    if not (isinstance(deco, ast.Call) and len(deco.args) == 1 and not deco.keywords
            and ast.unparse(deco.func) in _REGISTRIES):
        return False
    tree, package = _module_tree(module)  # type: ignore[misc]
    name = deco.func.value.id  # type: ignore[attr-defined]
    return _imported(tree, package, name) == (_REGISTRY, name) and \
        [role for role, _ in _uses(module)[name]].count("bind") == 1


def exact_declarations(target: str, fields: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any] | None:
    """``fields`` of the class at ``"module:Class"`` exactly as importing it would give them (``defaults`` for those
    it does not declare), read from its source; None where its source cannot tell (the class is not found, one of
    ``fields`` is assigned something other than a literal or defined as a function, or the class or what it names
    is made or used in a way this module does not follow: see its docstring): import it then."""
    chain = _chain(target)
    if chain is None:
        return None
    out: dict[str, Any] = {}
    for f in fields:
        v = chain[0].get(f, _MISSING)
        if v is _UNREADABLE or isinstance(v, _Defined):
            return None
        out[f] = defaults.get(f) if v is _MISSING else v
    return out


def declared(target: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """``fields`` of the class at ``"module:Class"`` that it has, read from its source; {} where the source cannot
    tell them exactly (:func:`exact_declarations`)."""
    found = exact_declarations(target, fields, dict.fromkeys(fields, _MISSING))
    return {f: v for f, v in (found or {}).items() if v is not _MISSING}


def defined_in(target: str, function: str) -> str | None:
    """The ``"module:Class"`` whose body defines ``function`` for the class at ``target`` (itself or a base),
    read from its source; None where no class of its chain defines it (or the source cannot tell)."""
    chain = _chain(target)
    found = None if chain is None else chain[0].get(function)
    return str(found) if isinstance(found, _Defined) else None


def _imports_within(tree: ast.Module, package: str, top: str) -> set[str]:
    """The modules of the package ``top`` that a module of ``package`` imports (any depth of ``from``/``import``,
    lazy ones too)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.partition(".")[0] == top)
        elif isinstance(node, ast.ImportFrom) and (base := _source_module(node, package)).partition(".")[0] == top:
            out.update([base, *(f"{base}.{a.name}" for a in node.names)])  # a submodule imported by name too
    return out


def code_digest(module: str) -> dict[str, str]:
    """``{file: sha256[:12]}`` of the source of ``module`` and of every module of its own top-level package that it
    imports, directly or through another (a method's implementation: ``methods/ofa.py`` with ``methods/combine.py``,
    ``methods/subwords.py``, ...), found on disk, nothing imported. Files are named relative to the package's parent
    folder."""
    top = module.partition(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.origin:
        return {}
    root = Path(spec.origin).parent.parent if spec.submodule_search_locations else Path(spec.origin).parent
    files: dict[str, str] = {}
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        seen.add(name)
        stem = root.joinpath(*name.split("."))
        path = stem.with_suffix(".py") if stem.with_suffix(".py").is_file() else stem / "__init__.py"
        if path.is_file():  # else a name imported from a module, not a module
            st = path.stat()
            digest, imports = _parsed(str(path), st.st_size, st.st_mtime_ns, name, top)
            files[path.relative_to(root).as_posix()] = digest
            todo.extend(imports - seen)
    return dict(sorted(files.items()))


@functools.cache
def _parsed(path: str, size: int, mtime_ns: int, name: str, top: str) -> tuple[str, frozenset[str]]:
    """The digest of a file and the modules of ``top`` it imports, read and parsed once a process while its size
    and modification time stay (the methods of a run share most of their modules)."""
    import hashlib

    source = Path(path).read_bytes()
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    return hashlib.sha256(source).hexdigest()[:12], frozenset(_imports_within(ast.parse(source), package, top))


def changed_files(recorded: dict[str, str] | None, code: dict[str, str]) -> list[str]:
    """The files of a method's code that differ between what a run recorded and now (added or removed ones too),
    and the libraries (``lib:<name>``) whose version differs from the one it recorded (a run recorded before the
    libraries were has none to differ)."""
    if recorded is None:
        return []
    return sorted(f for f in set(recorded) | set(code) if recorded.get(f) != code.get(f)
                  and not (f.startswith("lib:") and f not in recorded))
