"""``harness plan``: the cells of a run, their resource requests and an estimate of their cost: on the ``cpu``
profile the wall time and core-hours on this kind of machine, otherwise GPU-hours."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from harness.commands.common import (
    add_run_args,
    check_config_tables,
    check_world_name,
    config_from_args,
    console,
)


def cmd_plan(args: argparse.Namespace) -> int:
    from harness.plan import PAPER_GRID, cpt_rates, estimate_rows, on_cpu, world_for_planning
    from harness.spec import resolve

    if args.grid == "paper":
        for key, value in PAPER_GRID.items():
            if getattr(args, key, None) is None:
                setattr(args, key, ",".join(str(v) for v in value) if isinstance(value, list) else value)
    cfg = config_from_args(args)
    check_world_name(cfg.world)
    check_config_tables(cfg)  # method_params, task_params, cpt: as harness run checks them
    world = world_for_planning(cfg.world)
    spec = resolve(cfg, world, probe=False)  # nothing asked of this machine: a plan is for a cluster
    plan = spec.plan
    if on_cpu(cfg) and args.gpu is None:  # (--gpu: the same cells sized for that GPU)
        return _cpu_plan(cfg, spec, world)
    rates = cpt_rates(plan, world, args.gpu)
    rows = estimate_rows(spec, rates=rates)
    _cells_table(f"plan: world {cfg.world}, profile {cfg.profile}, tasks {', '.join(plan.tasks)}", rows,
                 {"GPUs": "{gpus:g}", "init GPU-h": "{init_h:.2f}", "CPT GPU-h": "{cpt_h:.2f}",
                  "eval GPU-h": "{eval_h:.2f}", "total GPU-h": "{total_h:.2f}"}, plan.skipped)
    if rates:
        first = next(iter(rates.values()))[0]
        console.print(f"CPT sized for one {first.gpu} per CPT device, from {first.basis}:", highlight=False,
                      soft_wrap=True)
    for (source, dim), (rate, n_from) in rates.items():
        small = ("; a model this much smaller than the measured one is bound by kernel launches, not FLOPs: "
                 "its CPT is slower than this" if rate.params * 10 < first.reference_params else "")
        console.print(f"  {source}, dim {dim or 'full'}: N = {rate.params / 1e6:,.1f}M parameters ({n_from}) -> "
                      f"{rate.tokens_per_s:,.0f} tokens/s{small}", highlight=False, soft_wrap=True)
    total = sum(r["total_h"] for r in rows)
    gpu = next(iter(rates.values()))[0].gpu if rates else args.gpu
    console.print(f"{len(rows)} cells, about [bold]{total:,.0f} GPU-hours[/bold] ({total / 24:,.1f} GPU-days) on "
                  f"{gpu}: CPT from measured throughput (harness/throughput.json), initialization and evaluation "
                  f"rough figures from the papers' budgets (harness/plan.py)", highlight=False, soft_wrap=True)
    return 0


def _cells_table(title: str, rows: list[dict[str, Any]], columns: dict[str, str], skipped: list[str]) -> None:
    """The plan's table: a row per cell (its name and CPUs, then ``columns``: header -> format of the row's
    fields), then the cells the plan skipped."""
    t = Table(title=title)
    for col in ("cell", "CPUs", *columns):
        t.add_column(col, justify="left" if col == "cell" else "right")
    for r in rows:
        t.add_row(r["cell"], f"{r['cpus']:g}", *(f.format(**r) for f in columns.values()))
    console.print(t)
    for s in skipped:
        console.print(f"[yellow]skipped:[/yellow] {s}")


def heldout_diagnostic(world: Any, plan: Any) -> str:
    """What the held-out diagnostic after CPT steps is for the plan's sources: the masked-LM loss of an encoder,
    the causal-LM loss of a decoder (:data:`harness.evaluation.HELDOUT_TASKS`)."""
    from harness.core.objective import heldout_name

    of = getattr(world, "source_objective", None)
    return heldout_name({of(c.source) if of is not None else "mlm" for c in plan.cells})


def _cpu_plan(cfg: Any, spec: Any, world: Any) -> int:
    """A CPU run's plan: each cell's seconds on this kind of machine, the wall time over the workers the run
    will use, the core-hours, and what the run evaluates (:func:`harness.plan.cpu_rows`)."""
    from harness.plan import cpu_rows
    from harness.throughput import cpu_cost, cpu_figures

    plan, cpt = spec.plan, spec.cpt
    workers = cpu_workers(cfg, spec)
    rows = cpu_rows(spec, workers)
    _cells_table(f"plan: world {cfg.world}, profile {cfg.profile} (CPU), tasks {', '.join(plan.tasks)}, in the "
                 "order the cells run", [{**r, "ends_min": r["ends_s"] / 60} for r in rows],
                 {"init s": "{init_s:,.0f}", "eval s": "{eval_s:,.0f}", "CPT s": "{cpt_s:,.0f}",
                  "total s": "{total_s:,.0f}", "ends at min": "{ends_min:,.1f}"}, plan.skipped)
    _shared_line(cfg, plan)
    for task in plan.tasks:
        langs = plan.languages[task]
        console.print(f"{task}: {len(langs)} language(s): {', '.join(langs)}", highlight=False, soft_wrap=True)
    console.print(f"CPT: {cpt.steps} step(s) of {cpt['effective_batch']} x {cpt['block_size']} tokens; tasks "
                  f"evaluated at step(s) {', '.join(map(str, cpt.task_steps()))}; {heldout_diagnostic(world, plan)} "
                  "at step(s) "
                  f"{', '.join(map(str, cpt.heldout_steps())) or 'none (no CPT)'}", highlight=False, soft_wrap=True)
    ref = cpu_figures()["reference"]
    decoder_ref = None
    for source in sorted({c.source for c in plan.cells}):
        cost = cpu_cost(cfg.world, source)
        shape = ", ".join(f"{k} {v:,}" for k, v in cost.shape.items())
        scaled = ""
        if cost.figures.get("reference_objective") == "clm":
            decoder_ref = cost.figures["reference"]
            scaled = f"; its cells scaled from the decoder reference, {decoder_ref['model']}"
        console.print(f"model {source}: {shape} ({cost.shape_from}{scaled})", highlight=False, soft_wrap=True)
    wall = max((r["ends_s"] for r in rows), default=0.0)
    core_h = sum(r["total_s"] * r["cpus"] for r in rows) / 3600
    first = first_board_s(rows)
    board = f"; first partial board at about {first / 60:,.0f} min" if first is not None else ""
    console.print(f"{len(rows)} cells, {workers} side by side ({spec.cpus_per_cell} CPU each): about "
                  f"[bold]{wall / 60:,.0f} min[/bold] of cells ({core_h:,.2f} core-hours){board}; the world's "
                  f"build and the workers' start are not counted. Seconds of this code measured on "
                  f"{ref['machine']} ({ref['date']}: `{ref['command']}`"
                  + (f"; a decoder's: {decoder_ref['machine']}, {decoder_ref['date']}: `{decoder_ref['command']}`"
                     if decoder_ref else "") + ") and on the synthetic world, scaled by "
                  "the model's shape (harness/throughput.json); a loaded machine takes longer", highlight=False,
                  soft_wrap=True)
    return 0


def _shared_line(cfg: Any, plan: Any) -> None:
    """Which cell's "init s" holds a product several methods share (the helper model): the first of them in the
    order the cells run, which builds it; the others' initialization is their own work only."""
    from harness.plan import init_cost, run_order, shared_builders
    from harness.throughput import cpu_cost

    builds = shared_builders(run_order(plan.cells, init_cost("cpu"), plan.method_facts), world=cfg.world)
    for cell, products in builds.items():
        cost = cpu_cost(cfg.world, cell.source)
        said = ", ".join(f"the {p.replace('-', ' ')} ({cost.shared(p):,.0f} s)" for p in products)
        console.print(f"init s of {cell.label} includes building {said}, which the other cells that read it "
                      "reuse", highlight=False, soft_wrap=True)


def add_parser(sub: Any) -> None:
    pl = sub.add_parser("plan", help="the cells of a run, their resource requests and an estimate: wall time and "
                                     "core-hours on the cpu profile, GPU-hours on a GPU")
    add_run_args(pl)
    pl.add_argument("--grid", choices=["paper"], help="the papers' full grid (flags given still override it)")
    pl.add_argument("--gpu", default=None,
                    help="size the run for this GPU kind, e.g. h100, a100, l4, in GPU-hours (the default on a GPU "
                         "profile or device: the kind measured last, "
                         "harness/throughput.json; a card never measured is sized from its bf16 peak at the "
                         "measured MFU)")
    pl.set_defaults(func=cmd_plan)


def cpu_workers(cfg: Any, spec: Any) -> int:
    """The cells a CPU run of ``spec`` runs side by side on this machine (as ``harness run`` chooses them)."""
    from harness.executors import choose

    return choose(cfg, "cpu", 1, spec.cpus_per_cell).workers_for(len(spec.plan.cells))


def first_board_s(rows: list[dict[str, Any]], interval: float | None = None) -> float | None:
    """When the run's first partial board comes (:class:`harness.runner.PartialBoards`) if its cells end as
    ``rows`` (:func:`harness.plan.cpu_rows`) say; None if none comes before the last cell."""
    from harness.runner import PARTIAL_EVERY_S, PartialBoards

    now = [0.0]
    boards = PartialBoards([r["method"] for r in rows], PARTIAL_EVERY_S if interval is None else interval,
                           clock=lambda: now[0])
    done: set[str] = set()
    ended = sorted(rows, key=lambda r: r["ends_s"])
    for i, r in enumerate(ended):
        now[0] = r["ends_s"]
        done.add(r["method"])
        if boards.due(done, computing=i < len(ended) - 1) is not None:
            return now[0]
    return None
