"""The ``harness`` command line: run, list, init, leaderboard, ui, world build|info|check."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.core.errors import HarnessError

# piped or redirected output keeps its tables on one line per row (rich would otherwise fold them to 80 columns)
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200)
err = Console(stderr=True)


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


# -- run ---------------------------------------------------------------------------------------------------
def _add_run_args(p: argparse.ArgumentParser) -> None:
    from harness.config import add_run_flags

    add_run_flags(p)  # each setting is declared once, in harness.config.RunConfig


def _config_from_args(args: argparse.Namespace):
    from harness.config import config_from_flags

    return config_from_flags(args)


def _check_device(device: str) -> None:
    """A CUDA device must exist before anything is loaded (torch's own error is a traceback deep in a cell)."""
    if not device.startswith("cuda"):
        return
    import torch

    idx = device.partition(":")[2]
    if idx and not idx.isdigit():
        raise HarnessError(f"--device {device!r} is malformed; give cuda or cuda:N")
    if not torch.cuda.is_available():
        raise HarnessError(f"--device {device}: CUDA is not available on this machine; use --device cpu or auto")
    if idx and int(idx) >= torch.cuda.device_count():
        raise HarnessError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                           f"give cuda:0 to cuda:{torch.cuda.device_count() - 1}")


def _check_run_inputs(cfg: Any) -> None:
    """Everything that can be checked before a world is built, a model loaded or a store created."""
    from harness.core.paths import harness_home
    from harness.core.registry import METHODS, TASKS
    from harness.core.tracking import check_tracking_reachable, check_tracking_uri

    harness_home()
    _check_world_name(cfg.world)
    for m in cfg.methods:
        if m != "all":
            METHODS.get(m)
    for t in cfg.tasks:
        TASKS.get(t)
    if not cfg.tasks:
        raise HarnessError("no task given; pass --tasks, e.g. --tasks sr-t,ner (`harness list` shows them)")
    if cfg.cpt_steps is not None:
        late = [c for c in cfg.cpt_checkpoints if c > cfg.cpt_steps or c <= 0]
        if late:
            raise HarnessError(f"--cpt-checkpoints {','.join(map(str, late))} not within 1..--cpt-steps "
                               f"{cfg.cpt_steps}; give checkpoints between 1 and the CPT steps")
    if cfg.workers is not None and cfg.workers < 1:
        raise HarnessError("--workers must be at least 1")
    if cfg.executor != "ray" and cfg.ray_address:
        raise HarnessError("--ray-address needs --executor ray")
    _check_device(cfg.device)
    cfg.tracking_uri = check_tracking_uri(cfg.tracking_uri)
    check_tracking_reachable(cfg.tracking_uri)


def cmd_run(args: argparse.Namespace) -> int:
    from harness.core import lifecycle

    cfg = _config_from_args(args)
    _check_run_inputs(cfg)
    lifecycle.stop_on_signals()  # SIGINT / SIGTERM: workers stopped, unfinished runs KILLED, exit 130 / 143
    runners: list[Any] = []
    try:
        return _run(cfg, runners)
    except lifecycle.Stopped as stop:
        return lifecycle.clean_stop(stop, runners[-1] if runners else None)


def _run(cfg: Any, runners: list[Any]) -> int:
    from harness.runner import Runner
    from harness.worlds import get_world

    world = get_world(cfg.world)
    runner = Runner(cfg, world)
    runners.append(runner)
    if not runner.plan.cells:
        raise HarnessError("nothing to run: no cell is left after the checks above")
    executor = None
    if cfg.executor == "ray":
        from harness.executors import RayExecutor

        executor = RayExecutor(address=cfg.ray_address, max_retries=cfg.max_retries)
    else:
        from harness.executors import ProcessExecutor, available_cpus, local_workers

        workers = local_workers(cfg, runner.device, len(runner.plan.cells))
        if workers > 1:
            executor = ProcessExecutor(workers, threads=max(1, available_cpus() // workers))
    res = runner.run(executor)
    err.print(f"\nresults: MLflow at [bold]{runner.tracker.uri}[/bold], experiment(s) "
              f"{', '.join(sorted({runner.experiment_name(c.source) for c in runner.plan.cells}))}")
    err.print("browse: `harness leaderboard` (terminal table) or `harness ui` (MLflow UI on 127.0.0.1)")
    if res["failed"]:
        err.print(f"[red]{len(res['failed'])} cell(s) failed[/red]: " +
                  "; ".join(f"{f['cell']}: {f['error']}" for f in res["failed"]))
        return 1
    return 0


def _check_world_name(name: str) -> None:
    from harness.worlds import WORLDS

    WORLDS.get(name)  # unknown names fail with a suggestion


# -- plan --------------------------------------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    from harness.plan import PAPER_GRID, estimate_rows, world_for_planning
    from harness.runner import make_plan

    if args.grid == "paper":
        for key, value in PAPER_GRID.items():
            if getattr(args, key, None) is None:
                setattr(args, key, ",".join(str(v) for v in value) if isinstance(value, list) else value)
    cfg = _config_from_args(args)
    _check_world_name(cfg.world)
    world = world_for_planning(cfg.world)
    plan = make_plan(cfg, world)
    rows = estimate_rows(cfg, plan)
    t = Table(title=f"plan: world {cfg.world}, profile {cfg.profile}, tasks {', '.join(plan.tasks)}")
    for col in ("cell", "CPUs", "GPUs", "init GPU-h", "CPT GPU-h", "eval GPU-h", "total GPU-h"):
        t.add_column(col, justify="left" if col == "cell" else "right")
    for r in rows:
        t.add_row(r["cell"], f"{r['cpus']:g}", f"{r['gpus']:g}", f"{r['init_h']:.2f}", f"{r['cpt_h']:.2f}",
                  f"{r['eval_h']:.2f}", f"{r['total_h']:.2f}")
    console.print(t)
    for s in plan.skipped:
        console.print(f"[yellow]skipped:[/yellow] {s}")
    total = sum(r["total_h"] for r in rows)
    console.print(f"{len(rows)} cells, about [bold]{total:,.0f} GPU-hours[/bold] "
                  f"({total / 24:,.1f} GPU-days); rough figures from the papers' budgets, see harness/plan.py")
    return 0


# -- list --------------------------------------------------------------------------------------------------
def list_method_params(name: str) -> int:
    """``harness list --method NAME``: the method's declared parameters, with each profile's values."""
    from harness.core.profiles import PROFILES
    from harness.core.registry import METHODS

    cls = METHODS.get(name)
    rows = cls.describe_params() if hasattr(cls, "describe_params") else [
        {"name": k, "type": "", "default": repr(v), "range": "", "doc": ""} for k, v in getattr(cls, "defaults", {}).items()]
    t = Table(title=f"{name}: parameters (set under \\[method_params.{name}] or with harness init --params)")
    for col in ("name", "type", "default", *PROFILES, "allowed", "what it does"):
        t.add_column(col)
    by_profile = {prof: PROFILES[prof].get("method_params", {}).get(name, {}) for prof in PROFILES}
    for r in rows:
        t.add_row(r["name"], r["type"], r["default"],
                  *[repr(by_profile[prof][r["name"]]) if r["name"] in by_profile[prof] else "" for prof in PROFILES],
                  r["range"], r["doc"])
    console.print(t if rows else f"method {name!r} takes no parameters")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from harness.core.registry import METHODS, TASKS
    from harness.worlds import WORLDS, get_world

    if getattr(args, "method", None):
        return list_method_params(args.method)
    t = Table(title="methods", show_lines=False)
    for col in ("name", "description", "requires", "overlap rule", "factorized"):
        t.add_column(col)
    for name in METHODS.names():
        try:
            m = METHODS.listing(name)  # a built-in's without importing it
            t.add_row(name, m.get("description", ""), ", ".join(sorted(m.get("requires", ()))) or "-",
                      m.get("overlap_rule", "-"), "yes" if m.get("supports_factorized", False) else "no")
        except HarnessError as exc:
            t.add_row(name, f"[red]{exc}[/red]", "", "", "")
    console.print(t)
    t = Table(title="tasks")
    for col in ("name", "description", "metrics (headline first)"):
        t.add_column(col)
    for name in TASKS.names():
        task = TASKS.listing(name)
        metrics = [task["headline"]] + [m for m in task["metrics"] if m != task["headline"]]
        t.add_row(name, task["description"], ", ".join(metrics))
    console.print(t)
    t = Table(title="worlds")
    for col in ("name", "description", "built"):
        t.add_column(col)
    from harness.worlds import world_dir

    for name in WORLDS.names():
        w = WORLDS.get(name)
        t.add_row(name, w.description, "yes" if (world_dir(name) / "manifest.json").is_file() else "no")
    console.print(t)
    wname = args.world or "bible"
    if wname not in WORLDS.names():
        console.print(f"world {wname!r} is not available in this build.")
        return 0
    try:
        world = get_world(wname, build=args.world is not None and args.build)
    except HarnessError:
        console.print(f"world [bold]{wname}[/bold] is not built yet: `harness world build {wname}` "
                      f"(or `harness list --world {wname} --build`) shows its tasks and languages.")
        return 0
    _print_world_tasks(world)
    return 0


def _print_world_tasks(world: Any) -> None:
    t = Table(title=f"world {world.name}: tasks and languages with data (pivot {world.pivot})")
    t.add_column("task")
    t.add_column("#")
    t.add_column("languages")
    for task in world.tasks_available():
        langs = world.task_languages(task)
        meta = world.task_meta(task).get("languages", {})
        shown = [f"{lang}{'*' if meta.get(lang, {}).get('label_source') == 'silver' else ''}" for lang in langs]
        t.add_row(task, str(len(langs)), " ".join(shown))
    console.print(t)
    console.print("(* silver labels) sources: " + ", ".join(
        f"{s}{' (default)' if s == world.default_source else ''}" for s in world.sources))


# -- init --------------------------------------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> int:
    from harness.core.paths import harness_home
    from harness.core.profiles import profile
    from harness.core.registry import METHODS
    from harness.initialize import initialize_model
    from harness.worlds import get_world

    harness_home()
    _check_world_name(args.world)
    METHODS.get(args.method)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise HarnessError(f"--out {out} is a file; give a folder")
    if out.exists() and any(out.iterdir()) and not args.force:
        raise HarnessError(f"--out {out} exists and is not empty; choose another folder or pass --force")
    try:
        params = json.loads(args.params) if args.params else {}
    except json.JSONDecodeError as exc:
        raise HarnessError(f"--params is not valid JSON ({exc}); give an object, e.g. '{{\"k\": 10}}'") from None
    if not isinstance(params, dict):
        raise HarnessError("--params must be a JSON object, e.g. '{\"k\": 10}'")
    if args.dim is not None and args.dim <= 0:
        raise HarnessError(f"--dim {args.dim} must be a positive number (leave it out for the full dimension)")
    params = {**profile(args.profile).get("method_params", {}).get(args.method, {}), **params}
    if args.device not in {"auto", "cpu"} and not args.device.startswith(("cuda", "mps")):
        raise HarnessError(f"--device {args.device!r}: expected auto, cpu, cuda or cuda:N")
    _check_device(args.device)
    world = get_world(args.world)
    source = args.source or world.default_source
    world.source_dir(source)
    out.mkdir(parents=True, exist_ok=True)
    from harness.runner import resolve_device

    report = initialize_model(world, source, args.method, dim=args.dim, seed=args.seed, params=params,
                              out_dir=out, device=resolve_device(args.device), profile=args.profile)
    console.print_json(json.dumps(report.get("counts", {})))
    console.print(f"model written to {out} (report: {out / 'init_report.json'})")
    return 0


# -- leaderboard / ui --------------------------------------------------------------------------------------
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


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.core.tracking import check_tracking_reachable, check_tracking_uri
    from leaderboard.compare import run_compare

    if args.bootstrap < 0:
        raise HarnessError("--bootstrap must be 0 (no intervals) or a positive number of resamples")
    if not all(Path(x).expanduser().exists() for x in (args.a, args.b)):
        args.tracking_uri = check_tracking_uri(args.tracking_uri)
        check_tracking_reachable(args.tracking_uri)
    return run_compare(args.a, args.b, tracking_uri=args.tracking_uri, task=args.task, metric=args.metric,
                       step=args.step, fmt=args.format, out=args.out, resamples=args.bootstrap,
                       seed=args.bootstrap_seed)


def cmd_ui(args: argparse.Namespace) -> int:
    from harness.ui import serve

    return serve(tracking_uri=args.tracking_uri, port=args.port, open_browser=args.open and not args.no_browser)


# -- world -------------------------------------------------------------------------------------------------
def cmd_world(args: argparse.Namespace) -> int:
    from harness.worlds import WORLDS, build_world, get_world

    builder = WORLDS.get(args.name)
    if args.action == "build":
        root = build_world(args.name, force=args.force, keep_inputs=args.keep_downloads)
        console.print(f"world {args.name} ready at {root}")
        return 0
    if args.action == "check":
        rows = builder.check()
        t = Table(title=f"world {args.name}: inputs")
        for col in ("input", "present", "from", "size", "how to provide"):
            t.add_column(col)
        for r in rows:
            t.add_row(r.name, "[green]yes[/green]" if r.present else "[red]no[/red]", r.where, r.size, r.how)
        console.print(t)
        missing = [r for r in rows if not r.present]
        if missing:
            console.print(f"[red]{len(missing)} input(s) missing[/red]")
            return 1
        return 0
    world = get_world(args.name)
    info = getattr(builder, "info", None)
    rows = info(world) if info else _default_info(world)
    t = Table(title=f"world {args.name} ({world.hash}) at {world.root}")
    cols = list(rows[0]) if rows else []
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*[str(r.get(c, "")) for c in cols])
    console.print(t)
    task_inputs = getattr(builder, "task_inputs", None)
    if task_inputs:
        t = Table(title=f"world {args.name}: where each task's data come from")
        for c in ("task", "inputs", "licences"):
            t.add_column(c)
        for r in task_inputs(world):
            t.add_row(r["task"], r["inputs"], r["licences"])
        console.print(t)
    return 0


def _default_info(world: Any) -> list[dict[str, Any]]:
    from harness.worlds.base import read_jsonl, read_lines

    rows = []
    for code, lang in sorted(world.languages.items()):
        row: dict[str, Any] = {"language": code, "script": lang.script,
                               "seen": ",".join(s for s, v in lang.seen.items() if v) or "-",
                               "text chars": lang.text_chars}
        for task in world.tasks_available():
            meta = world.task_meta(task).get("languages", {})
            if code not in meta:
                row[task] = "-"
                continue
            d = world.task_dir(task)
            if (d / f"{code}.jsonl").is_file():
                n = len(read_jsonl(d / f"{code}.jsonl"))
            elif (d / f"{code}.txt").is_file():
                n = len(read_lines(d / f"{code}.txt"))
            else:
                n = sum(len(read_jsonl(p)) for p in (d / code).glob("*.jsonl"))
            row[task] = f"{n} ({meta[code].get('label_source', 'gold')})"
        rows.append(row)
    return rows


# -- main --------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr naming the problem and where to look, exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"error: {self.prog}: {message}; see `{self.prog} --help`\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="harness", description="Compare embedding-initialization methods for "
                                "vocabulary expansion on per-language leaderboards.")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="initialize, evaluate, continue pre-training, evaluate again; log to MLflow")
    _add_run_args(r)
    r.set_defaults(func=cmd_run)

    pl = sub.add_parser("plan", help="the cells of a run, their resource requests and a GPU-hour estimate")
    _add_run_args(pl)
    pl.add_argument("--grid", choices=["paper"], help="the papers' full grid (flags given still override it)")
    pl.set_defaults(func=cmd_plan)

    ls = sub.add_parser("list", help="methods, tasks and worlds, with what each needs and has")
    ls.add_argument("--world", help="show the tasks and languages of this world (default: bible, if built)")
    ls.add_argument("--build", action="store_true", help="build the --world first if needed")
    ls.add_argument("--method", help="list this method's parameters: type, default, each profile's value, range")
    ls.set_defaults(func=cmd_list)

    i = sub.add_parser("init", help="write one initialized model folder and its init_report.json")
    i.add_argument("--world", default="bible")
    i.add_argument("--source", help="source model (default: the world's default)")
    i.add_argument("--method", required=True)
    i.add_argument("--dim", type=int, default=None, help="factorized dim (default: full)")
    i.add_argument("--seed", type=int, default=1)
    i.add_argument("--params", help="method parameters as a JSON object (over the profile's)")
    i.add_argument("--profile", default="cpu",
                   help="whose method parameters to start from: cpu (default, as `harness run` uses) or paper")
    i.add_argument("--device", default="auto")
    i.add_argument("--out", required=True)
    i.add_argument("--force", action="store_true", help="write into a non-empty --out")
    i.set_defaults(func=cmd_init)

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

    c = sub.add_parser("compare", help="two experiments, runs or leaderboard folders side by side, per task and "
                                        "language, with the difference, its interval and its significance")
    c.add_argument("a", help="an experiment name, an MLflow run id, or a folder written by `harness leaderboard`")
    c.add_argument("b", help="the same kinds as A; the difference is A - B")
    c.add_argument("--tracking-uri")
    c.add_argument("--task", help="only this task")
    c.add_argument("--metric", help="this metric (default: the task's headline; 'all' for every one)")
    c.add_argument("--step", default="final", help="final (default), a CPT step (0, 10, ...) or all")
    c.add_argument("--format", choices=["md", "csv"], default="md", help="Markdown (default) or CSV")
    c.add_argument("--out", type=Path, help="write to this file instead of printing")
    c.add_argument("--bootstrap", type=int, default=1000,
                   help="bootstrap resamples for the intervals (default 1000; 0: none)")
    c.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    c.set_defaults(func=cmd_compare)

    u = sub.add_parser("ui", help="start the MLflow UI on 127.0.0.1 and print its URL")
    u.add_argument("--tracking-uri")
    u.add_argument("--port", type=int, default=5000)
    u.add_argument("--open", action="store_true", help="open the current leaderboard in a browser")
    u.add_argument("--no-browser", action="store_true", help="never open a browser (the default)")
    u.set_defaults(func=cmd_ui)

    w = sub.add_parser("world", help="build, describe or check a world")
    w.add_argument("action", choices=["build", "info", "check"])
    w.add_argument("name", nargs="?", default="bible")
    w.add_argument("--force", action="store_true", help="rebuild even if cached")
    w.add_argument("--keep-downloads", action="store_true", help="keep what the build downloaded and installed "
                   "(downloads/, build-envs/; default: removed once the world is built, fetched again by a rebuild)")
    w.set_defaults(func=cmd_world)

    from harness.cache_admin import add_parser as add_cache_parser

    add_cache_parser(sub)  # harness cache du|prune
    return p


def main(argv: list[str] | None = None) -> int:
    _setup_env()
    from harness.core import lifecycle

    os.environ[lifecycle.MAIN_PID_ENV] = str(os.getpid())  # the process its workers live and die with
    lifecycle.install_fault_hook()  # tests only: HARNESS_FAULT_AT
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if "transformers" in sys.modules:  # imported before the variable above was set (main called in a process)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    for noisy in ("mlflow", "alembic", "transformers", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR if not args.verbose else logging.INFO)
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
