"""What bf16 autocast gains over fp32 on this CPU, for the model passes a run makes.

    OMP_NUM_THREADS=2 python benchmarks/bench_precision.py [--hidden 384 --layers 6 --heads 12 --ffn 1536]
                                                          [--vocab 122776] [--repeats 5] [--threads N]

The default ``precision`` of every run on a CPU is fp32 (``harness.core.precision``: ``auto`` is fp32 on any CPU,
so a board does not depend on the CPU's instruction set); bf16 is ``--precision bf16``. This measures, on a BERT
encoder of the bible world's source size (random weights, built from its config: nothing is downloaded) with the
expanded vocabulary, the median wall time of each pass the ``cpu`` profile makes, in fp32 and in bf16 autocast
(``harness.core.precision.autocast``, as the tasks and CPT use it):

- ``encode``: sentence encoding for retrieval (sr-t / sr-b), 32 sentences x 64 tokens, no gradient;
- ``mlm loss``: the held-out MLM loss (the LM head over the whole vocabulary), 16 x 64 tokens, no gradient;
- ``CPT step``: one step of continued pre-training (8 x 64 tokens, MLM head, backward, AdamW).

It prints one table with the CPU's name, whether it computes bf16 natively (AMX / AVX512-BF16; elsewhere bf16 is
emulated and usually slower), the thread count, and for each pass: fp32 seconds, bf16 seconds, the speed-up and the
largest difference of the outputs (a bf16 run's numbers differ from an fp32 run's, which is why bf16 is never a
default).
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import statistics
import time


def _timed(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up (oneDNN picks its kernels on the first call)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=122776)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per sequence")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = ap.parse_args(argv)

    import torch
    from transformers import BertConfig, BertForMaskedLM

    from harness.core.precision import autocast, cpu_flags, cpu_has_native_bf16, cpu_name

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                     num_attention_heads=args.heads, intermediate_size=args.ffn, max_position_embeddings=512,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(cfg).eval()
    n = args.tokens

    def batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(size)
        ids = torch.randint(5, args.vocab, (size, n), generator=g)
        labels = torch.full_like(ids, -100)
        labels[:, ::7] = ids[:, ::7]  # about 15 % of the positions
        return ids, labels

    enc_ids, _ = batch(32)
    mlm_ids, mlm_labels = batch(16)
    cpt_ids, cpt_labels = batch(8)

    def encode(precision: str):
        def run() -> torch.Tensor:
            with torch.inference_mode(), autocast("cpu", precision):
                h = model.bert(input_ids=enc_ids).last_hidden_state
            return h.float().mean(dim=1)
        return run

    def mlm(precision: str):
        def run() -> torch.Tensor:
            with torch.inference_mode(), autocast("cpu", precision):
                loss = model(input_ids=mlm_ids, labels=mlm_labels).loss
            return loss.float()
        return run

    def cpt_step(precision: str):
        train = BertForMaskedLM(cfg)
        train.load_state_dict(model.state_dict())
        train.train()
        opt = torch.optim.AdamW(train.parameters(), lr=1e-4)

        def run() -> torch.Tensor:
            with autocast("cpu", precision):
                loss = train(input_ids=cpt_ids, labels=cpt_labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach().float()
        return run

    rows = []
    for name, make in ((f"encode (32 x {n}, no grad)", encode), (f"mlm loss (16 x {n}, no grad)", mlm),
                       (f"CPT step (8 x {n}, AdamW)", cpt_step)):
        t32, out32 = _timed(make("fp32"), args.repeats)
        t16, out16 = _timed(make("bf16"), args.repeats)
        diff = float((out32 - out16).abs().max())  # type: ignore[operator]
        rows.append((name, t32, t16, t32 / t16 if t16 > 0 else float("nan"), diff))

    flags = cpu_flags()
    native = "yes (" + ", ".join(sorted(flags & {"amx_bf16", "avx512_bf16"})) + ")" if cpu_has_native_bf16() \
        else "no (emulated)"
    print(f"CPU: {cpu_name()} · native bf16: {native} · torch {torch.__version__} · "
          f"{torch.get_num_threads()} thread(s)")
    print(f"model: BERT {args.layers} layers x {args.hidden} (ffn {args.ffn}, {args.heads} heads), vocabulary "
          f"{args.vocab:,}; median of {args.repeats} after a warm-up")
    head = f"{'pass':<30} {'fp32 s':>9} {'bf16 s':>9} {'speed-up':>9} {'max |fp32-bf16|':>16}"
    print(head)
    print("-" * len(head))
    for name, t32, t16, speed, diff in rows:
        print(f"{name:<30} {t32:>9.4f} {t16:>9.4f} {speed:>8.2f}x {diff:>16.4g}")


if __name__ == "__main__":
    main()
