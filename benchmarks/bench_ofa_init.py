"""Benchmark OFA's similarity + combination step (``methods.ofa.knn_softmax_combine``) on synthetic data.

For each size |V_t| x |V_s| it draws random subword vectors (``--word-dim``, 200 like ColexNet+) for both sides, a
random source matrix (``--dim`` columns: 768 = full XLM-R, or a factorized d'), then times the blocked cosine
top-k + softmax + convex combination for **all** |V_t| target rows (an upper bound: in a real run only the
non-copied target tokens with a matched word go through it, e.g. 84k of Glot500's 401k for XLM-R), and records
peak memory: the process's peak RSS during the step and its rise over the RSS before it (inputs included in the
former, not in the latter), and on CUDA the peak allocated device memory.

    OMP_NUM_THREADS=1 python benchmarks/bench_ofa_init.py                    # the default grid, 1 thread
    python benchmarks/bench_ofa_init.py --sizes 401000x250000 --device cuda --block-sizes 1024,8192

Timings depend on the thread count (``--threads``; default 1 because the machine is shared) and on other load.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import gc
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.initialize import PeakMemory  # noqa: E402
from methods.ofa import knn_softmax_combine  # noqa: E402

DEFAULT_SIZES = "10000x30000,50000x30000,50000x250000,100000x250000,401000x250000"


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        t, s = part.lower().split("x")
        out.append((int(float(t)), int(float(s))))
    return out


def run_one(n_t: int, n_s: int, *, word_dim: int, dim: int, k: int, block: int, device: str, seed: int
            ) -> dict[str, float]:
    g = torch.Generator().manual_seed(seed)
    u_t = torch.randn(n_t, word_dim, generator=g)
    u_s = torch.randn(n_s, word_dim, generator=g)
    u_s[: n_s // 10] = 0  # a tenth of the source subwords without a matched word, as in a real vocabulary
    f_s = torch.randn(n_s, dim, generator=g) * 0.05
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    with PeakMemory(interval=0.01) as mem:
        t0 = time.perf_counter()
        out, nb, w = knn_softmax_combine(u_t, u_s, f_s, k=k, temperature=0.1, block_size=block, device=device)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    assert out.shape == (n_t, dim) and bool(torch.isfinite(out).all())
    assert torch.allclose(w.sum(1), torch.ones(n_t), atol=1e-4)
    m = mem.as_dict()
    del out, nb, w, u_t, u_s, f_s
    gc.collect()
    return {"seconds": seconds, "rows_per_s": n_t / seconds, **m}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated |V_t|x|V_s| (default: %(default)s)")
    ap.add_argument("--block-sizes", default="1024", help="target rows per block, comma-separated")
    ap.add_argument("--word-dim", type=int, default=200)
    ap.add_argument("--dim", type=int, default=768, help="columns of the source matrix (768 full, or d')")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from rich.console import Console
    from rich.table import Table

    console = Console()
    dev = args.device
    if dev.startswith("cuda"):
        dev_name = torch.cuda.get_device_name(0)
    else:
        dev_name = f"cpu, {torch.get_num_threads()} thread(s)"
    table = Table(title=f"OFA similarity + combination: word dim {args.word_dim}, source dim {args.dim}, "
                        f"k={args.k}, {dev_name}, torch {torch.__version__}")
    for col in ("|V_t|", "|V_s|", "block", "seconds", "target rows/s", "peak RSS MB", "RSS rise MB",
                "CUDA peak MB", "score block MB"):
        table.add_column(col, justify="right")
    for n_t, n_s in parse_sizes(args.sizes):
        for block in [int(b) for b in args.block_sizes.split(",")]:
            r = run_one(n_t, n_s, word_dim=args.word_dim, dim=args.dim, k=args.k, block=block, device=dev,
                        seed=args.seed)
            row = [f"{n_t:,}", f"{n_s:,}", str(block), f"{r['seconds']:.2f}", f"{r['rows_per_s']:,.0f}",
                   f"{r['peak_rss_mb']:,.0f}", f"{r['extra_rss_mb']:,.0f}",
                   "-" if r["cuda_peak_mb"] is None else f"{r['cuda_peak_mb']:,.0f}",
                   f"{block * n_s * 4 / 2**20:,.0f}"]
            table.add_row(*row)
            console.print(" | ".join(row), highlight=False)
    console.print(table)


if __name__ == "__main__":
    main()
