"""Read the runner's runs back from MLflow (never re-compute a task), through the run record
(:mod:`harness.core.record`: what each run holds, its tags and artifacts, and the readers of cell and task runs).

Per experiment: every cell run (identity, params, ``init/*`` metrics, the CPT curves, the languages and the init
report) and every task run (the task's facts, per-language scores per CPT step, label sources, and, lazily, the
per-item statistics the bootstrap resamples).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from harness.core.record import (
    Kind,
    kind_filter,
    list_artifact_paths,
    own_tags,
    read_items,
    read_json_artifact,
)
from harness.core.record_read import (
    CellRecord,
    TaskFacts,
    TaskRun,
    metric_names,
    read_cell_run,
    read_task_run,
    search_runs,
    untagged_task_facts,
)

log = logging.getLogger(__name__)


REFERENCE_ARTIFACTS = "references"  # a reference run's ``references/<role>_<lang>.json`` (harness.transplant)


@dataclass
class ReferenceRun:
    """A derived world's bits-per-byte references for one source, task and task settings: ``docs[role][lang]`` is
    what its model scored (``scores``, per-sentence ``items``, ``hyperparameters``)."""

    world: str
    source: str
    task: str
    profile: str
    precision: str
    docs: dict[str, dict[str, dict[str, Any]]]


def read_references(client: Any, experiment_id: str, world: str | None = None) -> list[ReferenceRun]:
    """Every reference run of an experiment (of one world), with its artifacts."""
    out = []
    for run in search_runs(client, experiment_id, kind_filter(Kind.REFERENCE, **({"world": world} if world else {}))):
        tags = own_tags(run)
        docs: dict[str, dict[str, dict[str, Any]]] = {}
        for path in list_artifact_paths(client, run.info.run_id, REFERENCE_ARTIFACTS, run.info.artifact_uri):
            doc = read_json_artifact(client, run.info.run_id, path, run.info.artifact_uri)
            if isinstance(doc, dict) and doc.get("role") and doc.get("lang") and doc.get("scores"):
                docs.setdefault(str(doc["role"]), {})[str(doc["lang"])] = doc
        if docs and tags.get("world") and tags.get("source") and tags.get("task"):
            out.append(ReferenceRun(tags["world"], tags["source"], tags["task"], tags.get("profile", "?"),
                                    tags.get("precision", ""), docs))
    return out


@dataclass
class ExperimentData:
    name: str
    experiment_id: str
    cells: dict[str, CellRecord]
    tasks: list[TaskRun]
    client: Any = None
    references: list[ReferenceRun] = field(default_factory=list)  # a derived world's bpb references
    _items: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    _tmp: Any = None

    def task_info(self, task: str) -> TaskFacts:
        """The task's headline metric, direction and metrics as its runs were tagged (the last tagged run's, the
        newest account), else :func:`untagged_task_facts`."""
        tagged = [r.tagged_facts for r in self.tasks if r.task == task and r.tagged_facts is not None]
        return tagged[-1] if tagged else untagged_task_facts(task)

    def parent(self, run: TaskRun) -> CellRecord | None:
        return self.cells.get(run.parent_id or "")

    def final_step(self, run: TaskRun) -> int | None:
        """The run's final step: the last step its tasks were evaluated at, from its parent's
        ``harness.task_final_step`` tag, else ``harness.final_step`` (the final CPT step; None while the cell is
        unfinished)."""
        p = self.parent(run)
        if p is not None:
            return p.task_final_step if p.task_final_step is not None else p.final_step
        return max(run.scores) if run.scores else None  # orphaned task run: its last evaluated step

    def items(self, run: TaskRun, step: int) -> dict[str, Any]:
        """``{metric: {lang: {num, den, transform}}}`` of a task run at a step ({} when it has none)."""
        key = (run.run_id, step)
        if key not in self._items:
            data: dict[str, Any] = {}
            if step in run.item_steps and self.client is not None:
                raw = read_items(self.client, run.run_id, run.task, step, run.artifact_uri)
                names = metric_names(run.facts)
                data = {names.get(m, m): v for m, v in (raw or {}).items()}
            self._items[key] = data
        return self._items[key]


def experiments(client: Any, name: str | None = None) -> list[Any]:
    """The active experiments (``name``: only that one); a name that does not exist gives []."""
    if name:
        exp = client.get_experiment_by_name(name)
        return [exp] if exp is not None and exp.lifecycle_stage == "active" else []
    return sorted(client.search_experiments(), key=lambda e: e.name)


def collect_experiment(client: Any, exp: Any, *, world: str | None = None, task: str | None = None,
                       progress: Any = None) -> ExperimentData:
    """Every cell and task run of one experiment (optionally of one world / one task)."""
    where = {k: v for k, v in (("task", task), ("world", world)) if v}
    task_runs = search_runs(client, exp.experiment_id, kind_filter(Kind.TASK, **where))
    cell_flt = kind_filter(Kind.CELL, **({"world": world} if world else {}))
    cell_runs = search_runs(client, exp.experiment_id, cell_flt) if task_runs else []
    bar = progress.add_task(f"reading {exp.name}", total=len(task_runs) + len(cell_runs)) if progress else None
    cells: dict[str, CellRecord] = {}
    for r in cell_runs:
        cells[r.info.run_id] = read_cell_run(client, r)
        if progress:
            progress.advance(bar)
    tasks: list[TaskRun] = []
    for r in task_runs:
        t = read_task_run(client, r)
        if t is not None and t.scores:
            tasks.append(t)
        if progress:
            progress.advance(bar)
    if progress:
        progress.remove_task(bar)
    refs = read_references(client, exp.experiment_id, world) if any(
        t.task in ("clm", "mlm-bpb") for t in tasks) else []
    return ExperimentData(name=exp.name, experiment_id=exp.experiment_id, cells=cells, tasks=tasks, client=client,
                          references=refs)
