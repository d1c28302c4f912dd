"""What a class's source cannot tell exactly is not read from it: :func:`harness.core.declarations.
exact_declarations` answers None (and planning imports the class) for every construction that makes the class's
attributes other than its body's literals over a single chain of bases. Each test writes a small module, checks
what importing it gives, and that the source reading either gives the same or None."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from harness.core import declarations
from harness.core.declarations import exact_declarations

FIELDS = ("requires", "supports_factorized")
DEFAULTS = {"requires": frozenset(), "supports_factorized": False}


def _clear() -> None:
    declarations._module_tree.cache_clear()  # what the reading caches by a module's name
    declarations._uses.cache_clear()


@pytest.fixture
def module(tmp_path, monkeypatch):
    """Write ``{name: source}`` as modules on the path; the name of the first."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(**sources: str) -> str:
        for name, source in sources.items():
            (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
            written.append(name)
        _clear()
        return next(iter(sources))

    yield write
    _clear()
    for name in written:
        sys.modules.pop(name, None)


def _imported(target: str) -> dict:
    mod, _, cls = target.partition(":")
    obj = getattr(importlib.import_module(mod), cls)
    return {f: getattr(obj, f, DEFAULTS[f]) for f in FIELDS}


def _read(target: str) -> dict | None:
    """The source's reading, checked: None, or what importing gives."""
    got = exact_declarations(target, FIELDS, DEFAULTS)
    assert got is None or got == _imported(target), (target, got, _imported(target))
    return got


def test_a_single_chain_of_literals_is_still_read(module):
    mod = module(decl_plain="""
        from harness.core.registry import METHODS
        REQ = ("a", "b")
        class Base:
            supports_factorized = True
        @METHODS.register("decl-plain-test")
        class Plain(Base):
            '''A docstring.'''
            requires = frozenset(REQ)
            def helper(self):
                return self.requires
        """)
    assert exact_declarations(f"{mod}:Plain", FIELDS, DEFAULTS) == {"requires": frozenset({"a", "b"}),
                                                                    "supports_factorized": True}
    assert _read(f"{mod}:Plain") is not None
    from harness.core.registry import METHODS

    METHODS.unregister("decl-plain-test")


def test_multiple_inheritance_is_not_read(module):
    """Python takes the first base's attribute (its MRO); merging the bases in their order took the last one's."""
    mod = module(decl_multi="""
        class A:
            requires = frozenset({"a"})
        class B:
            requires = frozenset({"b"})
            supports_factorized = True
        class Both(A, B):
            pass
        class One(A):
            pass
        """)
    assert _read(f"{mod}:Both") is None
    assert _read(f"{mod}:One") == {"requires": frozenset({"a"}), "supports_factorized": False}


def test_a_chained_assignment_is_not_read(module):
    mod = module(decl_chained="""
        class Base:
            requires = frozenset()
        class Chained(Base):
            requires = other = frozenset({"x"})
        """)
    assert _read(f"{mod}:Chained") is None


def test_a_tuple_assignment_in_the_class_body_is_not_read(module):
    mod = module(decl_tuple="""
        class Base:
            supports_factorized = False
        class Unpacked(Base):
            requires, supports_factorized = frozenset({"x"}), True
        """)
    assert _read(f"{mod}:Unpacked") is None


def test_a_class_decorator_is_not_read(module):
    mod = module(decl_decorated="""
        import functools
        def louder(cls):
            cls.requires = frozenset({"decorated"})
            return cls
        @louder
        class Decorated:
            requires = frozenset({"x"})
        @functools.total_ordering
        class Ordered:
            requires = frozenset({"x"})
            def __lt__(self, other):
                return False
        """, decl_fake_registry="""
        class _Reg:
            def register(self, name):
                def deco(cls):
                    cls.supports_factorized = True
                    return cls
                return deco
        METHODS = _Reg()
        """, decl_lookalike="""
        from decl_fake_registry import METHODS
        @METHODS.register("x")
        class LookAlike:
            requires = frozenset({"x"})
        """)
    assert _read(f"{mod}:Decorated") is None
    assert _read(f"{mod}:Ordered") is None
    assert _read("decl_lookalike:LookAlike") is None  # a register that is not the harness's registries'


def test_an_init_subclass_of_a_base_is_not_read(module):
    mod = module(decl_hook="""
        class Base:
            supports_factorized = False
            def __init_subclass__(cls, **kwargs):
                super().__init_subclass__(**kwargs)
                if cls.__name__.startswith("F"):
                    cls.supports_factorized = True
        class Factorized(Base):
            requires = frozenset({"x"})
        class Sets:
            def __init_subclass__(cls, **kwargs):
                super().__init_subclass__(**kwargs)
                cls.supports_factorized = not cls.requires
        class Set(Sets):
            requires = frozenset()
        class Meta(type):
            def __new__(mcs, name, bases, ns):
                ns["requires"] = frozenset({"meta"})
                return super().__new__(mcs, name, bases, ns)
        class WithMeta(metaclass=Meta):
            requires = frozenset({"x"})
        """)
    assert _read(f"{mod}:Factorized") is None
    # a hook that only sets cls.<name>: what it sets (and reads) is unknown, the rest is read
    assert _read(f"{mod}:Set") is None
    assert exact_declarations(f"{mod}:Set", ("requires",), DEFAULTS) is None  # it reads cls.requires
    assert exact_declarations(f"{mod}:Set", ("description",), {"description": "d"}) == {"description": "d"}
    assert _read(f"{mod}:WithMeta") is None


AFTER = {"assign": "Late.requires = frozenset({'late'})",
         "setattr": "setattr(Late, 'requires', frozenset({'late'}))",
         "augmented": "Late.requires |= {'late'}",
         "del": "del Late.supports_factorized",
         "rebound": "class Late(Base):\n    supports_factorized = False",
         "in a function": "def fix():\n    Late.supports_factorized = False\nfix()",
         "handed on": "import decl_helper\ndecl_helper.touch(Late)"}


@pytest.mark.parametrize("after", AFTER.values(), ids=AFTER.keys())
def test_the_class_changed_after_its_body_is_not_read(module, after):
    module(decl_helper="def touch(cls):\n    cls.requires = frozenset({'touched'})\n")
    mod = module(decl_after="class Base:\n    supports_factorized = False\n"
                            "class Late(Base):\n    requires = frozenset({'x'})\n"
                            "    supports_factorized = True\n" + after + "\n")
    assert _read(f"{mod}:Late") is None


CHANGES = {"append": "REQ.append('b')",
           "augmented": "REQ += ['b']",
           "item": "REQ[0] = 'b'",
           "del": "del REQ[0]",
           "alias": "ALIAS = REQ\nALIAS.append('b')",
           "in a function": "def grow():\n    REQ.extend(['b'])\ngrow()",
           "handed on": "import decl_grower\ndecl_grower.grow(REQ)",
           "globals": "globals()['REQ'] = ['b']",
           "rebound": "if True:\n    REQ = ['b']"}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_a_module_constant_changed_before_the_class_is_not_read(module, change):
    module(decl_grower="def grow(items):\n    items.append('b')\n")
    mod = module(decl_const="REQ = ['a']\n" + change + "\nclass Uses:\n    requires = frozenset(REQ)\n")
    assert _read(f"{mod}:Uses") is None


def test_a_module_constant_changed_elsewhere_or_after_the_class_is_not_read(module):
    # the constant of another module, changed in the class's module
    module(decl_const_home="REQ = ['a']\n")
    mod = module(decl_const_away="from decl_const_home import REQ\nREQ.append('b')\n"
                                 "class Uses:\n    requires = frozenset(REQ)\n")
    assert _read(f"{mod}:Uses") is None
    # a mutable constant the class holds, changed after the class
    mod = module(decl_const_held="PROFILE = {'cpu': {'k': 1}}\nclass Holds:\n    profiles = PROFILE\n"
                                 "PROFILE['cpu']['k'] = 2\n")
    got = exact_declarations(f"{mod}:Holds", ("profiles",), {})
    assert got is None, (got, importlib.import_module(mod).Holds.profiles)
