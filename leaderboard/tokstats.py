"""The tokenizer statistics on the board's report: per source model and language, what the source and the target
tokenizers make of the language's held-out text (fertility: tokens a word; bytes a token; the UNK rate), and per
method, the share of the language's target-token occurrences whose rows were copied from the source, computed by the
method, drawn at random, or unknown.

Read from each cell's init report (``tokenizer_stats``, written by :mod:`harness.tokstats`); a cell logged before
the statistics existed adds nothing. The tokenizers' figures are the same for every cell of a source (one tokenizer
pair); the shares are a method's, averaged over its cells (seeds) where they differ.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

TOKENIZER_FIELDS = (("fertility", "fertility"), ("bytes_per_token", "bytes/token"), ("unk_rate", "UNK rate"))
SHARES = ("copied", "method", "random", "unk")


@dataclass
class SourceTokStats:
    """One source model's tokenizer statistics: ``languages`` lang -> {"source": {...}, "target": {...}} (the
    :data:`TOKENIZER_FIELDS`); ``shares`` method -> lang -> {copied, method, random, unk} (occurrence shares)."""

    source: str
    languages: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    shares: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "languages": self.languages, "shares": self.shares}


def tokenizer_stats(cells: list[Any]) -> list[SourceTokStats]:
    """The statistics of every source of ``cells`` (cell runs whose init report holds ``tokenizer_stats``)."""
    per_source: dict[str, SourceTokStats] = {}
    shares: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for cell in cells:
        report = cell.init_report if isinstance(cell.init_report, dict) else {}
        stats = report.get("tokenizer_stats")
        if not isinstance(stats, dict):
            continue
        out = per_source.setdefault(cell.source, SourceTokStats(cell.source))
        for lang, both in stats.items():
            if not isinstance(both, dict):
                continue
            entry = out.languages.setdefault(lang, {})
            for side in ("source", "target"):
                got = both.get(side) or {}
                entry.setdefault(side, {k: float(got[k]) for k, _ in TOKENIZER_FIELDS if k in got})
            target = both.get("target") or {}
            acc = shares.setdefault((cell.source, cell.method, lang), {})
            for k in SHARES:
                if k in target:
                    acc.setdefault(k, []).append(float(target[k]))
    for (source, method, lang), acc in shares.items():
        per_source[source].shares.setdefault(method, {})[lang] = {k: statistics.fmean(v) for k, v in acc.items()}
    return [per_source[s] for s in sorted(per_source)]


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def language_rows(stats: SourceTokStats) -> tuple[list[str], list[list[str]]]:
    """Header and rows (one per language) of a source's tokenizer table: each figure for source -> target."""
    head = ["language"] + [f"{name} (source → target)" for _, name in TOKENIZER_FIELDS]
    rows = []
    for lang, both in sorted(stats.languages.items()):
        src, tgt = both.get("source", {}), both.get("target", {})
        digits = {"unk_rate": 3}
        rows.append([lang] + [f"{_num(src.get(k), digits.get(k, 2))} → {_num(tgt.get(k), digits.get(k, 2))}"
                              for k, _ in TOKENIZER_FIELDS])
    return head, rows


def share_rows(stats: SourceTokStats) -> tuple[list[str], list[list[str]]]:
    """Header and rows (one per method) of the shares of target-token occurrences, averaged over languages."""
    head = ["method", *(f"{k} %" for k in SHARES), "languages"]
    rows = []
    for method, langs in sorted(stats.shares.items()):
        avg = {k: statistics.fmean(v[k] for v in langs.values() if k in v) if any(k in v for v in langs.values())
               else None for k in SHARES}
        rows.append([method, *(_num(None if avg[k] is None else 100 * avg[k], 1) for k in SHARES), str(len(langs))])
    return head, rows
