"""Slices of a board by language metadata: script, seen/unseen by the row's source model, resource level, and
the source of the task's labels (gold or silver). The step-0 -> final delta is a board of its own
(:mod:`leaderboard.tables`, kind ``delta``) and is sliced the same way.

A slice's value for a row is the mean over the slice's languages, only when the row has all of them (the
board's MTEB rule, applied inside the slice). Language metadata come from the ``languages.json`` artifact of the
parent runs (``seen`` is per source model) and the label sources from the task runs' tables artifacts; a
language without a script in its metadata takes the script of its ``iso3_Scrp`` code.
"""

from __future__ import annotations

import statistics
from typing import Any

from leaderboard.collect import ExperimentData
from leaderboard.model import Board, Row, SliceColumn

DIMENSIONS = ("script", "seen", "resource level", "label source")


def language_table(data: ExperimentData) -> dict[str, dict[str, Any]]:
    """lang -> {script, seen: {source: bool}, resource_level, text_chars, label_source: {task: gold|silver}}."""
    out: dict[str, dict[str, Any]] = {}
    for cell in data.cells.values():
        for lang, meta in (cell.languages or {}).items():
            d = out.setdefault(lang, {"seen": {}, "label_source": {}})
            for k in ("script", "resource_level", "text_chars"):
                if meta.get(k) is not None:
                    d.setdefault(k, meta[k])
            if meta.get("seen") is not None:
                d["seen"][cell.source] = bool(meta["seen"])
    for run in data.tasks:
        for lang, src in run.label_source.items():
            d = out.setdefault(lang, {"seen": {}, "label_source": {}})
            prev = d["label_source"].get(run.task)
            d["label_source"][run.task] = src if prev in (None, src) else "mixed"
        for per in run.scores.values():
            for langs in per.values():
                for lang in langs:
                    out.setdefault(lang, {"seen": {}, "label_source": {}})
    for lang, d in out.items():
        if not d.get("script") and "_" in lang:
            d["script"] = lang.rsplit("_", 1)[1]
    return dict(sorted(out.items()))


def group_of(dimension: str, lang: str, meta: dict[str, Any], source: str, task: str) -> str | None:
    """The slice a language falls into along a dimension (None when its metadata do not say)."""
    if dimension == "script":
        return meta.get("script")
    if dimension == "seen":
        seen = (meta.get("seen") or {}).get(source)
        return None if seen is None else ("seen" if seen else "unseen")
    if dimension == "resource level":
        return meta.get("resource_level")
    if dimension == "label source":
        return (meta.get("label_source") or {}).get(task)
    raise ValueError(dimension)


def _row_source(row: Row, board: Board) -> str:
    if row.variant is not None:
        return row.variant.source
    srcs = sorted({r.variant.source for r in board.rows if r.variant is not None})
    return srcs[0] if srcs else "?"


def slice_board(board: Board, data: ExperimentData, langs: dict[str, dict[str, Any]] | None = None) -> None:
    """Fill ``board.slices``: one column per (dimension, value) with each row's average over those languages."""
    langs = langs if langs is not None else language_table(data)
    board.slices = []
    rows = board.rows + board.paper_rows
    for dim in DIMENSIONS:
        members: dict[str, dict[str, list[str]]] = {}  # value -> row label -> languages
        for row in rows:
            src = _row_source(row, board)
            for lang in board.languages:
                g = group_of(dim, lang, langs.get(lang, {}), src, board.task)
                if g is not None:
                    members.setdefault(g, {}).setdefault(row.label, []).append(lang)
        for value in sorted(members):
            per_row = {r.label: members[value].get(r.label, []) for r in rows}
            avgs: dict[str, float | None] = {}
            for r in rows:
                ls = per_row[r.label]
                vals = r.values()
                avgs[r.label] = statistics.fmean(vals[lang] for lang in ls) if ls and all(
                    lang in vals for lang in ls) else None
            board.slices.append(SliceColumn(dim, value, per_row, avgs))
