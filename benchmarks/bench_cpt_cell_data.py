"""What a cell's CPT data costs on a built world under a profile's CPT settings: the corpus product built once, then
found by every later cell, against tokenizing the CPT text in every cell (``harness.cpt.cpt_blocks``, the path the
product replaced).

Each measurement runs in a fresh process (as a cell's worker meets it: nothing read or hashed before), on one
thread, against a temporary product cache: the product's build, then ``--repeat`` cells that find it (looking it up,
which hashes the CPT files and the tokenizer once a process, and opening the view a cell trains on), and ``--repeat``
cells of the old path. The main job's figure: the ``cpu`` profile on the ``bible`` world (block size 64, the first 100
lines of each language).

    OMP_NUM_THREADS=1 python benchmarks/bench_cpt_cell_data.py [--world bible] [--profile cpu] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads

REPO = Path(__file__).resolve().parents[1]


def child(world_name: str, profile: str, cache_dir: str, path: str) -> dict:
    from transformers import AutoTokenizer

    from harness.core.cache import ProductCache
    from harness.core.profiles import profile as get_profile
    from harness.corpus import CorpusDataset, ensure_corpus, write_order
    from harness.cpt import cpt_blocks
    from harness.worlds import get_world

    world = get_world(world_name, build=False)
    cpt = get_profile(profile)["cpt"]
    block, cap = int(cpt["block_size"]), cpt.get("max_sentences_per_language")
    tok = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    langs = sorted(p.stem for p in world.resource_files("cpt_text"))
    t0 = time.perf_counter()
    if path == "product":
        corpus = ensure_corpus(tok, world, langs, block, cap, cache=ProductCache(Path(cache_dir)))
        view = CorpusDataset(corpus, write_order(corpus, {}, 1, Path(cache_dir)))
        view[0]
        out = {"built": corpus.built, "blocks": len(view)}
    else:
        out = {"built": False, "blocks": len(cpt_blocks(tok, world, langs, block, cap, 1))}
    return {**out, "seconds": time.perf_counter() - t0, "languages": len(langs), "block": block, "cap": cap}


def run(args: argparse.Namespace, cache: str, path: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, __file__, "--child", path, "--cache", cache, "--world", args.world,
                           "--profile", args.profile], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", default="bible")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=("product", "old"))
    ap.add_argument("--cache")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.world, args.profile, args.cache, args.child)))
        return
    with tempfile.TemporaryDirectory() as cache:
        first = run(args, cache, "product")
        assert first["built"], "the temporary cache held the product already"
        found = [run(args, cache, "product") for _ in range(args.repeat)]
        old = [run(args, cache, "old") for _ in range(args.repeat)]
    assert not any(f["built"] for f in found) and {f["blocks"] for f in found} == {first["blocks"]} == \
        {o["blocks"] for o in old}
    print(f"{args.world}, profile {args.profile}: {first['languages']} languages, block {first['block']}, "
          f"cap {first['cap']} lines a language: {first['blocks']} blocks (one thread, a fresh process each)")
    print(f"  the corpus product built once:      {first['seconds']:.2f} s")
    print(f"  a cell that finds it (median of {args.repeat}): {statistics.median(f['seconds'] for f in found):.2f} s")
    print(f"  a cell of the old path (median of {args.repeat}): {statistics.median(o['seconds'] for o in old):.2f} s")


if __name__ == "__main__":
    main()
