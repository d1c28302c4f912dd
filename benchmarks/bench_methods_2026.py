"""The methods of 2024-2026 (issue 51), timed at two vocabulary sizes; one section per method.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_methods_2026.py [--only tokdist|omp_clp] [--steps 20]

omp_clp: OMP token transplantation, CLP and CLP+ (methods.omp.transplant, methods.clp.clp_rows) and their helper
model's training step, at two target vocabularies (see bench_omp_clp).

tokdist: Token Distillation's training loop (methods.tokdist.distill) on a random model of the bible world's
source shape (all-MiniLM-L6-v2: BERT, 6 layers, 384 wide, 30,522 tokens; no weights are downloaded), batches of
16 snippets of 50 ids + CLS, at two target vocabularies (1,000 and 4,000 new tokens that all have enough snippets).
It times ``--steps`` optimizer steps (after one untimed step) and prints the seconds a step, and the steps and time
of the ``cpu`` profile's budget (the most frequent new tokens, ``max_tokens``, 8 snippets each) and of the paper's
settings (every token, 25 snippets), extrapolated from the seconds a step (``--full``: the cpu budget run in
full), and the peak RSS of the process. The mining of snippets (tokenizing the CPT text) comes on top.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
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


# -- omp, clp, clp+ --------------------------------------------------------------------------------------------------
class _Tok:
    """What the helper's model and masking read of a tokenizer (ids of an XLM-R-style vocabulary of ``n``)."""

    def __init__(self, n: int):
        self.n = n
        self.pad_token_id, self.bos_token_id, self.eos_token_id, self.unk_token_id, self.mask_token_id = 1, 0, 2, 3, n - 1
        self.all_special_ids = [0, 1, 2, 3, n - 1]

    def __len__(self) -> int:
        return self.n


@section
def bench_omp_clp(args: argparse.Namespace) -> None:
    """OMP (k = 64), CLP and CLP+ on random tables of the bible world's shapes (source rows of 384 dimensions, the
    cpu profile's 128-dimensional helper), at two target vocabularies: 10,000 tokens (5,000 shared) and 120,000
    (30,000 shared, 90,000 new; the bible world's target has about 123,000). Timed on a slice of the new tokens
    (``--omp-rows`` for OMP, 4,096 for CLP) and extrapolated; the helper's training step (the cpu profile's 2 x 128
    model, 32 x 64 tokens, the vocabulary projection at the masked positions) at the same vocabularies, times the
    profile's 400 steps."""
    from methods.clp import clp_rows
    from methods.helper_model import HELPER_CPU, build_helper, mask_tokens, masked_loss
    from methods.omp import transplant

    g = torch.Generator().manual_seed(0)
    hidden, d_h = 384, int(HELPER_CPU["helper_hidden"])
    print(f"omp / clp / clp+: {os.environ.get('OMP_NUM_THREADS', '?')} thread(s), source rows {hidden} wide, "
          f"helper {d_h} wide")
    print(f"{'|V_t|':>8} {'shared':>7} {'new':>7} {'what':>26} {'timed rows':>10} {'s':>8} {'total s':>9} "
          f"{'peak MB':>8}")
    for n_t, shared in ((10_000, 5_000), (120_000, 30_000)):
        n_new = n_t - shared
        helper = torch.randn(n_t, d_h, generator=g)
        source = torch.randn(shared, hidden, generator=g) * 0.05
        rows = min(args.omp_rows, n_new)
        t0 = time.perf_counter()
        transplant(helper[shared:shared + rows], helper[:shared], source, 64)
        secs = time.perf_counter() - t0
        print(f"{n_t:>8,} {shared:>7,} {n_new:>7,} {'omp k=64 (helper donor)':>26} {rows:>10,} {secs:>8.2f} "
              f"{secs * n_new / rows:>9,.0f}* {_peak_mb():>8,.0f}")
        for plus in (False, True):
            rows = min(4096, n_new)
            t0 = time.perf_counter()
            clp_rows(helper[shared:shared + rows].numpy(), helper[:shared].numpy(), source.double().numpy(),
                     plus=plus)
            secs = time.perf_counter() - t0
            print(f"{n_t:>8,} {shared:>7,} {n_new:>7,} {'clp+' if plus else 'clp':>26} {rows:>10,} {secs:>8.2f} "
                  f"{secs * n_new / rows:>9,.0f}* {_peak_mb():>8,.0f}")
        tok = _Tok(n_t)
        settings = {"objective": "mlm", "hidden": d_h, "layers": int(HELPER_CPU["helper_layers"]),
                    "heads": int(HELPER_CPU["helper_heads"]), "seq_len": int(HELPER_CPU["helper_seq_len"])}
        torch.manual_seed(0)
        model = build_helper(tok, settings)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        batch = torch.randint(4, n_t - 1, (int(HELPER_CPU["helper_batch"]), settings["seq_len"]), generator=g)
        steps = 5
        for i in range(steps + 1):
            if i == 1:
                t0 = time.perf_counter()  # the first step (allocations) is not timed
            inputs, labels = mask_tokens(batch, tok, g)
            masked_loss(model, inputs, labels).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        per = (time.perf_counter() - t0) / steps
        total = per * int(HELPER_CPU["helper_steps"])
        print(f"{n_t:>8,} {shared:>7,} {n_new:>7,} {'helper step (cpu profile)':>26} {steps:>10} {per:>8.2f} "
              f"{total:>9,.0f}* {_peak_mb():>8,.0f}")
    print(f"* extrapolated (OMP and CLP: to every new token; helper: to the cpu profile's "
          f"{HELPER_CPU['helper_steps']} steps); load average at the end: {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(SECTIONS), help="one section")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps timed (the totals are extrapolated)")
    ap.add_argument("--full", action="store_true", help="run the cpu budget in full instead of extrapolating")
    ap.add_argument("--omp-rows", type=int, default=512, help="new tokens OMP is timed on (extrapolated to all)")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for name, fn in SECTIONS.items():
        if args.only in (None, name):
            fn(args)  # type: ignore[operator]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
