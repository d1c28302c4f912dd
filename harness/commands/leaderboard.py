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
    from harness.core.paths import harness_home
    from harness.core.tracking import check_tracking_reachable, check_tracking_uri
    from leaderboard.publish import run_leaderboard

    if args.bootstrap < 0:
        raise HarnessError("--bootstrap must be 0 (no intervals) or a positive number of resamples")
    harness_home()
    args.tracking_uri = check_tracking_uri(args.tracking_uri)
    check_tracking_reachable(args.tracking_uri)
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise HarnessError(f"--out {args.out} is a file; give a folder for the html/md/csv tables")
    return run_leaderboard(tracking_uri=args.tracking_uri, experiment=args.experiment, task=args.task,
                           step=args.step, world=args.world, metric=args.metric, per_seed=args.per_seed,
                           out=args.out, log_run=not args.no_log, write=not args.no_write,
                           bootstrap=args.bootstrap, bootstrap_seed=args.bootstrap_seed,
                           console=_board_console())


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
    lb.add_argument("--tracking-uri")
    lb.add_argument("--experiment", help="experiment name (default: all)")
    lb.add_argument("--world", help="only experiments of this world")
    lb.add_argument("--task", help="print only this task (the files always hold every task)")
    lb.add_argument("--step", default="final",
                    help="print this CPT step: 0, N, final (default), delta (final - step 0) or all")
    lb.add_argument("--metric", help="print this metric (default: the task's headline; 'all' for every one)")
    lb.add_argument("--per-seed", action="store_true", help="print one row per seed instead of seed means")
    lb.add_argument("--out", type=Path,
                    help="folder for html/md/csv (default: <HARNESS_HOME>/leaderboards/<experiment>/)")
    lb.add_argument("--bootstrap", type=int, default=1000,
                    help="bootstrap resamples for the confidence intervals (default 1000; 0: none)")
    lb.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    lb.add_argument("--no-log", action="store_true", help="write the files but do not log them to MLflow")
    lb.add_argument("--no-write", action="store_true", help="only print (no files, no MLflow run)")
    lb.set_defaults(func=cmd_leaderboard)
