"""What pinning WECHSEL's alignment costs: ``methods.pinned_blas.align_all`` for one language on OpenBLAS's pinned SSE
kernels in a child process (its start included) against the same float32 Procrustes and ``u_s @ R`` in this
process on its own kernels, at the cpu profile's size and at a crawl-vector size.

    OMP_NUM_THREADS=1 python benchmarks/bench_pinned_blas.py [--vocab 30522] [--repeat 3]
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import statistics
import time

import numpy as np

from methods.pinned_blas import align_all


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=30522, help="source tokens (rows of u_s)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"one language, u_s of {args.vocab} rows; median of {args.repeat} (seconds)")
    print(f"{'pairs':>8} {'dim':>4} {'native':>8} {'pinned':>8}  kernels (pinned)")
    for pairs, dim in ((20_000, 50), (100_000, 300)):
        x_s = rng.standard_normal((pairs, dim)).astype(np.float32)
        x_t = rng.standard_normal((pairs, dim)).astype(np.float32)
        u_s = rng.standard_normal((args.vocab, dim))
        times, used = {}, ""
        for mode in ("native", "pinned"):
            runs = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                _, blas = align_all(u_s, {"x": (x_s, x_t)}, blas=mode)
                runs.append(time.perf_counter() - t0)
            times[mode] = statistics.median(runs)
            used = blas if mode == "pinned" else used
        print(f"{pairs:>8} {dim:>4} {times['native']:>8.2f} {times['pinned']:>8.2f}  {used}")


if __name__ == "__main__":
    main()
