"""What a bf16 matrix product costs on a CPU under the pinned kernels, against fp32, at two vocabulary sizes.

    OMP_NUM_THREADS=1 python benchmarks/bench_bf16_gemm.py [--vocab 30000 122776] [--rows 128] [--hidden 384]

The three products of one training step of a vocabulary projection (``logits = h @ E.T`` for ``rows`` positions of
width ``hidden`` over ``vocab`` rows, as the bible world's MLM heads and every LM head compute): the forward product,
the gradient of the hidden states (``g @ E``) and the gradient of the table (``g.T @ h``), each timed once after a
warm-up, in fp32 and in bf16. The harness pins oneDNN to AVX2 (``ONEDNN_MAX_CPU_ISA``, :mod:`harness.core.kernels`),
which has no bf16 matrix product: ATen's reference GEMM computes them. This is why the bible world's heads train in
fp32 and why a run asking for bf16 on a CPU says so at its start (``harness/commands/run.py``).
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import os
import time

import torch


def _once(fn, *tensors: torch.Tensor) -> float:
    """The wall time of ``fn(*tensors)``, once after a warm-up."""
    fn(*tensors)
    t0 = time.perf_counter()
    fn(*tensors)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, nargs="+", default=[30_000, 122_776])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=384)
    args = ap.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), ONEDNN_MAX_CPU_ISA="
          f"{os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}, ATen {torch.backends.cpu.get_cpu_capability()}")
    print(f"{'vocab':>8} {'product':<18} {'fp32 s':>8} {'bf16 s':>8} {'bf16/fp32':>10}")
    for vocab in args.vocab:
        h = torch.randn(args.rows, args.hidden, generator=gen)
        emb = torch.randn(vocab, args.hidden, generator=gen)
        g = torch.randn(args.rows, vocab, generator=gen)
        products = {"forward h @ E.T": lambda a, e, d: a @ e.t(), "grad h: g @ E": lambda a, e, d: d @ e,
                    "grad E: g.T @ h": lambda a, e, d: d.t() @ a}
        halves = (h.bfloat16(), emb.bfloat16(), g.bfloat16())
        for name, fn in products.items():
            fp32, bf16 = _once(fn, h, emb, g), _once(fn, *halves)
            print(f"{vocab:>8,} {name:<18} {fp32:>8.3f} {bf16:>8.3f} {bf16 / fp32:>9.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
