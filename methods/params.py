"""A method's parameters, declared once: name, type, default, range or choices, and what it does.

A method lists its parameters as :class:`Param` entries (``params`` on :class:`methods.base.Method`); from that one
list come the checks of ``ctx.params`` (unknown names, ranges, choices, :func:`resolve`), the method's ``defaults``
(logged with every run as ``method.<name>`` MLflow params), and the parameter table of ``harness list``
(:func:`describe`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.core.errors import ConfigError


@dataclass(frozen=True)
class Param:
    """One parameter. ``type`` is a label for people ("int", "float", "bool", "str", "list", "dict", "path",
    "any"); the checks are the bounds and choices:

    ``low`` / ``high``   inclusive bounds of a number (compared as ``float(value)``)
    ``above``            exclusive lower bound (``temperature > 0``)
    ``choices``          the allowed values
    ``check``            any other condition, a function of the value; ``expect`` says what it wants

    ``None`` passes every check when the default is ``None`` ("unset": the method picks), or when ``nullable``.
    """

    name: str
    default: Any
    doc: str = ""
    type: str = "any"
    low: float | None = None
    high: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any], bool] | None = None
    expect: str = ""
    nullable: bool = False

    def allows_none(self) -> bool:
        return self.nullable or self.default is None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed (a phrase such as "must be >= 1, not 0"), or None when it is."""
        if value is None and self.allows_none():
            return None
        if self.choices is not None and value not in self.choices:
            return f"must be one of {list(self.choices)}, not {value!r}"
        if self.low is not None or self.high is not None or self.above is not None:
            try:
                x = float(value)
            except (TypeError, ValueError):
                return f"must be a number, not {value!r}"
            if self.low is not None and x < self.low:
                return f"must be >= {_num(self.low)}, not {value!r}"
            if self.high is not None and x > self.high:
                return f"must be <= {_num(self.high)}, not {value!r}"
            if self.above is not None and x <= self.above:
                return f"must be > {_num(self.above)}, not {value!r}"
        if self.check is not None:
            try:
                ok = bool(self.check(value))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                return f"must be {self.expect or 'valid'}, not {value!r}"
        return None

    def range_text(self) -> str:
        """The allowed values in a few words (for ``harness list``)."""
        parts = []
        if self.choices is not None:
            parts.append(" | ".join(repr(c) if isinstance(c, str) else str(c) for c in self.choices))
        if self.low is not None:
            parts.append(f">= {_num(self.low)}")
        if self.above is not None:
            parts.append(f"> {_num(self.above)}")
        if self.high is not None:
            parts.append(f"<= {_num(self.high)}")
        if self.expect:
            parts.append(self.expect)
        if self.allows_none() and self.default is not None:
            parts.append("or null")
        return ", ".join(parts)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def defaults_of(params: Iterable[Param]) -> dict[str, Any]:
    return {p.name: p.default for p in params}


def resolve(method: str, params: Iterable[Param], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The declared defaults overridden by ``given``, checked: an unknown name or a value out of range raises a
    :class:`ConfigError` naming the method and the parameter."""
    declared = list(params)
    defaults = defaults_of(declared)
    given = dict(given or {})
    unknown = set(given) - set(defaults)
    if unknown:
        if not defaults:
            raise ConfigError(f"method {method!r} takes no parameters, got {sorted(given)}")
        raise ConfigError(f"method {method!r} has no parameter(s) {sorted(unknown)}; it takes {sorted(defaults)}")
    values = {**defaults, **given}
    for p in declared:
        why = p.problem(values[p.name])
        if why is not None:
            raise ConfigError(f"{method}: {p.name} {why}")
    return values


def describe(params: Iterable[Param]) -> list[dict[str, str]]:
    """One row per parameter for a listing: name, type, default, allowed values, doc."""
    return [{"name": p.name, "type": p.type, "default": repr(p.default), "range": p.range_text(), "doc": p.doc}
            for p in params]


# -- the fastText parameters of FOCUS, WECHSEL and Tik-to-Tok (each with its paper's defaults) ----------------------
def fasttext_params(*, dim: int, epochs: int, min_count: int, model: str, minn: int, maxn: int,
                    neg: int | None = None, bucket: int = 2_000_000, lr: float = 0.05) -> tuple[Param, ...]:
    """The declared fastText parameters with a method's defaults (``neg=None``: the method does not set it, fastText's
    default applies); :func:`fasttext_settings` turns their values into the training settings."""
    out = [Param("dim", dim, "fastText dimension", "int", low=1),
           Param("epochs", epochs, "fastText epochs", "int", low=1),
           Param("min_count", min_count, "fastText minCount", "int", low=1),
           Param("model", model, "fastText model", "str", choices=("cbow", "skipgram"))]
    if neg is not None:
        out.append(Param("neg", neg, "fastText negative samples", "int"))
    out += [Param("minn", minn, "fastText shortest character n-gram", "int"),
            Param("maxn", maxn, "fastText longest character n-gram", "int"),
            Param("bucket", bucket, "fastText n-gram buckets", "int"),
            Param("lr", lr, "fastText learning rate", "float"),
            Param("fasttext_seed", 0, "fastText seed (null: the run's seed)", "int"),
            Param("threads", 1, "fastText threads (time only, never the vectors)", "int", low=1)]
    return tuple(out)


def fasttext_settings(p: Mapping[str, Any], seed: int | None = None, dim: int | None = None) -> dict[str, Any]:
    """fastText's training settings from the values of :func:`fasttext_params` (part of the models' cache keys):
    ``seed`` is used when ``fasttext_seed`` is null, ``dim`` overrides ``p["dim"]``."""
    s: dict[str, Any] = {"model": p["model"], "dim": int(p["dim"] if dim is None else dim), "epoch": int(p["epochs"]),
                         "minCount": int(p["min_count"])}
    if "neg" in p:
        s["neg"] = int(p["neg"])
    s.update(minn=int(p["minn"]), maxn=int(p["maxn"]), bucket=int(p["bucket"]), lr=float(p["lr"]),
             seed=int(seed if p["fasttext_seed"] is None else p["fasttext_seed"]), thread=int(p["threads"]))
    return s
