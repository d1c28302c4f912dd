"""``harness world derive`` at two target-vocabulary sizes, with and without ``--trim``: wall time, CPU time, peak
memory, the bytes the derived world adds on disk, and the target vocabulary it keeps; prints a table.

    python benchmarks/bench_derive.py --home DIR            # DIR holds the built bible world (`harness world build`)
    python benchmarks/bench_derive.py --home DIR --keep     # leave the derived worlds in DIR
    python benchmarks/bench_derive.py --home DIR --langs swh_Latn,hin_Deva   # and --trim with --langs (a third row)

The two sizes are the bible world's two decoders transplanted onto each other: SmolLM2-135M given Gemma 3's
262,144-piece tokenizer (Gemma 3 270M the donor), and Gemma 3 270M given SmolLM2's 49,152-piece tokenizer (SmolLM2 the
donor). Each derivation runs in a fresh ``harness`` process (its peak resident memory is that process's); the
derived worlds are named ``bench-derive-*`` and removed afterwards unless ``--keep`` (the benchmark removes only the
worlds it made, and refuses to start where one of those names exists). What grows with the vocabulary: the donor
check (every target piece's string), the trimming (the world's text tokenized once, the kept pieces' rows written),
and the hashing of the model files (linked, not copied: hard links add no bytes).
Run it alone: other CPU-bound processes slow every stage.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAIRS = {  # name: (source, target tokenizer and donor), sources of the built bible world
    "262k": ("smollm2", "gemma3"),
    "49k": ("gemma3", "smollm2"),
}


def _disk_bytes(root: Path) -> int:
    """Bytes a world folder adds: files whose only link is this one (a hard link to the user's file adds none)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and p.stat().st_nlink == 1)


def _derive(home: Path, base: Path, name: str, pair: tuple[str, str], trim: bool, langs: str | None) -> dict:
    source, target = (base / "sources" / s for s in pair)
    cmd = [sys.executable, "-m", "harness.cli", "world", "derive", name, "--from", "bible", "--source", str(source),
           "--target-tokenizer", str(target), "--donor", str(target)] + (["--trim"] if trim else []) + \
        (["--langs", langs] if langs else [])
    env = {**os.environ, "HARNESS_HOME": str(home), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own resources (its peak resident memory)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        sys.exit(f"bench_derive: {' '.join(cmd[2:])} failed ({proc.returncode}): {text.strip()[-600:]}")
    root = next(p for p in (home / "worlds").glob(f"{name}-v*") if p.is_dir())
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024, "disk_mb": _disk_bytes(root) / 1e6,
            "vocab": manifest["target_tokenizer"]["size"], "root": root}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("HARNESS_HOME", Path.home() / ".cache/harness")),
                    help="the harness home holding the built bible world")
    ap.add_argument("--keep", action="store_true", help="leave the derived worlds in the home")
    ap.add_argument("--langs", help="also derive with --trim --langs LANGS at each size (the languages a job runs)")
    args = ap.parse_args(argv)
    base = next((p for p in sorted((args.home / "worlds").glob("bible-v*")) if (p / "manifest.json").is_file()), None)
    if base is None:
        sys.exit(f"bench_derive: no built bible world under {args.home}/worlds (`harness world build bible`)")
    trims = ("no", "yes") + (("langs",) if args.langs else ())
    names = {(size, trim): f"bench-derive-{size}-{trim}" for size in PAIRS for trim in trims}
    taken = [n for n in names.values() if any((args.home / "worlds").glob(f"{n}-v*"))]
    if taken:
        sys.exit(f"bench_derive: world {taken[0]} exists in {args.home}; remove it or use another home")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; base {base.name}")
    print("| target | --trim | target pieces kept | wall s | CPU s | peak RSS MB | disk MB added |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    made = []
    try:
        for (size, trim), name in names.items():
            r = _derive(args.home, base, name, PAIRS[size], trim != "no", args.langs if trim == "langs" else None)
            made.append(r["root"])
            how = f"yes, --langs {args.langs}" if trim == "langs" else trim
            print(f"| {PAIRS[size][1]} ({size}) | {how} | {r['vocab']:,} | {r['wall']:.1f} | "
                  f"{r['cpu']:.1f} | {r['peak_mb']:,.0f} | {r['disk_mb']:,.1f} |", flush=True)
    finally:
        if not args.keep:
            import shutil

            for root in made:
                shutil.rmtree(root)
                lease = root.parent / f"{root.name}.lease"
                if lease.is_file():
                    lease.unlink()
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
