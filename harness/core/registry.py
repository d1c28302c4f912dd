"""Registries for initialization methods and evaluation tasks.

Our own implementations register with a decorator (``@methods_registry.register("ofa")``); third-party packages
register through the entry-point groups ``harness.methods`` and ``harness.tasks``::

    [project.entry-points."harness.methods"]
    mymethod = "my_package.module:MyMethod"

Entry points are only listed at first use and only imported when their name is looked up (lazy), so a broken
third-party plugin cannot break ``harness list`` for everybody else. The built-in ones are lazy too
(``methods/__init__.py`` and ``tasks/__init__.py`` register ``"module:Class"`` placeholders with what ``harness
list`` shows of each), so a command that looks up no method or task imports none of them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Generic, TypeVar

from harness.core.errors import HarnessError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, entry_point_group: str, builtin_modules: tuple[str, ...] = (),
                 listing_fields: tuple[str, ...] = ()):
        self.kind = kind
        self.group = entry_point_group
        self._builtin_modules = builtin_modules
        self.listing_fields = listing_fields  # the attributes `harness list` shows of an entry
        self._items: dict[str, T] = {}
        self._lazy: dict[str, str] = {}  # name -> "module:attr" (entry points, placeholders)
        self._listing: dict[str, dict[str, Any]] = {}  # name -> its listing facts, known without importing it
        self._lock = threading.RLock()
        self._discovered = False

    # -- registration -------------------------------------------------------------------------------------
    def register(self, name: str, obj: T | None = None, *, replace: bool = False) -> Callable[[T], T] | T:
        """Register ``obj`` under ``name``; used bare as a decorator ``@registry.register("name")``."""

        def deco(o: T) -> T:
            with self._lock:
                if not replace and (name in self._items and self._items[name] is not o):
                    raise HarnessError(f"{self.kind} {name!r} is registered twice ({self._items[name]!r} and {o!r})")
                self._items[name] = o
                self._lazy.pop(name, None)
            return o

        return deco(obj) if obj is not None else deco

    def register_lazy(self, name: str, target: str, listing: dict[str, Any] | None = None) -> None:
        """Register a placeholder ``"module.path:Attr"`` imported on first :meth:`get`; ``listing``: what
        :meth:`listing` gives for it until then (the values of :attr:`listing_fields` on the object)."""
        with self._lock:
            if name not in self._items:
                self._lazy[name] = target
                if listing is not None:
                    self._listing[name] = dict(listing)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._items.pop(name, None)
            self._lazy.pop(name, None)

    # -- discovery ----------------------------------------------------------------------------------------
    def _discover(self) -> None:
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            for mod in self._builtin_modules:
                importlib.import_module(mod)
            for ep in importlib.metadata.entry_points(group=self.group):
                if ep.name not in self._items:
                    self._lazy[ep.name] = ep.value

    def names(self) -> list[str]:
        self._discover()
        return sorted(set(self._items) | set(self._lazy))

    def get(self, name: str) -> T:
        self._discover()
        with self._lock:
            if name in self._items:
                return self._items[name]
            if name in self._lazy:
                target = self._lazy[name]
                mod_name, _, attr = target.partition(":")
                try:
                    obj = importlib.import_module(mod_name)
                    for part in attr.split(".") if attr else []:
                        obj = getattr(obj, part)
                except Exception as exc:  # a broken plugin names itself
                    raise HarnessError(f"{self.kind} {name!r} could not be loaded from {target!r}: {exc}") from exc
                self._items[name] = obj  # type: ignore[assignment]
                self._lazy.pop(name, None)
                return obj  # type: ignore[return-value]
        raise UnknownNameError(self.kind, name, self.names())

    def listing(self, name: str) -> dict[str, Any]:
        """The :attr:`listing_fields` of an entry (those it has): of a placeholder registered with its listing,
        without importing it; otherwise read from the object (imported if need be)."""
        self._discover()
        with self._lock:
            if name in self._lazy and name in self._listing:
                return dict(self._listing[name])
            target = self._lazy.get(name)
        if target is not None:  # what the class declares, read from its source (harness.core.declarations)
            from harness.core.declarations import declared

            facts = declared(target, self.listing_fields)
            if facts:
                return facts
        obj = self.get(name)
        return {f: getattr(obj, f) for f in self.listing_fields if hasattr(obj, f)}

    def declared(self, name: str, fields: tuple[str, ...]) -> dict[str, Any]:
        """``fields`` as the entry's class declares them: read from its source when it is not imported yet and the
        source tells them exactly (:mod:`harness.core.declarations`), else from the object."""
        self._discover()
        with self._lock:
            target = self._lazy.get(name)
        if target is not None:
            from harness.core.declarations import declared

            facts = declared(target, fields)
            if facts:  # else what the source cannot tell exactly: the class itself
                return facts
        obj = self.get(name)
        return {f: getattr(obj, f) for f in fields if hasattr(obj, f)}

    def builtin_target(self, name: str) -> str | None:
        """The ``"module:Class"`` of a built-in entry not imported yet (one of :attr:`_builtin_modules`), else None."""
        self._discover()
        with self._lock:
            target = self._lazy.get(name)
        if target is None or target.partition(":")[0].partition(".")[0] not in self._builtin_modules:
            return None
        return target

    def facts(self, name: str, fields: tuple[str, ...], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
        """``fields`` of an entry as its object has them (``defaults`` for those it lacks). A built-in entry not
        imported yet is read from its source where the source tells them exactly (literal class attributes:
        :func:`harness.core.declarations.exact_declarations`), so planning a run imports no method or task (nor
        torch); any other is imported."""
        defaults = defaults or {}
        target = self.builtin_target(name)
        if target is not None:
            from harness.core.declarations import exact_declarations

            found = exact_declarations(target, fields, defaults)
            if found is not None:
                return found
        obj = self.get(name)
        return {f: getattr(obj, f, defaults.get(f)) for f in fields}

    def entries(self, spec: str | list[str], fields: tuple[str, ...],
                defaults: dict[str, Any] | None = None) -> dict[str, SimpleNamespace]:
        """Every entry ``spec`` names (:meth:`resolve_list`), each asked once: ``{name: its facts}``, its ``fields``
        (:meth:`facts`) and ``target``, its ``"module:Class"`` where it is a built-in not imported yet
        (:meth:`builtin_target`), else None. What planning reads of a run's methods and tasks."""
        return {name: SimpleNamespace(target=self.builtin_target(name), **self.facts(name, fields, defaults))
                for name in self.resolve_list(spec)}

    def check(self, name: str) -> None:
        """Refuse an unknown name (with the known ones); a third-party entry is imported, so that a broken plug-in
        names itself before anything is written; a built-in one is not (its module ships with the harness)."""
        if self.builtin_target(name) is None:
            self.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self.names()

    def resolve_list(self, spec: str | list[str]) -> list[str]:
        """``"all"`` → every name; ``"a,b"`` → checked list (unknown names raise with a suggestion)."""
        items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
        items = [s for s in items if s]
        if items == ["all"]:
            return self.names()
        for s in items:
            self.check(s)
        if not items:
            raise HarnessError(f"no {self.kind} given; choose from {', '.join(self.names())} or 'all'")
        return list(dict.fromkeys(items))


def dim_refusal(name: str, cls: Any, dim: int | None) -> str | None:
    """Why a method cannot initialize at factorized dimension ``dim`` (None: it can; ``dim`` None is the full
    dimension): the one check of a dimension against a method's declared ``supports_factorized``."""
    if dim is None:
        return None
    if int(dim) <= 0:
        return f"dim must be a positive factorized dimension or full, not {dim}"
    if not getattr(cls, "supports_factorized", False):
        return (f"method {name!r} does not support factorized embeddings: it is defined on full-dimension "
                f"embeddings only (spec Appendix B: factorization applies to OFA, HyperOFA and random); use dim full")
    return None


def untied_refusal(name: str, cls: Any, policy: str | None) -> str | None:
    """Why a method cannot initialize a source's untied output table under ``policy`` (None: it can, or there is
    no untied table): ``recompute`` (the method computed on the output table) needs a method that does not declare
    ``serves_untied_output = False``."""
    if policy == "recompute" and not getattr(cls, "serves_untied_output", True):
        return (f"method {name!r} cannot initialize the source's untied output table; give "
                f"[method_params.{name}] untied_output = \"method\" (the input side's rows) or \"zero\", or a "
                f"source with tied embeddings")
    return None


def method_entries(spec: str | list[str], fields: tuple[str, ...], defaults: dict[str, Any] | None = None,
                   dims: tuple[int | None, ...] = ()) -> dict[str, SimpleNamespace]:
    """The methods ``spec`` names with their facts (:meth:`Registry.entries`), each with its refusals too:
    ``dim_refusals``, ``{dim: why}`` for each of ``dims`` it cannot initialize at (:func:`dim_refusal`), and
    ``untied_refusal``, why it cannot initialize an untied output table computed on it (:func:`untied_refusal`
    under ``recompute``; None: it can)."""
    out = METHODS.entries(spec, fields, defaults)
    for name, facts in out.items():
        facts.dim_refusals = {d: why for d in dims if (why := dim_refusal(name, facts, d))}
        facts.untied_refusal = untied_refusal(name, facts, "recompute")
    return out


METHODS: Registry = Registry("method", "harness.methods", builtin_modules=("methods",),
                             listing_fields=("description", "requires", "overlap_rule", "supports_factorized"))
TASKS: Registry = Registry("task", "harness.tasks", builtin_modules=("tasks",),
                           listing_fields=("description", "metrics", "headline"))


def method_code(method: str) -> dict[str, str]:
    """The digest of the registered method ``method``'s code (:func:`harness.core.declarations.code_digest` of its
    module): what its cells ran with."""
    from harness.core.declarations import code_digest

    target = METHODS.builtin_target(method)  # a built-in one not imported yet: its module named, not imported
    return code_digest(target.partition(":")[0] if target is not None else METHODS.get(method).__module__)
