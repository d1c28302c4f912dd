"""The run record read back: what the leaderboard, the resume policy and the cache's view read of a cell run and
its task runs (:func:`read_cell_run`, :func:`read_task_run`), through the tags, done markers and artifact paths
that :mod:`harness.core.record` spells."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.core.record import (
    INIT_REPORT,
    ITEMS,
    LANGUAGES,
    TABLES,
    list_artifact_paths,
    metric_key,
    one_per_step,
    own_tags,
    parent_of,
    parse_items_path,
    parse_table_path,
    read_json_artifact,
)


# -- readers -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskFacts:
    """What the leaderboard needs to know of a task: its headline metric (None: unknown), whether higher is better,
    and its metrics in the task's order."""

    headline: str | None
    higher_is_better: bool
    metrics: tuple[str, ...]


def task_facts_from_tags(tags: dict[str, str]) -> TaskFacts | None:
    """A task run's own account of its task (None for a run logged before the tags existed)."""
    headline = tags.get("task.headline")
    if not headline:
        return None
    metrics = tuple(m for m in (tags.get("task.metrics") or "").split(",") if m) or (headline,)
    return TaskFacts(headline, tags.get("task.higher_is_better", "true").lower() != "false", metrics)


def metric_names(facts: TaskFacts) -> dict[str, str]:
    """Metric-key form -> the task's own metric name (``acc_at_10`` -> ``acc@10``)."""
    return {metric_key(m): m for m in facts.metrics}


def untagged_task_facts(task: str) -> TaskFacts:
    """The facts of a task whose runs carry no tags (logged before the runner tagged task runs with their
    headline, direction and metrics): what the registered task declares (read from its source, without importing
    it: :mod:`harness.core.declarations`); a task no registry here knows has no headline and ranks higher-is-better.
    """
    from harness.core.registry import TASKS

    try:
        decl = TASKS.declared(task, ("headline", "metrics", "higher_is_better"))
    except Exception:  # noqa: BLE001 - an unknown or broken task: no facts
        decl = {}
    if not decl.get("headline"):
        return TaskFacts(None, True, ())
    return TaskFacts(decl["headline"], bool(decl.get("higher_is_better", True)),
                     tuple(decl.get("metrics") or (decl["headline"],)))


@dataclass
class RunIdentity:
    """What a cell run and each of its task runs say of the cell: its variant and seed, profile and world."""

    run_id: str
    method: str
    source: str
    dim: str
    seed: str
    profile: str
    world: str

    @staticmethod
    def read(run: Any, tags: dict[str, str]) -> dict[str, str]:
        """The identity fields of a fetched run, from its tags ("?" where one is missing)."""
        return {"run_id": run.info.run_id, "method": tags.get("method", "?"), "source": tags.get("source", "?"),
                "dim": str(tags.get("dim", "full")), "seed": str(tags.get("seed", "?")),
                "profile": tags.get("profile", "?"), "world": tags.get("world", "?")}


@dataclass
class CellRecord(RunIdentity):
    """One parent run: a model variant at one seed."""

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
    # what the method was checked against, from the ``harness.method_reference`` tag (None: logged before it)
    method_reference: str | None = None
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def method_params(self) -> dict[str, str]:
        return {k[len("method."):]: v for k, v in sorted(self.params.items()) if k.startswith("method.")}

    @property
    def objective(self) -> str:
        """The source model's objective as the cell's surgery recorded it (``mlm``: an encoder; ``clm``: a
        decoder); ``mlm`` for a cell logged before decoder sources existed (every source was an encoder)."""
        surgery = self.init_report.get("surgery") if isinstance(self.init_report, dict) else None
        return str((surgery if isinstance(surgery, dict) else {}).get("objective") or "mlm")

    @property
    def cpt_params(self) -> dict[str, str]:
        return {k[len("cpt."):]: v for k, v in sorted(self.params.items()) if k.startswith("cpt.")}


@dataclass
class TaskRun(RunIdentity):
    """One nested task run: a task's per-language scores at every evaluated CPT step."""

    task: str
    parent_id: str | None
    scores: dict[int, dict[str, dict[str, float]]]  # step -> metric -> lang -> value
    label_source: dict[str, str]
    item_steps: set[int]
    tagged_facts: TaskFacts | None = None  # from the run's ``task.*`` tags (None: logged before they existed)
    protocol: dict[str, str] = field(default_factory=dict)  # the task's resolved settings, its ``<task>.*`` params
    artifact_uri: str | None = None  # where the run's artifacts are (read in place from a local store)

    @property
    def steps(self) -> list[int]:
        return sorted(self.scores)

    @property
    def facts(self) -> TaskFacts:
        return self.tagged_facts or untagged_task_facts(self.task)


def _json_tag(value: str | None) -> dict[str, str]:
    try:
        doc = json.loads(value) if value else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def search_runs(client: Any, exp_id: str, flt: str) -> list[Any]:
    out, token = [], None
    while True:
        page = client.search_runs([exp_id], filter_string=flt, max_results=1000, page_token=token)
        out.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return out


def read_cell_run(client: Any, run: Any) -> CellRecord:
    tags = own_tags(run)
    final = tags.get("final_step")
    cell = CellRecord(
        **RunIdentity.read(run, tags), status=run.info.status,
        final_step=int(final) if final not in (None, "") else None,
        params=dict(run.data.params), metrics=dict(run.data.metrics),
        task_final_step=int(t) if (t := tags.get("task_final_step")) not in (None, "") else None,
        method_defaults=_json_tag(tags.get("method_defaults")), method_reference=tags.get("method_reference"))
    arts = set(list_artifact_paths(client, run.info.run_id, "", run.info.artifact_uri))
    if LANGUAGES in arts:
        cell.languages = read_json_artifact(client, run.info.run_id, LANGUAGES, run.info.artifact_uri) or {}
    if INIT_REPORT in arts:
        cell.init_report = read_json_artifact(client, run.info.run_id, INIT_REPORT, run.info.artifact_uri) or {}
    for key in ("cpt/train_loss", "cpt/heldout_loss"):
        if key in run.data.metrics:
            cell.curves[key] = one_per_step(client.get_metric_history(run.info.run_id, key))
    return cell


def read_task_run(client: Any, run: Any) -> TaskRun | None:
    tags = own_tags(run)
    task = tags.get("task")
    if not task:
        return None
    tagged = task_facts_from_tags(tags)
    names = metric_names(tagged or untagged_task_facts(task))
    scores: dict[int, dict[str, dict[str, float]]] = {}
    label_source: dict[str, str] = {}
    uri = run.info.artifact_uri
    tables = list_artifact_paths(client, run.info.run_id, TABLES, uri)
    item_steps = {s for path in list_artifact_paths(client, run.info.run_id, ITEMS, uri)
                  if (s := parse_items_path(path, task)) is not None}
    from_tables = False
    for path in tables:
        parsed = parse_table_path(path)
        if parsed is None or parsed[0] != task:
            continue
        doc = read_json_artifact(client, run.info.run_id, path, uri)
        if not isinstance(doc, dict) or "scores" not in doc:
            continue
        from_tables = True
        step = int(doc.get("step", parsed[1]))
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
            for step, value in one_per_step(client.get_metric_history(run.info.run_id, key)):
                scores.setdefault(step, {}).setdefault(metric, {})[parts[1]] = value
    return TaskRun(**RunIdentity.read(run, tags), task=task, parent_id=parent_of(run), scores=scores,
                   label_source=label_source, item_steps=item_steps, tagged_facts=tagged,
                   protocol={k[len(task) + 1:]: v for k, v in run.data.params.items()
                             if k.startswith(task + ".") and k != f"{task}.seed"},  # the seed is the row's own
                   artifact_uri=uri)
