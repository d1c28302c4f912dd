"""The run record: what a run of the harness leaves in MLflow, written and read through this one module.

The runner computes; it hands what it computed to :class:`RunRecord`, which writes it; the leaderboard
(:mod:`leaderboard.collect`), the resume policy and the pass-over of finished cells
(:mod:`harness.cell`) and the cache's view of the runs read it back through
:func:`harness.core.record_read.read_cell_run`, :func:`~harness.core.record_read.read_task_run` and the helpers
here. No other module spells a tag, a done marker or an artifact path.

The record, per experiment (one per world and source model):

* a **cell run** per model variant and seed, found again by its identity tags ``harness.cell`` (the hash of the
  cell's identity) and ``harness.kind = cell``; described by ``harness.method``, ``source``, ``dim``, ``seed``,
  ``profile``, ``world``, ``method_defaults``, ``method_code``, ``method_reference``, ``init_product``,
  ``cpt_product``, ``final_step``, ``task_final_step``; done markers ``harness.done.init``, ``done.cpt_log``,
  ``done.heldout_<step>``; artifacts
  :data:`INIT_REPORT`, :data:`LANGUAGES`, :data:`CPT_LAYOUT`, ``init/...``;
* a **task run** per cell and task (``harness.kind = task``, ``harness.task``, ``harness.parent``), tagged with the
  task's facts (``harness.task.headline``, ``.higher_is_better``, ``.metrics``), done marker
  ``harness.done.step_<step>`` per evaluated CPT step with the languages it covers (``harness.langs.step_<step>``:
  :func:`coverage_tags`), artifacts :func:`table_path` and :func:`items_path` (a later evaluation of more
  languages at the same step adds the step's next part);
* an **aggregate run** per variant and task over seeds (``harness.kind = aggregate``, ``harness.group``,
  ``harness.seeds``), done markers ``harness.done.agg_<step>_<n>``;
* the leaderboard's own runs (``harness.kind = leaderboard`` and ``result``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness.core.artifacts import list_artifact_paths, read_json_artifact

TAG = "harness."  # every tag of ours starts so (MLflow's own start with "mlflow.")
_BAD = re.compile(r"[^\w\-. /:]")


def metric_key(*parts: str) -> str:
    """An MLflow-valid metric key: ``@`` becomes ``_at_`` (``acc@10`` -> ``acc_at_10``), other bad chars ``_``."""
    return "/".join(_BAD.sub("_", p.replace("@", "_at_")) for p in parts)


PARENT_TAG = "mlflow.parentRunId"


class Kind:
    """The ``harness.kind`` of each run of the record."""

    CELL = "cell"
    TASK = "task"
    AGGREGATE = "aggregate"
    LEADERBOARD = "leaderboard"
    RESULT = "result"
    REFERENCE = "reference"  # a derived world's bits-per-byte references (harness.transplant)


def tag(name: str) -> str:
    """The MLflow tag key of one of our tags (``kind`` -> ``harness.kind``)."""
    return name if name.startswith("mlflow.") else TAG + name


def own_tags(run: Any) -> dict[str, str]:
    """A run's tags of ours, without the prefix."""
    return {k[len(TAG):]: v for k, v in run.data.tags.items() if k.startswith(TAG)}


# -- identities (the tags a run is found again by) -------------------------------------------------------------
def cell_identity(key: str) -> dict[str, str]:
    return {"cell": key, "kind": Kind.CELL}


def task_identity(key: str, task: str) -> dict[str, str]:
    return {"cell": key, "kind": Kind.TASK, "task": task}


def cell_task_runs(key: str) -> dict[str, str]:
    """Every task run of a cell."""
    return {"cell": key, "kind": Kind.TASK}


def cell_all_runs(key: str) -> dict[str, str]:
    """The cell run and its task runs."""
    return {"cell": key}


def aggregate_identity(group: str, task: str) -> dict[str, str]:
    return {"kind": Kind.AGGREGATE, "group": group, "task": task}


def leaderboard_identity() -> dict[str, str]:
    """The experiment's one leaderboard run."""
    return {"kind": Kind.LEADERBOARD}


def result_identity(task: str, profile: str, row: str) -> dict[str, str]:
    """The leaderboard's run of one row of one task (its headline figures as metrics)."""
    return {"kind": Kind.RESULT, "task": task, "profile": profile, "row": row}


def reference_identity(key: str, task: str) -> dict[str, str]:
    """The experiment's run of a task's references for one world, source and task settings (``key``)."""
    return {"kind": Kind.REFERENCE, "reference": key, "task": task}


def cells_of(**tags: str) -> dict[str, str]:
    """The cell runs with these descriptive tags (method, dim, source, seed ...)."""
    return {"kind": Kind.CELL, **tags}


def variant_aggregates(variant: dict[str, str]) -> dict[str, str]:
    """The aggregate runs of a variant (its method, source, dim, profile and world tags)."""
    return {"kind": Kind.AGGREGATE, **variant}


def parent_of(run: Any) -> str | None:
    """The cell run of a task run."""
    return run.data.tags.get(tag("parent")) or run.data.tags.get(PARENT_TAG)


def seeds_of(run: Any) -> list[str]:
    """The seeds an aggregate run counted."""
    return [s for s in run.data.tags.get(tag("seeds"), "").split(",") if s]


def kind_filter(kind: str, **more: str) -> str:
    """An MLflow search filter for the runs of a kind (and more tags)."""
    return " and ".join(f"tags.`{tag(k)}` = '{str(v).replace(chr(39), chr(92) + chr(39))}'"
                        for k, v in {"kind": kind, **more}.items())


# -- done markers ---------------------------------------------------------------------------------------------
class Done:
    """What a run marks done, so that a resumed run never logs it twice."""

    INIT = "init"
    CPT_LOG = "cpt_log"

    @staticmethod
    def heldout(step: int) -> str:
        return f"heldout_{step}"

    @staticmethod
    def evaluated(step: int) -> str:
        return f"step_{step}"

    @staticmethod
    def aggregated(step: int, n_seeds: int) -> str:
        return f"agg_{step}_{n_seeds}"


def done_tag(marker: str) -> str:
    return tag(f"done.{marker}")


def is_marked(run: Any, marker: str) -> bool:
    """Whether a fetched run carries the done marker."""
    return run.data.tags.get(done_tag(marker)) == "1"


# -- artifact paths -------------------------------------------------------------------------------------------
INIT_REPORT = "init_report.json"
# the default helper / donor of omp, clp and clp+ as their init report names it (methods.helper_model.DONOR_TRAINED);
# any other (the world's donor, the helper_model param) is logged as the run param ``init.donor``
TRAINED_HELPER = "helper model (trained)"
LANGUAGES = "languages.json"
CPT_LAYOUT = "cpt_layout.json"
INIT_ARTIFACTS = "init"
TABLES = "tables"
ITEMS = "items"
_TABLE = re.compile(rf"^{TABLES}/(?P<task>.+)_step(?P<step>\d+)(?:\.part\d+)?\.json$")


def _part(part: int) -> str:
    return f".part{part}" if part else ""


def table_path(task: str, step: int, part: int = 0) -> str:
    """The per-language table of a task at a step (scores, averages, label sources, extras); ``part`` > 0: the
    table of languages evaluated later at the same step (a run that asked for more languages), beside the first."""
    return f"{TABLES}/{task}_step{step}{_part(part)}.json"


def items_path(task: str, step: int, part: int = 0) -> str:
    """The per-item statistics of a task at a step (what the bootstrap resamples); ``part`` as :func:`table_path`."""
    return f"{ITEMS}/{task}_step{step}{_part(part)}.json"


def board_table_path(board_id: str) -> str:
    """A leaderboard table logged on the leaderboard's run."""
    return f"{TABLES}/{board_id}.json"


def parse_table_path(path: str) -> tuple[str, int] | None:
    m = _TABLE.match(path)
    return (m.group("task"), int(m.group("step"))) if m else None


def parse_items_path(path: str, task: str) -> int | None:
    m = re.match(rf"^{ITEMS}/{re.escape(task)}_step(\d+)(?:\.part\d+)?\.json$", path)
    return int(m.group(1)) if m else None


def read_items(client: Any, run_id: str, task: str, step: int, artifact_uri: str | None = None) -> dict[str, Any]:
    """``{metric: {lang: item statistics}}`` of a task run at ``step``, every part of the step merged."""
    out: dict[str, Any] = {}
    for path in list_artifact_paths(client, run_id, ITEMS, artifact_uri):
        if parse_items_path(path, task) == step:
            for metric, per in (read_json_artifact(client, run_id, path, artifact_uri) or {}).items():
                out.setdefault(metric, {}).update(per)
    return out


# -- what an evaluation covers --------------------------------------------------------------------------------
_CHUNK = 4000  # characters of one coverage tag (MLflow caps a tag's value); longer lists continue in ``.1``, ...


def langs_tag(step: int) -> str:
    """The tag naming the languages a task run's evaluation at ``step`` covers (``harness.langs.step_<step>``)."""
    return f"langs.step_{step}"


def coverage_tags(step: int, languages: list[str] | set[str]) -> dict[str, str]:
    """The tags that record ``languages`` as covered at ``step`` (sorted, comma-separated, split over tags)."""
    text = ",".join(sorted(set(languages)))
    parts = [text[i:i + _CHUNK] for i in range(0, len(text), _CHUNK)] or [""]
    return {langs_tag(step) + (f".{i}" if i else ""): part for i, part in enumerate(parts)}


def covered_languages(run: Any, task: str, step: int) -> set[str] | None:
    """The languages a fetched task run's evaluation at ``step`` covers; None when it is not marked evaluated
    there. A run logged before coverage was recorded covers the languages its ``{task}/{metric}/{lang}``
    metrics name (it ran in one command, on one set of languages)."""
    if not is_marked(run, Done.evaluated(step)):
        return None
    tags, first = run.data.tags, run.data.tags.get(tag(langs_tag(step)))
    if first is None:
        return {parts[2] for k in run.data.metrics if k.startswith(task + "/")
                and len(parts := k.split("/")) == 3 and parts[2] != "avg"}
    chunks, i = [first], 1
    while (more := tags.get(tag(f"{langs_tag(step)}.{i}"))) is not None:
        chunks.append(more)
        i += 1
    return {lang for lang in "".join(chunks).split(",") if lang}


def missing_languages(run: Any, task: str, step: int, languages: list[str]) -> list[str]:
    """Those of ``languages`` a fetched task run has not evaluated at ``step`` (all of them when it has not
    evaluated the step); [] when it covers them."""
    covered = covered_languages(run, task, step) if run is not None else None
    return list(languages) if covered is None else [lang for lang in languages if lang not in covered]


def evaluated_steps(client: Any, run: Any, task: str) -> set[int]:
    """The CPT steps a task run was evaluated at: its done markers, else its per-step tables, else the metric
    history of one of its task metrics (runs logged before the markers and the tables)."""
    marker = re.compile(re.escape(done_tag(Done.evaluated(""))) + r"(\d+)")
    steps = {int(m.group(1)) for k in run.data.tags if (m := marker.fullmatch(k))}
    if steps:
        return steps
    steps = {p[1] for a in client.list_artifacts(run.info.run_id, TABLES) if (p := parse_table_path(a.path))}
    if steps:
        return steps
    key = next((k for k in sorted(run.data.metrics) if k.startswith(task + "/")), None)
    return {int(h.step) for h in client.get_metric_history(run.info.run_id, key)} if key else set()


def one_per_step(history: list[Any]) -> list[tuple[int, float]]:
    """``[(step, value)]`` of a metric's history, one value a step (the last logged): a process killed between
    logging a value and marking it done logs it again when the cell resumes."""
    last: dict[int, float] = {}
    for m in sorted(history, key=lambda m: m.timestamp):
        last[int(m.step)] = float(m.value)
    return sorted(last.items())


# -- the writer -----------------------------------------------------------------------------------------------
class RunRecord:
    """Persists what the runner computed, on a :class:`harness.core.tracking.Tracker` (the MLflow client wrapper):
    the runs of a cell found again by their identity, each piece logged once and marked done."""

    def __init__(self, tracker: Any):
        self.tracker = tracker

    # runs
    def open_cell(self, experiment_id: str, key: str, name: str, tags: dict[str, Any]) -> str:
        run_id, _ = self.tracker.get_or_create_run(experiment_id, cell_identity(key), name)
        self.tracker.set_tags(run_id, tags)
        return run_id

    def open_task(self, experiment_id: str, key: str, task: str, parent: str, tags: dict[str, Any]) -> str:
        run_id, _ = self.tracker.get_or_create_run(experiment_id, task_identity(key, task), task,
                                                   parent_run_id=parent)
        self.tracker.set_tags(run_id, {**tags, "parent": parent})
        return run_id

    def done(self, run_id: str, marker: str) -> bool:
        return self.tracker.is_done(run_id, marker)

    def finished_cell(self, experiment_id: str, key: str, cell_markers: list[str],
                      languages: dict[str, list[str]], task_steps: list[int]) -> str | None:
        """The cell's run when it is FINISHED with ``cell_markers`` done and every task of ``languages`` evaluated
        on its languages at every step of ``task_steps``; else None."""
        run = self.finished_cell_run(experiment_id, key, cell_markers, languages, task_steps)
        return None if run is None else run.info.run_id

    def finished_cell_run(self, experiment_id: str, key: str, cell_markers: list[str],
                          languages: dict[str, list[str]], task_steps: list[int]) -> Any:
        """:meth:`finished_cell`'s run itself (its tags read with it: the code it recorded), or None.
        ``languages``: each task the command asks for, with the languages it asks for (an evaluation that
        covers fewer is not finished: :func:`missing_languages`)."""
        runs = self.tracker.find_runs(experiment_id, cell_identity(key))
        if not runs or runs[0].info.status != "FINISHED" or not all(is_marked(runs[0], m) for m in cell_markers):
            return None
        done = {r.data.tags.get(tag("task")): r
                for r in reversed(self.tracker.find_runs(experiment_id, cell_task_runs(key)))}
        for task, langs in languages.items():
            if any(missing_languages(done.get(task), task, s, langs) for s in task_steps):
                return None
        return runs[0]

    def missing(self, task_run: str, task: str, step: int, languages: list[str]) -> list[str]:
        """Those of ``languages`` the task run ``task_run`` has not evaluated at ``step``."""
        return missing_languages(self.tracker.reader.get_run(task_run), task, step, languages)

    @staticmethod
    def recorded_code(run: Any) -> dict[str, str] | None:
        """The method code a cell run recorded (``{file: digest}``; None: logged before it was recorded)."""
        raw = run.data.tags.get(tag("method_code")) if run is not None else None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def delete_cell(self, experiment_id: str, key: str, variant: dict[str, str], seed: int) -> int:
        """Delete a cell's runs (the cell run and its task runs) and the aggregate runs of its variant that
        counted its seed. Returns how many."""
        runs = self.tracker.find_runs(experiment_id, cell_all_runs(key))
        runs += [r for r in self.tracker.find_runs(experiment_id, variant_aggregates(variant))
                 if str(seed) in seeds_of(r)]
        for r in runs:
            self.tracker.client.delete_run(r.info.run_id)
        return len(runs)

    def cell_code(self, experiment_id: str, key: str) -> dict[str, str] | None:
        """The method code a cell's run recorded (``{file: digest}``; None: logged before it was recorded)."""
        runs = self.tracker.find_runs(experiment_id, cell_identity(key))
        return self.recorded_code(runs[0] if runs else None)

    def cell_status(self, experiment_id: str, key: str) -> list[str]:
        return [r.info.status for r in self.tracker.find_runs(experiment_id, cell_identity(key))]

    # pieces of a cell
    def log_init(self, parent: str, report: dict[str, Any], languages: dict[str, Any], *, wall_seconds: float,
                 cached: bool, artifacts: Path | None = None) -> None:
        """The initialization's counts, statistics, memory and time as ``init/*`` metrics; its report, the
        world's languages and what the method kept (``artifacts``; a ``curves.json`` there becomes ``init/<name>``
        curves) as artifacts."""
        if self.done(parent, Done.INIT):
            return
        tr = self.tracker
        scalars = {f"init/{k}": float(v) for k, v in (report.get("method_stats") or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        mem = report.get("memory") or {}
        if isinstance(mem.get("peak_rss_mb"), (int, float)):
            scalars["init/peak_rss_mb"] = float(mem["peak_rss_mb"])
        # init/seconds is the product's own computation, which a cached product did not repeat; wall: this cell's
        tr.log_metrics(parent, {**scalars, **{f"init/{k}": v for k, v in report.get("counts", {}).items()},
                                "init/seconds": float(report.get("seconds", 0.0)),
                                "init/wall_seconds": wall_seconds, "init/cached": float(cached)}, step=0)
        tr.log_dict(parent, report, INIT_REPORT)
        donor = ((report.get("method_stats") or {}).get("donor_model") or {}).get("donor")
        if donor and donor != TRAINED_HELPER:  # (a run of the trained helper logs no param it did not log before)
            tr.log_params(parent, {"init.donor": donor})
        if artifacts is not None and artifacts.is_dir():
            for f in sorted(artifacts.rglob("*")):
                if f.is_file() and f.stat().st_size < 200 * 2**20:
                    rel = f.parent.relative_to(artifacts)
                    tr.log_artifact(parent, f, INIT_ARTIFACTS if str(rel) == "." else f"{INIT_ARTIFACTS}/{rel}")
            curves = artifacts / "curves.json"
            if curves.is_file():
                for name, points in json.loads(curves.read_text()).items():
                    tr.log_series(parent, metric_key("init", name), [(int(s), float(v)) for s, v in points])
        tr.log_dict(parent, languages, LANGUAGES)
        tr.mark_done(parent, Done.INIT)

    def log_cpt(self, parent: str, steps: int, seconds: float, train_log: list[dict[str, Any]],
                layouts: list[dict[str, Any]]) -> None:
        """CPT's wall time, training-loss curve and the batch layout(s) it used."""
        if self.done(parent, Done.CPT_LOG):
            return
        tr = self.tracker
        tr.log_metrics(parent, {"cpt/seconds": seconds}, step=steps)
        tr.log_series(parent, "cpt/train_loss", [(r["step"], r["loss"]) for r in train_log])
        for lay in layouts:
            tr.log_metrics(parent, {"cpt/per_device_batch": float(lay["per_device"]),
                                    "cpt/grad_accumulation": float(lay["accumulation"])}, step=int(lay["from_step"]))
        if layouts:
            tr.log_dict(parent, layouts, CPT_LAYOUT)
        tr.mark_done(parent, Done.CPT_LOG)

    def log_evaluation(self, task_run: str, parent: str, task: str, step: int, result: Any, seconds: float,
                       languages: list[str] | None = None) -> None:
        """A task's result at a CPT step: its protocol as params, per-language and average metrics on the task run
        (the averages on the cell run too), the per-language table and the per-item statistics as artifacts, the
        languages it covers (``languages``, those asked for; default: those scored) as coverage tags.

        A task run that has evaluated the step on other languages before is extended: ``result`` holds the
        languages it lacked; their metrics are logged, the averages over all its languages logged again at the
        step (the readers keep the last value of a key at a step), their table and items written as the step's
        next part beside the first, and the coverage widened."""
        tr = self.tracker
        run = tr.reader.get_run(task_run)
        earlier = covered_languages(run, task, step)
        hp = result.extras.get("hyperparameters") or {}  # the task's resolved protocol settings
        tr.log_params(task_run, {f"{task}.{k}": v for k, v in hp.items()})
        scores = {m: dict(per) for m, per in result.scores.items()}
        if earlier is not None:  # only the languages it lacked, on top of what it logged (their scores kept)
            scores = {m: {lang: v for lang, v in per.items() if lang not in earlier} for m, per in scores.items()}
        metrics = {metric_key(task, metric, lang): v for metric, per_lang in scores.items()
                   for lang, v in per_lang.items()}
        logged = {} if earlier is None else self.logged_scores(run, task, step)
        merged = {m: {**logged.get(m, {}), **scores.get(m, {})} for m in dict.fromkeys([*scores, *logged])}  # (in order)
        avgs = {m: float(sum(per.values()) / len(per)) for m, per in merged.items() if per}
        metrics.update({metric_key(task, metric, "avg"): v for metric, v in avgs.items()})
        if earlier is None:
            metrics[metric_key(task, "seconds")] = seconds
        tr.log_metrics(task_run, metrics, step=step)
        tr.log_metrics(parent, {metric_key(task, m, "avg"): v for m, v in avgs.items()}, step=step)
        part = 0 if earlier is None else self._next_part(run, task, step)
        tr.log_dict(task_run, {"task": task, "step": step, "part": part, "scores": scores, "averages": avgs,
                               "label_source": result.label_source, "extras": result.extras, "seconds": seconds},
                    table_path(task, step, part))
        if result.items:
            tr.log_dict(task_run, {m: {lang: st.to_dict() for lang, st in per.items() if lang in scores.get(m, {})}
                                   for m, per in result.items.items()}, items_path(task, step, part))
        asked = set(languages if languages is not None else {lang for per in scores.values() for lang in per})
        tr.set_tags(task_run, coverage_tags(step, asked | (earlier or set())))
        tr.mark_done(task_run, Done.evaluated(step))

    def logged_scores(self, run: Any, task: str, step: int) -> dict[str, dict[str, float]]:
        """``{metric: {lang: value}}`` a fetched task run logged at ``step`` (its tables' scores, every part)."""
        scores: dict[str, dict[str, float]] = {}
        for path in list_artifact_paths(self.tracker.reader, run.info.run_id, TABLES, run.info.artifact_uri):
            parsed = parse_table_path(path)
            if parsed is None or parsed != (task, step):
                continue
            doc = read_json_artifact(self.tracker.reader, run.info.run_id, path, run.info.artifact_uri)
            for metric, per in (doc or {}).get("scores", {}).items():
                scores.setdefault(metric, {}).update({lang: float(v) for lang, v in per.items() if v is not None})
        return scores

    def _next_part(self, run: Any, task: str, step: int) -> int:
        paths = list_artifact_paths(self.tracker.reader, run.info.run_id, TABLES, run.info.artifact_uri)
        return sum(1 for path in paths if parse_table_path(path) == (task, step))

    def logged_average(self, parent: str, task: str, metric: str, step: int) -> float | None:
        """The average a cell run holds for a task's metric at a step (None when not logged)."""
        hist = one_per_step(self.tracker.reader.get_metric_history(parent, metric_key(task, metric, "avg")))
        return next((v for s, v in hist if s == step), None)

    def log_heldout(self, parent: str, step: int, loss: float | None) -> None:
        if loss is not None:
            self.tracker.log_metrics(parent, {"cpt/heldout_loss": loss}, step=step)
        self.tracker.mark_done(parent, Done.heldout(step))

    def log_cell_metrics(self, parent: str, metrics: dict[str, float], step: int) -> None:
        if metrics:
            self.tracker.log_metrics(parent, metrics, step=step)

    def heldout_curve(self, parent: str) -> list[tuple[int, float]]:
        return one_per_step(self.tracker.reader.get_metric_history(parent, "cpt/heldout_loss"))

    def task_values(self, experiment_id: str, key: str, task: str) -> dict[tuple[str, int], float]:
        """``{(metric key, step): value}`` of a cell's task run: each ``{task}/{metric}/{lang}`` metric at every
        step, the last value logged per step (a run killed between logging and marking logs it again)."""
        out: dict[tuple[str, int], float] = {}
        for run in self.tracker.find_runs(experiment_id, task_identity(key, task)):
            for mkey in run.data.metrics:
                if not mkey.startswith(task + "/") or mkey.count("/") != 2:
                    continue
                history = self.tracker.reader.get_metric_history(run.info.run_id, mkey)
                for m in sorted(history, key=lambda m: m.timestamp):
                    out[(mkey, m.step)] = m.value
        return out

    def aggregated(self, experiment_id: str, group: str, task: str, steps: list[int], n_seeds: int) -> bool:
        """Whether the seed aggregate of ``group`` for ``task`` is logged at every one of ``steps`` over
        ``n_seeds`` seeds (:meth:`log_aggregate` would then log nothing)."""
        found = self.tracker.find_runs(experiment_id, aggregate_identity(group, task))
        return bool(found) and all(is_marked(found[0], Done.aggregated(s, n_seeds)) for s in steps)

    def log_aggregate(self, experiment_id: str, group: str, task: str, name: str, tags: dict[str, Any],
                      by_step: dict[int, dict[str, float]], n_seeds: int) -> None:
        tr = self.tracker
        run_id, _ = tr.get_or_create_run(experiment_id, aggregate_identity(group, task), name)
        tr.set_tags(run_id, tags)
        for step, metrics in sorted(by_step.items()):
            if not tr.is_done(run_id, Done.aggregated(step, n_seeds)):
                tr.log_metrics(run_id, metrics, step=step)
                tr.mark_done(run_id, Done.aggregated(step, n_seeds))
        tr.finish(run_id)
