"""``harness plan``: the cells of a run, their resource requests and a GPU-hour estimate."""

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
    from harness.plan import PAPER_GRID, estimate_rows, make_plan, world_for_planning

    if args.grid == "paper":
        for key, value in PAPER_GRID.items():
            if getattr(args, key, None) is None:
                setattr(args, key, ",".join(str(v) for v in value) if isinstance(value, list) else value)
    cfg = config_from_args(args)
    check_world_name(cfg.world)
    check_config_tables(cfg)  # method_params, task_params, cpt: as harness run checks them
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


def add_parser(sub: Any) -> None:
    pl = sub.add_parser("plan", help="the cells of a run, their resource requests and a GPU-hour estimate")
    add_run_args(pl)
    pl.add_argument("--grid", choices=["paper"], help="the papers' full grid (flags given still override it)")
    pl.set_defaults(func=cmd_plan)
