"""Seed aggregates: per-language mean, standard deviation (ddof=1) and count across the seeds of a variant, one
aggregate run per (variant, task), metrics ``{task}/{metric}/{lang}/mean``, ``.../std`` and ``.../n`` at every
evaluated step. Read from and written to the run record (:mod:`harness.core.record`)."""

from __future__ import annotations

import statistics
from typing import Any

from harness.core.hashing import hash_obj
from harness.core.record import RunRecord
from harness.finished import task_steps


def seed_groups(cells: list[Any]) -> dict[tuple[str, str, int | None], list[Any]]:
    groups: dict[tuple[str, str, int | None], list[Any]] = {}
    for c in cells:
        groups.setdefault((c.source, c.method, c.dim), []).append(c)
    return groups


def group_key(runner: Any, source: str, method: str, dim: int | None, cells: list[Any]) -> str:
    """The identity of a variant's seed aggregate: its variant, world, profile, CPT settings, parameters, seeds."""
    return hash_obj({"source": source, "method": method, "dim": dim, "world": runner.world.hash,
                     "profile": runner.cfg.profile, "cpt": runner.cpt, "params": runner.method_params(method),
                     "seeds": sorted(c.seed for c in cells)})


def aggregate_seeds(runner: Any) -> None:
    """Every variant of ``runner``'s plan with at least two seeds."""
    record = RunRecord(runner.tracker)
    for (source, method, dim), cells in seed_groups(runner.plan.cells).items():
        if len(cells) < 2:
            continue
        exp = runner.tracker.experiment(runner.experiment_name(source))
        dim_s = "full" if dim is None else str(dim)
        group = group_key(runner, source, method, dim, cells)
        for task in runner.plan.tasks:
            if record.aggregated(exp, group, task, task_steps(runner.cpt), len(cells)):
                continue  # logged by an earlier command from the same cells: nothing to read again
            values: dict[tuple[str, int], list[float]] = {}
            for cell in cells:
                logged = record.task_values(exp, hash_obj(runner.cell_identity(cell)), task)
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
                                  "profile": runner.cfg.profile, "world": runner.world.name,
                                  "seeds": ",".join(str(c.seed) for c in cells)}, by_step, len(cells))
