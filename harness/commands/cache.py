"""``harness cache du|prune``: what the harness home holds, per kind and world, and removing cached products (never
the runs' results). The work is the cache library's (:mod:`harness.cache_admin`); this module is its command line."""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness.cache_admin import (
    PROTECTED,
    Item,
    human,
    kind_matches,
    known_kinds,
    parse_age,
    remove,
    scan,
    select,
    summarize,
)
from harness.core.errors import ConfigError


def _table(rows: list[dict[str, Any]], title: str, total: int) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for c, j in (("kind", "left"), ("world", "left"), ("items", "right"), ("size", "right")):
        t.add_column(c, justify=j)
    for r in rows:
        t.add_row(r["kind"], r["world"] or "-", str(r["items"]), human(r["bytes"]))
    t.add_section()
    t.add_row("total", "", str(sum(r["items"] for r in rows)), human(total))
    Console(soft_wrap=True).print(t)


def _check_filters(items: list[Item], world: str | None, kinds: list[str]) -> None:
    """An unknown ``--world`` or ``--kind`` is an error with a suggestion, never an empty result."""
    from harness.core.errors import UnknownNameError
    from harness.worlds import WORLDS

    known = known_kinds(items)
    unknown = [k for k in kinds if k not in known and k not in PROTECTED]
    if unknown:
        raise UnknownNameError("kind", unknown[0], known)
    if world and world != "-":
        worlds = sorted(set(WORLDS.names()) | {i.world for i in items if i.world != "-"})
        if world not in worlds:
            raise UnknownNameError("world", world, worlds)


def cmd_du(args: argparse.Namespace) -> int:
    from harness.core.paths import harness_home

    home = harness_home()
    items = scan(home)
    _check_filters(items, args.world, _kinds(args.kind))
    if args.world:
        items = [i for i in items if i.world == args.world]
    if args.kind:
        items = [i for i in items if kind_matches(i.kind, _kinds(args.kind))]
    rows = summarize(items, by_world=not args.by_kind)
    total = sum(i.bytes for i in items)
    if args.json:
        print(json.dumps({"home": str(home), "total_bytes": total, "rows": rows}, indent=1))
    else:
        _table(rows, f"harness home {home}", total)
        print("tracking and leaderboards are the runs' results and are never pruned; "
              "`harness cache prune --dry-run` shows what pruning would free")
    return 0


def _kinds(values: list[str] | None) -> list[str]:
    return [k.strip() for v in values or [] for k in v.split(",") if k.strip()]


def cmd_prune(args: argparse.Namespace) -> int:
    from harness.core.paths import harness_home

    home = harness_home()
    items = scan(home)
    kinds = _kinds(args.kind)
    bad = [k for k in kinds if k in PROTECTED]
    if bad:
        raise ConfigError(f"--kind {', '.join(bad)}: the runs' results (the tracking store, its artifacts, the "
                          f"published leaderboards) are never pruned")
    _check_filters(items, args.world, kinds)
    older = parse_age(args.older_than) if args.older_than else None
    chosen = select(items, kinds or None, args.world, older, finished=args.finished)
    rows = summarize(chosen)
    total = sum(i.bytes for i in chosen)
    if args.dry_run:
        if rows:
            _table(rows, "would remove", total)
        print(f"would free {human(total)} in {len(chosen)} item(s) (dry run: nothing removed)")
        return 0
    freed = remove(chosen, home)
    if rows:
        _table(rows, "removed", freed)
    print(f"freed {human(freed)} in {len(chosen)} item(s)")
    return 0


def add_parser(sub: Any) -> None:
    """Register ``harness cache du|prune`` on the CLI's subparsers."""
    c = sub.add_parser("cache", help="what the harness home holds (du) and removing cached products (prune)")
    csub = c.add_subparsers(dest="cache_command", required=True)
    du = csub.add_parser("du", help="size of each kind of product, per world")
    du.add_argument("--kind", action="append", help="only these kinds (comma-separated or repeated)")
    du.add_argument("--world", help="only this world")
    du.add_argument("--by-kind", action="store_true", help="one row per kind, worlds summed")
    du.add_argument("--json", action="store_true", help="print JSON instead of a table")
    du.set_defaults(func=cmd_du)
    pr = csub.add_parser("prune", help="remove cached products (never the runs' results) and say what it freed")
    pr.add_argument("--kind", action="append",
                    help="only these kinds (comma-separated or repeated): init, cpt, tagger, tagger-test, "
                         "methods or methods/<name>, mappings, world, downloads, build-envs, ... "
                         "(default: every cached product; world, downloads and build-envs only when named)")
    pr.add_argument("--world", help="only products of this world")
    pr.add_argument("--older-than", help="only products older than this (7d, 12h, 30m, 2w)")
    pr.add_argument("--finished", action="store_true",
                    help="only the init, CPT and tagger products of cells whose MLflow run finished (a later "
                         "evaluation of such a cell builds them again)")
    pr.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    pr.set_defaults(func=cmd_prune)
