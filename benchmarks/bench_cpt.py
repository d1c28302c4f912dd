"""CPT throughput: tokens per second, model FLOPs utilization (MFU) and peak memory of MLM training.

Two parts, each printed as a table, row by row as each row finishes (and written to ``--json`` after each row, so a
run stopped by its time budget keeps the rows it has):

1. **The harness's CPT path, lever by lever** (the default): :func:`harness.cpt.run_cpt` itself -- the HF Trainer,
   the MLM collator, the masked-positions head, the batch search -- timed beside the stock HF path (the stock
   masked-LM forward over the whole vocabulary, fp32, a padding mask, plain AdamW, the loss logged every step, no
   loader workers), on the same model and data, in one process. Each next row turns one more lever on and prints
   its gain over the row before and over the stock path: the masked-only head, bf16 autocast, no attention mask
   over packed blocks (SDPA/flash kernels unmasked), fused AdamW, data-loader workers with pinned memory, loader
   workers kept across epochs (where ``run_cpt`` has the setting), the loss logged every 10 steps instead of every
   step, the output layer and its cross-entropy fused and chunked over the positions (``harness.core.fused_ce``:
   no whole logits matrix kept), a loader prefetch of 8 batches a worker, ``torch.compile``. Then ``run_cpt`` with the defaults ``harness run`` uses on that device
   (:func:`harness.cpt.cpt_speed`), the same at twice the per-device batch, and last the same in a **spawned cell**:
   ``run_cpt`` called in a process started with the spawn start method (as ``harness run`` starts an isolated
   cell, whose loader workers are then spawned too), timed the same way; then the spawned cell with
   ``torch.compile``, and with the fused cross-entropy (the two levers off by default until measured as gains).

   **Timing**: each row runs ``--warmup`` optimizer steps, then ``--timed`` steps, at a per-device batch of
   ``--batch`` sequences with accumulation 1 (the effective batch is the per-device one). The stock row and
   ``run_cpt``'s own rows search the per-device batch as ``harness run`` does (a row that does not fit runs a
   smaller one with accumulation making up the rest, and the table shows it); the lever rows take ``--batch`` as it
   is (an out-of-memory error mid-run still halves it). The clock starts at the end of the last warm-up step and stops at the end of the last timed step (the
   device synchronized at both), so model loading, the batch search, compilation and the loader's start are out of
   it. tokens/s = timed steps x batch x ``--seq`` / those seconds: the rate of an optimizer step of the paper's
   effective batch (512 x 512) is the same per token, so a run of S such steps takes S x 512 x 512 / tokens/s.
   **Data**: the synthetic world's CPT text (built in seconds when missing) with its tokenizer, repeated so that
   no epoch ends within a row's steps (a real world's epoch is far longer than the steps timed here; ``--repeat-text
   1`` keeps the synthetic world's own size, whose epoch is a few steps, where loader workers restart every epoch
   unless kept).
2. **A plain training loop** (``--plain``): one forward/backward/AdamW step on random ids, the stock head, for the
   `bible` world's sources when it is built and the papers' shape.

Models: the papers' ``xlm-roberta-base`` shape with the Glot500-m vocabulary (401,145 pieces; ``--shape base``, the
default on a GPU) built from its config with random weights (a step's speed does not depend on the values), or a
tiny shape (``--shape tiny``, the default on a CPU). The decoder sources' shapes (``--shape smollm2``, ``gemma3``;
several shapes, comma-separated, print a table each) are the bible world's two decoders as the decoder job trains
them: the source's architecture with the world's 122,776-token target vocabulary, tied, causal CPT (every position
predicted: the masked-positions head is an encoder's lever, so their lever rows differ only from the bf16 row on).
Their configuration is read from the bible world's converted source where that world is built here, else from
``cpt_shapes.DECODER_CONFIGS`` (the same shapes: at the sources' own vocabularies they count the parameters of
the world's converted folders, 134,515,008 and 268,098,176, which tests/test_bench_gpu.py checks).
``tiny-causal`` is a small Llama for checking the causal path on a CPU. MFU = 6 * N * tokens/s / peak FLOP/s (N = all the model's parameters,
the tied embedding counted once; attention's own FLOPs left out, as in the papers' figures), the peak being the
GPU's dense bf16 figure from its datasheet (``harness/throughput.json``), so MFU is printed only on a known GPU; on
a CPU the tokens per second are printed alone. Torch runs ``--threads`` threads (default: every core).

**The per-device batch** (``--batches 32,64,128``): a spawned cell's row at each per-device batch, the batch search
on (a batch that does not fit runs a smaller one with accumulation, and the row shows it), to choose the batch for
throughput within memory. **torch.compile net of its compile time**: a row's ``warmup_s`` is the time from the start
of training to the end of its warm-up steps; compiling adds to it. After the table, each compiled row is set beside
the same row without compile: the compile time (the difference of their warm-ups), the time saved over the
paper's 4,000 steps of 512 x 512 tokens at the two rates, and the net (positive: compile gains).

``--record`` writes the spawned cell's row (else the in-process defaults row) to ``harness/throughput.json`` as the
GPU kind's measured throughput, which ``harness plan`` sizes runs from: on a GPU of a known kind, ``--shape base``.

    python benchmarks/bench_cpt.py --device cuda                      # per-device 32 x 512, every row
    python benchmarks/bench_cpt.py --device cuda --quick --record     # stock, defaults, spawned cell; recorded
    python benchmarks/bench_cpt.py --device cpu --shape tiny --batch 8 --seq 64 --warmup 2 --timed 10
    python benchmarks/bench_cpt.py --device cuda --only spawned --batches 32,64,128    # the batch for throughput
    python benchmarks/bench_cpt.py --device cuda --shape smollm2,gemma3 --quick        # the decoders' causal CPT
    python benchmarks/bench_cpt.py --plain --device cuda --batch 16 --seq 512
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import datetime
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import throughput  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpt_shapes import DECODER_CONFIGS, SHAPES, TARGET_VOCAB, decoder_config, model_folder  # noqa: E402,F401


def gpu_name(device: str) -> str | None:
    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None


def _peak(device: str) -> float | None:
    name = gpu_name(device)
    kind = throughput.kind_of(name) if name else None
    return throughput.peak_flops(kind) if kind else None


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
         "dataloader_workers": 0, "pin_memory": False, "persistent_workers": False, "logging_steps": 1,
         "compile": False}
LEVERS = [  # (row, what the lever turns on), each on top of the rows before it
    ("stock HF path (full-vocabulary head, fp32)", {}),
    ("+ masked-positions head", {"masked_head": True}),
    ("+ bf16 autocast", {"precision": "bf16"}),
    ("+ no padding mask on packed blocks (SDPA/flash)", {"attention_mask": False}),
    ("+ fused AdamW", {"optim": "adamw_torch_fused"}),
    ("+ 2 loader workers, pinned memory", {"dataloader_workers": 2, "pin_memory": True}),
    ("+ loader workers kept across epochs", {"persistent_workers": True}),
    ("+ loss logged every 10 steps", {"logging_steps": 10}),
    ("+ fused cross-entropy, chunked over the positions", {"fused_ce": True}),
    ("+ loader prefetch of 8 batches a worker", {"prefetch_factor": 8}),
    ("+ torch.compile", {"compile": True}),
]
DEFAULTS_ROW = "run_cpt as `harness run` calls it on this device"
SPAWNED_ROW = "the same in a spawned cell (a process of its own, started by spawn)"
SPAWNED_COMPILE_ROW = "the same in a spawned cell, + torch.compile"
SPAWNED_FUSED_ROW = "the same in a spawned cell, + fused cross-entropy"
BATCH_ROW = "a spawned cell at per-device batch"  # + the batch: --batches
QUICK = ("stock HF path", DEFAULTS_ROW, SPAWNED_ROW)
PAPER_STEPS, PAPER_TOKENS_PER_STEP = 4_000, 512 * 512  # the paper profile's CPT: 4,000 steps of 512 blocks of 512

class TextWorld:
    """What :func:`harness.cpt.run_cpt` reads of a world: its name and its CPT text files (one per language)."""

    def __init__(self, name: str, files: list[str]):
        self.name, self.files = name, files

    def resource_files(self, kind: str) -> list[Path]:
        return [Path(f) for f in self.files] if kind == "cpt_text" else []


def bench_text(out: Path, seq: int, blocks_needed: int, repeat: int | None) -> tuple[TextWorld, str, dict]:
    """The synthetic world's CPT text, repeated ``repeat`` times (default: enough for ``blocks_needed`` blocks of
    ``seq`` tokens), as a :class:`TextWorld` under ``out``; its tokenizer's folder; what was made."""
    from transformers import AutoTokenizer

    from harness.cpt import cpt_blocks
    from harness.worlds import get_world

    world = get_world("synthetic")
    tok_dir = str(world.target_tokenizer_dir)
    languages = sorted(p.stem for p in world.resource_files("cpt_text"))
    once = len(cpt_blocks(AutoTokenizer.from_pretrained(tok_dir), world, languages, seq, None, 0))
    repeat = repeat or max(1, math.ceil(blocks_needed / max(once, 1)))
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for p in world.resource_files("cpt_text"):
        text = p.read_text(encoding="utf-8")
        (out / p.name).write_text(text * repeat, encoding="utf-8")
        files.append(str(out / p.name))
    return TextWorld("bench-cpt-text", files), tok_dir, {"blocks_per_copy": once, "repeat": repeat}


def _quiet() -> None:
    """No progress bars of transformers' own (loading, saving) between the table's rows."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


@contextmanager
def clocked(device: str, warmup: int, total: int):
    """Every Trainer made inside gets a callback that reads the clock at the end of optimizer step ``warmup`` and
    of step ``total`` (the device synchronized first); yields ``{"t0": ..., "t1": ...}``, with what the training
    did: the steps it took (``steps``), its loader's workers (``loader_workers``) and the most child processes this
    one had at the end of a step (``loader_processes``: the loader workers that ran)."""
    import transformers.trainer as hf_trainer
    from transformers import TrainerCallback

    marks: dict[str, float] = {"loader_processes": 0}

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kw):  # noqa: ANN001
            marks["loader_workers"] = getattr(train_dataloader, "num_workers", None)
            marks["t_begin"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            marks["loader_processes"] = max(marks["loader_processes"], len(multiprocessing.active_children()))
            if state.global_step in (warmup, total):
                _sync(device)
                marks["t0" if state.global_step == warmup else "t1"] = time.perf_counter()

        def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
            marks["steps"] = state.global_step

    clock = Clock()
    hf_trainer.DEFAULT_CALLBACKS.append(clock)
    try:
        yield marks
    finally:
        hf_trainer.DEFAULT_CALLBACKS.remove(clock)


def time_row(spec: dict[str, Any]) -> dict[str, Any]:
    """One row: ``run_cpt`` with ``spec``'s settings, timed over ``spec["timed"]`` steps after ``spec["warmup"]``."""
    from transformers import AutoTokenizer

    from harness.cpt import read_layouts, run_cpt
    from harness.initialize import load_model, save_model

    device, warmup, timed = spec["device"], int(spec["warmup"]), int(spec["timed"])
    settings = {**spec["settings"], "steps": warmup + timed}
    product = Path(spec["product"])
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t_start = time.perf_counter()
    with clocked(device, warmup, warmup + timed) as marks:
        run_cpt(model_dir=Path(spec["model"]), tokenizer=AutoTokenizer.from_pretrained(spec["tokenizer"]),
                world=TextWorld(*spec["world"]), languages=spec["languages"], settings=settings, seed=1,
                device=device, product_dir=product, eval_steps=[], load_fn=lambda p: load_model(p, device="cpu"),
                save_fn=save_model)
    layout = read_layouts(product)[-1]
    if "t0" not in marks or "t1" not in marks:
        return {"skipped": f"the clock did not see steps {warmup} and {warmup + timed}"}
    seconds = marks["t1"] - marks["t0"]
    return {"per_device": layout["per_device"], "accumulation": layout["accumulation"],
            "tok_s": timed * int(settings["effective_batch"]) * int(settings["block_size"]) / seconds,
            "seconds_timed": seconds, "steps_timed": timed, "wall_s": time.perf_counter() - t_start,
            # from the start of training to the end of the warm-up steps: what compiling adds to
            "warmup_s": marks["t0"] - marks["t_begin"] if "t_begin" in marks else None,
            "steps_done": marks.get("steps"), "loader_workers": marks.get("loader_workers"),
            "loader_processes": marks["loader_processes"],
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None}


def _spawned_main(spec: dict[str, Any], out: str, threads: int) -> None:
    """The spawned cell's row, in its own process; the row says how this process was started (``started_by``:
    ``spawn`` where its command line is multiprocessing's spawn entry point, else ``fork``, a forked process
    keeping its parent's) and its process id."""
    torch.set_num_threads(threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _quiet()
    try:
        row = time_row(spec)
    except Exception as exc:  # noqa: BLE001 - the row says why it failed, the table goes on
        row = {"skipped": f"{type(exc).__name__}: {str(exc)[:160]}"}
    row["started_by"] = "spawn" if "spawn_main" in " ".join(getattr(sys, "orig_argv", [])) else "fork"
    row["pid"] = os.getpid()
    Path(out).write_text(json.dumps(row))


def spawned_row(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    out = tmp / f"spawned-{time.time_ns()}.json"
    proc = multiprocessing.get_context("spawn").Process(target=_spawned_main, args=(spec, str(out),
                                                                                  torch.get_num_threads()))
    t0 = time.perf_counter()
    proc.start()
    proc.join()
    if not out.is_file():
        return {"skipped": f"the spawned process ended ({proc.exitcode}) without a result"}
    row = json.loads(out.read_text())
    row["own_process"] = row.pop("pid", None) not in (None, os.getpid())
    row["process_wall_s"] = time.perf_counter() - t0
    return row


def row_configs(device: str, batch: int, batches: list[int] | tuple[int, ...] = ()
                ) -> list[tuple[str, dict[str, Any], int, bool]]:
    """``(row, CPT speed settings, per-device batch, spawned)`` for every row, in order: the levers, the defaults
    (at ``batch`` and twice it), a spawned cell, the same with torch.compile, the same with the fused
    cross-entropy, and a spawned cell at each of ``batches``."""
    from harness.core.precision import resolve_precision
    from harness.cpt import cpt_speed

    defaults = {**cpt_speed({}, device), "precision": resolve_precision("auto", device)}
    rows, current = [], dict(STOCK)
    for name, change in LEVERS:
        if any(k not in defaults for k in change):
            continue  # a lever run_cpt does not have (yet)
        current = {**current, **change}
        rows.append((name, {k: v for k, v in current.items() if k in defaults}, batch, False))
    rows.append((DEFAULTS_ROW, defaults, batch, False))
    rows.append((f"the same at per-device batch {2 * batch}", defaults, 2 * batch, False))
    rows.append((SPAWNED_ROW, defaults, batch, True))
    rows.append((SPAWNED_COMPILE_ROW, {**defaults, "compile": True}, batch, True))
    rows.append((SPAWNED_FUSED_ROW, {**defaults, "fused_ce": True}, batch, True))
    rows.extend((f"{BATCH_ROW} {b}", defaults, b, True) for b in batches)
    return rows


def compile_net(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each compiled row that ran beside the same row without compile (the lever row beside the row before it, the
    spawned cell's compiled row beside the spawned cell's): the compile time, the seconds saved over the paper's
    4,000 steps of 512 x 512 tokens, and the net of the two."""
    found = []
    for i, r in enumerate(rows):
        if r["row"] not in ("+ torch.compile", SPAWNED_COMPILE_ROW) or "tok_s" not in r:
            continue
        plain = rows[i - 1] if r["row"] == "+ torch.compile" else next(
            (p for p in rows if p["row"] == SPAWNED_ROW), None)
        if not plain or "tok_s" not in plain or r.get("warmup_s") is None or plain.get("warmup_s") is None:
            continue
        compile_s = r["warmup_s"] - plain["warmup_s"]
        saved = PAPER_STEPS * PAPER_TOKENS_PER_STEP * (1 / plain["tok_s"] - 1 / r["tok_s"])
        found.append({"row": r["row"], "beside": plain["row"], "compile_s": compile_s, "tok_s": r["tok_s"],
                      "tok_s_without": plain["tok_s"], "saved_s": saved, "net_s": saved - compile_s})
    return found


def say_compile(found: list[dict[str, Any]]) -> None:
    for c in found:
        verdict = "a gain" if c["net_s"] > 0 else "a loss"
        print(f"torch.compile ({c['row']}): {c['compile_s']:.1f} s to compile (warm-up against the row without it), "
              f"{c['tok_s_without']:,.0f} -> {c['tok_s']:,.0f} tokens/s; over the paper's {PAPER_STEPS:,} steps of "
              f"512 x 512 it saves {c['saved_s']:,.0f} s, net {c['net_s']:+,.0f} s: {verdict}", flush=True)


def lever_rows(device: str, shape: str, warmup: int, timed: int, batch: int, seq: int,
               only: list[str] | None = None, repeat: int | None = None, json_out: Path | None = None,
               skip: list[str] | None = None, batches: list[int] | tuple[int, ...] = (),
               done: list[dict] | None = None) -> tuple[list[dict], dict]:
    """Run the rows, print each as it finishes and write ``json_out`` after each (with the tables of ``done``,
    the shapes measured before this one, where there are several)."""
    from harness.core.objective import objective_of_model
    from harness.initialize import load_model

    tmp = Path(tempfile.mkdtemp(prefix="bench-cpt-"))
    configs = row_configs(device, batch, batches)
    if only:
        configs = [c for c in configs if any(o in c[0] for o in only)]
    max_batch = max((c[2] for c in configs), default=batch)
    world, tok_dir, made = bench_text(tmp / "text", seq, (warmup + timed + 2) * max_batch, repeat)
    folder = model_folder(shape, tmp / "model")
    model = load_model(folder)
    n_params, objective = sum(p.numel() for p in model.parameters()), objective_of_model(model)
    del model
    config_from = (folder / "config_from.txt").read_text() if (folder / "config_from.txt").is_file() else None
    peak = _peak(device)
    base = {"lr": 5e-5, "mlm_probability": 0.15, "warmup_steps": 0, "weight_decay": 0.0, "save_every": 0,
            "max_sentences_per_language": None, "block_size": seq}
    meta = {"device": device, "gpu": gpu_name(device), "shape": shape, "objective": objective,
            "config_from": config_from, "params": n_params,
            "params_M": n_params / 1e6, "batch": batch, "seq": seq, "warmup": warmup, "timed": timed,
            "threads": torch.get_num_threads(), "torch": torch.__version__, "text": made,
            "emulating": os.environ.get("HARNESS_EMULATE_ACCELERATOR", "")}
    rows: list[dict] = []
    table = Table(meta)
    for i, (name, levers, per_device, spawned) in enumerate(configs):
        if skip and any(k in name for k in skip):
            row: dict[str, Any] = {"skipped": "left out of this run (--skip)"}
        elif not device.startswith("cuda") and levers.get("compile"):
            row = {"skipped": "torch.compile is measured on a GPU"}
        else:
            spec = {"device": device, "warmup": warmup, "timed": timed, "product": str(tmp / f"cpt-{i}"),
                    "model": str(folder), "tokenizer": tok_dir, "world": (world.name, world.files),
                    "languages": sorted(Path(f).stem for f in world.files),
                    "settings": {**base, **levers, "effective_batch": per_device, "per_device_batch": per_device,
                                 # the batch search where harness run's path or the stock one needs it; the lever
                                 # rows fit the batch the defaults fit (an out-of-memory error still halves it)
                                 "auto_batch": not name.startswith("+ ")}}
            try:
                row = spawned_row(spec, tmp) if spawned else time_row(spec)
            except Exception as exc:  # noqa: BLE001 - a row that cannot run says why and the table goes on
                row = {"skipped": f"{type(exc).__name__}: {str(exc)[:160]}"}
        row.update(row=name, levers=levers, batch=per_device, spawned=spawned)
        if "tok_s" in row:
            row["mfu"] = 6 * n_params * row["tok_s"] / peak if peak else None
        rows.append(row)
        table.print_row(row)
        meta["compile"] = compile_net(rows)
        if json_out:
            table_now = {"meta": meta, "rows": rows}
            json_out.write_text(json.dumps({"tables": [*done, table_now]} if done else table_now, indent=1,
                                           default=str))
    say_compile(meta["compile"])
    return rows, meta


class Table:
    """The lever table, printed a row at a time."""

    def __init__(self, meta: dict[str, Any]):
        self.stock = self.before = self.defaults = None
        print(f"run_cpt on {meta['gpu'] or meta['device']}: {meta['shape']} shape ({meta['params_M']:.0f}M "
              f"parameters, {meta['objective']} CPT"
              + (f"; config: {meta['config_from']}" if meta.get("config_from") else "")
              + f"), per-device batch {meta['batch']} x {meta['seq']} tokens with accumulation 1 (a row "
              f"the batch search lowers shows its accumulation); each row {meta['warmup']} warm-up steps, then "
              f"{meta['timed']} optimizer steps timed, device synchronized at both ends: tokens/s = timed steps x "
              f"batch x {meta['seq']} / seconds, per optimizer step of any effective batch; data: the synthetic "
              f"world's CPT text x {meta['text']['repeat']}; torch {meta['torch']}, {meta['threads']} threads"
              + (", accelerator branches emulated on the CPU" if meta["emulating"] not in ("", "0") else ""))
        print("| row | per-device x accum | tokens/s | MFU | peak GiB | gain over the row before | over stock |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)

    def print_row(self, r: dict[str, Any]) -> None:
        if "tok_s" not in r:
            print(f"| {r['row']} | - | - | - | - | skipped: {r['skipped']} | - |", flush=True)
            return
        ref = self.defaults if r["row"] != DEFAULTS_ROW and self.defaults else self.before
        gain = f"{r['tok_s'] / ref:.2f}x" if ref else "-"
        if self.defaults and r["row"] != DEFAULTS_ROW:
            gain += " (vs the defaults)"
        over = f"{r['tok_s'] / self.stock:.2f}x" if self.stock else "-"
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
        mem = f"{r['peak_gib']:.1f}" if r.get("peak_gib") is not None else "n/a"
        print(f"| {r['row']} | {r['per_device']} x {r['accumulation']} | {r['tok_s']:,.0f} | {mfu} | {mem} | "
              f"{gain} | {over} |", flush=True)
        self.stock = self.stock or r["tok_s"]
        if r["row"] == DEFAULTS_ROW:
            self.defaults = r["tok_s"]
        elif not self.defaults:
            self.before = r["tok_s"]


def record(rows: list[dict], meta: dict, argv: list[str]) -> str:
    """Write the spawned cell's row (else the in-process defaults row) to harness/throughput.json."""
    name = meta["gpu"]
    kind = throughput.kind_of(name) if name else None
    if kind is None or meta["shape"] != "base":
        return (f"not recorded: --record needs a GPU of a known kind (this is {name or meta['device']}) and "
                f"--shape base")
    row = next((r for r in rows if r["row"] == SPAWNED_ROW and "tok_s" in r), None) or next(
        (r for r in rows if r["row"] == DEFAULTS_ROW and "tok_s" in r), None)
    if row is None:
        return "not recorded: neither the spawned cell's row nor the defaults row ran"
    path = throughput.record({
        "gpu": kind, "card": name, "path": "run_cpt as harness run calls it" + (
            ", in a spawned cell" if row["spawned"] else " (bench_cpt's own process)"),
        "model": "xlm-roberta-base shape, Glot500-m vocabulary (401,145)", "params": meta["params"],
        "vocab_size": 401_145, "hidden_size": 768, "tokens_per_s": round(row["tok_s"]),
        "mfu": round(row["mfu"], 4) if row.get("mfu") else None, "per_device_batch": row["per_device"],
        "accumulation": row["accumulation"], "seq": meta["seq"],
        "timed": f"{meta['timed']} steps after {meta['warmup']}", "torch": meta["torch"],
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "command": "python benchmarks/bench_cpt.py " + " ".join(argv)})
    return f"recorded {row['tok_s']:,.0f} tokens/s on {kind} ({row['row']}) in {path}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--plain", action="store_true", help="the plain training loop instead of run_cpt's levers")
    ap.add_argument("--shape", default=None,
                    help=f"model shape(s), comma-separated: {', '.join(SHAPES)} (default base on a GPU, tiny on a CPU)")
    ap.add_argument("--batches", default="",
                    help="comma-separated per-device batches, each a spawned cell's row (e.g. 32,64,128)")
    ap.add_argument("--steps", type=int, default=None, help="--plain only: steps timed")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up optimizer steps of a row (default 5; 2 on a CPU)")
    ap.add_argument("--timed", type=int, default=None, help="optimizer steps timed after them (default 20; 10 on a CPU)")
    ap.add_argument("--batch", type=int, default=None, help="per-device batch (sequences; default 32, 8 on a CPU)")
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--only", default="", help="comma-separated substrings of the rows to run")
    ap.add_argument("--quick", action="store_true", help="only the stock, the defaults and the spawned cell's rows")
    ap.add_argument("--skip", default="", help="comma-separated substrings of rows to leave out (listed as such)")
    ap.add_argument("--repeat-text", type=int, default=None,
                    help="copies of the synthetic world's CPT text (default: enough that no epoch ends in a row)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: every core)")
    ap.add_argument("--precision", default="bf16", help="--plain only")
    ap.add_argument("--json", type=Path, help="write the rows and their setting here too (after every row)")
    ap.add_argument("--record", action="store_true",
                    help="write the measured throughput to harness/throughput.json (harness plan sizes from it)")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _quiet()
    torch.set_num_threads(max(1, a.threads))
    cpu = a.device == "cpu"
    if a.plain:
        batch, seq = a.batch or (4 if cpu else 32), a.seq or (128 if cpu else 512)
        steps = a.steps or (3 if cpu else 10)
        print(f"device {a.device}" + (f" ({gpu_name(a.device)})" if not cpu else "") +
              f", torch threads {torch.get_num_threads()}, precision {a.precision if not cpu else 'fp32'}")
        print("| model | params (M) | batch x seq | tokens/s | s/step | MFU |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |", flush=True)
        for name, make in _models():
            r = bench(name, make, a.device, steps, batch, seq, a.precision)
            mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
            print(f"| {r['model']} | {r['params_M']:.1f} | {r['batch']}x{r['seq']} | {r['tok_s']:,.0f} | "
                  f"{r['step_s']:.3f} | {mfu} |", flush=True)
        return 0
    only = [o for o in a.only.split(",") if o] or (list(QUICK) if a.quick else [])
    shapes = [s for s in (a.shape or ("tiny" if cpu else "base")).split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        ap.error(f"--shape {','.join(unknown)}: the shapes are {', '.join(SHAPES)}")
    try:
        batches = [int(b) for b in a.batches.split(",") if b]
    except ValueError:
        ap.error(f"--batches {a.batches!r}: comma-separated whole numbers, e.g. 32,64,128")
    if batches and only:  # the batch rows are asked for by name
        only.append(BATCH_ROW)
    tables: list[dict] = []
    for shape in shapes:
        if tables:
            print()
        rows, meta = lever_rows(a.device, shape, warmup=a.warmup or (2 if cpu else 5),
                                timed=a.timed or (10 if cpu else 20), batch=a.batch or (8 if cpu else 32),
                                seq=a.seq or (64 if cpu else 512), only=only, repeat=a.repeat_text, json_out=a.json,
                                skip=[k for k in a.skip.split(",") if k], batches=batches, done=tables)
        tables.append({"meta": meta, "rows": rows})
        if a.record:
            print(record(rows, meta, sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
