"""What each kind of product takes in the harness home after a job.

    python benchmarks/bench_footprint.py --run [--world synthetic] [--methods all] [--tasks sr-t,ner]
    python benchmarks/bench_footprint.py --home ~/.cache/harness [--experiment bible/mono]

``--run`` runs a job in a fresh temporary home (``harness run``, one worker, the ``cpu`` profile) and prints the
table of ``harness cache du`` for it: what a job leaves with the current layout. ``--home`` measures an existing
home read-only (nothing in it is changed) and prints, per kind, what it holds now and what the same products take
in the current layout: a tagger that took less than ``tasks.tagging.KEEP_WEIGHTS_SECONDS`` to fine-tune keeps its
record and scores but not its weights; an init product keeps only the tensors that differ from its source model's
(compared byte for byte); a CPT step keeps no tokenizer copy; the init and CPT products of a cell whose MLflow run
finished are removed (``harness run --keep-products`` keeps them); a fastText model is kept in compact form (each
``.bin`` is compacted into a temporary folder to measure it: ``--no-compact`` skips that and counts it whole); a
world build's downloads and build environments are removed once the world is built. ``--experiment`` restricts
the init, CPT and tagger products to the cells of that MLflow experiment (e.g. the main job's ``bible/mono``); the
world and the method caches (fastText models) are shared by every job and always counted whole.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import json
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _safetensors_index(path: Path) -> tuple[int, dict[str, tuple[int, int]]]:
    """(data offset, {tensor: (start, end)}) from a safetensors header."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return 8 + n, {k: tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__"}


def shared_bytes(model: Path, source: Path) -> int:
    """Bytes of the tensors of ``model`` that are byte-identical (same name) to the source model's."""
    if not model.is_file() or not source.is_file():
        return 0
    m0, mi = _safetensors_index(model)
    s0, si = _safetensors_index(source)
    total = 0
    with open(model, "rb") as fm, open(source, "rb") as fs:
        for name, (a, b) in mi.items():
            if name not in si or si[name][1] - si[name][0] != b - a:
                continue
            fm.seek(m0 + a)
            fs.seek(s0 + si[name][0])
            if fm.read(b - a) == fs.read(b - a):
                total += b - a
    return total


def experiment_cells(home: Path, experiment: str) -> list[dict[str, str]]:
    """Identity tags of the cell runs of an experiment in the home's default store (read-only)."""
    db = home / "mlflow.db"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT t.run_uuid, t.key, t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            "JOIN experiments e ON e.experiment_id = r.experiment_id WHERE e.name = ? AND t.key LIKE 'harness.%'",
            (experiment,)).fetchall()
    finally:
        con.close()
    runs: dict[str, dict[str, str]] = {}
    for run, key, value in rows:
        runs.setdefault(run, {})[key[len("harness."):]] = value
    return [t for t in runs.values() if t.get("kind") == "cell"]


def compact_size(model: Path, scratch: Path) -> int:
    """Bytes of the compact form of a fastText ``.bin`` (written into ``scratch`` and removed; the ``.bin`` is
    only read), or of the file itself when it is not a ``.bin`` or cannot be compacted."""
    from methods.fasttext_util import compact_model

    if model.suffix != ".bin":
        return model.stat().st_size
    out = scratch / (model.stem + ".npz")
    try:
        info = compact_model(model, out)
    finally:
        out.unlink(missing_ok=True)
    return model.stat().st_size if info is None else int(info["size"])


def projected(home: Path, items: list, experiment: str | None,
              compact: bool = True) -> list[tuple[str, int, int, int]]:
    """(kind, items, bytes now, bytes in the current layout) per kind."""
    from harness.cache_admin import _marker, world_names
    from tasks.tagging import KEEP_WEIGHTS_SECONDS, WEIGHTS

    hashes = {v: k for k, v in world_names(home).items()}  # name -> hash
    cells = experiment_cells(home, experiment) if experiment else None
    keep_init: set[str] | None = None
    if cells is not None:
        wanted = {(c.get("method"), c.get("source"), None if c.get("dim") == "full" else c.get("dim"),
                   c.get("seed")) for c in cells}
        keep_init = set()
        for i in items:
            if i.kind == "init":
                inp = _marker(i.path).get("inputs") or {}
                dim = inp.get("dim")
                if (inp.get("method"), inp.get("source"), None if dim is None else str(dim),
                        str(inp.get("seed"))) in wanted:
                    keep_init.add(i.path.name)
        cell_keys = {c.get("cell") for c in cells}
    rows: dict[str, list[int]] = {}
    scratch = Path(tempfile.mkdtemp(prefix="footprint-compact-"))
    models = [i for i in items if i.kind.startswith("methods/") and i.path.suffix == ".bin"] if compact else []
    for i in items:
        info = _marker(i.path) if i.path.is_dir() else {}
        if cells is not None:
            if i.kind == "init" and i.path.name not in keep_init:
                continue
            if i.kind == "cpt" and not _cpt_of(i, info, keep_init):
                continue
            if i.kind == "tagger" and str((info.get("inputs") or {}).get("model", "")).split(":")[0] not in cell_keys:
                continue
            if i.kind == "tagger-test":
                continue  # counted with nothing: a few KB of scores
        after = i.bytes
        if i.kind == "tagger" and (i.path / WEIGHTS).is_file():
            rec = json.loads((i.path / "tagger.json").read_text()) if (i.path / "tagger.json").is_file() else {}
            if float(rec.get("train_seconds", 0.0)) < KEEP_WEIGHTS_SECONDS:
                after -= (i.path / WEIGHTS).stat().st_size
        elif i.kind == "init" and not (i.path / "body.json").is_file():
            inp = info.get("inputs") or {}
            world_dir = next((d for d in (home / "worlds").iterdir()
                              if hashes.get(d.name.rsplit("-v", 1)[0]) == inp.get("world")), None) \
                if (home / "worlds").is_dir() else None
            if world_dir is not None:
                after -= shared_bytes(i.path / "model.safetensors",
                                      world_dir / "sources" / str(inp.get("source")) / "model.safetensors")
        elif i.kind == "cpt":
            for step in i.path.glob("step-*"):
                for f in step.glob("tokenizer*"):
                    after -= f.stat().st_size
                for f in step.glob("special_tokens_map.json"):
                    after -= f.stat().st_size
        if i.kind in ("init", "cpt") and i.finished:
            after = 0  # removed once the cell's run finished
        elif i.kind in ("downloads", "build-envs"):
            after = 0  # removed once the world is built
        elif i in models:
            after += compact_size(i.path, scratch) - i.path.stat().st_size
            print(f"  compacted {models.index(i) + 1}/{len(models)}: {i.path.name}", file=sys.stderr, flush=True)
        r = rows.setdefault(i.kind, [0, 0, 0])
        r[0] += 1
        r[1] += i.bytes
        r[2] += after
    scratch.rmdir()
    return sorted(((k, *v) for k, v in rows.items()), key=lambda r: -r[2])


def _cpt_of(item, info: dict, init_keys: set[str] | None) -> bool:
    from harness.core.hashing import hash_obj

    if init_keys is None:
        return True
    settings = {k: v for k, v in (info.get("settings") or {}).items() if k != "devices"}
    return any(hash_obj({"init": k, "cpt": settings, "seed": info.get("seed")}) == item.path.name for k in init_keys)


def print_table(rows: list[tuple], headers: list[str]) -> None:
    from harness.cache_admin import human

    cells = [[str(r[0]), str(r[1]), *[human(x) for x in r[2:]]] for r in rows]
    total = ["total", str(sum(r[1] for r in rows)), *[human(sum(r[k] for r in rows)) for k in range(2, len(headers))]]
    widths = [max(len(h), *(len(c[j]) for c in [*cells, total])) for j, h in enumerate(headers)]

    def line(c: list[str]) -> str:
        return "  ".join(x.ljust(w) if j == 0 else x.rjust(w) for j, (x, w) in enumerate(zip(c, widths, strict=True)))

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print(line(c))
    print("  ".join("-" * w for w in widths))
    print(line(total))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="run a job in a temporary home and measure it")
    ap.add_argument("--home", type=Path, help="measure this existing home (read-only)")
    ap.add_argument("--experiment", help="with --home: only the products of this experiment's cells")
    ap.add_argument("--world", default="synthetic")
    ap.add_argument("--methods", default="all")
    ap.add_argument("--tasks", default="sr-t,ner")
    ap.add_argument("--keep", action="store_true", help="with --run: keep the temporary home")
    ap.add_argument("--no-compact", action="store_true",
                    help="with --home: count fastText .bin files whole instead of compacting them to measure")
    args = ap.parse_args()
    if not args.run and not args.home:
        ap.error("give --run or --home PATH")

    from harness.cache_admin import scan, summarize

    if args.home:
        home = args.home.expanduser().resolve()
        rows = projected(home, scan(home), args.experiment, compact=not args.no_compact)
        what = f" (products of experiment {args.experiment!r}; shared caches whole)" if args.experiment else ""
        print(f"\nharness home {home}{what}: now, and the same products in the current layout\n")
        print_table(rows, ["kind", "items", "now", "current layout"])
    if args.run:
        tmp = Path(tempfile.mkdtemp(prefix="harness-footprint-"))
        env = {**os.environ, "HARNESS_HOME": str(tmp), "HF_HOME": str(tmp / "hf")}
        env.pop("MLFLOW_TRACKING_URI", None)
        cmd = [sys.executable, "-m", "harness.cli", "run", "--world", args.world, "--methods", args.methods,
               "--tasks", args.tasks, "--workers", "1"]
        t0 = time.time()
        subprocess.run(cmd, check=True, env=env, cwd=REPO)
        wall = time.time() - t0
        items = scan(tmp)
        rows = [(r["kind"], r["items"], r["bytes"]) for r in summarize(items, by_world=False)]
        print(f"\n`harness {' '.join(cmd[3:])}` in a fresh home ({wall:.0f} s): what it leaves\n")
        print_table(rows, ["kind", "items", "size"])
        if args.keep:
            print(f"\nkept: {tmp}")
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
