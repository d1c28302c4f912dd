"""A plug-in class's declarations, read from its source without importing it.

``harness list``, ``harness --help`` and the leaderboard import no method or task (nor torch); what they show of a
built-in one -- its description, what it requires, its metrics -- is what its class declares as literal class
attributes (``description: ClassVar[str] = "..."``). This module reads those attributes from the module's source
with :mod:`ast`, following the class's bases (in the same module or imported by name from another one), so the
declaration is written once, on the class, and never copied into a table. Values must be literals: strings,
numbers, booleans, None, tuples, lists, dicts, and ``frozenset(...)`` / ``set(...)`` / ``tuple(...)`` of one.

What the source cannot tell exactly is not read (:func:`exact_declarations` answers None, and planning imports the
class): a class with more than one base that declares, a decorator other than a harness registry's ``register``, a
metaclass or class keywords, a class body with anything but docstrings, plain ``name = value`` /
``name: T = value`` assignments, functions and nested classes, an ``__init_subclass__`` of a base that does more
than set ``cls.<name>`` (those names are then unknown), and a class or module constant that something else in its
module may change (:func:`_touched`: ``Cls.x = ...``, ``LIST.append(...)``, ``+=``, ``del``, ``setattr``, a second
binding, an alias that is changed, ``globals()``, a star import, or, in code run at import, a method of it called or
the object passed to a function).
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
    if _changes(module, name):
        raise ValueError(f"{name} of {module} may be changed after it is bound")
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


# -- what else in a module may change a name it binds ------------------------------------------------------------
_ALL = "<every name>"  # globals(), exec, a star import: any name of the module may change
_MUTATORS = frozenset({"append", "extend", "insert", "remove", "pop", "clear", "update", "setdefault", "add",
                       "discard", "popitem", "sort", "reverse", "difference_update", "intersection_update",
                       "symmetric_difference_update", "__setitem__", "__delitem__", "__setattr__", "__delattr__",
                       "__iadd__", "__ior__", "__init_subclass__"})
_READ_ONLY = frozenset({"get", "copy", "keys", "values", "items", "index", "count", "union", "intersection",
                        "difference", "symmetric_difference", "issubset", "issuperset", "isdisjoint", "format",
                        "join", "startswith", "endswith", "lower", "upper", "strip", "split", "replace"})
_PURE = frozenset({"isinstance", "issubclass", "len", "sorted", "repr", "str", "hasattr", "getattr", "id", "hash",
                   "type", "bool", "int", "float", "print", "super", *_MAKERS})
_EVERYTHING = frozenset({"globals", "locals", "exec", "eval", "__import__"})


def _root(node: ast.AST) -> str | None:
    """The name an ``a.b[c].d`` chain starts from (None where it starts from a call or another expression)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _names_in(node: ast.AST | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()


class _Scan(ast.NodeVisitor):
    """What a module's code may change (:func:`_touched`): ``touched`` names, ``aliases`` (a name -> the names its
    value was taken from) and ``top`` (how many times each name is bound at the module's top level)."""

    def __init__(self) -> None:
        self.touched: set[str] = set()
        self.aliases: dict[str, set[str]] = {}
        self.top: dict[str, int] = {}
        self.at_import = True  # outside a function's body: run when the module is imported
        self.at_top = True  # the module's own statements (not a class's or a function's)

    def bind(self, target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Name):
            self.aliases.setdefault(target.id, set()).update(_names_in(value))
            if self.at_top:
                self.top[target.id] = self.top.get(target.id, 0) + 1
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.bind(elt, value)
        elif (name := _root(target)) is not None:  # an attribute or an item of a name set: the name changes
            self.touched.add(name)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, value)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.bind(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None or not isinstance(node.target, ast.Name):
            self.bind(node.target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.bind(node.target, node.value)
        self.touched.add(_root(node.target) or _ALL)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self.touched.update(_root(t) or _ALL for t in node.targets)
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.bind(node.target, node.iter)
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_comprehension(self, node: ast.comprehension) -> None:
        outer, self.at_top = self.at_top, False  # a comprehension's names are its own
        self.bind(node.target, node.iter)
        self.generic_visit(node)
        self.at_top = outer

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self.bind(node.optional_vars, node.context_expr)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.bind(node.target, node.value)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.touched.update(node.names)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        if any(a.name == "*" for a in node.names):
            self.touched.add(_ALL)
        for alias in node.names:
            self.bind(ast.Name(id=alias.asname or alias.name.partition(".")[0]), None)

    visit_ImportFrom = visit_Import

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and (func.id in _EVERYTHING or (func.id == "vars" and not node.args)):
            self.touched.add(_ALL)
        if isinstance(func, ast.Name) and func.id in {"setattr", "delattr"} and node.args:
            self.touched.add(_root(node.args[0]) or _ALL)
        if isinstance(func, ast.Attribute) and (name := _root(func.value)) is not None and (
                func.attr in _MUTATORS or (self.at_import and func.attr not in _READ_ONLY)):
            self.touched.add(name)
        if self.at_import and not (isinstance(func, ast.Name) and func.id in _PURE):
            for arg in [*node.args, *(k.value for k in node.keywords)]:  # what the callee is handed may change
                self.touched.update(_names_in(arg))
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        if not isinstance(node, ast.Lambda):
            self.bind(ast.Name(id=node.name), None)
            for deco in node.decorator_list:
                self.visit(deco)
            if node.returns is not None:
                self.visit(node.returns)
        self.visit(node.args)
        outer = self.at_import, self.at_top
        self.at_import = self.at_top = False
        for stmt in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(stmt)
        self.at_import, self.at_top = outer

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bind(ast.Name(id=node.name), None)
        for part in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(part)
        outer = self.at_top
        self.at_top = False
        for stmt in node.body:
            self.visit(stmt)
            if isinstance(stmt, ast.Assign | ast.AnnAssign):  # the class holds what its attributes were given
                self.aliases.setdefault(node.name, set()).update(_names_in(stmt.value))
        self.at_top = outer


@functools.lru_cache(maxsize=128)
def _scan(module: str) -> _Scan:
    scan = _Scan()
    found = _module_tree(module)
    if found is None:
        scan.touched.add(_ALL)
    else:
        scan.visit(found[0])
    return scan


@functools.lru_cache(maxsize=128)
def _touched(module: str) -> frozenset[str]:
    """The names bound in ``module`` that something in it besides their one plain binding may change: bound more
    than once at its top level; the root of an attribute or item assigned, deleted or augmented (``Cls.x = 1``,
    ``TABLE[k] = v``, ``del Cls.x``, ``X += ...``); ``setattr``/``delattr``'s object; a ``global`` of a function;
    the receiver of a method that changes it (``LIST.append``) or, in code run at import, of any method not known
    to only read; what code run at import hands a function other than a built-in that only reads; and what such a
    name was taken from (``A = LIST`` then ``A.append(...)`` changes ``LIST``). :data:`_ALL` among them where any
    name may change (``globals()``, ``exec``, ``from x import *``)."""
    scan = _scan(module)
    touched = scan.touched | {name for name, n in scan.top.items() if n > 1}
    todo = list(touched)
    while todo:
        for origin in scan.aliases.get(todo.pop(), ()):
            if origin not in touched:
                touched.add(origin)
                todo.append(origin)
    return frozenset(touched)


def _changes(module: str, name: str) -> bool:
    touched = _touched(module)
    return _ALL in touched or name in touched


_UNREADABLE = object()  # an attribute assigned a value that is not a literal: known only by importing
_UNRESOLVED = "<a base class not read>"  # in a chain: the source cannot tell the class's attributes
_HOOK = "<what an __init_subclass__ sets>"  # in a chain: the names it sets on a subclass (None: not understood)
_PLAIN_BASES = {"object": "builtins", "ABC": "abc", "Protocol": "typing", "Generic": "typing"}  # declare no facts
_REGISTRY = "harness.core.registry"  # its registries' ``register`` returns the class it is given, unchanged


def _plain_base(tree: ast.Module, module: str, base: ast.expr) -> bool:
    """``object``, ``abc.ABC``, ``typing.Protocol`` or ``typing.Generic`` (imported by name, not rebound)."""
    if not isinstance(base, ast.Name) or base.id not in _PLAIN_BASES or _changes(module, base.id):
        return False
    if base.id == "object":
        return base.id not in _scan(module).top
    origin = _imported(tree, module, base.id)
    return origin is not None and origin[1] == base.id and \
        origin[0] in {_PLAIN_BASES[base.id], f"{_PLAIN_BASES[base.id]}_extensions"}


def _registers(tree: ast.Module, module: str, deco: ast.expr) -> bool:
    """A decorator ``@REG.register("name")`` of a registry of the harness (which hands the class back as it is)."""
    if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "register"
            and isinstance(deco.func.value, ast.Name) and not deco.keywords
            and all(isinstance(a, ast.Constant) for a in deco.args)):
        return False
    name = deco.func.value.id
    origin = _imported(tree, module, name)
    return origin is not None and origin[0] == _REGISTRY and _scan(module).top.get(name) == 1 \
        and _ALL not in _touched(module)


def _chain(module: str, cls: str, depth: int = 0) -> dict[str, Any]:
    """The class attributes of ``module:cls`` and of its bases (the class's own win), without importing: each a
    literal value, :data:`_UNREADABLE` (assigned something else, or set by a base's ``__init_subclass__``) or, for
    a function defined in the class body, the ``"module:Class"`` that defines it. :data:`_UNRESOLVED` among the
    keys where the source cannot tell them all (see the module's docstring)."""
    found = _module_tree(module)
    if found is None:
        return {_UNRESOLVED: _UNREADABLE}
    tree, _ = found
    node = _class_node(tree, cls)
    origin = _imported(tree, module, cls) if node is None else None
    if depth > 16 or _changes(module, cls) or (node is None and origin is None):
        return {_UNRESOLVED: _UNREADABLE}
    if node is None:  # a class this module imports from another one
        return _chain(*origin, depth + 1)  # type: ignore[misc]
    out: dict[str, Any] = {}
    bases = [b for b in node.bases if not _plain_base(tree, module, b)]
    if len(bases) > 1 or node.keywords or not all(_registers(tree, module, d) for d in node.decorator_list):
        out[_UNRESOLVED] = _UNREADABLE  # several bases (their order), a metaclass, a decorator that may change it
    for base in bases:
        if isinstance(base, ast.Name) and (_class_node(tree, base.id) or _imported(tree, module, base.id)):
            out.update(_chain(module, base.id, depth + 1))
        else:  # a base whose source is not read here (another library's class, an expression)
            out[_UNRESOLVED] = _UNREADABLE
    hook = out.pop(_HOOK, frozenset())  # what the bases' __init_subclass__ sets on this class once it is made
    _body(module, cls, node, out)
    if hook is None:
        out[_UNRESOLVED] = _UNREADABLE
    out.update(dict.fromkeys(hook or (), _UNREADABLE))
    own = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init_subclass__"), None)
    sets = _hook_sets(own) if own is not None else frozenset()
    out[_HOOK] = None if hook is None or sets is None else hook | sets
    return out


def _body(module: str, cls: str, node: ast.ClassDef, out: dict[str, Any]) -> None:
    """The attributes the class body of ``node`` binds, into ``out``; :data:`_UNRESOLVED` for a statement that is
    none of a docstring, ``pass``, ``name = value``, ``name: T [= value]``, a function or a nested class."""
    local = {t.id for s in node.body for t in ast.walk(s) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    local |= {s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for stmt in node.body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            target, value = stmt.target.id, stmt.value
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[stmt.name] = _Defined(f"{module}:{cls}")
            continue
        elif isinstance(stmt, ast.ClassDef):
            out[stmt.name] = _UNREADABLE
            continue
        elif isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            continue
        else:  # a, b = ...; a = b = ...; x += ...; del x; a call; an if, a for, ...: not followed here
            out[_UNRESOLVED] = _UNREADABLE
            continue
        if value is None:  # an annotation alone binds nothing
            continue
        try:
            if _names_in(value) & local:  # a name of the class body (not the module's constant of that name)
                raise ValueError("a name bound in the class body")
            out[target] = _literal(value, module)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            out[target] = _UNREADABLE


def _hook_sets(fn: ast.FunctionDef) -> frozenset[str] | None:
    """The attributes an ``__init_subclass__`` sets on a subclass or reads of it (``cls.x = f(cls.y)``: x and y),
    or None where it does more than that and call ``super().__init_subclass__(...)``."""
    params = [*fn.args.posonlyargs, *fn.args.args]
    if not params or fn.decorator_list:
        return None
    cls = params[0].arg
    names: set[str] = set()
    for stmt in fn.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(call := stmt.value, ast.Call) \
                and isinstance(call.func, ast.Attribute) and call.func.attr == "__init_subclass__" \
                and isinstance(call.func.value, ast.Call) and isinstance(call.func.value.func, ast.Name) \
                and call.func.value.func.id == "super" and not call.func.value.args and cls not in _names_in(call):
            continue
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
                and isinstance(stmt.targets[0].value, ast.Name) and stmt.targets[0].value.id == cls):
            return None
        reads = [n for n in ast.walk(stmt.value) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                 and n.value.id == cls]
        if sum(isinstance(n, ast.Name) and n.id == cls for n in ast.walk(stmt.value)) != len(reads):
            return None  # the class itself is handed on: anything may be done to it
        names.update([stmt.targets[0].attr, *(n.attr for n in reads)])
    return frozenset(names)


class _Defined(str):
    """Where a function attribute of a class is defined (``"module:Class"``)."""


def class_declarations(module: str, cls: str) -> dict[str, Any]:
    """The literal class attributes of ``module:cls`` and of its bases (the class's own win), without importing."""
    return {k: v for k, v in _chain(module, cls).items()
            if k not in (_UNRESOLVED, _HOOK) and v is not _UNREADABLE and not isinstance(v, _Defined)}


def exact_declarations(target: str, fields: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any] | None:
    """``fields`` of the class at ``"module:Class"`` exactly as importing it would give them (``defaults`` for those
    it does not declare), read from its source; None where its source cannot tell (the class is not found, one of
    ``fields`` is assigned something other than a literal or defined as a function, or the class or what it names
    is made or changed in a way this module does not follow: see its docstring): import it then."""
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
    """The files of a method's code that differ between what a run recorded and now (added or removed ones too),
    and the libraries (``lib:<name>``) whose version differs from the one it recorded (a run recorded before the
    libraries were has none to differ)."""
    if recorded is None:
        return []
    return sorted(f for f in set(recorded) | set(code) if recorded.get(f) != code.get(f)
                  and not (f.startswith("lib:") and f not in recorded))
