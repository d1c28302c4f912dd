"""``harness compare A B``: two methods or rows, experiments, runs or leaderboard folders side by side."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.commands.leaderboard import _store_exists
    from harness.core.paths import home_dir
    from harness.core.tracking import check_tracking_reachable, check_tracking_uri
    from leaderboard.compare_output import run_compare

    if args.bootstrap < 0:
        raise HarnessError("--bootstrap must be 0 (no intervals) or a positive number of resamples")
    if not all(Path(x).expanduser().exists() for x in (args.a, args.b)):
        given = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        args.tracking_uri = check_tracking_uri(given) if given else f"sqlite:///{home_dir() / 'mlflow.db'}"
        if not _store_exists(args.tracking_uri):  # opening it would make it (and the home): nothing to compare
            where = f"tracking URI {given}" if given else f"the harness home ({home_dir()})"
            raise HarnessError(f"no results yet: {where} holds no tracking store, so {args.a!r} and {args.b!r} "
                               f"name no experiment or run; run `harness run ...` first, give --tracking-uri of a "
                               f"store that holds runs, or give folders written by `harness leaderboard`")
        check_tracking_reachable(args.tracking_uri)
    return run_compare(args.a, args.b, tracking_uri=args.tracking_uri, task=args.task, metric=args.metric,
                       step=args.step, fmt=args.format, out=args.out, resamples=args.bootstrap,
                       seed=args.bootstrap_seed, experiment=args.experiment, ids=args.ids,
                       across_variants=args.across_variants)


# leaderboard.compare_output.FORMATS and leaderboard.stats.VERDICT_RESAMPLES, named here so that building the parser
# imports neither (tests/test_compare_verdict.py checks they agree)
FORMATS = ("terminal", "md", "csv")
VERDICT_RESAMPLES = 2000


def add_parser(sub: Any) -> None:
    c = sub.add_parser("compare", help="two methods or rows, experiments, runs or leaderboard folders side by side, per task and "
                                        "language, with the difference, its interval and its significance")
    c.add_argument("a", help="a method name or row label (ofa, 'ofa d=100') of the current experiment, an "
                             "experiment name, an MLflow run id, or a folder written by `harness leaderboard`")
    c.add_argument("b", help="the same kinds as A; the difference is A - B")
    c.add_argument("--experiment", help="where method names and row labels are looked for (default: the "
                                        "experiment of the latest cell run)")
    c.add_argument("--ids", action="store_true", help="name the MLflow run id of every cell run the rows come from")
    c.add_argument("--tracking-uri", help="the MLflow store to read (default: $MLFLOW_TRACKING_URI, else the "
                                          "harness home's sqlite store)")
    c.add_argument("--task", help="only this task")
    c.add_argument("--metric", help="this metric (default: the task's headline; 'all' for every one)")
    c.add_argument("--step", default="final", help="final (default), a CPT step (0, 10, ...) or all")
    c.add_argument("--format", choices=list(FORMATS), default="terminal",
                   help="terminal: plain text at most 160 columns wide (default); md: Markdown; csv: one line per "
                        "language and average")
    c.add_argument("--across-variants", action="store_true",
                   help="compare rows of different variants (CPT budget or settings, evaluation precision, CPU "
                        "kernels, source model), refused otherwise; each table then says what differs")
    c.add_argument("--out", type=Path, help="write to this file instead of printing")
    c.add_argument("--bootstrap", type=int, default=VERDICT_RESAMPLES,
                   help=f"bootstrap resamples for the intervals (default {VERDICT_RESAMPLES}, as the claims'; 0: none)")
    c.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    c.set_defaults(func=cmd_compare)
