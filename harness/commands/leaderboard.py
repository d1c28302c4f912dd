"""``harness leaderboard``: per-language tables from the runs in MLflow."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.core.errors import HarnessError


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from harness.commands.common import check_tracking
    from harness.core.paths import harness_home, home_dir
    from leaderboard.publish import run_leaderboard

    if args.bootstrap < 0:
        raise HarnessError("--bootstrap must be 0 (no intervals) or a positive number of resamples")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise HarnessError(f"--out {args.out} is a file; give a folder for the html/md/csv tables")
    _check_step_form(args.step)
    given = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    store = check_tracking(given) if given else f"sqlite:///{home_dir() / 'mlflow.db'}"
    if not _store_exists(store):  # opening it would make it (and the home): there is nothing to show yet
        where = f"tracking URI {given}" if given else f"the harness home ({home_dir()})"
        raise HarnessError(f"no results yet: {where} holds no tracking store; run `harness run ...` first, or give "
                           f"--tracking-uri of a store that holds runs")
    check_filters(store, experiment=args.experiment, world=args.world, task=args.task, step=args.step,
                  metric=args.metric)
    harness_home()  # every input is checked: the home may be made now
    args.tracking_uri = store if given else check_tracking(None)
    return run_leaderboard(tracking_uri=args.tracking_uri, experiment=args.experiment, task=args.task,
                           step=args.step, world=args.world, metric=args.metric, per_seed=args.per_seed,
                           out=args.out, log_run=not args.no_log, write=not args.no_write,
                           bootstrap=args.bootstrap, bootstrap_seed=args.bootstrap_seed,
                           console=_board_console(), langs=True if args.langs else None, claims=args.claims,
                           ids=args.ids)


# -- the filters, checked against what the store holds ---------------------------------------------------------
_STEP_WORDS = ("final", "delta", "all")


def _check_step_form(step: str) -> None:
    if step in _STEP_WORDS or step.isdigit():
        return
    raise HarnessError(f"--step {step!r}: give 0, a CPT step, final, delta or all{_did_you_mean(step, _STEP_WORDS)}")


def _did_you_mean(name: str, known: Any) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def _unknown(flag: str, what: str, name: str, known: Any, where: str = "") -> HarnessError:
    """One line: the value is not in the store, the closest ones that are, and all that are."""
    return HarnessError(f"{flag} {name!r}: no {what} of that name in the tracking store{where}"
                        f"{_did_you_mean(name, known)}; it holds {', '.join(sorted(known))}")


def _store_exists(uri: str) -> bool:
    """Whether there is a store to read (a SQLite file or a file-store folder that exists; a server: always)."""
    from urllib.parse import urlparse

    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):]).is_file()
    if "://" not in uri and ":" not in uri:
        return Path(uri).is_dir()
    if urlparse(uri).scheme == "file":
        return Path(urlparse(uri).path).is_dir()
    return True


def _task_runs(client: Any, exp_ids: list[str]) -> list[Any]:
    from harness.core.record import Kind, kind_filter

    out: list[Any] = []
    token = None
    while True:
        page = client.search_runs(exp_ids, filter_string=kind_filter(Kind.TASK), max_results=1000, page_token=token)
        out.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return out


def check_filters(uri: str, *, experiment: str | None, world: str | None, task: str | None, step: str,
                  metric: str | None) -> None:
    """``--experiment``, ``--world``, ``--task``, ``--step`` and ``--metric`` must name what the store holds (each
    within the ones before it): a value it does not hold fails in one line with the closest ones and the list,
    instead of printing every other table and no match. A store without any task run is left to say so itself."""
    if not any((experiment, world, task, step not in _STEP_WORDS, metric not in (None, "all"))):
        return
    if not _store_exists(uri):
        return
    from mlflow.tracking import MlflowClient

    from harness.core.record import evaluated_steps, own_tags
    from harness.core.record_read import task_facts_from_tags
    from leaderboard.collect import experiments, untagged_task_facts

    client = MlflowClient(uri)
    exps = experiments(client)
    if experiment:
        names = [e.name for e in exps]
        if experiment not in names:
            if not names:
                return
            raise _unknown("--experiment", "experiment", experiment, names)
        exps = [e for e in exps if e.name == experiment]
    runs = _task_runs(client, [e.experiment_id for e in exps]) if exps else []
    if not runs:
        return

    def own(run: Any, name: str) -> str:
        return own_tags(run).get(name, "?")

    scope = [f"experiment {experiment!r}"] if experiment else []

    def where() -> str:
        return f" ({', '.join(scope)})" if scope else ""

    if world:
        worlds = {own(r, "world") for r in runs}
        if world not in worlds:
            raise _unknown("--world", "world", world, worlds, where())
        runs = [r for r in runs if own(r, "world") == world]
        scope.append(f"world {world!r}")
    if task:
        tasks = {own(r, "task") for r in runs}
        if task not in tasks:
            raise _unknown("--task", "task", task, tasks, where())
        runs = [r for r in runs if own(r, "task") == task]
        scope.append(f"task {task!r}")
    if step.isdigit():
        steps = set().union(*(evaluated_steps(client, r, own(r, "task")) for r in runs))
        if steps and int(step) not in steps:
            shown = ", ".join(map(str, sorted(steps)))
            raise HarnessError(f"--step {step}: no results at CPT step {step} in the tracking store{where()}; it "
                               f"holds step(s) {shown}; give one of them, final, delta or all")
    if metric not in (None, "all"):
        metrics: set[str] = set()
        for r in runs:
            metrics |= set((task_facts_from_tags(own_tags(r)) or untagged_task_facts(own(r, "task"))).metrics)
        if metrics and metric not in metrics:
            raise _unknown("--metric", "metric", metric, metrics, where())


def _board_console() -> Console:
    """The console the tables are printed to: as wide as ``COLUMNS`` says, else the terminal, else 100 cells
    when piped; tables wider than that are split into parts (the files keep them whole)."""
    import shutil

    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        columns = shutil.get_terminal_size((100, 24)).columns if sys.stdout.isatty() else 100
    return Console(width=max(columns, 20))


def add_parser(sub: Any) -> None:
    lb = sub.add_parser("leaderboard", help="per-language tables from the runs in MLflow")
    lb.add_argument("--tracking-uri", help="the MLflow store to read (default: $MLFLOW_TRACKING_URI, else the "
                                           "harness home's sqlite store)")
    lb.add_argument("--experiment", help="experiment name (default: all)")
    lb.add_argument("--world", help="only experiments of this world")
    lb.add_argument("--task", help="print only this task (the files always hold every task)")
    lb.add_argument("--step", default="final",
                    help="print this CPT step: 0, N, final (default), delta (final - step 0) or all")
    lb.add_argument("--metric", help="print this metric (default: the task's headline; 'all' for every one)")
    lb.add_argument("--per-seed", action="store_true", help="print one row per seed instead of seed means")
    lb.add_argument("--langs", action="store_true",
                    help="print the per-language tables with their slices and paired tests (default: one screen: "
                         "the claims, each row's average per task, the notes; --task, --step, --metric and "
                         "--per-seed print per-language tables too)")
    lb.add_argument("--claims", action="store_true",
                    help="print every claim of the papers with its averages, interval, p-value and note")
    lb.add_argument("--out", type=Path,
                    help="folder for html/md/csv (default: <HARNESS_HOME>/leaderboards/<experiment>/)")
    lb.add_argument("--bootstrap", type=int, default=1000,
                    help="bootstrap resamples for the confidence intervals (default 1000; 0: none)")
    lb.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    lb.add_argument("--no-log", action="store_true", help="write the files but do not log them to MLflow")
    lb.add_argument("--no-write", action="store_true", help="only print (no files, no MLflow run)")
    lb.add_argument("--ids", action="store_true", help="name the MLflow run id of every cell run under a board")
    lb.set_defaults(func=cmd_leaderboard)
