"""A decoder cell's time and memory, per source: the initialization (FVT through ``initialize_model``, the path a
cell takes), one causal CPT step (forward, backward and AdamW on a batch of packed blocks, fp32, the CPU's eager
attention as CPT sets it), and the held-out ``clm`` evaluation of a batch of sentences; with the parameters counted.

Each source is measured in a fresh process (its peak RSS is its own), on ``OMP_NUM_THREADS`` threads. The sources
are model folders: by default the bible world's ``smollm2`` (135 M parameters) and ``gemma3`` (268 M) from a built
bible world in the harness home; ``--source name=folder`` names others (a folder converted by
``harness.worlds.bible.decoders.build_decoder``). The target tokenizer is the bible world's by default; its size
drives the cost of the embedding and output tables (``--target`` names another).

    OMP_NUM_THREADS=1 python benchmarks/bench_decoder_cell.py [--source smollm2=DIR --source gemma3=DIR]
        [--target DIR] [--batch 8] [--block 128]
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

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads

REPO = Path(__file__).resolve().parents[1]


class _World:
    """The two folders an initialization reads, as a world presents them."""

    def __init__(self, source: Path, target: Path):
        self.name, self.hash, self._source, self.target_tokenizer_dir = "bench", "bench", source, target

    def source_dir(self, source: str) -> Path:
        return self._source

    def require(self, kind: str, who: str) -> None:
        raise SystemExit(f"{who} needs {kind!r}: the benchmark runs FVT, which needs none")


def child(source: str, target: str, batch: int, block: int) -> dict:
    import torch
    from transformers import AutoTokenizer

    from harness.core import objective
    from harness.core.precision import training_attention
    from harness.initialize import PeakMemory, initialize_model, load_model
    from tasks.clm import sentence_nats

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp, PeakMemory() as mem:
        t0 = time.perf_counter()
        rep = initialize_model(_World(Path(source), Path(target)), "src", "fvt", dim=None, seed=1, params={},
                               out_dir=Path(tmp) / "init", mapping_cache_dir=Path(tmp) / "maps", compact=False)
        out["init_s"] = round(time.perf_counter() - t0, 1)
        out["init_counts"] = rep["counts"]
        model = load_model(Path(tmp) / "init")
        out["params_m"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 1)
        out["target_vocab"] = rep["target_vocab_size"]
        training_attention(model, "cpu")
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(5, rep["target_vocab_size"], (batch, block), generator=g)
        steps = []
        for _ in range(3):  # the first step allocates AdamW's states: the figure is the median of three
            t = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            steps.append(time.perf_counter() - t)
        out["cpt_step_s"] = round(sorted(steps)[1], 2)
        model.eval()
        tok = AutoTokenizer.from_pretrained(Path(tmp) / "init")
        seqs = [[tok.bos_token_id or 0, *ids[i % batch, : 48].tolist()] for i in range(32)]
        t = time.perf_counter()
        sentence_nats(model, seqs, 0, 32, torch.device("cpu"), "fp32")
        out["clm_eval_32x48_s"] = round(time.perf_counter() - t, 2)
        out["objective"] = objective.objective_of_model(model)
    out.update(mem.as_dict())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append", default=[], help="name=model folder (repeatable)")
    ap.add_argument("--target", default=None, help="target tokenizer folder (default: the bible world's)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        src, tgt, batch, block = args.child
        print(json.dumps(child(src, tgt, int(batch), int(block))))
        return
    from harness.worlds import world_dir

    bible = world_dir("bible")
    sources = dict(s.split("=", 1) for s in args.source) or {n: str(bible / "sources" / n) for n in ("smollm2", "gemma3")}
    target = args.target or str(bible / "target_tokenizer")
    rows = []
    for name, folder in sources.items():
        proc = subprocess.run([sys.executable, __file__, "--child", folder, target, str(args.batch), str(args.block)],
                              capture_output=True, text=True, cwd=REPO, env=os.environ)
        if proc.returncode != 0:
            raise SystemExit(f"{name}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
        rows.append((name, json.loads(proc.stdout.strip().splitlines()[-1])))
    threads = os.environ.get("OMP_NUM_THREADS", "all")
    print(f"decoder cell on {threads} thread(s), load average {os.getloadavg()[0]:.1f}; target {target}; CPT batch "
          f"{args.batch} x {args.block} tokens, fp32")
    print(f"{'source':<10} {'params M':>8} {'|V_t|':>7} {'init s':>7} {'CPT step s':>10} {'clm eval s':>10} "
          f"{'peak RSS MB':>11}")
    for name, r in rows:
        print(f"{name:<10} {r['params_m']:>8} {r['target_vocab']:>7} {r['init_s']:>7} {r['cpt_step_s']:>10} "
              f"{r['clm_eval_32x48_s']:>10} {r['peak_rss_mb']:>11}")


if __name__ == "__main__":
    main()
