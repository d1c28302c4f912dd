"""Seed aggregates: per-language mean, standard deviation (ddof=1) and count across the seeds of a variant, one
aggregate run per (variant, task), metrics ``{task}/{metric}/{lang}/mean``, ``.../std`` and ``.../n`` at every
evaluated step. Read from and written to the run record (:mod:`harness.core.record`)."""

from __future__ import annotations

import statistics
from typing import Any

from harness.core.hashing import hash_obj
from harness.core.record import RunRecord


def seed_groups(cells: list[Any]) -> dict[tuple[str, str, int | None], list[Any]]:
    groups: dict[tuple[str, str, int | None], list[Any]] = {}
    for c in cells:
        groups.setdefault((c.source, c.method, c.dim), []).append(c)
    return groups


def group_key(spec: Any, source: str, method: str, dim: int | None, cells: list[Any]) -> str:
    """The identity of a variant's seed aggregate: the hash of its cells' own keys (:func:`harness.spec.cell_identity`:
    the world, the source and its own identity, the method and its parameters, the profile, the CPT product, the
    initialization's version, the seeds and the numerics), so an aggregate is found again exactly while every cell
    it counts is, and a change that moves a cell's key moves its group too; settings that move no cell (the CPT
    devices, the batch search) move no group. The variant (``source``, ``method``, ``dim``) is named in it as well
    (the cells' keys hold it already). An aggregate run logged under an earlier group (before the group was its
    cells' keys) is left as it was: the aggregate is logged again under this one (the leaderboard reads the cells'
    task runs, never these)."""
    return hash_obj({"seed_aggregate": {"source": source, "method": method, "dim": dim},
                     "cells": sorted(spec.keys(c).key for c in cells)})


def aggregate_seeds(spec: Any, tracker: Any, groups: dict[tuple[str, str, int | None], list[Any]] | None = None) -> None:
    """Every variant of the run ``spec``'s plan with at least two seeds (``groups``: its cells' :func:`seed_groups`,
    where the caller has them)."""
    record = RunRecord(tracker)
    for (source, method, dim), cells in (groups if groups is not None else seed_groups(spec.plan.cells)).items():
        if len(cells) < 2:
            continue
        exp = tracker.experiment(spec.experiment(source))
        dim_s = "full" if dim is None else str(dim)
        group = group_key(spec, source, method, dim, cells)
        for task in spec.plan.tasks:
            if record.aggregated(exp, group, task, spec.cpt.task_steps(), len(cells)):
                continue  # logged by an earlier command from the same cells: nothing to read again
            values: dict[tuple[str, int], list[float]] = {}
            for cell in cells:
                logged = record.task_values(exp, spec.keys(cell).key, task)
                for key, value in logged.items():
                    values.setdefault(key, []).append(value)
            if not values:
                continue
            by_step: dict[int, dict[str, float]] = {}
            for (mkey, step), vals in values.items():
                if len(vals) < 2:
                    continue
                by_step.setdefault(step, {})[f"{mkey}/mean"] = statistics.fmean(vals)
                by_step[step][f"{mkey}/std"] = statistics.stdev(vals)
                by_step[step][f"{mkey}/n"] = float(len(vals))
            record.log_aggregate(exp, group, task, f"{method}-{dim_s}-seeds-{task}",
                                 {"method": method, "source": source, "dim": dim_s, "task": task,
                                  "profile": spec.profile, "world": spec.world,
                                  "seeds": ",".join(str(c.seed) for c in cells)}, by_step, len(cells))
