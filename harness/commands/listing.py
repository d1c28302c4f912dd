"""``harness list``: methods, tasks and worlds, with what each needs and has; ``--method NAME``: the
method's declared parameters. The built-in methods and tasks are listed without importing them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.core.errors import HarnessError

# the terminal's width; piped (and no COLUMNS), 100 columns: the tables wrap their descriptions to fit a page or a
# pager, rather than the 200 columns that keep the run's result tables on one line
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 100)


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


def add_parser(sub: Any) -> None:
    ls = sub.add_parser("list", help="methods, tasks and worlds, with what each needs and has")
    ls.add_argument("--world", help="show the tasks and languages of this world (default: bible, if built)")
    ls.add_argument("--build", action="store_true", help="build the --world first if needed")
    ls.add_argument("--method", help="list this method's parameters: type, default, each profile's value, range")
    ls.set_defaults(func=cmd_list)
