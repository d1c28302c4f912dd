"""``harness world build|info|check``: build, describe or check a world."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from harness.commands.common import console


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


def add_parser(sub: Any) -> None:
    w = sub.add_parser("world", help="build, describe or check a world")
    w.add_argument("action", choices=["build", "info", "check"])
    w.add_argument("name", nargs="?", default="bible")
    w.add_argument("--force", action="store_true", help="rebuild even if cached")
    w.add_argument("--keep-downloads", action="store_true", help="keep what the build downloaded and installed "
                   "(downloads/, build-envs/; default: removed once the world is built, fetched again by a rebuild)")
    w.set_defaults(func=cmd_world)
