"""``harness run``: initialize, evaluate, continue pre-training, evaluate again; log to MLflow."""

from __future__ import annotations

import argparse
import os
from typing import Any

from harness.commands.common import add_run_args, check_world_name, config_from_args, err
from harness.config import device_available
from harness.core.errors import HarnessError


def _check_run_inputs(cfg: Any) -> None:
    """Everything that can be checked before a world is built, a model loaded or a store created. A refused run
    leaves nothing on disk: the harness home is checked here but made only once every input has passed."""
    import os

    from harness.commands.common import check_config_tables, check_tracking
    from harness.core.paths import harness_home, home_dir
    from harness.core.registry import METHODS, TASKS

    home_dir()
    check_world_name(cfg.world)
    for m in cfg.methods:
        if m != "all":
            METHODS.check(m)
    for t in cfg.tasks:
        TASKS.check(t)
    if not cfg.tasks:
        raise HarnessError("no task given; pass --tasks, e.g. --tasks sr-t,ner (`harness list` shows them)")
    if cfg.cpt_steps is not None:
        late = [c for c in cfg.cpt_checkpoints if c > cfg.cpt_steps or c <= 0]
        if late:
            raise HarnessError(f"--cpt-checkpoints {','.join(map(str, late))} not within 1..--cpt-steps "
                               f"{cfg.cpt_steps}; give checkpoints between 1 and the CPT steps")
    if cfg.executor != "ray" and cfg.ray_address:
        raise HarnessError("--ray-address needs --executor ray")
    _check_cpt_devices(cfg)
    check_config_tables(cfg)  # method_params, task_params, cpt
    _check_cells(cfg)
    from harness.core import kernels

    kernels.check()  # HARNESS_CPU_KERNELS
    from harness.spec import check_precisions, cpt_devices

    device_available(cfg.device, cpt_devices(cfg))
    check_precisions(cfg)  # fp16 on a CPU, before the home or the store exists
    given = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")  # else the default store, in the home
    if given:
        cfg.tracking_uri = check_tracking(given)
    harness_home()  # every input is checked: the home may be made now
    if not given:
        cfg.tracking_uri = check_tracking(None)


def _check_cpt_devices(cfg: Any) -> None:
    """Several CPT devices a cell need GPUs (or the accelerator's emulation): on a CPU the run says there is no GPU
    here, not that the batch cannot be split over them."""
    from harness.config import resolve_device
    from harness.core.devices import accelerator_branches
    from harness.spec import cpt_devices

    try:
        n = cpt_devices(cfg)
    except (HarnessError, TypeError, ValueError):  # a bad [cpt] table: refused by check_config_tables, next
        return
    if n <= 1:
        return
    device = resolve_device(cfg.device)
    if accelerator_branches(device):
        return
    flag = "--cpt-devices" if "cpt_devices" in getattr(cfg, "_flags", ()) else "config key 'cpt.devices'"
    why = "there is no GPU here" if cfg.device == "auto" else f"the run computes on --device {cfg.device}"
    raise HarnessError(f"{flag} {n}: {why}, and CPT on a CPU runs in one process; leave it out (1), or run on a "
                       f"machine with {n} GPUs")


def _check_cells(cfg: Any) -> None:
    """The run's cells against what its world declares, before the world is built (:func:`harness.worlds.
    declared_world`): ``--langs``, ``--source``, ``--dims`` against the methods and the source models' hidden
    sizes, and a run with no cell left, each refused in one line. A world that declares nothing (or not a hidden
    size) is checked once built, before the tracking store is opened (:func:`_run`)."""
    from harness.plan import plan_cells
    from harness.worlds import declared_world

    declared = declared_world(cfg.world)
    if declared is None:
        return
    cells, skipped = plan_cells(cfg, declared)
    if not cells:
        raise HarnessError(no_cell_left(skipped))


def no_cell_left(skipped: list[str]) -> str:
    """The one line of a run whose every cell was skipped: each reason, grouped."""
    why = "; ".join(skipped) if skipped else "the plan holds no cell"
    return f"nothing to run: every cell of the run is skipped: {why}"


def cmd_run(args: argparse.Namespace) -> int:
    from harness.core import lifecycle

    cfg = config_from_args(args)
    _check_run_inputs(cfg)
    lifecycle.stop_on_signals()  # SIGINT / SIGTERM: workers stopped, unfinished runs KILLED, exit 130 / 143
    runners: list[Any] = []
    try:
        world = _load_world(cfg.world)  # built first where it is not (minutes, said stage by stage)
        return _run(cfg, world, runners)
    except lifecycle.Stopped as stop:
        return lifecycle.clean_stop(stop, runners[-1] if runners else None)


def _run(cfg: Any, world: Any, runners: list[Any]) -> int:
    """The stages of a run on its loaded ``world``: resolve every setting once, skip what is finished, run the
    cells, write the seed aggregates, print the results table."""
    from harness.cell import pending
    from harness.core.run_status import partial_line
    from harness.executors import make_executor
    from harness.runner import Runner
    from harness.spec import resolve

    spec = resolve(cfg, world)  # every setting, once; what only the built world says (task data) included
    if not spec.plan.cells:
        raise HarnessError(no_cell_left(spec.plan.skipped))
    _say_kernels(spec)
    runner = Runner(spec, world)
    runners.append(runner)
    runner.on_partial = lambda done, total, to_come, minutes: results_table(
        spec, runner.tracker, partial=partial_line(done, total, to_come, minutes=minutes))
    # cells already finished are passed over here: a run with nothing left to do starts no worker
    from harness.core.progress import STARTUP_HEARTBEAT_S, still_running

    with still_running("cells: finding those left to do", STARTUP_HEARTBEAT_S):  # (a store of many runs: seconds)
        todo = None if spec.executor.backend == "ray" else pending(spec, runner.tracker, runner.finished)
    runner.todo = None if todo is None else set(todo)
    executor = make_executor(spec, len(spec.plan.cells) if todo is None else len(todo))
    res = runner.run(executor)
    results_table(spec, runner.tracker)
    err.print(f"\nresults: MLflow at [bold]{runner.tracker.uri}[/bold], experiment(s) {', '.join(spec.experiments())}")
    err.print("browse: `harness leaderboard` (terminal table) or `harness ui` (MLflow UI on 127.0.0.1)")
    import gc

    gc.freeze()  # all is written: the exit then skips collecting torch's, mlflow's and scipy's objects (seconds)
    if res["failed"]:
        err.print(f"[red]{len(res['failed'])} cell(s) failed[/red]: " +
                  "; ".join(f"{f['cell']}: {f['error']}" for f in res["failed"]))
        return 1
    return 0


def _say_kernels(spec: Any) -> None:
    """The CPU kernels the cells compute with, said where they are not the pinned set's (a pin variable the user
    set, a library's own choice, another CPU): the label the cells carry, and why (:mod:`harness.core.kernels`)."""
    from harness.core import kernels

    if spec.cpu_kernels not in (kernels.PINNED, kernels.PINNED_BF16) or kernels.kept_by_user():
        err.print(f"[yellow]CPU kernels:[/yellow] {kernels.describe(spec.cpu_bf16)}; the cells are labelled "
                  f"{spec.cpu_kernels} (in their identity and on the board)", soft_wrap=True, highlight=False)
    onednn_capped = os.environ.get("ONEDNN_MAX_CPU_ISA") == kernels.PINS["ONEDNN_MAX_CPU_ISA"]
    if spec.cpu_kernels == kernels.PINNED_BF16 or (spec.cpu_bf16 and kernels.pin() and onednn_capped):
        # (the pins made, whatever the label: an AMD CPU's MKL labels a pinned run native, and oneDNN is capped there too)
        err.print("[yellow]bf16 on the CPU under the pinned kernels:[/yellow] oneDNN held to AVX2 has no bf16 matrix "
                  "product, so ATen's reference GEMM computes them: 5 to 200 times slower than fp32 (a 122,776-row "
                  "vocabulary projection's backward product: 34 s against 0.16 s, benchmarks/bench_bf16_gemm.py); "
                  "fp32 (the default) is faster "
                  "here, and HARNESS_CPU_KERNELS=native takes the CPU's own bf16 kernels (cells labelled native)",
                  soft_wrap=True, highlight=False)


def _load_world(name: str) -> Any:
    """The run's world; a built one says when its loading (its files checked against their record) starts and
    ends, a world built first says each stage of the build (:mod:`harness.worlds`)."""
    from harness.core.progress import STARTUP_HEARTBEAT_S, stage
    from harness.worlds import get_world, world_dir

    if not (world_dir(name) / "manifest.json").is_file():
        return get_world(name)
    with stage(f"world {name}: loading", heartbeat=STARTUP_HEARTBEAT_S):
        return get_world(name)


def results_table(spec: Any, tracker: Any, partial: str | None = None) -> None:
    """The run's results on stdout (progress and logs go to stderr): per task, each row's headline average ±
    its spread over seeds at the task's final step, and the claims' one-line summary (``leaderboard.summary``).
    ``partial``: the line that says the board of a run still going is partial (:func:`harness.core.run_status.
    partial_line`)."""
    from harness.commands.common import console
    from harness.core.progress import STARTUP_HEARTBEAT_S, stage

    if partial is not None:
        console.print(f"\n[bold]{partial}[/bold]; the full board follows when the run ends", highlight=False)

    for name in spec.experiments():
        tables = []
        # reading MLflow, scipy's import, the intervals' bootstrap: seconds
        with stage(f"results of {name}: boards, intervals and claims", heartbeat=STARTUP_HEARTBEAT_S):
            from leaderboard.collect import collect_experiment
            from leaderboard.collect import experiments as find
            from leaderboard.summary import row_origins, summaries
            from leaderboard.tables import build_leaderboard

            for exp in find(tracker.reader, name):
                ours, older = _cell_runs(spec, tracker, exp.experiment_id)
                data = collect_experiment(tracker.reader, exp, world=spec.world)
                if data.tasks:  # rows of earlier runs and of older method code are marked
                    origins = row_origins(data, ours, older)
                    tables += summaries(build_leaderboard(data), spec.plan.tasks, origins)
                    from leaderboard.where_rows import runs_footer

                    footer = runs_footer(exp.name, data.cells.values())
        from leaderboard.summary import render

        for table in tables:
            console.print()
            render(table, console)
        if tables:  # where the rows are
            console.print(footer, highlight=False, soft_wrap=True)


def _cell_runs(spec: Any, tracker: Any, experiment_id: str) -> tuple[set[str], dict[str, list[str]]]:
    """The ids of the command's cell runs in the experiment, and, for each of its cell runs that recorded another
    version of its method's code than the one installed now, the files that changed (``harness.method_code``)."""
    import json

    from harness.core.declarations import changed_files
    from harness.core.record import Kind, kind_filter, own_tags
    from harness.core.record_read import search_runs
    from harness.core.registry import method_code

    keys = {k.key for k in spec.cells.values()}
    code = dict(spec.method_code)  # the run's methods' digests, and those of earlier runs' methods, each read once
    ours, older = set(), {}
    for run in search_runs(tracker.reader, experiment_id, kind_filter(Kind.CELL, world=spec.world)):
        tags = own_tags(run)
        if tags.get("cell") in keys:
            ours.add(run.info.run_id)
        try:
            recorded = json.loads(tags.get("method_code") or "null")
            method = tags.get("method", "")
            now = code[method] if method in code else code.setdefault(method, method_code(method))
        except (ValueError, HarnessError):  # unreadable, or a method not installed here: not judged
            continue
        files = changed_files(recorded, now) if isinstance(recorded, dict) else []
        if files:
            older[run.info.run_id] = files
    return ours, older


def add_parser(sub: Any) -> None:
    r = sub.add_parser("run", help="initialize, evaluate, continue pre-training, evaluate again; log to MLflow")
    add_run_args(r)
    r.set_defaults(func=cmd_run)
