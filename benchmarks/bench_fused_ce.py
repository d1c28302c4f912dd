"""What the fused, chunked cross-entropy (``harness.core.fused_ce``, the CPT lever ``fused_ce``) saves: the peak
memory and the time of the output layer's loss, forward and backward, at a decoder's width (576, SmolLM2's) for
two vocabularies (SmolLM2's own 49,152 and the bible world's 122,776-token target) and two numbers of predicted
positions (a causal LM predicts every position: 4 x 512 and 16 x 512 tokens a micro-batch; the stock path's
peak grows with both, 23 GB at 32 x 512 with the target vocabulary), the stock path (the
whole logits matrix, upcast to fp32 for the loss) beside the fused one. Each measurement in a fresh process (its
peak RSS over its baseline after the inputs are made is the step's own), fp32 on the CPU, ``--threads`` threads.

    python benchmarks/bench_fused_ce.py [--hidden 576] [--threads 2] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import REPO, with_repo_path  # noqa: E402 - this checkout first on the children's path

CHILD = """
import json, resource, sys, time, torch
from torch.nn import functional as F
from harness.core import fused_ce
path, vocab, n, hidden, threads, repeat = sys.argv[1], *map(int, sys.argv[2:7])
torch.set_num_threads(threads)
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
h = torch.randn(n, hidden, generator=g, requires_grad=True)
out = torch.nn.Linear(hidden, vocab, bias=False)
t = torch.randint(0, vocab, (n,), generator=g)
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MB (Linux: KB)
base = rss()
times = []
for _ in range(repeat):
    t0 = time.perf_counter()
    if path == "stock":
        loss = F.cross_entropy(out(h).float(), t, reduction="sum")
    else:
        loss = fused_ce.fused_loss_sum(h, out, t)
    loss.backward()
    times.append(time.perf_counter() - t0)
    h.grad = None
    out.weight.grad = None
print(json.dumps({"peak_mb": rss() - base, "seconds": min(times), "loss": float(loss)}))
"""


def measure(path: str, vocab: int, n: int, hidden: int, threads: int, repeat: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": with_repo_path(dict(os.environ))}
    proc = subprocess.run([sys.executable, "-c", CHILD, path, str(vocab), str(n), str(hidden), str(threads),
                           str(repeat)], capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        return {"failed": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=2, help="steps per measurement (the fastest is shown)")
    a = ap.parse_args()
    print(f"output layer {a.hidden} wide, fp32 on the CPU, {a.threads} threads; peak RSS of the loss's forward and "
          f"backward over the process's baseline; seconds: the fastest of {a.repeat}")
    print("| vocabulary | positions | stock MB | fused MB | stock s | fused s | same loss |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |", flush=True)
    for vocab in (49_152, 122_776):
        for n in (4 * 512, 16 * 512):
            stock = measure("stock", vocab, n, a.hidden, a.threads, a.repeat)
            fused = measure("fused", vocab, n, a.hidden, a.threads, a.repeat)
            if "failed" in stock or "failed" in fused:
                print(f"| {vocab:,} | {n:,} | failed: {stock.get('failed') or fused.get('failed')} |", flush=True)
                continue
            same = abs(stock["loss"] - fused["loss"]) <= 1e-4 * abs(stock["loss"])
            print(f"| {vocab:,} | {n:,} | {stock['peak_mb']:,.0f} | {fused['peak_mb']:,.0f} | "
                  f"{stock['seconds']:.2f} | {fused['seconds']:.2f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
