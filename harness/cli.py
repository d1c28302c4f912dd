"""The ``harness`` command line: run, plan, list, init, leaderboard, compare, ui, world build|info|check, cache.

This module holds the entry point (``harness.cli:main``, also ``python -m harness.cli``) and the parser; each
subcommand lives in its own module under :mod:`harness.commands` (``harness cache`` in :mod:`harness.cache_admin`),
which adds its parser and does its work, importing what it needs only when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from harness.commands.common import err
from harness.core.errors import HarnessError


def _setup_env() -> None:
    # Nothing loads from a hub at run time; the world builders fetch explicitly.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    # our own rich bars show progress; HF's per-file bars are noise: transformers and huggingface_hub take their
    # initial state from this when imported (a command that needs neither does not import them)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


# -- main --------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr naming the problem and where to look, exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"error: {self.prog}: {message}; see `{self.prog} --help`\n")
        sys.exit(2)


class _Version(argparse.Action):
    """``harness --version``: the harness's version and checkout, and the versions of the libraries its numbers
    depend on (what every run records as its ``version.*`` tags), read from the installed packages' metadata."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object):
        super().__init__(option_strings, dest=dest, nargs=0, help="print the version (and the libraries') and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from harness.core.versions import git_commit, library_versions

        versions = library_versions()
        commit = git_commit()
        libraries = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "harness")
        where = f" (commit {commit[:12]}{'+dirty' if commit.endswith('+dirty') else ''})" if commit else ""
        sys.stdout.write(f"harness {versions['harness']}{where}\n{libraries}\n")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="harness", description="Compare embedding-initialization methods for "
                                "vocabulary expansion on per-language leaderboards.")
    p.add_argument("--version", action=_Version)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level (the libraries' logs too)")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)
    from harness.commands import cache, compare, init, leaderboard, listing, plan, run, ui, world

    for command in (run, plan, listing, init, leaderboard, compare, ui, world, cache):
        command.add_parser(sub)  # each subcommand's flags live with it, in harness/commands/
    return p


def main(argv: list[str] | None = None) -> int:
    from harness.core.kernels import pin

    pin()  # first: one CPU kernel set on every x86-64 machine, before torch or numpy loads (harness.core.kernels)
    _setup_env()
    from harness.core import faults, processes

    os.environ[processes.MAIN_PID_ENV] = str(os.getpid())  # the process its workers live and die with
    faults.install()  # tests only: HARNESS_FAULT_* and HARNESS_SIMULATED_MEMORY
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if "transformers" in sys.modules:  # imported before _setup_env set HF_HUB_DISABLE_PROGRESS_BARS
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    for noisy in ("mlflow", "alembic", "transformers", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR if not args.verbose else logging.INFO)
    from harness.core.tracking import quiet_mlflow_logs

    quiet_mlflow_logs(debug=args.debug)  # MLflow's own INFO lines (set again when it is imported): --debug only
    try:
        return int(args.func(args) or 0)
    except HarnessError as exc:
        if args.debug:
            raise
        from rich.markup import escape

        err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True, highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("[yellow]interrupted; finished products are kept, run the same command to resume[/yellow]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
