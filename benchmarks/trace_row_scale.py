"""Where a method's rows leave the source table's scale, and what that does to a decoder's loss before CPT.

For each initialized model folder (``harness init --out DIR``, or an init product of the cache), prints the row
norms of its input table by provenance (copied, method, random fallback) beside the source table's, how many method
rows are longer than ten times the source's median row, and the mean next-token loss (nats a token) of the model on
held-out sentences of the world (``tasks/mlm/<lang>.txt``, the causal-LM task's text) as it is and with every row
longer than the source's longest row (``--clip max``; or its 99th percentile, or its median) scaled down to that
length. The second loss is a diagnostic, not a method: it
says how much of the loss those rows alone cause (a tied decoder's output layer is its input table, so one long row
is a large logit at every position).

    python benchmarks/trace_row_scale.py --world bible --source gemma3 DIR [DIR ...] [--langs swh_Latn,fra_Latn]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

NAMES = {0: "copied", 1: "method", 2: "random", 3: "unk"}


def quantiles(x: torch.Tensor) -> str:
    if x.numel() == 0:
        return "-"
    q = torch.quantile(x.double(), torch.tensor([0.5, 0.99], dtype=torch.float64)).tolist()
    return f"{q[0]:.3g} / {q[1]:.3g} / {float(x.max()):.3g}"


@torch.no_grad()
def heldout_loss(model: torch.nn.Module, tok, lines: list[str], max_len: int = 128) -> float:
    total, count = 0.0, 0
    for line in lines:
        ids = tok(line, truncation=True, max_length=max_len, return_tensors="pt")["input_ids"]
        if ids.shape[1] < 2:
            continue
        logits = model(input_ids=ids).logits[0, :-1].float()
        total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    return total / max(count, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--world", default="bible")
    ap.add_argument("--source", required=True)
    ap.add_argument("--langs", default="eng_Latn,fra_Latn,swh_Latn")
    ap.add_argument("--lines", type=int, default=60, help="held-out sentences per language")
    ap.add_argument("--clip", choices=("max", "p99", "median"), default="max",
                    help="the length the long rows are scaled down to: the source's longest row, its 99th "
                         "percentile or its median")
    args = ap.parse_args()
    torch.set_num_threads(1)

    from transformers import AutoTokenizer

    from harness.core.surgery import load_model
    from harness.worlds import get_world

    world = get_world(args.world, build=False)
    src = load_model(world.source_dir(args.source)).get_input_embeddings().weight.float()
    src_norm = src.norm(dim=1)
    median, longest = float(src_norm.median()), float(src_norm.max())
    bound = {"max": longest, "median": median,
             "p99": float(torch.quantile(src_norm.double(), torch.tensor(0.99, dtype=torch.float64)))}[args.clip]
    print(f"source {args.source}: {src.shape[0]} rows x {src.shape[1]}, row norm median / p99 / max "
          f"{quantiles(src_norm)}")
    langs = args.langs.split(",")
    texts = {lang: (world.root / "tasks" / "mlm" / f"{lang}.txt").read_text(encoding="utf-8").splitlines()
             [: args.lines] for lang in langs}
    header = ("init", "rows (copied / method / random)", "method row norm med / p99 / max", "> 10x src median",
              *(f"loss {lang}" for lang in langs), *(f"clipped ({args.clip}) {lang}" for lang in langs))
    print(" | ".join(header))
    for d in args.dirs:
        report = json.loads((d / "init_report.json").read_text()) if (d / "init_report.json").is_file() else {}
        prov = torch.from_numpy(np.load(d / "provenance.npy").astype(np.int64))
        tok = AutoTokenizer.from_pretrained(d)
        model = load_model(d).eval()
        emb = model.get_input_embeddings().weight
        norms = emb.detach().float().norm(dim=1)
        counts = " / ".join(str(int((prov == k).sum())) for k in (0, 1, 2))
        method_norms = norms[prov == 1]
        off = int((method_norms > 10 * median).sum())
        before = [heldout_loss(model, tok, texts[lang]) for lang in langs]
        with torch.no_grad():
            scale = torch.clamp(bound / norms.clamp_min(1e-12), max=1.0)
            emb.mul_(scale.unsqueeze(1).to(emb.dtype))
            if model.get_output_embeddings() is not None and model.get_output_embeddings().weight is not emb:
                out = model.get_output_embeddings().weight
                out.mul_(torch.clamp(bound / out.float().norm(dim=1).clamp_min(1e-12), max=1.0)
                         .unsqueeze(1).to(out.dtype))
        after = [heldout_loss(model, tok, texts[lang]) for lang in langs]
        name = report.get("method", d.name)
        print(" | ".join((str(name), counts, quantiles(method_norms), str(off),
                          *(f"{x:.2f}" for x in before), *(f"{x:.2f}" for x in after))), flush=True)
    print(f"uniform guess over the target vocabulary: {math.log(len(tok)):.2f} nats a token")


if __name__ == "__main__":
    main()
