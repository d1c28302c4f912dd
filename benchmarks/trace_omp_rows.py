"""The length of OMP's rows on a source, from a sample of its new tokens: what ``benchmarks/trace_row_scale.py``
reads from a full initialization, for a source where OMP's full rows take too long (Gemma 3: 40 minutes of a core).

The sample's rows are computed as the method computes them (:func:`methods.omp.transplant`, k = 64 anchors picked
in the helper model's input table, the coefficients applied to the anchors' source rows), with the overlap OMP uses
(exact, special tokens by role) and the helper model the cache holds (``--helper DIR``: its ``model`` folder, as
``CLP``, ``CLP+`` and ``OMP`` trained it). Prints the sample's row-length quantiles beside the source table's, how
many rows are longer than 2, 5 and 10 times the source's median, and the coefficients' absolute sums.

    python benchmarks/trace_omp_rows.py --world bible --source gemma3 --helper HOME/cache/methods/helper/products/helper-model/KEY/model
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", default="bible")
    ap.add_argument("--source", required=True)
    ap.add_argument("--helper", type=Path, required=True, help="the helper model's folder")
    ap.add_argument("--sample", type=int, default=1000, help="new tokens sampled (seed 0)")
    ap.add_argument("--k", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from transformers import AutoModel, AutoTokenizer

    from harness.core.surgery import load_model
    from harness.worlds import get_world
    from methods.omp import transplant
    from methods.overlap import build_mapping

    world = get_world(args.world, build=False)
    src = load_model(world.source_dir(args.source)).get_input_embeddings().weight.detach().float()
    target = AutoTokenizer.from_pretrained(world.root / "target_tokenizer")
    mapping = build_mapping(AutoTokenizer.from_pretrained(world.source_dir(args.source)), target, "exact",
                            specials="role")
    helper = AutoModel.from_pretrained(args.helper).get_input_embeddings().weight.detach().float()
    copied = np.zeros(len(target), dtype=bool)
    copied[list(mapping.copy)] = True
    anchors, new = np.array(sorted(mapping.copy)), np.flatnonzero(~copied)
    sample = np.sort(np.random.default_rng(0).choice(new, size=min(args.sample, len(new)), replace=False))
    t0 = time.time()
    rows, _picked, coeff, _residual = transplant(
        helper[torch.from_numpy(sample)], helper[torch.from_numpy(anchors)],
        src[torch.tensor([mapping.copy[int(t)] for t in anchors])], min(args.k, len(anchors), helper.shape[1] - 1),
        batch_size=512)
    seconds = time.time() - t0
    norms, src_norms = rows.norm(dim=1).double(), src.norm(dim=1).double()
    qs = torch.tensor([0.5, 0.9, 0.99, 0.999], dtype=torch.float64)
    median = float(src_norms.median())
    print(f"source {args.source}: {src.shape[0]} rows, length median / p99 / max "
          f"{median:.3f} / {float(torch.quantile(src_norms, 0.99)):.3f} / {float(src_norms.max()):.3f}")
    print(f"OMP: {len(anchors)} anchors, {len(new)} new tokens, {len(sample)} sampled, {seconds:.0f} s")
    print("sample row length p50 / p90 / p99 / p99.9 / max: "
          + " / ".join(f"{x:.3f}" for x in torch.quantile(norms, qs).tolist()) + f" / {float(norms.max()):.3f}")
    for f in (2, 5, 10):
        share = float((norms > f * median).double().mean())
        print(f"longer than {f}x the source median: {share:.4f} of the sample (about {share * len(new):.0f} of "
              f"the {len(new)} new rows)")
    sums = coeff.abs().sum(1)
    print(f"sum of |coefficients| a row: median {float(sums.median()):.2f}, max {float(sums.max()):.2f}")


if __name__ == "__main__":
    main()
