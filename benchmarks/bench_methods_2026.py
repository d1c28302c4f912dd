"""The methods of 2024-2026 (issue 51), timed at two vocabulary sizes; one section per method.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_methods_2026.py [--only tokdist] [--steps 20]

tokdist: Token Distillation's training loop (methods.tokdist.distill) on a random model of the bible world's
source shape (all-MiniLM-L6-v2: BERT, 6 layers, 384 wide, 30,522 tokens; no weights are downloaded), batches of
16 snippets of 50 ids + CLS, at two target vocabularies (1,000 and 4,000 new tokens that all have enough snippets).
It times ``--steps`` optimizer steps (after one untimed step) and prints the seconds a step, and the steps and time
of the ``cpu`` profile's budget (the most frequent new tokens, ``max_tokens``, 8 snippets each) and of the paper's
settings (every token, 25 snippets), extrapolated from the seconds a step (``--full``: the cpu budget run in
full), and the peak RSS of the process. The mining of snippets (tokenizing the CPT text) comes on top.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

import harness  # noqa: F401 - first: it pins the CPU kernels (harness.core.kernels) before torch or numpy loads
import argparse
import os
import resource
import time

import torch

SECTIONS: dict[str, object] = {}


def section(fn):
    SECTIONS[fn.__name__.removeprefix("bench_")] = fn
    return fn


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- tokdist ------------------------------------------------------------------------------------------------------
def _minilm_shaped() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30_522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                     intermediate_size=1536, max_position_embeddings=512)
    return BertModel(cfg, add_pooling_layer=False).eval()


def _samples(n_tokens: int, snippets: int, vocab: int, length: int = 50) -> tuple[list, dict]:
    from methods.tokdist import merge_snippets

    g = torch.Generator().manual_seed(1)
    patterns = {}
    while len(patterns) < n_tokens:
        pat = tuple(torch.randint(1000, vocab, (int(torch.randint(2, 5, (1,), generator=g)),), generator=g).tolist())
        patterns.setdefault(pat, vocab + len(patterns))
    snips = []
    for pat in patterns:
        for _ in range(snippets):
            s = torch.randint(1000, vocab, (length,), generator=g).tolist()
            mid = (length - len(pat)) // 2
            s[mid:mid + len(pat)] = pat
            snips.append([101] + s)
    return merge_snippets(snips, patterns, 0), patterns


@section
def bench_tokdist(args: argparse.Namespace) -> None:
    from methods.tokdist import TokenDistillationInit, batches_of, distill, steps_at

    model = _minilm_shaped()
    vocab = model.get_input_embeddings().weight.shape[0]
    print(f"tokdist: {os.environ.get('OMP_NUM_THREADS', '?')} thread(s), source BERT 6 x 384, {vocab:,} tokens, "
          "batch 16 x 51 ids")
    print(f"{'new tokens':>10} {'setting':>24} {'steps':>7} {'s/step':>7} {'total s':>9} {'peak MB':>8}")
    budget = TokenDistillationInit.profile_defaults("cpu")
    for n_new in (1_000, 4_000):
        for label, n_tok, snippets in ((f"cpu ({budget['max_tokens']} x {budget['snippets']})",
                                        min(int(budget["max_tokens"]), n_new), int(budget["snippets"])),
                                       ("paper (all x 25)", n_new, 25)):
            steps = steps_at(n_tok, snippets, 16)
            full = args.full and label.startswith("cpu")
            samples, patterns = _samples(n_tok if full else 64, snippets if full else 16, vocab)
            init = torch.randn(len(patterns), 384) * 0.05
            order = batches_of(len(samples), 16, 1, torch.Generator().manual_seed(0))
            distill(model, init, samples, order[:1], lr=1e-4)  # warm-up, not timed
            order = order if full else order[:args.steps]
            t0 = time.perf_counter()
            distill(model, init, samples, order, lr=1e-4)
            secs = time.perf_counter() - t0
            per = secs / max(1, len(order))
            total = secs if full else per * steps
            print(f"{n_new:>10,} {label:>24} {steps:>7,} {per:>7.3f} {total:>9,.0f}{'' if full else '*'} "
                  f"{_peak_mb():>8,.0f}")
    print(f"* extrapolated from {args.steps} timed steps; load average at the end: "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(SECTIONS), help="one section")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps timed (the totals are extrapolated)")
    ap.add_argument("--full", action="store_true", help="run the cpu budget in full instead of extrapolating")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for name, fn in SECTIONS.items():
        if args.only in (None, name):
            fn(args)  # type: ignore[operator]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
