"""Read the runner's runs back from MLflow (never re-compute a task).

What is read, per experiment (see :mod:`harness.runner` and :mod:`harness.core.tracking` for the writing side):

* parent runs (``harness.kind=cell``): identity tags (and ``harness.method_defaults``, the method's declared
  parameter defaults), params (``method.*``, ``cpt.*``), ``init/*`` metrics, the
  CPT curves ``cpt/train_loss`` and ``cpt/heldout_loss``, and the artifacts ``languages.json`` and
  ``init_report.json``;
* task runs (``harness.kind=task``): the task's headline metric, its direction and its metrics (tags
  ``harness.task.headline``, ``harness.task.higher_is_better``, ``harness.task.metrics``; :data:`UNTAGGED_TASKS` for
  runs logged before them); per-language scores per CPT step from the ``tables/{task}_step{N}.json``
  artifacts (the per-language tables the runner logs together with the metrics; one download per step instead of
  one metric-history query per language), or from the metric histories ``{task}/{metric}/{lang}`` when a run has no
  tables artifact; the label source of every language; and, lazily, the per-item statistics
  ``items/{task}_step{N}.json`` that the bootstrap resamples.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.tracking import TAG, metric_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskFacts:
    """What the leaderboard needs to know of a task: its headline metric (None: unknown), whether higher is better,
    and its metrics in the task's order."""

    headline: str | None
    higher_is_better: bool
    metrics: tuple[str, ...]


_TABLE = re.compile(r"^tables/(?P<task>.+)_step(?P<step>\d+)\.json$")


# What the runs of each built-in task logged before the runner tagged task runs with their headline metric,
# its direction and the task's metrics (``harness.task.headline``, ``harness.task.higher_is_better``,
# ``harness.task.metrics``): the facts of those tasks at that time, so older stores keep their tables. A tag-less
# run of any other task has no headline (every metric is shown as equal) and is ranked higher-is-better.
UNTAGGED_TASKS: dict[str, TaskFacts] = {
    "mlm": TaskFacts("loss", False, ("loss", "ppl")),
    "sr-b": TaskFacts("acc@10", True, ("acc@10", "acc@1")),
    "sr-t": TaskFacts("acc@10", True, ("acc@10", "acc@1")),
    "ner": TaskFacts("f1", True, ("f1", "precision", "recall")),
    "pos": TaskFacts("f1", True, ("f1", "acc")),
}


def task_facts_from_tags(tags: dict[str, str]) -> TaskFacts | None:
    """A task run's own account of its task (None for a run logged before the tags existed)."""
    headline = tags.get("task.headline")
    if not headline:
        return None
    metrics = tuple(m for m in (tags.get("task.metrics") or "").split(",") if m) or (headline,)
    return TaskFacts(headline, tags.get("task.higher_is_better", "true").lower() != "false", metrics)


def _metric_names(facts: TaskFacts) -> dict[str, str]:
    """Metric-key form -> the task's own metric name (``acc_at_10`` -> ``acc@10``)."""
    return {metric_key(m): m for m in facts.metrics}


def untagged_task_facts(task: str) -> TaskFacts:
    """The facts of a task whose runs carry no tags: :data:`UNTAGGED_TASKS`, else no headline, higher is better."""
    return UNTAGGED_TASKS.get(task, TaskFacts(None, True, ()))


@dataclass
class CellRun:
    """One parent run: a model variant at one seed."""

    run_id: str
    method: str
    source: str
    dim: str
    seed: str
    profile: str
    world: str
    status: str
    final_step: int | None
    params: dict[str, str]
    metrics: dict[str, float]
    languages: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the last step at which the tasks were evaluated (None: runs logged before the tag existed, which evaluated
    # them at the final step); 0 when the profile's CPT is a smoke test measured by the held-out MLM loss only
    task_final_step: int | None = None
    init_report: dict[str, Any] = field(default_factory=dict)
    # the method's declared parameter defaults, from the ``harness.method_defaults`` tag ({}: logged before it)
    method_defaults: dict[str, str] = field(default_factory=dict)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def method_params(self) -> dict[str, str]:
        return {k[len("method."):]: v for k, v in sorted(self.params.items()) if k.startswith("method.")}

    @property
    def cpt_params(self) -> dict[str, str]:
        return {k[len("cpt."):]: v for k, v in sorted(self.params.items()) if k.startswith("cpt.")}


@dataclass
class TaskRun:
    """One nested task run: a task's per-language scores at every evaluated CPT step."""

    run_id: str
    task: str
    parent_id: str | None
    method: str
    source: str
    dim: str
    seed: str
    profile: str
    world: str
    scores: dict[int, dict[str, dict[str, float]]]  # step -> metric -> lang -> value
    label_source: dict[str, str]
    item_steps: set[int]
    tagged_facts: TaskFacts | None = None  # from the run's ``task.*`` tags (None: logged before they existed)
    protocol: dict[str, str] = field(default_factory=dict)  # the task's resolved settings, its ``<task>.*`` params

    @property
    def steps(self) -> list[int]:
        return sorted(self.scores)

    @property
    def facts(self) -> TaskFacts:
        return self.tagged_facts or untagged_task_facts(self.task)


@dataclass
class ExperimentData:
    name: str
    experiment_id: str
    cells: dict[str, CellRun]
    tasks: list[TaskRun]
    client: Any = None
    _items: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    _tmp: Any = None

    def task_info(self, task: str) -> TaskFacts:
        """The task's headline metric, direction and metrics as its runs were tagged (the last tagged run's, the
        newest account), else :func:`untagged_task_facts`."""
        tagged = [r.tagged_facts for r in self.tasks if r.task == task and r.tagged_facts is not None]
        return tagged[-1] if tagged else untagged_task_facts(task)

    def parent(self, run: TaskRun) -> CellRun | None:
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
                raw = read_json_artifact(self.client, run.run_id, f"items/{run.task}_step{step}.json")
                names = _metric_names(run.facts)
                data = {names.get(m, m): v for m, v in (raw or {}).items()}
            self._items[key] = data
        return self._items[key]


def read_json_artifact(client: Any, run_id: str, path: str) -> Any:
    """A JSON artifact of a run, or None when it is absent or unreadable."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    with tempfile.TemporaryDirectory() as td:
        try:
            local = client.download_artifacts(run_id, path, td)
            return json.loads(Path(local).read_text())
        except Exception as exc:  # absent, or written by an older runner
            log.debug("artifact %s of run %s not readable: %s", path, run_id, exc)
            return None


def _tags(run: Any) -> dict[str, str]:
    return {k[len(TAG):]: v for k, v in run.data.tags.items() if k.startswith(TAG)}


def _json_tag(value: str | None) -> dict[str, str]:
    try:
        doc = json.loads(value) if value else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _search(client: Any, exp_id: str, flt: str) -> list[Any]:
    out, token = [], None
    while True:
        page = client.search_runs([exp_id], filter_string=flt, max_results=1000, page_token=token)
        out.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return out


def _cell_run(client: Any, run: Any) -> CellRun:
    tags = _tags(run)
    final = tags.get("final_step")
    cell = CellRun(
        run_id=run.info.run_id, method=tags.get("method", "?"), source=tags.get("source", "?"),
        dim=str(tags.get("dim", "full")), seed=str(tags.get("seed", "?")), profile=tags.get("profile", "?"),
        world=tags.get("world", "?"), status=run.info.status,
        final_step=int(final) if final not in (None, "") else None,
        params=dict(run.data.params), metrics=dict(run.data.metrics),
        task_final_step=int(t) if (t := tags.get("task_final_step")) not in (None, "") else None,
        method_defaults=_json_tag(tags.get("method_defaults")))
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    if "languages.json" in arts:
        cell.languages = read_json_artifact(client, run.info.run_id, "languages.json") or {}
    if "init_report.json" in arts:
        cell.init_report = read_json_artifact(client, run.info.run_id, "init_report.json") or {}
    for key in ("cpt/train_loss", "cpt/heldout_loss"):
        if key in run.data.metrics:
            cell.curves[key] = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
    return cell


def _task_run(client: Any, run: Any) -> TaskRun | None:
    tags = _tags(run)
    task = tags.get("task")
    if not task:
        return None
    tagged = task_facts_from_tags(tags)
    names = _metric_names(tagged or untagged_task_facts(task))
    scores: dict[int, dict[str, dict[str, float]]] = {}
    label_source: dict[str, str] = {}
    tables = [a.path for a in client.list_artifacts(run.info.run_id, "tables")]
    item_steps = set()
    for a in client.list_artifacts(run.info.run_id, "items"):
        m = re.match(rf"^items/{re.escape(task)}_step(\d+)\.json$", a.path)
        if m:
            item_steps.add(int(m.group(1)))
    from_tables = False
    for path in tables:
        m = _TABLE.match(path)
        if not m or m.group("task") != task:
            continue
        doc = read_json_artifact(client, run.info.run_id, path)
        if not isinstance(doc, dict) or "scores" not in doc:
            continue
        from_tables = True
        step = int(doc.get("step", m.group("step")))
        per = scores.setdefault(step, {})
        for metric, langs in doc["scores"].items():
            per.setdefault(names.get(metric_key(metric), metric), {}).update(
                {lang: float(v) for lang, v in langs.items() if v is not None})
        label_source.update(doc.get("label_source") or {})
    if not from_tables:  # metric histories: {task}/{metric}/{lang}, step = CPT step
        prefix = task + "/"
        for key in run.data.metrics:
            parts = key[len(prefix):].split("/") if key.startswith(prefix) else []
            if len(parts) != 2 or parts[1] == "avg":
                continue
            metric = names.get(parts[0], parts[0])
            for h in client.get_metric_history(run.info.run_id, key):
                scores.setdefault(int(h.step), {}).setdefault(metric, {})[parts[1]] = float(h.value)
    return TaskRun(run_id=run.info.run_id, task=task, parent_id=tags.get("parent") or
                   run.data.tags.get("mlflow.parentRunId"), method=tags.get("method", "?"),
                   source=tags.get("source", "?"), dim=str(tags.get("dim", "full")), seed=str(tags.get("seed", "?")),
                   profile=tags.get("profile", "?"), world=tags.get("world", "?"), scores=scores,
                   label_source=label_source, item_steps=item_steps, tagged_facts=tagged,
                   protocol={k[len(task) + 1:]: v for k, v in run.data.params.items()
                             if k.startswith(task + ".") and k != f"{task}.seed"})  # the seed is the row's own


def experiments(client: Any, name: str | None = None) -> list[Any]:
    """The active experiments (``name``: only that one); a name that does not exist gives []."""
    if name:
        exp = client.get_experiment_by_name(name)
        return [exp] if exp is not None and exp.lifecycle_stage == "active" else []
    return sorted(client.search_experiments(), key=lambda e: e.name)


def collect_experiment(client: Any, exp: Any, *, world: str | None = None, task: str | None = None,
                       progress: Any = None) -> ExperimentData:
    """Every cell and task run of one experiment (optionally of one world / one task)."""
    flt = f"tags.`{TAG}kind` = 'task'"
    if task:
        flt += f" and tags.`{TAG}task` = '{task}'"
    if world:
        flt += f" and tags.`{TAG}world` = '{world}'"
    task_runs = _search(client, exp.experiment_id, flt)
    cell_flt = f"tags.`{TAG}kind` = 'cell'" + (f" and tags.`{TAG}world` = '{world}'" if world else "")
    cell_runs = _search(client, exp.experiment_id, cell_flt) if task_runs else []
    bar = progress.add_task(f"reading {exp.name}", total=len(task_runs) + len(cell_runs)) if progress else None
    cells: dict[str, CellRun] = {}
    for r in cell_runs:
        cells[r.info.run_id] = _cell_run(client, r)
        if progress:
            progress.advance(bar)
    tasks: list[TaskRun] = []
    for r in task_runs:
        t = _task_run(client, r)
        if t is not None and t.scores:
            tasks.append(t)
        if progress:
            progress.advance(bar)
    if progress:
        progress.remove_task(bar)
    return ExperimentData(name=exp.name, experiment_id=exp.experiment_id, cells=cells, tasks=tasks, client=client)
