"""CPT throughput: tokens per second and model FLOPs utilization (MFU) of MLM training steps.

    python benchmarks/bench_cpt.py [--device cuda] [--steps 20] [--batch 32] [--seq 512] [--precision bf16]

Models: the `bible` world's `mono` and `multi` sources when that world is built (the default world), and the
papers' `xlm-roberta-base` shape with the Glot500-m vocabulary (401k) built from its config (random weights: the
speed of a step does not depend on the values). MFU = 6 * N * tokens/s / peak FLOP/s (N = parameters touched per
token: the transformer body plus the LM head's projection, counting the embedding matrix once for the output
layer, as the usual 6N estimate does); the peak is the GPU's dense bf16 figure from its datasheet (table below),
so MFU is printed only on a known GPU. On the CPU the tokens per second are printed alone.
"""

from __future__ import annotations

import argparse
import time

import torch

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "4090": 165.0}


def _peak(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name()
    for key, tf in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tf * 1e12
    return None


def _models():
    from transformers import AutoModelForMaskedLM, XLMRobertaConfig, XLMRobertaForMaskedLM

    try:
        from harness.worlds import get_world

        world = get_world("bible", build=False)
        for s in world.sources:
            yield f"bible/{s}", lambda s=s: AutoModelForMaskedLM.from_pretrained(world.source_dir(s))
    except Exception as exc:  # not built here
        print(f"(bible world not available: {exc})")
    cfg = XLMRobertaConfig(vocab_size=401_145, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                           intermediate_size=3072, max_position_embeddings=514)
    yield "xlmr-base-glot500-vocab", lambda: XLMRobertaForMaskedLM(cfg)


def bench(name, make, device, steps, batch, seq, precision):
    model = make().to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    vocab = model.config.vocab_size
    seq = min(seq, model.config.max_position_embeddings - 2)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (batch, seq), generator=g).to(device)
    labels = ids.clone()
    mask = torch.rand((batch, seq), generator=g).to(device) < 0.15
    labels[~mask] = -100
    dtype = torch.bfloat16 if precision == "bf16" and device.startswith("cuda") else None

    def step():
        with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=dtype,
                            enabled=dtype is not None):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tok_s = steps * batch * seq / dt
    peak = _peak(device)
    mfu = 6 * n_params * tok_s / peak if peak else None
    return {"model": name, "params_M": n_params / 1e6, "batch": batch, "seq": seq, "tok_s": tok_s,
            "step_s": dt / steps, "mfu": mfu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--precision", default="bf16")
    a = ap.parse_args()
    cpu = a.device == "cpu"
    batch = a.batch or (4 if cpu else 32)
    seq = a.seq or (128 if cpu else 512)
    steps = a.steps if not cpu else min(a.steps, 3)
    print(f"device {a.device}" + (f" ({torch.cuda.get_device_name()})" if not cpu else "") +
          f", torch threads {torch.get_num_threads()}, precision {a.precision if not cpu else 'fp32'}")
    print("| model | params (M) | batch x seq | tokens/s | s/step | MFU |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, make in _models():
        r = bench(name, make, a.device, steps, batch, seq, a.precision)
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        print(f"| {r['model']} | {r['params_M']:.1f} | {r['batch']}x{r['seq']} | {r['tok_s']:,.0f} | "
              f"{r['step_s']:.3f} | {mfu} |")


if __name__ == "__main__":
    main()
