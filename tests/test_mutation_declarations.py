"""The source reading of :mod:`harness.core.declarations`, construction by construction, and the code digest that
names a method's files in its runs' identity.

The reading must never answer other than what importing the class gives: each reading here is checked against
the imported class where the module can be imported (:func:`_read`), and it must answer None (planning imports
the class) wherever the source alone cannot tell. The code digest must name every file of the package a module
imports, however it imports it, so that a change to any of them starts the method's cells over."""

from __future__ import annotations

import ast
import hashlib
import importlib
import os
import sys
import textwrap

import pytest

from harness.core import declarations
from harness.core.declarations import changed_files, code_digest, declared, defined_in, exact_declarations
from tests.test_declarations_exact import _clear  # what the reading caches by a module's name

FIELDS = ("requires", "supports_factorized", "profiles")
DEFAULTS = {"requires": frozenset(), "supports_factorized": False, "profiles": {}}


@pytest.fixture
def write(tmp_path, monkeypatch):
    """Write ``{"dotted.name": source}`` as modules (packages made as needed) on the path."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def put(**sources: str) -> None:
        for name, source in sources.items():
            parts = name.split("__")  # a__b names the module a/b.py; a__init names the package a
            path = tmp_path.joinpath(*parts[:-1], "__init__.py" if parts[-1] == "init" else f"{parts[-1]}.py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source), encoding="utf-8")
            written.append(".".join(parts[:-1] if parts[-1] == "init" else parts))
        _clear()
        importlib.invalidate_caches()

    yield put
    _clear()
    for name in written:
        sys.modules.pop(name, None)


def _imported(target: str, fields: tuple[str, ...]) -> dict:
    mod, _, cls = target.partition(":")
    obj = getattr(importlib.import_module(mod), cls)
    return {f: getattr(obj, f, DEFAULTS.get(f)) for f in fields}


def _read(target: str, fields: tuple[str, ...] = FIELDS) -> dict | None:
    """The source's reading, checked against importing the class: None, or what importing gives."""
    got = exact_declarations(target, fields, DEFAULTS)
    assert got is None or got == _imported(target, fields), (target, got, _imported(target, fields))
    return got


# -- what is read ----------------------------------------------------------------------------------------------
def test_a_chain_across_modules_and_packages_is_read_as_importing_gives_it(write):
    write(dpkg__init="", dpkg__consts="""
        BASE_K = 1
        HELPER = {"k": BASE_K, "xs": (1, -2), "on": True}
        LIMIT = -3
        """, dpkg__base="""
        from __future__ import annotations
        from typing import ClassVar
        from dpkg.consts import HELPER
        class Base:
            '''The base.'''
            requires: ClassVar[frozenset[str]] = frozenset()
            supports_factorized = True
            profiles = {"cpu": dict(HELPER)}
            note: ClassVar[str]
            pass
            def helper(self) -> Base:
                return self
        """, dpkg__impl="""
        from harness.core.registry import METHODS
        from .base import Base
        from .consts import LIMIT
        WORDS = ["a", "b"]
        @METHODS.register("decl-mutation-impl")
        class Impl(Base):
            requires = frozenset({"x", "y"})
            bounds = (LIMIT, 2.5, None)
            table = {"a": [1, {2}], "b": set(), "c": tuple(WORDS), "d": list(), "e": {1: -4}, LIMIT: "limit"}
            def run(self, other: Base) -> None:
                pass
        class Again(Impl):
            supports_factorized = False
        """)
    try:
        assert _read("dpkg.impl:Impl") == {"requires": frozenset({"x", "y"}), "supports_factorized": True,
                                           "profiles": {"cpu": {"k": 1, "xs": (1, -2), "on": True}}}
        assert _read("dpkg.impl:Impl", ("bounds", "table")) == {
            "bounds": (-3, 2.5, None),
            "table": {"a": [1, {2}], "b": set(), "c": ("a", "b"), "d": [], "e": {1: -4}, -3: "limit"}}
        assert _read("dpkg.impl:Again", ("supports_factorized", "requires")) == {
            "supports_factorized": False, "requires": frozenset({"x", "y"})}
        assert _read("dpkg.impl:Base", ("note",)) == {"note": None}  # an annotation alone binds nothing
        assert _read("dpkg.impl:Impl", ("helper",)) is None  # a function is not a literal
        assert defined_in("dpkg.impl:Again", "helper") == "dpkg.base:Base"
        assert defined_in("dpkg.impl:Again", "run") == "dpkg.impl:Impl"
        assert defined_in("dpkg.impl:Again", "requires") is None  # a literal, not a function
        assert defined_in("dpkg.impl:Again", "absent") is None
        assert defined_in("dpkg.impl:Missing", "run") is None
        assert declared("dpkg.impl:Again", ("requires", "absent", "bounds")) == {
            "requires": frozenset({"x", "y"}), "bounds": (-3, 2.5, None)}
    finally:
        from harness.core.registry import METHODS

        METHODS.unregister("decl-mutation-impl")


def test_a_task_registry_decorator_is_read_and_a_class_imported_by_another_name_is_followed(write):
    write(dtask="""
        from harness.core.registry import TASKS
        class Base:
            requires = ("t",)
        @TASKS.register("decl-mutation-task")
        class Task(Base):
            supports_factorized = True
        """, dtask_alias="from dtask import Task as Renamed\n")
    try:
        want = {"requires": ("t",), "supports_factorized": True, "profiles": {}}
        assert _read("dtask:Task") == want
        assert _read("dtask_alias:Renamed") == want
    finally:
        from harness.core.registry import TASKS

        TASKS.unregister("decl-mutation-task")


def test_a_hook_that_sets_an_attribute_makes_only_what_it_sets_and_reads_unknown(write):
    write(dhook="""
        class Base:
            supports_factorized = False
            requires = frozenset()
            profiles = {}
            def __init_subclass__(cls, **kwargs):
                '''Derived.'''
                super().__init_subclass__(**kwargs)
                cls.derived = len(cls.requires)
        class Sub(Base):
            requires = frozenset({"x"})
            supports_factorized = True
        class SubSub(Sub):
            pass
        """)
    assert _read("dhook:Sub", ("supports_factorized", "profiles")) == {"supports_factorized": True, "profiles": {}}
    assert _read("dhook:SubSub", ("supports_factorized",)) == {"supports_factorized": True}
    for target in ("dhook:Base", "dhook:Sub", "dhook:SubSub"):
        assert _read(target, ("requires",)) is None  # what the hook reads of a subclass
        assert _read(target, ("derived",)) is None  # what it sets
    assert _read("dhook:Base", ("supports_factorized",)) == {"supports_factorized": False}


def test_a_name_used_only_in_annotations_or_as_a_plain_base_stays_readable(write):
    write(dannot="""
        from dataclasses import dataclass
        REQ = ("a",)
        class Base:
            requires = frozenset(REQ)
        class Sub(Base):
            pass
        @dataclass
        class Holder:
            item: Base
        def use(x: Base) -> Sub:
            return x
        """)
    assert _read("dannot:Sub") == {"requires": frozenset({"a"}), "supports_factorized": False, "profiles": {}}


# -- what is not read: the class ---------------------------------------------------------------------------------
def test_a_class_made_otherwise_than_one_plain_chain_is_not_read(write):
    """Each of these would be imported to be known (the module is never imported here: some cannot be)."""
    write(dshape="""
        import collections
        from collections import OrderedDict
        from harness.core.registry import METHODS
        from harness.core.registry import METHODS as RENAMED
        class Meta(type):
            pass
        class Base:
            requires = frozenset({"base"})
        class WithMeta(Base, metaclass=Meta):
            pass
        class Foreign(collections.OrderedDict):
            pass
        class FromLibrary(OrderedDict):
            requires = frozenset({"x"})
        @METHODS.register("decl-shape-two", "another")
        class TwoArgs:
            requires = frozenset({"two"})
        @METHODS.register(name="decl-shape-kw")
        class Keyword:
            requires = frozenset({"kw"})
        @RENAMED.register("decl-shape-renamed")
        class Renamed:
            requires = frozenset({"renamed"})
        def plain(cls):
            return cls
        @plain
        class Decorated:
            requires = frozenset({"x"})
        def function():
            pass
        if True:
            class Hidden:
                requires = frozenset({"hidden"})
        """)
    for cls in ("WithMeta", "Foreign", "FromLibrary", "TwoArgs", "Keyword", "Renamed", "Decorated", "function",
                "Meta", "Absent", "Hidden"):
        assert exact_declarations(f"dshape:{cls}", FIELDS, DEFAULTS) is None, cls
    assert exact_declarations("dshape:Base", ("requires",), DEFAULTS) == {"requires": frozenset({"base"})}


def test_a_registry_imported_relatively_inside_the_harness_is_read(write, tmp_path, monkeypatch):
    import harness.core

    monkeypatch.setattr(harness.core, "__path__", [*harness.core.__path__, str(tmp_path / "harness" / "core")])
    write(harness__core__decl_relative="""
        from .registry import TASKS
        @TASKS.register("decl-mutation-relative")
        class Relative:
            requires = ("r",)
        """)
    try:
        assert _read("harness.core.decl_relative:Relative", ("requires",)) == {"requires": ("r",)}
    finally:
        from harness.core.registry import TASKS

        TASKS.unregister("decl-mutation-relative")


def test_a_class_a_metaclass_may_change_is_not_read(write):
    """A metaclass's ``__new__`` runs for each class made with it, and may change the metaclass itself."""
    write(dmeta="""
        class Counting(type):
            made = 0
            def __new__(mcs, name, bases, ns):
                mcs.made += 1
                return super().__new__(mcs, name, bases, ns)
        class Counted(metaclass=Counting):
            pass
        """)
    assert _read("dmeta:Counting", ("made",)) is None


def test_a_registry_name_bound_twice_is_not_trusted(write):
    write(drebound="""
        from harness.core.registry import METHODS
        class _Other:
            def register(self, name):
                return lambda cls: type(cls.__name__, (), {"requires": frozenset({"other"})})
        METHODS = _Other()
        @METHODS.register("x")
        class Made:
            requires = frozenset({"x"})
        """)
    assert _read("drebound:Made") is None


BODIES = {"async": "async def run(self):\n        pass",
          "nested class": "class Inner:\n        pass",
          "if": "if True:\n        supports_factorized = True",
          "augmented": "requires |= {'more'}",
          "dunder": "__slots__ = ()",
          "hook assigned": "__init_subclass__ = classmethod(lambda cls: None)",
          "chained": "requires = other = frozenset()",
          "unpacked": "requires, other = frozenset(), 1"}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_a_class_body_with_another_statement_is_not_read(write, body):
    write(dbody=f"class Base:\n    requires = frozenset()\nclass Odd(Base):\n    requires = frozenset()\n    {body}\n")
    assert _read("dbody:Odd") is None
    assert _read("dbody:Base") is not None


HOOKS = {"decorated": "@classmethod\n    def __init_subclass__(cls, **kwargs):\n        pass",
         "no positional parameter": "def __init_subclass__(**kwargs):\n        pass",
         "another statement": "def __init_subclass__(cls, **kwargs):\n        if cls:\n            pass",
         "an item of it": "def __init_subclass__(cls, **kwargs):\n        cls.table['k'] = 1",
         "another object": "def __init_subclass__(cls, **kwargs):\n        other.count = 1",
         "two targets": "def __init_subclass__(cls, **kwargs):\n        cls.a = cls.b = 1",
         "handed on": "def __init_subclass__(cls, **kwargs):\n        cls.a = print(cls)",
         "super with arguments": "def __init_subclass__(cls, **kwargs):\n        super().__init_subclass__(x=cls)"}


@pytest.mark.parametrize("hook", HOOKS.values(), ids=HOOKS.keys())
def test_a_hook_that_does_more_than_set_attributes_is_not_read(write, hook):
    write(dhooks=f"class Base:\n    requires = frozenset()\n    {hook}\nclass Sub(Base):\n    pass\n")
    assert exact_declarations("dhooks:Sub", ("supports_factorized",), DEFAULTS) is None
    assert exact_declarations("dhooks:Base", ("supports_factorized",), DEFAULTS) is None


def test_classes_that_derive_from_each_other_are_not_read(write):
    """Such modules cannot be imported; the reading must still end, with None."""
    write(dloop_a="from dloop_b import B\nclass A(B):\n    pass\n",
          dloop_b="from dloop_a import A\nclass B(A):\n    pass\n",
          dloop_c="from dloop_d import C\n", dloop_d="from dloop_c import C\n",
          dloop_e="class E(F):\n    pass\nclass F(E):\n    pass\n")
    for target in ("dloop_a:A", "dloop_b:B", "dloop_c:C", "dloop_e:E"):
        assert exact_declarations(target, FIELDS, DEFAULTS) is None, target


def test_a_module_that_cannot_be_read_gives_nothing(write, tmp_path):
    (tmp_path / "dnamespace").mkdir()
    write(dconst_away="from math import pi\nclass Uses:\n    requires = frozenset({pi})\n")
    assert exact_declarations("sys:Anything", FIELDS, DEFAULTS) is None  # built into the interpreter
    assert exact_declarations("dnamespace:Anything", FIELDS, DEFAULTS) is None  # a folder without __init__.py
    assert exact_declarations("dmissing_module:X", FIELDS, DEFAULTS) is None
    assert _read("dconst_away:Uses") is None  # a constant of a module that is not Python source
    assert declared("dmissing_module:X", FIELDS) == {}


# -- what is not read: the values --------------------------------------------------------------------------------
VALUES = {"call": "sorted({'a'})", "negated name": "-LIMIT", "negated text": "-'a'", "double negation": "-(-1)",
          "dict with **": "{**{'a': 1}}", "maker of two": "dict({'a': 1}, b=2)", "maker of two args": "set((1,), (2,))",
          "a class": "Base", "a function": "helper", "unknown name": "nowhere", "class-local name": "frozenset(LOCAL)",
          "class-local function": "frozenset(FUNC)",
          "a comprehension": "[x for x in (1,)]", "a conditional": "1 if LIMIT else 2", "an item": "TABLE['k']"}


@pytest.mark.parametrize("value", VALUES.values(), ids=VALUES.keys())
def test_a_value_that_is_not_a_literal_is_not_read(write, value):
    write(dvalue=f"LIMIT = 3\nLOCAL = ('module',)\nFUNC = ('module',)\nTABLE = {{'k': 1}}\ndef helper():\n    pass\n"
                 f"class Base:\n    supports_factorized = True\nclass Uses(Base):\n    LOCAL = ('class',)\n"
                 f"    def FUNC(self):\n        pass\n    requires = {value}\n")
    assert exact_declarations("dvalue:Uses", ("requires",), DEFAULTS) is None
    assert exact_declarations("dvalue:Uses", ("supports_factorized",), DEFAULTS) == {"supports_factorized": True}


# -- what is not read: names that something may change ----------------------------------------------------------
CHANGED = {"star import": "from os.path import *",
           "globals": "globals()",
           "exec": "exec('pass')",
           "except as": "try:\n    pass\nexcept Exception as REQ:\n    pass",
           "imported again": "from os import sep as REQ",
           "item": "REQ['k'][0] = 'b'",
           "deleted item": "del REQ['k']",
           "method": "REQ['k'].append('b')",
           "in a function": "def grow():\n    REQ['k'].append('b')",
           "held and changed": "HELD = {'x': REQ['k']}\nHELD['x'].append('b')",
           "copied and changed": "COPY = dict(REQ)\nCOPY['k'].append('b')",
           "a local copy": "def grow():\n    local = [REQ]\n    local[0]['k'].append('b')",
           "compared": "SAME = REQ == {}",
           "a subclass changed": "class Sub(Uses):\n    pass\nSub.profiles['cpu']['k'].append('b')",
           "the class changed": "Uses.profiles['cpu']['k'].append('b')",
           "the class handed on": "print(Uses)",
           "another class changed": "class Other:\n    held = {'x': REQ}\nOther.held['x']['k'].append('b')",
           "imported as a package": "import REQ.sub",
           "defined again": "def REQ():\n    pass"}


@pytest.mark.parametrize("change", ["", *CHANGED.values()], ids=["unchanged", *CHANGED.keys()])
def test_a_constant_or_class_that_something_may_change_is_not_read(write, change):
    write(dchanged=f"REQ = {{'k': ['a']}}\nclass Uses:\n    profiles = {{'cpu': REQ}}\n{change}\n")
    assert _read("dchanged:Uses", ("profiles",)) == (None if change else {"profiles": {"cpu": {"k": ["a"]}}})


def test_names_held_in_cycles_are_not_trusted(write):
    write(dcycle="""
        def f():
            a = [b]
            b = [a]
        class Uses:
            requires = frozenset({1})
            table = (a,)
        """)
    assert exact_declarations("dcycle:Uses", ("table",), DEFAULTS) is None
    assert exact_declarations("dcycle:Uses", ("requires",), DEFAULTS) == {"requires": frozenset({1})}


# -- the code digest ---------------------------------------------------------------------------------------------
def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def test_the_code_digest_names_every_file_of_the_package_the_module_imports(write, tmp_path):
    write(cpkg__init="from .sub import VALUE\n", cpkg__sub="VALUE = 1\n", cpkg__other="X = 1\n",
          cpkg__unused="Y = 1\n", cpkg__inner__init="", cpkg__inner__leaf="Z = 1\n", cpkg__inner__only="W = 1\n",
          cpkg__inner__deep="""
            import os
            import cpkg.other
            import cpkg.inner.only
            from .. import sub
            from ..sub import VALUE
            from . import leaf
            def lazy():
                from cpkg import inner
                return inner
            """)
    files = code_digest("cpkg.inner.deep")
    assert files == {f: _digest(tmp_path / f) for f in ("cpkg/__init__.py", "cpkg/other.py", "cpkg/sub.py",
                                                       "cpkg/inner/__init__.py", "cpkg/inner/deep.py",
                                                       "cpkg/inner/leaf.py", "cpkg/inner/only.py")}
    assert list(files) == sorted(files)
    assert code_digest("cpkg") == {f: _digest(tmp_path / f) for f in ("cpkg/__init__.py", "cpkg/sub.py")}
    # a changed file is digested again: one changed in the same second to another size, or at another time to
    # the same size
    sub = tmp_path / "cpkg" / "sub.py"
    before = sub.stat()
    sub.write_text("VALUE = 22\n", encoding="utf-8")
    os.utime(sub, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert code_digest("cpkg")["cpkg/sub.py"] == _digest(sub)
    sub.write_text("VALUE = 23\n", encoding="utf-8")
    os.utime(sub, ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))
    assert code_digest("cpkg")["cpkg/sub.py"] == _digest(sub)


def test_the_code_digest_of_a_single_module_and_of_what_is_no_package(write, tmp_path):
    write(cmod="import cmod_helper\nfrom cmod import nothing\n", cmod_helper="X = 1\n")
    assert code_digest("cmod") == {"cmod.py": _digest(tmp_path / "cmod.py")}  # another top-level name is not its
    (tmp_path / "cnamespace").mkdir()
    assert code_digest("cnamespace.mod") == {}
    assert code_digest("cmissing_top.mod") == {}


def test_relative_imports_resolve_from_the_package():
    node = ast.parse("from ..x import y").body[0]
    assert declarations._source_module(node, "a.b.c") == "a.b.x"
    node = ast.parse("from . import y").body[0]
    assert declarations._source_module(node, "a.b") == "a.b"
    node = ast.parse("from ...x import y").body[0]
    assert declarations._source_module(node, "a.b.c") == "a.x"
    node = ast.parse("from x.z import y").body[0]
    assert declarations._source_module(node, "a.b") == "x.z"


def test_changed_files_names_what_differs_and_new_libraries_only_once_recorded():
    recorded = {"m/a.py": "1", "m/b.py": "2", "lib:torch": "2.1"}
    assert changed_files(None, {"m/a.py": "1"}) == []
    assert changed_files(recorded, dict(recorded)) == []
    now = {"m/a.py": "1", "m/c.py": "3", "lib:torch": "2.2", "lib:numpy": "2.0"}
    assert changed_files(recorded, now) == ["lib:torch", "m/b.py", "m/c.py"]
    assert changed_files({"m/a.py": "1"}, {"m/a.py": "1", "lib:torch": "2.2"}) == []


def test_the_digest_is_computed_from_disk_without_importing(write):
    write(cquiet="raise RuntimeError('imported')\n")
    assert set(code_digest("cquiet")) == {"cquiet.py"}
    assert "cquiet" not in sys.modules
