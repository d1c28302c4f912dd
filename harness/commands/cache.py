"""``harness cache du|prune|verify``: what the harness home holds, per kind and world, removing cached products (never
the runs' results, never one in use), and hashing every product again. The work is the cache library's
(:mod:`harness.cache_admin`); this module is its command line. None of them makes a home that does not exist."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.cache_admin import (
    PROTECTED,
    Item,
    human,
    kept,
    kind_matches,
    known_kinds,
    parse_age,
    remove,
    scan,
    select,
    summarize,
)
from harness.core.errors import ConfigError, HarnessError


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
        import difflib

        close = difflib.get_close_matches(unknown[0], known, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(f"unknown kind {unknown[0]!r}.{hint} Kinds: {', '.join(known)} (`harness cache du "
                          "--by-kind` shows what the home holds of each)")
    if world and world != "-":
        worlds = sorted(set(WORLDS.names()) | {i.world for i in items if i.world != "-"})
        if world not in worlds:
            raise UnknownNameError("world", world, worlds)


def _home(as_json: bool = False) -> Path | None:
    """The harness home, or None (said in one line, a JSON object with ``as_json``) when there is none yet: these
    commands never make one."""
    from harness.core.paths import home_dir

    home = home_dir()
    if not home.is_dir():
        note = f"no harness home at {home} (nothing cached yet; HARNESS_HOME names another)"
        print(json.dumps({"home": str(home), "total_bytes": 0, "rows": [], "note": note}) if as_json else note)
        return None
    return home


def cmd_du(args: argparse.Namespace) -> int:
    home = _home(as_json=args.json)
    if home is None:
        return 0
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


WHY = {"in use": "a process is reading them; `harness cache prune --force` removes them anyway",
       "being built": "a process is building them; nothing removes them meanwhile",
       "an SQLite store": "an SQLite database, a tracking store's: the runs' results are never pruned"}


def _kept_lines(items: list[Item], verb: str) -> list[str]:
    """One line per reason the items were left (``Item.why``): what, and why."""
    lines = []
    for why, text in WHY.items():
        these = [i for i in items if i.why == why]
        if these:
            names = ", ".join(f"{i.kind} {i.path.name}" for i in these[:5]) + (", ..." if len(these) > 5 else "")
            lines.append(f"{verb} {len(these)} product(s) {why if why != 'an SQLite store' else 'holding ' + why}: "
                         f"{names} ({text})")
    return lines


def cmd_prune(args: argparse.Namespace) -> int:
    kinds = _kinds(args.kind)
    bad = [k for k in kinds if k in PROTECTED]
    if bad:
        raise ConfigError(f"--kind {', '.join(bad)}: the runs' results (the tracking store, its artifacts, the "
                          f"published leaderboards) are never pruned")
    if "other" in kinds:
        raise ConfigError("--kind other: what the harness home holds beside its products (a tracking store under "
                          "another name, a user's files, the runs' status files) is never pruned; remove it "
                          "yourself if it is yours to remove")
    older = parse_age(args.older_than) if args.older_than else None
    home = _home()
    if home is None:
        return 0
    items = scan(home)
    _check_filters(items, args.world, kinds)
    chosen = select(items, kinds or None, args.world, older, finished=args.finished)
    busy = []
    for i in chosen:
        i.why = kept(i, home, force=args.force)
        if i.why:
            busy.append(i)
    chosen = [i for i in chosen if not i.why]
    rows = summarize(chosen)
    total = sum(i.bytes for i in chosen)
    if args.dry_run:
        if rows:
            _table(rows, "would remove", total)
        print(f"would free {human(total)} in {len(chosen)} item(s) (dry run: nothing removed)")
        for line in _kept_lines(busy, "would skip"):
            print(line)
        return 0
    # what it is about to remove, before it does
    forced = sum(kept(i, home) == "in use" for i in chosen) if args.force else 0
    print(f"removing {len(chosen)} item(s), {human(total)}"
          + (f" (in use and removed anyway: {forced})" if args.force else ""), flush=True)
    skipped: list[Item] = []
    freed = remove(chosen, home, force=args.force, skipped=skipped)  # (a reader or a build may have come since)
    busy += skipped
    removed = [i for i in chosen if i not in skipped]
    if removed:
        _table(summarize(removed), "removed", freed)
    print(f"freed {human(freed)} in {len(removed)} item(s)")
    for line in _kept_lines(busy, "skipped"):
        print(line)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Hash every file of every finished product again against its marker (``harness.core.cache.verify_product``
    with ``full``); exit 2 naming each product that does not match. Nothing is removed: a run that needs a damaged
    product builds it again."""
    from harness.core.cache import verify_product

    kinds = _kinds(args.kind)
    home = _home()
    if home is None:
        return 0
    items = scan(home)
    _check_filters(items, None, kinds)
    products = [i for i in items if i.path.is_dir() and (i.path / "_DONE.json").is_file()
                and (home / "products") in i.path.parents and (not kinds or kind_matches(i.kind, kinds))]
    bad = []
    for i in products:
        problem = verify_product(i.path, full=True)
        if problem is not None:
            bad.append(f"{i.kind} {i.path.name} ({problem})")
            print(f"  {i.kind} {i.path.name}: {problem}")
    size = human(sum(i.bytes for i in products))
    if bad:
        raise HarnessError(f"{len(bad)} of {len(products)} product(s) do not match their sha256: {'; '.join(bad)} "
                           f"(a run that needs them builds them again; `harness cache prune` removes them)")
    print(f"verified {len(products)} product(s), {size}: every file matches its sha256")
    return 0


def add_parser(sub: Any) -> None:
    """Register ``harness cache du|prune|verify`` on the CLI's subparsers."""
    c = sub.add_parser("cache", help="what the harness home holds (du), removing cached products (prune), hashing "
                                     "them again (verify)")
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
    pr.add_argument("--force", action="store_true",
                    help="also remove products that a process is reading (a CPT's corpus, a cell's model, a run's "
                         "world): that process then fails (never one being built, never an SQLite file)")
    pr.set_defaults(func=cmd_prune)
    ve = csub.add_parser("verify", help="hash every cached product again; exit 2 naming each that does not match")
    ve.add_argument("--kind", action="append", help="only these kinds (comma-separated or repeated)")
    ve.set_defaults(func=cmd_verify)
