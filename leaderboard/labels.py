"""The labels of a leaderboard's rows: each run's variant key (method, dim, source, parameters, CPT settings,
numerics) and the label a board prints for it, with the qualifiers (``cpt=``, ``eval=``, ``kernels=``,
``cpt.<setting>=``) that tell apart rows of one method computed otherwise. Shared by every board's labels: the
leaderboard (:mod:`leaderboard.tables`), the results table of ``harness run``, ``harness compare`` and the overview's
summary (:mod:`leaderboard.summary`).
"""

from __future__ import annotations

import json
from typing import Any

from harness.core.kernels import NATIVE as NATIVE_KERNELS
from harness.core.kernels import PINNED as PINNED_KERNELS
from harness.core.precision import DEFAULT_EVAL_PRECISION
from leaderboard.collect import CellRecord, TaskRun
from leaderboard.model import VariantKey


def _canon(d: dict[str, str]) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


# DEFAULT_EVAL_PRECISION, PINNED_KERNELS: a row of another evaluation precision, or computed with other CPU kernels
# than the pinned ones, is a variant of its own, and says so


def cell_kernels(cell: CellRecord | None) -> str:
    """The CPU kernels a cell computed with, as its identity counts them: ``avx2`` (pinned) or ``native`` (each
    library's own, which every cell logged before the pin computed with)."""
    logged = cell.params.get("cpu_kernels") if cell is not None else None
    return (logged or NATIVE_KERNELS).split(" ")[0]


def _variant(run: TaskRun | CellRecord, parent: CellRecord | None, per_seed: bool) -> VariantKey:
    params = _canon(parent.method_params) if parent else "{}"
    cpt = _canon(parent.cpt_params) if parent else "{}"
    evaluation = parent.params.get("eval_precision") if parent else None
    numerics = {**({"eval_precision": evaluation} if evaluation not in (None, DEFAULT_EVAL_PRECISION) else {}),
                **({"cpu_kernels": k} if parent and (k := cell_kernels(parent)) != PINNED_KERNELS else {})}
    protocol = _canon(numerics) if numerics else "{}"
    return VariantKey(run.method, run.dim, run.source, params, cpt, run.seed if per_seed else None, protocol)


def variant_labels(keys: list[VariantKey], defaults: dict[str, dict[str, str]] | None = None, *,
                   cpt_defaults: dict[str, Any] | None = None) -> dict[VariantKey, str]:
    """``method d=dim`` (+ ``src=`` when sources differ, + the parameters that tell apart two variants of one method,
    + the qualifiers that tell apart rows of different CPT budgets, precisions, CPU kernels or CPT settings
    (:func:`row_qualifiers`), + ``s=seed`` for per-seed rows). ``defaults``: method -> its declared parameter
    defaults, as its cell runs were tagged with them; ``cpt_defaults``: the CPT settings a run that did not log one
    ran with (the profile's)."""
    sources = {k.source for k in keys}
    quals = row_qualifiers(keys, cpt_defaults)
    out = {}
    for k in keys:
        label = f"{k.method} d={k.dim}"
        if len(sources) > 1:
            label += f" src={k.source}"
        same = [o for o in keys if (o.method, o.dim, o.source) == (k.method, k.dim, k.source)]
        if len({o.params for o in same}) > 1:
            label += f" ({_distinguishing_params(k, same, (defaults or {}).get(k.method, {}))})"
        label += "".join(f" {q}" for q in quals[k])
        if k.seed is not None:
            label += f" s={k.seed}"
        out[k] = label
    return out


# the CPT settings a run logged before they existed ran with (harness.corpus's defaults)
LATER_CPT_DEFAULTS = {"language_sampling": "shuffled", "sampling_alpha": "0.3"}


def qualifier_values(k: VariantKey, cpt_defaults: dict[str, Any] | None = None) -> dict[str, str]:
    """What a row was computed with beyond its method, as qualifiers name it: ``cpt`` (the CPT budget in steps),
    ``cpt.<setting>`` (every other CPT setting), ``eval`` (the evaluation precision), ``kernels`` (the CPU
    kernels). A setting the row's runs did not log takes its default (``cpt_defaults``, the profile's), never
    ``-``."""
    filled = {**LATER_CPT_DEFAULTS, **{a: str(v) for a, v in (cpt_defaults or {}).items()}}
    cpt = json.loads(k.cpt or "{}")
    protocol = json.loads(k.protocol or "{}")
    out = {f"cpt.{a}" if a != "steps" else "cpt": str(cpt.get(a, filled.get(a, "default")))
           for a in {*cpt, *filled} if a in cpt or a in filled}
    out["eval"] = str(protocol.get("eval_precision", DEFAULT_EVAL_PRECISION))
    out["kernels"] = str(protocol.get("cpu_kernels", PINNED_KERNELS))
    return out


def _qualifier_order(name: str) -> tuple[int, str]:
    """The order qualifiers are chosen in (the ones that move numbers most first): the CPT budget, the evaluation
    precision, CPT's precision, the CPU kernels, then every other CPT setting."""
    first = {"cpt": 0, "eval": 1, "cpt.precision": 2, "kernels": 3}
    return first.get(name, 4), name


def _qualifier_shown(name: str) -> tuple[int, str]:
    """The order qualifiers are printed in: ``cpt=``, ``cpt.<setting>=``, ``eval=``, ``kernels=``."""
    return {"cpt": 0, "eval": 2, "kernels": 3}.get(name, 1), name


def row_qualifiers(keys: list[VariantKey], cpt_defaults: dict[str, Any] | None = None) -> dict[VariantKey, list[str]]:
    """For each row of a board (or of every board of a profile), the qualifiers that tell it apart from the rows
    of the same method computed otherwise (``cpt=2``, ``eval=bf16``, ``cpt.precision=fp32``,
    ``kernels=native``), and only those: a qualifier is chosen, in :func:`_qualifier_order`, when it splits rows
    that the ones chosen before it do not; every row then carries every chosen qualifier (its default spelled out),
    so that a method with one variant is labelled as the other methods' rows it is comparable with. No qualifier
    when every row was computed alike. The shared helper of every board's labels (the leaderboard, the results
    table of ``harness run``, ``harness compare``)."""
    values = {k: qualifier_values(k, cpt_defaults) for k in keys}
    names = sorted({n for v in values.values() for n in v}, key=_qualifier_order)
    groups: dict[tuple, list[VariantKey]] = {}
    for k in keys:
        groups.setdefault((k.method, k.dim, k.source, k.params, k.seed), []).append(k)
    parts = list(groups.values())
    chosen: list[str] = []
    for name in names:
        if any(len({values[k].get(name) for k in part}) > 1 for part in parts):
            chosen.append(name)
            parts = [list(sub) for part in parts for sub in _split(part, lambda k, n=name: values[k].get(n))]
    chosen.sort(key=_qualifier_shown)
    return {k: [f"{n}={values[k].get(n, 'default')}" for n in chosen] for k in keys}


def _split(part: list[VariantKey], value: Any) -> list[list[VariantKey]]:
    out: dict[Any, list[VariantKey]] = {}
    for k in part:
        out.setdefault(value(k), []).append(k)
    return list(out.values())


def _distinguishing_params(k: VariantKey, same: list[VariantKey], defaults: dict[str, str]) -> str:
    """The parameters whose values differ between the variants of one method (a parameter a run did not log counts
    as the method's default), e.g. ``overlap=casefold, specials=role``; ``defaults`` for a row that sets none of
    them away from the default; every parameter when the differences cannot be told apart that way. Runs logged
    before their cells were tagged with the method's defaults (``defaults`` empty) name every parameter that
    differs."""
    filled = {o: {**defaults, **json.loads(o.params)} for o in same}
    keys = sorted({a for f in filled.values() for a in f})
    differ = [a for a in keys if len({f.get(a) for f in filled.values()}) > 1]
    mine = filled[k]
    if differ and len({tuple(f.get(a) for a in differ) for f in filled.values()}) == len(filled):
        shown = [a for a in differ if a not in defaults or mine.get(a) != defaults[a]]
        return ", ".join(f"{a}={mine.get(a, 'default')}" for a in shown) or "defaults"
    return ", ".join(f"{a}={b}" for a, b in json.loads(k.params).items()) or "defaults"
