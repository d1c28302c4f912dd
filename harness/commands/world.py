"""``harness world build|info|check``: build, describe or check a world."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from harness.commands.common import console


def cmd_world(args: argparse.Namespace) -> int:
    from harness.worlds import WORLDS, build_world, get_world, world_dir

    if args.action == "derive":
        return _derive(args)
    given = [f"--{o.replace('_', '-')}" for o in DERIVE_OPTIONS if getattr(args, o, None)]
    if given:
        console.print(f"{', '.join(given)}: options of `harness world derive` only")
        return 2
    builder = WORLDS.get(args.name)
    if args.action == "build" and args.add_sources:
        from harness.worlds.adding import add_sources

        if args.force:
            console.print("--add-sources keeps the built world; --force builds it again: give one of them")
            return 2
        added = add_sources(args.name, note=lambda line: print(line, flush=True), keep_inputs=args.keep_downloads)
        print(f"world {args.name}: " + (f"added {', '.join(added)} (the world's identity and every cell's key "
                                        f"unchanged)" if added else "has every source this version declares"),
              flush=True)
        return 0
    if args.action == "build":
        root = build_world(args.name, force=args.force, keep_inputs=args.keep_downloads)
        console.print(f"world {args.name} ready at {root}")
        from harness.worlds.adding import missing_sources

        missing = missing_sources(root, builder)
        if missing:  # built by an earlier version, before these sources
            print(f"world {args.name} lacks {', '.join(missing)} (built before this version declared them): "
                  f"`harness world build {args.name} --add-sources` adds them, keeping every cell", flush=True)
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
        return max(1 if missing else 0, _check_built(args.name))
    if not (world_dir(args.name) / "manifest.json").is_file():
        return _declared_info(args.name, builder)
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
    if world.base is not None:  # a derived world: its base world, source, target tokenizer, donor, user texts
        from harness.worlds.derived import describe

        for line in describe(world):
            print(line, flush=True)
    else:
        for source in world.sources:  # architecture, objective, vocabulary, licence
            print(world.source_line(source), flush=True)
    from harness.worlds import world_digest

    digest, n_files = world_digest(world.root)
    print(f"world {args.name} digest: {digest} (sha256 over the {n_files} files its build produced, the source "
          "models and their heads included; equal digests, equal worlds)", flush=True)
    task_inputs = getattr(builder, "task_inputs", None)
    if task_inputs:
        t = Table(title=f"world {args.name}: where each task's data come from")
        for c in ("task", "inputs", "licences"):
            t.add_column(c)
        for r in task_inputs(world):
            t.add_row(r["task"], r["inputs"], r["licences"])
        console.print(t)
    return 0


DERIVE_OPTIONS = ("from_world", "source", "target_tokenizer", "donor", "text", "langs", "source_name", "copy",
                  "trim", "source_kind")


def _derive(args: argparse.Namespace) -> int:
    """``harness world derive NAME --from WORLD --source PATH ...`` (:mod:`harness.worlds.derived`)."""
    from harness.worlds.derived import derive

    if not args.name or not args.from_world or not args.source:
        console.print("harness world derive NAME --from WORLD --source MODEL: give the new world's name, the built "
                      "world it is derived from and the source model")
        return 2
    langs = [x.strip() for x in (args.langs or "").split(",") if x.strip()]
    root = derive(args.name, args.from_world, args.source, target_tokenizer=args.target_tokenizer, donor=args.donor,
                  texts=args.text or [], langs=langs, name_of_source=args.source_name, copy=args.copy,
                  trim=args.trim, source_kind=args.source_kind, note=lambda line: print(line, flush=True))
    print(f"world {args.name} derived at {root}; `harness world info {args.name}` describes it, "
          f"`harness run --world {args.name}` runs it", flush=True)
    return 0


def _check_built(name: str) -> int:
    """The built world's every file against the sha256 its build recorded (all of them hashed again, whatever
    their modification times say). 1 when a file does not match."""
    from rich.markup import escape

    from harness.worlds import check_world_files, world_dir

    root = world_dir(name)
    if not (root / "manifest.json").is_file():
        console.print(f"world {name}: not built here ({escape(str(root))}); `harness world build {name}` builds it")
        return 0
    res = check_world_files(root, full=True)
    if res.unlisted:
        from harness.worlds import unlisted_message

        console.print(f"[red]not in the record:[/red] {escape(unlisted_message(name, root, res.unlisted))}",
                      soft_wrap=True)
    if res.problems:
        for p in res.problems:
            console.print(f"[red]damaged:[/red] {escape(p)}", soft_wrap=True)
        console.print(f"[red]world {name} at {escape(str(root))}: {len(res.problems)} file(s) do not match what its "
                      f"build recorded[/red]; `harness world build {name} --force` builds it again (so does the next "
                      "run that loads it)", soft_wrap=True)
        return 1
    if res.unlisted:
        return 1
    if not res.digests:
        console.print(f"world {name} at {escape(str(root))}: built before file digests were recorded, so only the "
                      f"sizes of its {res.files} files and the sha256 of its manifest and language table are checked "
                      f"(they match); `harness world build {name} --force` builds it again with every file's sha256",
                      soft_wrap=True)
        return 0
    console.print(f"world {name} at {escape(str(root))}: all {res.files} files match the sha256 its build recorded",
                  soft_wrap=True)
    return 0


def _declared_info(name: str, builder: Any) -> int:
    """``harness world info`` of a world not built here: what its builder declares (``describe()``, else
    ``declare()``: languages, sources and their hidden sizes, the tasks each language is meant to have), read
    without building anything; nothing is written."""
    from rich.markup import escape

    from harness.worlds import world_dir
    from harness.worlds.base import builder_sketch

    sketch = builder_sketch(builder, ("describe", "declare"))
    where = escape(str(world_dir(name)))
    if sketch is None:
        console.print(f"world {name}: not built here ({where}), and its builder declares nothing before it is built; "
                      f"`harness world build {name}` builds it", soft_wrap=True)
        return 0
    tasks = sorted(sketch.tasks)
    t = Table(title=f"world {name} (declared; not built here)")
    for col in ("language", "script", *tasks):
        t.add_column(col)
    for code in sorted(sketch.languages):
        queries = code == sketch.pivot
        t.add_row(code, code.partition("_")[2] or "-",
                  *["yes" if code in sketch.tasks[task] else ("queries" if queries and task in ("sr-b", "sr-t")
                                                               else "-") for task in tasks])
    console.print(t)
    for source in sketch.sources:
        hidden = sketch.hidden_size(source)
        console.print(f"{sketch.source_line(source)}, hidden size "
                      f"{hidden if hidden is not None else 'known once built'}", highlight=False, soft_wrap=True)
    console.print(f"resources: {', '.join(sorted(sketch.resources)) or '-'}", highlight=False)
    console.print(f"world {name} is not built here ({where}): this is what its builder declares"
                  + f"; `harness world build {name}` builds it, and `harness world info {name}` then describes the "
                    "built world", highlight=False, soft_wrap=True)
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
    w.add_argument("action", choices=["build", "info", "check", "derive"],
                   help="build: build it (once; then cached); info: describe it; check: which of its inputs are present "
                        "and where each comes from; derive: make a new world NAME from a built world (--from) with "
                        "your own source model, target tokenizer, donor and text (docs/your-model.md)")
    w.add_argument("name", nargs="?", default="bible", help="the world (default: bible; `harness list` names them)")
    w.add_argument("--force", action="store_true", help="rebuild even if cached")
    w.add_argument("--add-sources", action="store_true",
                   help="add to a world built by an earlier version the sources it lacks that carry their own "
                        "identity (the decoders), keeping every file, the world's identity and every cell's key")
    w.add_argument("--keep-downloads", action="store_true", help="keep what the build downloaded and installed "
                   "(downloads/, build-envs/; default: removed once the world is built, fetched again by a rebuild)")
    d = w.add_argument_group("derive (docs/your-model.md)")
    d.add_argument("--from", dest="from_world", metavar="WORLD", help="the built world whose tasks and resources "
                   "the derived world reads (in place, nothing copied)")
    d.add_argument("--source", metavar="MODEL", help="the source model: a Hugging Face model folder, a .gguf file "
                   "(needs the gguf package) or a hub id in the local Hugging Face cache")
    d.add_argument("--source-name", metavar="NAME", help="the source's name in the world (default: from --source)")
    d.add_argument("--source-kind", choices=["mono", "multi"], help="whether the source model is monolingual or "
                   "multilingual (HyperOFA's temperature follows it; default: the base world's word for a source "
                   "with the same files, else unknown)")
    d.add_argument("--target-tokenizer", metavar="PATH", help="a tokenizer folder, a model folder, a tokenizer.json "
                   "or a SentencePiece .model file (default: the base world's target tokenizer)")
    d.add_argument("--donor", metavar="MODEL", help="a model that owns the target vocabulary (same kinds as "
                   "--source): as many embedding rows as the target tokenizer has tokens, the same vocabulary")
    d.add_argument("--text", action="append", metavar="LANG=FILE", help="your text for a language the base world "
                   "lacks (one sentence a line; every 10th line held out for the held-out loss); repeatable")
    d.add_argument("--langs", metavar="CODES", help="comma-separated languages the world keeps (the pivot with them): "
                   "each must be in the base world or given with --text; --trim then keeps their pieces only")
    d.add_argument("--copy", action="store_true", help="copy the models' files instead of hard-linking them (take "
                   "this where you will write over your model's files in place later)")
    d.add_argument("--trim", action="store_true", help="trim the target tokenizer to the pieces the world's text "
                   "(and yours) uses, with every special token and byte piece, and the donor's rows to it "
                   "(docs/your-model.md)")
    w.set_defaults(func=cmd_world)
