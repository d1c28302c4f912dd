"""The papers' published numbers for the `glot500` setting, as data, for leaderboards to show beside our runs.

Files (``reference/``), transcribed from HyperOFA (seed 000; cross-checked cell by cell against spec
``methods.md`` section 4, which transcribes the same tables):

* ``hyperofa_per_language.csv``: Tables 8-15 (App. D): per-language SR-B / SR-T top-10 accuracy and NER / POS F1
  of Random, OFA and HyperOFA at checkpoint 0 (before CPT) and 4000 (after), for mono-100 (roberta-base, D'=100)
  and multi-400 (xlm-roberta-base, D'=400); an empty value is a "-" in the paper. Language codes are as printed
  (``jpn_Japn``); the API returns them normalized (``jpn_Jpan``).
* ``hyperofa_averages.csv``: Table 3 (all languages, before CPT; the OFA rows are copied from the OFA paper) and
  Table 4 (CPT languages, before/after). Rows with ``doc = 001`` are the report version's differing cells.
  Numbers are kept exactly as printed; known defects are flagged in the ``note`` column (``FLAG: ...``).

Values are percentages as printed; ``as_fraction=True`` divides by 100 to match the harness's metrics (acc@10 and
f1 are fractions). :data:`REFERENCE_METRIC` names the harness metric each task's numbers correspond to.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from harness.core.errors import ConfigError
from harness.worlds.glot500.langcodes import normalize

REFERENCE_DIR = Path(__file__).with_name("reference")
TASKS = ("sr-b", "sr-t", "ner", "pos")
METHODS = ("random", "ofa", "hyperofa")
REFERENCE_METRIC = {"sr-b": "acc@10", "sr-t": "acc@10", "ner": "f1", "pos": "f1"}
SOURCE_OF_SETTING = {"mono": "roberta-base", "multi": "xlm-roberta-base"}


@dataclass(frozen=True)
class ReferenceCell:
    table: int
    task: str
    model_setting: str  # mono-100 ... multi-400
    method: str
    step: int  # 0 = before CPT, 4000 = after
    value: float | None
    lang: str | None = None  # None for averages
    doc: str = "000"
    note: str = ""

    @property
    def flagged(self) -> bool:
        return "FLAG" in self.note


def model_setting(source: str, dim: int | str | None) -> str | None:
    """The papers' model name for a source model and factorized dimension: (roberta-base, 100) -> ``mono-100``,
    (xlm-roberta-base, "400") -> ``multi-400``; None when the papers publish nothing for that pair."""
    try:
        d = int(dim) if dim is not None else None
    except (TypeError, ValueError):
        return None
    if d not in (100, 200, 400):
        return None
    for kind, src in SOURCE_OF_SETTING.items():
        if source == src or source.endswith("/" + src):
            return f"{kind}-{d}"
    return None


def _float(s: str) -> float | None:
    return float(s) if s.strip() else None


@lru_cache(maxsize=1)
def per_language_cells() -> tuple[ReferenceCell, ...]:
    with open(REFERENCE_DIR / "hyperofa_per_language.csv", encoding="utf-8") as f:
        return tuple(ReferenceCell(int(r["table"]), r["task"], r["model_setting"], r["method"], int(r["step"]),
                                   _float(r["value"]), r["lang"]) for r in csv.DictReader(f))


@lru_cache(maxsize=1)
def average_cells() -> tuple[ReferenceCell, ...]:
    with open(REFERENCE_DIR / "hyperofa_averages.csv", encoding="utf-8") as f:
        return tuple(ReferenceCell(int(r["table"]), r["task"], r["model_setting"], r["method"], int(r["step"]),
                                   _float(r["value"]), None, r["doc"], r["note"]) for r in csv.DictReader(f))


def _check(task: str, setting: str) -> None:
    if task not in TASKS:
        raise ConfigError(f"no published numbers for task {task!r}; tasks: {', '.join(TASKS)}")
    kind, _, dim = setting.partition("-")
    if kind not in SOURCE_OF_SETTING or dim not in ("100", "200", "400"):
        raise ConfigError(f"model setting {setting!r}: use mono-100 ... multi-400 (see model_setting())")


def reference_scores(task: str, model_setting: str, *, step: int = 0,
                     as_fraction: bool = False) -> dict[str, dict[str, float]]:
    """Per-language published scores: ``{method: {lang: value}}`` (languages with a value only).

    Only mono-100 and multi-400 have per-language tables (HyperOFA App. D); ``step`` is 0 (before CPT) or 4000.
    """
    _check(task, model_setting)
    out: dict[str, dict[str, float]] = {}
    for c in per_language_cells():
        if c.task == task and c.model_setting == model_setting and c.step == step and c.value is not None:
            assert c.lang is not None
            out.setdefault(c.method, {})[normalize(c.lang)] = c.value / 100 if as_fraction else c.value
    if not out:
        raise ConfigError(f"no per-language numbers for {task} / {model_setting} at step {step}: the papers "
                          f"report them for mono-100 and multi-400 at steps 0 and 4000 only")
    return out


def reference_averages(task: str, model_setting: str, *, step: int = 0, table: int | None = None,
                       doc: str = "000", as_fraction: bool = False) -> dict[str, float]:
    """Published macro averages ``{method: value}``: Table 3 (all languages, step 0) or Table 4 (the CPT
    languages, steps 0 and 4000). By default Table 4 when it has the setting and step, else Table 3."""
    _check(task, model_setting)
    cells = [c for c in average_cells() if c.task == task and c.model_setting == model_setting and c.step == step]
    tables = sorted({c.table for c in cells}, reverse=True)
    chosen = table if table is not None else (tables[0] if tables else None)
    out = {c.method: (c.value / 100 if as_fraction else c.value) for c in cells
           if c.table == chosen and c.value is not None and c.doc == "000"}
    if doc != "000":
        out.update({c.method: (c.value / 100 if as_fraction else c.value) for c in cells
                    if c.table == chosen and c.value is not None and c.doc == doc})
    if not out:
        raise ConfigError(f"no published average for {task} / {model_setting} at step {step}"
                          + (f" in Table {table}" if table else ""))
    return out


def flagged_cells() -> list[ReferenceCell]:
    """Cells whose printed value is known to be inconsistent (kept as printed)."""
    return [c for c in average_cells() if c.flagged]
