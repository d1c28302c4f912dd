"""CPT throughput: tokens per second, model FLOPs utilization (MFU) and peak memory of MLM training.

Two parts, each printed as a table:

1. **The harness's CPT path, lever by lever** (``--levers``, the default): :func:`harness.cpt.run_cpt` itself --
   the HF Trainer, the MLM collator, the data, the masked-positions head, the batch search -- timed beside the stock
   HF path (the stock masked-LM forward over the whole vocabulary, fp32, a padding mask, plain AdamW, the loss
   logged every step, no loader workers), on the same model, data and effective batch, in one process. Each next
   row turns one more lever on and prints its gain over the row before and over the stock path: the masked-only
   head, bf16 autocast, no attention mask over packed blocks (SDPA/flash kernels unmasked), fused AdamW, data-loader
   workers with pinned memory, the loss logged every 10 steps instead of every step, ``torch.compile``; the last
   row is ``run_cpt`` with the defaults ``harness run`` uses on that device (:func:`harness.cpt.cpt_speed`). The
   per-device batch is the batch search's (:mod:`harness.cpt_batch`; the stock path may need accumulation to fit),
   the effective batch ``--batch`` is the same for every row. Tokens/s are measured from the training-loss log's
   timestamps after ``--warmup`` steps (compilation excluded).
2. **A plain training loop** (``--plain``): one forward/backward/AdamW step on random ids, the stock head, for the
   `bible` world's sources when it is built and the papers' shape.

Models: the papers' ``xlm-roberta-base`` shape with the Glot500-m vocabulary (401,145 pieces; ``--shape base``, the
default on a GPU) built from its config with random weights (a step's speed does not depend on the values), or a
tiny shape (``--shape tiny``, the default on a CPU). Data: the synthetic world's CPT text and tokenizer (built in
seconds when missing), cut into blocks of ``--seq`` tokens. MFU = 6 * N * tokens/s / peak FLOP/s (N = all the
model's parameters, the tied embedding counted once), the peak being the GPU's dense bf16 figure from its
datasheet (table below), so MFU is printed only on a known GPU; on a CPU the tokens per second are printed alone.

    python benchmarks/bench_cpt.py --device cuda                      # the paper's per-device batch 32 x 512
    python benchmarks/bench_cpt.py --device cpu --shape tiny --steps 22 --seq 64 --batch 8
    python benchmarks/bench_cpt.py --plain --device cuda --batch 16 --seq 512
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


# -- the harness's CPT path, lever by lever ------------------------------------------------------------------
STOCK = {"masked_head": False, "precision": "fp32", "attention_mask": True, "optim": "adamw_torch",
         "dataloader_workers": 0, "pin_memory": False, "logging_steps": 1, "compile": False}
LEVERS = [  # (row, what the lever turns on), each on top of the rows before it
    ("stock HF path (full-vocabulary head, fp32)", {}),
    ("+ masked-positions head", {"masked_head": True}),
    ("+ bf16 autocast", {"precision": "bf16"}),
    ("+ no padding mask on packed blocks (SDPA/flash)", {"attention_mask": False}),
    ("+ fused AdamW", {"optim": "adamw_torch_fused"}),
    ("+ 2 loader workers, pinned memory", {"dataloader_workers": 2, "pin_memory": True}),
    ("+ loss logged every 10 steps", {"logging_steps": 10}),
    ("+ torch.compile", {"compile": True}),
]


def model_folder(shape: str, out: Path) -> Path:
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    if shape == "base":  # the papers' model: XLM-R base with the Glot500-m vocabulary
        cfg = XLMRobertaConfig(vocab_size=401_145, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                               intermediate_size=3072, max_position_embeddings=514)
    else:
        cfg = XLMRobertaConfig(vocab_size=30_000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=256, max_position_embeddings=514)
    torch.manual_seed(0)
    XLMRobertaForMaskedLM(cfg).save_pretrained(out)
    return out


def lever_rows(device: str, shape: str, steps: int, warmup: int, batch: int, seq: int,
               only: list[str] | None = None) -> tuple[list[dict], dict]:
    from transformers import AutoTokenizer

    from harness.cpt import cpt_speed, read_layouts, read_train_log, run_cpt
    from harness.initialize import load_model, save_model
    from harness.worlds import get_world

    world = get_world("synthetic")
    tokenizer = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    languages = sorted(p.stem for p in world.resource_files("cpt_text"))
    tmp = Path(tempfile.mkdtemp(prefix="bench-cpt-"))
    folder = model_folder(shape, tmp / "model")
    n_params = sum(p.numel() for p in load_model(folder).parameters())
    base = {"steps": steps, "lr": 5e-5, "effective_batch": batch, "per_device_batch": batch, "block_size": seq,
            "mlm_probability": 0.15, "warmup_steps": 0, "weight_decay": 0.0, "save_every": 0,
            "max_sentences_per_language": None}
    configs, current = [], dict(STOCK)
    for name, change in LEVERS:
        current = {**current, **change}
        configs.append((name, dict(current)))
    configs.append(("run_cpt as `harness run` calls it on this device",
                    {**cpt_speed({}, device), "precision": "auto"}))
    if only:
        configs = [c for c in configs if any(o in c[0] for o in only)]
    rows, peak = [], _peak(device)
    for i, (name, levers) in enumerate(configs):
        if not device.startswith("cuda") and levers.get("compile"):
            rows.append({"row": name, "skipped": "torch.compile is measured on a GPU"})
            continue
        product = tmp / f"cpt-{i}"
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        try:
            run_cpt(model_dir=folder, tokenizer=tokenizer, world=world, languages=languages,
                    settings={**base, **levers}, seed=1, device=device, product_dir=product, eval_steps=[],
                    load_fn=lambda p: load_model(p, device="cpu"), save_fn=save_model)
        except Exception as exc:  # noqa: BLE001 - a row that cannot run says why and the table goes on
            rows.append({"row": name, "skipped": f"{type(exc).__name__}: {str(exc)[:120]}"})
            continue
        wall = time.perf_counter() - t0
        log = [r for r in read_train_log(product) if "time" in r]
        timed = [r for r in log if r["step"] >= warmup] or log
        if len(timed) < 2:
            rows.append({"row": name, "skipped": f"fewer than 2 logged steps after {warmup} (give more --steps)"})
            continue
        first, last = timed[0], timed[-1]
        n_steps = last["step"] - first["step"]
        tok_s = n_steps * batch * seq / (last["time"] - first["time"]) if n_steps > 0 else float("nan")
        layout = read_layouts(product)[-1]
        rows.append({"row": name, "levers": levers, "per_device": layout["per_device"],
                     "accumulation": layout["accumulation"], "tok_s": tok_s,
                     "mfu": 6 * n_params * tok_s / peak if peak else None,
                     "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None,
                     "wall_s": wall, "steps_timed": n_steps})
    meta = {"device": device, "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
            "shape": shape, "params_M": n_params / 1e6, "batch": batch, "seq": seq, "steps": steps,
            "warmup": warmup, "threads": torch.get_num_threads(), "torch": torch.__version__}
    return rows, meta


def print_levers(rows: list[dict], meta: dict) -> None:
    print(f"run_cpt on {meta['gpu'] or meta['device']}: {meta['shape']} shape ({meta['params_M']:.0f}M parameters), "
          f"effective batch {meta['batch']} x {meta['seq']} tokens, {meta['steps']} steps timed after "
          f"{meta['warmup']}, torch {meta['torch']}, {meta['threads']} threads")
    print("| row | per-device x accum | tokens/s | MFU | peak GiB | gain over the row before | over stock |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    stock = before = None
    for r in rows:
        if "skipped" in r:
            print(f"| {r['row']} | - | - | - | - | skipped: {r['skipped']} | - |")
            continue
        gain = f"{r['tok_s'] / before:.2f}x" if before else "-"
        over = f"{r['tok_s'] / stock:.2f}x" if stock else "-"
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        mem = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "n/a"
        print(f"| {r['row']} | {r['per_device']} x {r['accumulation']} | {r['tok_s']:,.0f} | {mfu} | {mem} | "
              f"{gain} | {over} |")
        stock = stock or r["tok_s"]
        if not r["row"].startswith("run_cpt as"):
            before = r["tok_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--plain", action="store_true", help="the plain training loop instead of run_cpt's levers")
    ap.add_argument("--shape", choices=["base", "tiny"], default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None, help="effective batch (sequences per step)")
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--only", default="", help="comma-separated substrings of the rows to run")
    ap.add_argument("--precision", default="bf16", help="--plain only")
    ap.add_argument("--json", type=Path, help="write the rows and their setting here too")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cpu = a.device == "cpu"
    if a.plain:
        batch, seq = a.batch or (4 if cpu else 32), a.seq or (128 if cpu else 512)
        steps = a.steps or (3 if cpu else 10)
        print(f"device {a.device}" + (f" ({torch.cuda.get_device_name()})" if not cpu else "") +
              f", torch threads {torch.get_num_threads()}, precision {a.precision if not cpu else 'fp32'}")
        print("| model | params (M) | batch x seq | tokens/s | s/step | MFU |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, make in _models():
            r = bench(name, make, a.device, steps, batch, seq, a.precision)
            mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
            print(f"| {r['model']} | {r['params_M']:.1f} | {r['batch']}x{r['seq']} | {r['tok_s']:,.0f} | "
                  f"{r['step_s']:.3f} | {mfu} |")
        return
    shape = a.shape or ("tiny" if cpu else "base")
    rows, meta = lever_rows(a.device, shape, steps=a.steps or (22 if cpu else 40), warmup=a.warmup or (2 if cpu else 10),
                            batch=a.batch or (8 if cpu else 32), seq=a.seq or (64 if cpu else 512),
                            only=[o for o in a.only.split(",") if o])
    print_levers(rows, meta)
    if a.json:
        a.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
