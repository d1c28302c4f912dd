"""``harness leaderboard``: read the runs, build the boards, write the renderings, log them to MLflow, print.

Files (per experiment, in ``--out DIR`` or ``<HARNESS_HOME>/leaderboards/<experiment>/``): ``leaderboard.html``
(self-contained page), ``leaderboard.md``, ``leaderboard.csv`` (every cell, long format), ``csv/<board>.csv`` (one
wide table per board), ``leaderboard.txt`` (the terminal rendering) and ``leaderboard.json`` (the boards as data).

MLflow: one run per experiment it summarizes, tagged ``harness.kind=leaderboard``, found again by that tag and
updated on every render (its previous artifacts are replaced, never duplicated). It holds the files above as
artifacts, every board through ``MlflowClient.log_table`` (``tables/<board>.json``, shown by the UI's artifact
view), and the headline tables in Markdown as the run's description.

Results runs, the numbers a person sorts and charts in the runs table: one run per task and row (method variant)
and profile, tagged ``harness.kind=result``, named ``<task> · <row>`` (``sr-t · ofa d=full``), found again by its
identity and updated on every render. Its metrics are the task's headline metric (seed means, as on the board):
``step0/avg``, ``final/avg``, ``delta/avg`` (final - step 0), ``final/avg_common``, ``final/mean_rank`` and
``step0/<lang>``, ``final/<lang>`` per language; its params name the task, metric, method, dim, source, profile,
seeds and final CPT step; its artifacts are the task's board CSVs and the cells' ``init_report.json``; its
description links to the leaderboard page and to its task's view. When the tasks were evaluated at step 0 only
(the ``cpu`` profile, whose CPT is a smoke test) the final step is step 0: ``step0/*`` and ``final/*`` hold the same
step-0 values and there is no ``delta/avg`` (a 0 would read as "CPT changed nothing"; it was not measured).

Views: the experiment gets one saved view of its runs table per task, ``harness-results-<task>`` (that task's
results runs, the columns its runs have, sorted by ``final/avg`` in the task's direction: ascending for a
lower-is-better metric such as the MLM loss), and one of every task, ``harness-results`` (sorted by
``final/mean_rank``, 1 = best in every task); ``harness ui`` prints their URLs and MLflow lists them by name under
**Views**. The experiment's description (shown above its runs table) links to the leaderboard page and to each view.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.core.artifacts import copy_artifact
from harness.core.record import (
    INIT_REPORT,
    Kind,
    board_table_path,
    cells_of,
    kind_filter,
    leaderboard_identity,
    metric_key,
    result_identity,
    tag,
)
from harness.core.tracking import RESULTS_VIEW, Tracker, artifact_url, column, runs_table_url
from leaderboard.model import Board, Leaderboard, board_dict
from leaderboard.tables import build_leaderboard, select_boards

log = logging.getLogger(__name__)
# characters of Markdown in the run description: MLflow's limit on a run tag's value (8,000), less the line that
# says where the rest is; a longer value would be cut by MLflow itself, with a warning on stderr
NOTE_LIMIT = 8000 - 40
EXPERIMENT_NOTE_LIMIT = 20000  # MLflow's limit on an experiment tag's value
# the part of the experiment's description that ``harness leaderboard`` writes (anything else in it is kept)
NOTE_START, NOTE_END = "<!-- harness:results -->", "<!-- /harness:results -->"
HEADLINE_METRICS = ("step0/avg", "final/avg", "delta/avg", "final/mean_rank")


@dataclass
class Published:
    experiment: str
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    run_id: str | None = None


def safe_dir_name(experiment: str) -> Path:
    """``world/source`` -> ``world/source`` with every part reduced to safe characters (no ``..``)."""
    parts = [re.sub(r"[^\w.-]", "_", p) for p in experiment.split("/") if p not in ("", ".", "..")]
    return Path(*[p if p.strip(".") else "_" for p in parts]) if parts else Path("_")


def out_dir_for(experiment: str, out: Path | None, several: bool) -> Path:
    if out is not None:
        return Path(out) / safe_dir_name(experiment) if several else Path(out)
    from harness.core.paths import harness_home

    return harness_home() / "leaderboards" / safe_dir_name(experiment)


def _round(v: float | None, digits: int = 4) -> float | None:
    return None if v is None else round(float(v), digits)


def board_frame(board: Board) -> Any:
    """A board as a DataFrame for ``log_table`` (means per language, averages, rank, init columns), rounded to 4
    decimals for the UI's table view (``leaderboard.csv`` and ``csv/`` keep full precision)."""
    import pandas as pd

    inits = board.init_columns()
    recs = []
    for r in board.rows + board.paper_rows:
        rec: dict[str, Any] = {"row": r.label, "kind": r.kind, "seeds": " ".join(r.seeds)}
        rec.update({lang: _round(r.value(lang)) for lang in board.languages})
        rec.update({"avg": _round(r.avg), "avg_common": _round(r.avg_common), "mean_rank": _round(r.mean_rank)})
        rec.update({name: _round(r.init.get(k)) for k, name in inits})
        recs.append(rec)
    cols = ["row", "kind", "seeds", *board.languages, "avg", "avg_common", "mean_rank", *[n for _, n in inits]]
    return pd.DataFrame.from_records(recs, columns=cols)


def write_files(lb: Leaderboard, out_dir: Path, *, generated: str, tracking_uri: str = "") -> dict[str, Path]:
    from leaderboard.render_csv import board_csv, long_csv
    from leaderboard.render_html import leaderboard_html
    from leaderboard.render_markdown import leaderboard_md
    from leaderboard.render_terminal import render_text

    out_dir.mkdir(parents=True, exist_ok=True)
    csv_dir = out_dir / "csv"
    csv_dir.mkdir(exist_ok=True)
    for stale in csv_dir.glob("*.csv"):  # boards of an earlier render that may no longer exist
        stale.unlink()
    files = {
        "html": out_dir / "leaderboard.html",
        "md": out_dir / "leaderboard.md",
        "csv": out_dir / "leaderboard.csv",
        "txt": out_dir / "leaderboard.txt",
        "json": out_dir / "leaderboard.json",
    }
    files["html"].write_text(leaderboard_html(lb, generated=generated, tracking_uri=tracking_uri), encoding="utf-8")
    files["md"].write_text(leaderboard_md(lb, generated=generated), encoding="utf-8")
    files["csv"].write_text(long_csv(lb), encoding="utf-8")
    files["txt"].write_text(render_text(lb.boards, claims=lb.claims), encoding="utf-8")
    files["json"].write_text(json.dumps({
        "experiment": lb.experiment, "generated": generated, "worlds": lb.worlds, "bootstrap": lb.bootstrap,
        "claims": [c.as_dict() for c in lb.claims],
        "open_question": [{"source": o.source, "objective": o.objective, **o.result.as_dict()}
                          for o in lb.open_question],
        "tokenizers": [st.as_dict() for st in lb.tokstats],
        "boards": [board_dict(b) for b in lb.boards], "languages": lb.languages,
        "variants": [{"label": v.label, "profile": v.profile, "seeds": v.seeds, "settings": v.settings,
                      "init": v.init, "convergence": v.convergence, "curves": v.curves} for v in lb.variants],
    }, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    for b in lb.boards:
        p = csv_dir / f"{b.id}.csv"
        p.write_text(board_csv(b), encoding="utf-8")
        files[f"csv:{b.id}"] = p
    return files


def _clear_artifacts(client: Any, run_id: str) -> None:
    """Remove a leaderboard run's previous artifacts so that a re-render replaces them (log_table would append)."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    run = client.get_run(run_id)
    try:
        get_artifact_repository(run.info.artifact_uri).delete_artifacts()
    except Exception as exc:  # a store without deletion: files are overwritten, tables could be appended to
        log.warning("could not clear the previous leaderboard artifacts of run %s: %s", run_id, exc)
    client.set_tag(run_id, "mlflow.loggedArtifacts", "[]")


def leaderboard_run(tracker: Tracker, experiment_id: str) -> tuple[str, bool]:
    """The experiment's leaderboard run (created when absent). Returns (run_id, existed)."""
    found = tracker.find_runs(experiment_id, leaderboard_identity())
    if found:
        return found[0].info.run_id, True
    run = tracker.client.create_run(experiment_id, tags={tag(k): v for k, v in leaderboard_identity().items()},
                                    run_name="leaderboard")
    return run.info.run_id, False


def log_to_mlflow(tracker: Tracker, lb: Leaderboard, out_dir: Path, *, generated: str) -> str:
    """Log the rendered files to the experiment's leaderboard run (a failure marks the run FAILED), then the
    results runs and the runs table's saved view."""
    exp_id = tracker.experiment(lb.experiment)  # sets the experiment's kind on an experiment created before it
    run_id, existed = leaderboard_run(tracker, exp_id)
    try:
        _log(tracker, lb, out_dir, run_id, existed, generated=generated)
    except BaseException as exc:
        tracker.fail(run_id, exc if isinstance(exc, Exception) else "interrupted")
        raise
    log_result_runs(tracker, lb, exp_id, out_dir, leaderboard_run_id=run_id, generated=generated)
    return run_id


@dataclass
class TaskView:
    """What the saved view of one task's results runs needs: its metric, direction, profiles and logged metrics."""
    task: str
    metric: str
    higher_is_better: bool
    profiles: set[str] = field(default_factory=set)
    metrics: set[str] = field(default_factory=set)

    @property
    def key(self) -> str:
        return view_key(self.task)

    @property
    def name(self) -> str:
        return f"{self.task} · {self.metric}, {'higher' if self.higher_is_better else 'lower'} is better"


def view_key(task: str) -> str:
    """The key of a task's saved runs-table view: ``harness-results-<task>``."""
    return RESULTS_VIEW + "-" + re.sub(r"[^\w.-]", "_", task)


def ui_link(url: str) -> str:
    """A URL of the UI as a link relative to the UI page it is shown on (``#/experiments/...``): it opens in the UI
    that shows it, whatever its host, port or path."""
    return url[url.index("#"):]


def view_columns(views: list[TaskView], *, all_tasks: bool = False) -> list[str]:
    """The runs-table columns of a view: the headline metrics its runs have (``delta/avg`` only where a task was
    evaluated after CPT), the task (all tasks), the metric, the profile (when there are several), seeds, final step."""
    have = set().union(*(v.metrics for v in views))
    several_profiles = len(set().union(*(v.profiles for v in views))) > 1
    return ([column("params", "task")] if all_tasks else []) + [column("params", "metric")] + (
        [column("params", "profile")] if several_profiles else []) + [
        column("metrics", m) for m in HEADLINE_METRICS if m in have] + [
        column("params", "seeds"), column("params", "final_step")]


def save_result_views(tracker: Tracker, exp_id: str, views: list[TaskView]) -> None:
    """One saved view per task (sorted by ``final/avg`` in the task's direction) and one of every task (sorted by
    ``final/mean_rank``, which is 1 for the best row of any task)."""
    kind = kind_filter(Kind.RESULT)
    for v in views:
        order = "final/avg" if "final/avg" in v.metrics else "step0/avg"
        tracker.save_runs_view(exp_id, columns=view_columns([v]), order_by=column("metrics", order),
                               ascending=not v.higher_is_better, key=v.key, name=v.name,
                               search_filter=kind_filter(Kind.RESULT, task=v.task))
    tracker.save_runs_view(exp_id, columns=view_columns(views, all_tasks=True),
                           order_by=column("metrics", "final/mean_rank"), ascending=True, search_filter=kind,
                           key=RESULTS_VIEW, name="all tasks · by mean rank (1 = best)")


def _quote(v: str) -> str:
    return "'" + v.replace("'", "\\'") + "'"


def leaderboard_link(exp_id: str, run_id: str) -> str:
    return ui_link(artifact_url("", exp_id, run_id, "leaderboard.html"))


def view_link(exp_id: str, key: str) -> str:
    return ui_link(runs_table_url("", exp_id, key))


def experiment_note(exp_id: str, views: list[TaskView], leaderboard_run_id: str | None,
                    generated: str) -> str:
    """The experiment description's results block: its first line (what the UI shows above the runs table) links to
    the leaderboard page and to each task's view."""
    parts = [f"[leaderboard]({leaderboard_link(exp_id, leaderboard_run_id)})"] if leaderboard_run_id else []
    parts += [f"[{v.task}]({view_link(exp_id, v.key)}) ({v.metric}, {'higher' if v.higher_is_better else 'lower'} "
              "is better)" for v in views]
    parts.append(f"[all tasks]({view_link(exp_id, RESULTS_VIEW)}) (by mean rank)")
    return "\n".join([
        "**Results:** " + " · ".join(parts), "",
        f"`harness leaderboard` rendered these on {generated}: the leaderboard page (the papers' claims, every "
        "table with its intervals, the CPT curves), and one run per task and method whose metrics are the task's "
        "headline numbers (`step0/avg`, `final/avg`, `final/mean_rank`, per language, and `delta/avg` where the "
        "tasks were evaluated after CPT), in one saved view of the runs table per task, best first (also under "
        "**Views**).",
    ])


def merge_note(old: str, block: str) -> str:
    """The description with the harness's block replaced (or put first), the rest of it kept."""
    block = f"{NOTE_START}\n{block}\n{NOTE_END}"
    if NOTE_START in old and NOTE_END in old:
        head, rest = old.split(NOTE_START, 1)
        text = head + block + rest.split(NOTE_END, 1)[1]
    else:
        text = block + ("\n\n" + old if old.strip() else "")
    return text[:EXPERIMENT_NOTE_LIMIT]


def result_note(task: str, label: str, ref: Board, exp_id: str, leaderboard_run_id: str | None) -> str:
    """A results run's description: links to the leaderboard page and to its task's view, what its numbers are."""
    links = [f"**[Leaderboard]({leaderboard_link(exp_id, leaderboard_run_id)})**"] if leaderboard_run_id else []
    links.append(f"[all {task} results]({view_link(exp_id, view_key(task))})")
    step = ref.step if ref.step is not None else "mixed"
    lines = [" · ".join(links), "",
             f"`{label}` on `{task}`: `{ref.metric}`, {'higher' if ref.higher_is_better else 'lower'} is better; "
             f"profile {ref.profile}; seed means as on the board; final step {step}."]
    if ref.step == 0:
        lines.append("The tasks were evaluated at step 0 only, so `final/*` are the step-0 values and there is no "
                     "`delta/avg`.")
    lines += ["", *[f"- {n}" for n in ref.notes]]
    return "\n".join(lines)[:4000]


def result_boards(lb: Leaderboard) -> dict[tuple[str, str], dict[str, Board]]:
    """(profile, task) -> {"step0": board, "final": board, "delta": board} of the task's headline metric. When the
    final step is step 0 (the tasks evaluated at step 0 only) that board is both "step0" and "final"."""
    out: dict[tuple[str, str], dict[str, Board]] = {}
    for b in lb.boards:
        if not b.headline:
            continue
        name = {"final": "final", "delta": "delta"}.get(b.kind) or ("step0" if b.step == 0 else None)
        if name:
            out.setdefault((b.profile, b.task), {})[name] = b
    for boards in out.values():
        if "step0" not in boards and "final" in boards and boards["final"].step == 0:
            boards["step0"] = boards["final"]
    return out


def result_metrics(boards: dict[str, Board], label: str) -> dict[str, float]:
    """The metrics of one results run: averages, mean rank and per-language values of the row ``label``."""
    metrics: dict[str, float] = {}
    for name, b in boards.items():
        try:
            row = b.row(label)
        except KeyError:
            continue
        for stat in ("avg", "avg_common", "mean_rank"):
            v = getattr(row, stat)
            if v is not None and (stat == "avg" or name == "final"):
                metrics[metric_key(name, stat)] = float(v)
        if name != "delta":
            for lang in b.languages:
                v = row.value(lang)
                if v is not None:
                    metrics[metric_key(name, lang)] = float(v)
    return metrics


def _init_reports(tracker: Tracker, exp_id: str, row: Any, folder: Path) -> list[Path]:
    """The cells' ``init_report.json`` of a row (one per seed), downloaded into ``folder``."""
    key = row.variant
    if key is None:
        return []
    out = []
    for seed in row.seeds:
        runs = tracker.find_runs(exp_id, cells_of(method=key.method, dim=key.dim, source=key.source, seed=seed))
        for run in runs[:1]:
            dest = folder / f"init_report_seed{seed}.json"
            try:  # in place from a local store; no download progress bar either way
                copy_artifact(tracker.client, run.info.run_id, INIT_REPORT, dest, run.info.artifact_uri)
            except Exception as exc:  # noqa: BLE001 - a cell without the report: the run is still worth logging
                log.warning("no %s in run %s: %s", INIT_REPORT, run.info.run_id, exc)
                continue
            out.append(dest)
    return out


def log_result_runs(tracker: Tracker, lb: Leaderboard, exp_id: str, out_dir: Path, *,
                    leaderboard_run_id: str | None = None, generated: str = "") -> list[str]:
    """One run per task x row x profile with the headline numbers as metrics (see the module docstring), the
    experiment's saved runs-table views of them and its description's links. Returns the run ids."""
    import tempfile

    client = tracker.client
    ids: list[str] = []
    views: dict[str, TaskView] = {}
    several_profiles = len({p for p, _ in result_boards(lb)}) > 1
    for (profile, task), boards in sorted(result_boards(lb).items()):
        ref = boards.get("final") or boards.get("step0") or next(iter(boards.values()))
        csvs = [out_dir / "csv" / f"{b_id}.csv" for b_id in dict.fromkeys(b.id for b in boards.values())]
        view = views.setdefault(task, TaskView(task, ref.metric, ref.higher_is_better))
        view.profiles.add(profile)
        for row in ref.rows:
            name = f"{task} · {row.label}" + (f" · {profile}" if several_profiles else "")
            run_id, existed = tracker.get_or_create_run(
                exp_id, result_identity(task, profile, row.label), name)
            try:
                if existed:
                    _clear_artifacts(client, run_id)
                key = row.variant
                params = {"task": task, "metric": ref.metric, "profile": profile, "row": row.label,
                          "seeds": " ".join(row.seeds), "higher_is_better": ref.higher_is_better,
                          "final_step": ref.step if ref.step is not None else "mixed"}
                if key is not None:
                    params.update(method=key.method, dim=key.dim, source=key.source)
                run = client.get_run(run_id)
                changed = {k: v for k, v in params.items() if run.data.params.get(k, str(v)) != str(v)}
                if changed:  # a param cannot be overwritten; the tag says what it is now
                    tracker.set_tags(run_id, {f"now.{k}": v for k, v in changed.items()})
                tracker.log_params(run_id, params)
                metrics = result_metrics(boards, row.label)
                view.metrics |= set(metrics)
                tracker.log_metrics(run_id, metrics, step=0)
                tags = {"world": ",".join(lb.worlds), "method": key.method if key else row.label,
                        "mlflow.runName": name,
                        "mlflow.note.content": result_note(task, row.label, ref, exp_id, leaderboard_run_id)}
                if leaderboard_run_id:
                    tags["leaderboard_run"] = leaderboard_run_id
                tracker.set_tags(run_id, tags)
                for f in csvs:
                    if f.is_file():
                        client.log_artifact(run_id, str(f), "leaderboard")
                with tempfile.TemporaryDirectory() as td:
                    for f in _init_reports(tracker, exp_id, row, Path(td)):
                        client.log_artifact(run_id, str(f), "init")
                tracker.finish(run_id)
            except BaseException as exc:
                tracker.fail(run_id, exc if isinstance(exc, Exception) else "interrupted")
                raise
            ids.append(run_id)
    if ids:
        save_result_views(tracker, exp_id, list(views.values()))
        old = (client.get_experiment(exp_id).tags or {}).get("mlflow.note.content", "")
        block = experiment_note(exp_id, list(views.values()), leaderboard_run_id,
                                generated or datetime.now(UTC).isoformat(timespec="seconds"))
        client.set_experiment_tag(exp_id, "mlflow.note.content", merge_note(old, block))
    return ids


def _log(tracker: Tracker, lb: Leaderboard, out_dir: Path, run_id: str, existed: bool, *, generated: str) -> None:
    from leaderboard.render_markdown import board_md, slices_md

    client = tracker.client
    if existed:
        _clear_artifacts(client, run_id)
        client.update_run(run_id, status="RUNNING")
        if tag("error") in client.get_run(run_id).data.tags:  # left by an interrupted earlier render
            client.delete_tag(run_id, tag("error"))
    client.log_artifacts(run_id, str(out_dir))
    for b in lb.boards:
        client.log_table(run_id, board_frame(b), board_table_path(b.id))
    note = [f"# Leaderboard · {lb.experiment}", "", f"Rendered {generated}. Artifacts: `leaderboard.html` "
            "(the page), `leaderboard.md`, `leaderboard.csv`, `csv/`, and every board as a table under `tables/`.",
            ""]
    for b in lb.headline_boards():
        note += board_md(b) + slices_md(b)
    text = "\n".join(note)
    if len(text) > NOTE_LIMIT:
        cut = text.rfind("\n", 0, NOTE_LIMIT)  # at a line's end: no table row or link cut in half
        text = text[:cut if cut > 0 else NOTE_LIMIT] + "\n\n(truncated: see leaderboard.md)"
    summary: dict[str, float] = {}
    for b in lb.headline_boards():
        for r in b.rows:
            for name, v in (("avg", r.avg), ("avg_common", r.avg_common), ("mean_rank", r.mean_rank)):
                if v is not None:
                    summary[metric_key("leaderboard", b.profile, b.task, b.metric, r.label, name)] = v
    if summary:
        tracker.log_metrics(run_id, summary, step=0)
    bs = lb.bootstrap or {}
    tags = {
        **{tag(k): v for k, v in leaderboard_identity().items()},
        tag("bootstrap"): f"{bs.get('resamples', 0)} resamples, seed {bs.get('seed', 0)}, level {bs.get('level')}",
        tag("rendered_at"): generated,
        tag("boards"): str(len(lb.boards)),
        tag("worlds"): ",".join(lb.worlds),
        tag("profiles"): ",".join(sorted({b.profile for b in lb.boards})),
        tag("tasks"): ",".join(sorted({b.task for b in lb.boards})),
        "mlflow.note.content": text,
    }
    for k, v in tags.items():
        client.set_tag(run_id, k, v)
    client.set_terminated(run_id, status="FINISHED")


def publish(tracker: Tracker, lb: Leaderboard, out_dir: Path, *, log_run: bool = True) -> Published:
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    files = write_files(lb, out_dir, generated=generated, tracking_uri=tracker.uri)
    pub = Published(lb.experiment, out_dir, files)
    if log_run:
        pub.run_id = log_to_mlflow(tracker, lb, out_dir, generated=generated)
    return pub


def run_leaderboard(tracking_uri: str | None = None, experiment: str | None = None, task: str | None = None,
                    step: str = "final", world: str | None = None, *, metric: str | None = None,
                    per_seed: bool = False, out: Path | None = None, log_run: bool = True, write: bool = True,
                    bootstrap: int = 1000, bootstrap_seed: int = 0, console: Console | None = None,
                    langs: bool | None = None, claims: bool = False, ids: bool = False) -> int:
    """Read, build, print, write and log the leaderboard of each experiment. What is printed: by default one
    screen (:func:`leaderboard.render_terminal.render_overview`: the claims once, each row's headline average per
    task, the notes once, where the rest is); ``langs`` (or any of ``task``, ``metric``, ``per_seed``, a ``step``
    other than final, which ask for particular tables): the per-language boards with their slices and paired tests;
    ``claims``: every claim with its numbers and note. The files always hold everything."""
    from harness.core.progress import log_console

    # piped output (a file, a test) gets the full table instead of wrapped columns
    console = console or Console(width=None if sys.stdout.isatty() else 400)
    err = log_console()  # progress and messages: never wrapped when stderr is piped
    tracker = Tracker(tracking_uri)
    results, where = _build_boards(tracker, experiment, world, err, per_seed=per_seed, write=write,
                                   bootstrap=bootstrap, bootstrap_seed=bootstrap_seed, ids=ids)
    if not results:
        in_exp = f" in experiment {experiment!r}" if experiment else ""
        console.print(f"no results yet{in_exp}: run `harness run ...` first")
        return 0
    if langs is None:
        langs = bool(task or metric or per_seed or step != "final")
    several = len(results) > 1
    # where each experiment's page is written (after the tables are printed)
    pages = {lb.experiment: out_dir_for(lb.experiment, out, several) / "leaderboard.html"
             for lb, _ in results} if write else {}
    shown = _print_boards(results, where, pages, console, task=task, step=step, metric=metric, langs=langs,
                          claims=claims)
    if shown == 0:
        console.print(f"no table for task={task or 'any'} step={step} metric={metric or 'headline'}; "
                      "`--step all --metric all` lists every table")
    if write:
        for lb, _ in results:
            pub = publish(tracker, lb, out_dir_for(lb.experiment, out, several), log_run=log_run)
            err.print(f"[bold]{lb.experiment}[/bold]: {len(lb.boards)} tables written to {pub.out_dir}")
            if pub.run_id:
                err.print(f"  MLflow: leaderboard run {pub.run_id} in experiment {lb.experiment!r} "
                          f"({tracker.uri}); browse with `harness ui`")
            console.print(f"HTML: {pub.files['html']}", soft_wrap=True)
    return 0


def _build_boards(tracker: Tracker, experiment: str | None, world: str | None, err: Console, *, per_seed: bool,
                  write: bool, bootstrap: int, bootstrap_seed: int, ids: bool,
                  ) -> tuple[list[tuple[Leaderboard, Leaderboard | None]], dict[str, tuple[str | None, str]]]:
    """The leaderboard of each experiment with results (and its per-seed one when ``per_seed``), with a progress
    bar on ``err``; and for each, (the note of a run still computing its cells, the footer naming its runs)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    from harness.core.progress import Progress  # plain progress lines when stderr is piped
    from leaderboard.collect import collect_experiment, experiments

    exps = experiments(tracker.reader, experiment)
    results: list[tuple[Leaderboard, Leaderboard | None]] = []
    where: dict[str, tuple[str | None, str]] = {}  # experiment -> (partial note, footer naming its runs)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=err,
                  transient=True) as prog:
        for exp in exps:
            data = collect_experiment(tracker.reader, exp, world=world, progress=prog)
            if not data.tasks:
                continue
            lb = build_leaderboard(data, bootstrap=bootstrap if write else 0, bootstrap_seed=bootstrap_seed,
                                   progress=prog)
            per = build_leaderboard(data, per_seed=True, bootstrap=0) if per_seed else None
            results.append((lb, per))
            from harness.core.run_status import partial_note
            from leaderboard.where_rows import runs_footer

            where[lb.experiment] = (partial_note(tracker.reader, tracker.uri, exp),
                                    runs_footer(exp.name, data.cells.values(), ids))
    return results, where


def _print_boards(results: list[tuple[Leaderboard, Leaderboard | None]],
                  where: dict[str, tuple[str | None, str]], pages: dict[str, Path], console: Console, *,
                  task: str | None, step: str, metric: str | None, langs: bool, claims: bool) -> int:
    """Print each experiment's leaderboard (see :func:`run_leaderboard`); the number of screens and tables
    printed."""
    from leaderboard.render_terminal import (
        render,
        render_claims,
        render_claims_detail,
        render_open_question,
        render_overview,
    )

    shown = 0
    for lb, per in results:
        note, footer = where.get(lb.experiment, (None, ""))
        if note:  # a run still computing cells of this experiment
            console.print(note, style="bold", highlight=False, soft_wrap=True)
        mine = [c for c in lb.claims if task is None or c.task in (task, "held-out diagnostic")]
        if claims:
            render_claims_detail(mine, console)
            shown += 1
        if not langs:
            if not claims:
                render_overview(lb, console, tasks=[task] if task else None,
                                html=str(pages[lb.experiment]) if lb.experiment in pages else None)
                shown += 1
            console.print(footer, highlight=False)  # folded at words to the console's width
            continue
        if not claims:
            render_claims(mine, console)
            render_open_question([o for o in lb.open_question if task is None or o.result.task == task], console)
        boards = select_boards((per or lb).boards, task=task, step=step, metric=metric)
        for b in boards:
            render(b, console)
        shown += len(boards)
        console.print(footer, highlight=False)  # folded at words to the console's width
    return shown
