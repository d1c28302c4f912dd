"""Where the NER evaluation's fp32 time goes, against what the CPU can compute, and which speed-ups change no number.

NER is about half of a main-job cell's time in fp32 (the English tagger fine-tuned, then tested zero-shot on every
language). This script takes the model a cell evaluates (``--method``, initialized as ``harness init`` does, on the
``--world``'s default source, the ``cpu`` profile) and the ``ner`` task's own data, settings and code, and measures:

- **a fine-tuning step**, split into the forward pass, the backward pass and the optimizer (gradient clipping and
  the fused AdamW step, whose cost grows with the parameters, the target vocabulary's embedding matrix included,
  not with the batch), with the floating-point operations of the passes counted by torch's ``FlopCounterMode`` and
  the rate they achieve;
- **the zero-shot test**: the forward passes over every test language, their operations and rate;
- **what the CPU can do**: an fp32 matrix product of the model's shapes timed on the same threads (the attainable
  rate), and the nominal peak from the CPU's flags and clock (32 fp32 operations a cycle and a core with AVX2 and two
  FMA units, 64 with AVX-512; an assumption, printed);
- **speed-ups that change no number**, each checked bit for bit against the first variant: the threads of
  one cell (``--threads``; a cell of the main job runs on one), and the test's batch size (its predictions, with
  padding inside a batch, must be the same to the last tag).

Measured on the bible world (mono source, random init: 58.3 M parameters, 81 % of them the target vocabulary's
embedding matrix; 8 steps, 3 test languages), on a 2-core Intel Xeon with AVX-512, one thread: a step of 1,224
tokens takes 1.17 s, forward 0.38, backward 0.66, optimizer 0.13 (11 %); the passes' 191 GFLOP run at 182 GFLOP/s,
above the 121 GFLOP/s a lone matmul of the feed-forward shape reaches and at the core's nominal peak (134 at the
base clock): fp32 on one core has no slack left to take. Two threads make a step 1.8x faster and change the weights
(a cell computes on the profile's one thread, :func:`harness.runner.cell_threads`); four times the test's batch size
gives the same tags on the three languages in 3.7 s instead of 4.3 (it is part of the tagger's cache key, so
changing it would recompute every cached test). So the fp32 NER is as fast as this core allows; more speed without
a changed number comes from more cores running more cells.

With ``--source a,b,...`` it measures each source model of the world in turn (a decoder's NER tags a word's last
sub-token and its retrieval pools the middle layer, as the tasks do for a causal LM) and also **the retrieval pass**
(SR-T's sentence vectors of the pivot and one other language, the forward stopped at the pooled layer), then
compares the achieved rates of every source with the first one's: whether a decoder's evaluation computes as
efficiently as the encoder's.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_ner_flops.py [--world bible] [--source mono,smollm2,gemma3]
[--method random] [--steps 12] [--threads 1,2] [--langs 4] [--retrieval-sentences 200]``. Prints tables; nothing is
cached or logged (a temporary folder).
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.core import kernels


def cpu_peak_gflops(threads: int) -> tuple[float | None, str]:
    """The nominal fp32 peak of ``threads`` cores, from /proc/cpuinfo's flags and clock, and how it was reckoned."""
    flags, mhz = set(), None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("cpu MHz") and mhz is None:
                mhz = float(line.split(":", 1)[1])
    except OSError:
        return None, "no /proc/cpuinfo"
    per_cycle = 64 if "avx512f" in flags else 32 if {"avx2", "fma"} <= flags else 8
    if mhz is None:
        return None, f"{per_cycle} fp32 FLOP/cycle/core assumed, clock unknown"
    return per_cycle * mhz / 1e3 * threads, (f"{per_cycle} fp32 FLOP/cycle/core (two FMA units of "
                                             f"{per_cycle // 4} lanes assumed) x {mhz / 1e3:.2f} GHz x {threads}")


def attainable_gflops(tokens: int, hidden: int, ff: int, repeat: int = 5) -> float:
    """The rate of an fp32 matmul of a feed-forward layer's shape (tokens x hidden) @ (hidden x ff), on the current
    threads: what the model's largest products can reach here."""
    import torch

    a, b = torch.randn(tokens, hidden), torch.randn(hidden, ff)
    a @ b
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * tokens * hidden * ff / min(times) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", default="bible")
    ap.add_argument("--method", default="random")
    ap.add_argument("--steps", type=int, default=12, help="fine-tuning steps timed (after one warm-up step)")
    ap.add_argument("--threads", default="1,2", help="thread counts compared (a main-job cell runs on 1)")
    ap.add_argument("--langs", type=int, default=4, help="test languages timed (the first ones of the task)")
    ap.add_argument("--source", default=None,
                    help="comma-separated source models of the world, measured one after the other (default: its "
                         "default source); the first is the baseline the others' rates are compared with")
    ap.add_argument("--retrieval-sentences", type=int, default=200,
                    help="sentences of each of two languages encoded by the retrieval pass (the cpu profile's cap)")
    args = ap.parse_args()

    from rich.console import Console

    from harness.worlds import get_world

    console = Console(width=160)
    world = get_world(args.world)
    sources = args.source.split(",") if args.source else [world.default_source]
    summary = [measure(world, source, args, console) for source in sources]
    if len(summary) > 1:
        compare(summary, console)


def measure(world: Any, source: str, args: argparse.Namespace, console: Any) -> dict[str, Any]:
    """The fine-tuning step, the zero-shot test and the retrieval pass of ``source`` initialized by ``--method``:
    their tables printed, their one-thread rates returned."""
    import torch
    from rich.table import Table
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoTokenizer

    from harness.core.objective import label_subtoken, objective_of_model, pooled_layer
    from harness.core.profiles import profile as get_profile
    from harness.core.registry import TASKS
    from harness.initialize import initialize_model, load_model
    from tasks.base import TaskSettings
    from tasks.data import (
        batches_per_epoch,
        max_input_length,
        num_layers,
        pad_batch,
        read_id_texts,
        read_tagging_split,
        shuffled_length_batches,
    )
    from tasks.retrieval import encode_sentences, retrieval_layer
    from tasks.tagger import Featurizer, build_tagger, predict

    task = TASKS.get("ner")()
    hp = task.hyperparameters(TaskSettings(profile="cpu", seed=1, device="cpu", precision="fp32"))
    thread_counts = [int(t) for t in args.threads.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / args.method
        params = dict(get_profile("cpu").get("method_params", {}).get(args.method, {}))
        initialize_model(world, source, args.method, dim=None, seed=1, params=params, out_dir=out,
                         device="cpu", profile="cpu")
        model, tok = load_model(out, device="cpu"), AutoTokenizer.from_pretrained(out)
        objective = objective_of_model(model)
        hp["label_subtoken"] = label_subtoken(objective)  # as the task sets it from the model (tasks/tagging.py)
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        train = read_tagging_split(world, "ner", world.pivot, "train")[:hp["max_train_sentences"]]
        dev = read_tagging_split(world, "ner", world.pivot, "dev")[:hp["max_dev_sentences"]]
        labels = task._labels(world, train, dev)
        langs = task.languages(world)[:args.langs]
        tests = {lang: read_tagging_split(world, "ner", lang, "test")[:hp["max_test_sentences"]] for lang in langs}
        feat = Featurizer(tok, max_input_length(model, tok, int(hp["max_length"])), hp["label_subtoken"])
        label_ids = {t: i for i, t in enumerate(labels)}
        segs = feat.segments(train, label_ids)
        g = torch.Generator().manual_seed(2)
        batches = shuffled_length_batches([len(s.input_ids) for s in segs], int(hp["batch_size"]), g)
        steps_per_epoch = batches_per_epoch(len(segs), int(hp["batch_size"]), True)
        n_params = sum(p.numel() for p in model.parameters())
        emb = model.get_input_embeddings().weight
        cfg = model.config
        console.print(f"{args.world}/{source} ({objective}) initialized by {args.method}: {n_params / 1e6:.1f} M "
                      f"parameters, the embedding matrix {tuple(emb.shape)} ({emb.numel() / n_params:.0%}); ner "
                      f"cpu profile: {len(segs)} training segments, batch {hp['batch_size']}, {steps_per_epoch} "
                      f"steps an epoch x {hp['epochs']} epochs, label sub-token {hp['label_subtoken']}, test on {len(langs)} of "
                      f"{len(task.languages(world))} languages; {platform.processor() or platform.machine()}, "
                      f"{os.cpu_count()} CPUs, CPU kernels {kernels.describe()}")
        reference: dict[str, Any] = {}
        for threads in thread_counts:
            torch.set_num_threads(threads)
            torch.manual_seed(0)
            tagger = build_tagger(model, len(labels), hp["dropout"], 1, torch.device("cpu"), hp["encoder_dropout"])
            opt = torch.optim.AdamW(tagger.parameters(), lr=float(hp["lr"]), eps=float(hp["adam_eps"]), fused=True)
            tagger.train()
            timing = {"forward": [], "backward": [], "optimizer": []}
            flops = {"forward": 0, "backward": 0}
            tokens = []
            for i, idx in enumerate(batches[:args.steps + 1]):
                b = pad_batch([segs[j].input_ids for j in idx], pad_id, labels=[segs[j].labels for j in idx])
                counter = FlopCounterMode(display=False) if i == 1 else None
                t0 = time.perf_counter()
                if counter is not None:
                    with counter:
                        logits = tagger(b["input_ids"], b["attention_mask"])
                    flops["forward"] = counter.get_total_flops()
                else:
                    logits = tagger(b["input_ids"], b["attention_mask"])
                loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                         b["labels"].reshape(-1), ignore_index=-100)
                t1 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                if counter is not None:
                    back = FlopCounterMode(display=False)
                    with back:
                        loss.backward()
                    flops["backward"] = back.get_total_flops()
                else:
                    loss.backward()
                t2 = time.perf_counter()
                torch.nn.utils.clip_grad_norm_(tagger.parameters(), float(hp["grad_clip"] or 1e9))
                opt.step()
                t3 = time.perf_counter()
                if i == 0:
                    continue  # warm-up
                timing["forward"].append(t1 - t0)
                timing["backward"].append(t2 - t1)
                timing["optimizer"].append(t3 - t2)
                tokens.append(int(b["attention_mask"].sum()))
            state = {k: v.clone() for k, v in tagger.state_dict().items()}
            # the zero-shot test, at the profile's batch size and at four times it
            tagger.eval()
            t0 = time.perf_counter()
            counter = FlopCounterMode(display=False)
            with counter:
                preds = {lang: predict(tagger, feat, s, labels, batch_size=int(hp["eval_batch_size"]), pad_id=pad_id,
                                       device=torch.device("cpu")) for lang, s in tests.items()}
            test_s = time.perf_counter() - t0
            test_flops = counter.get_total_flops()
            t0 = time.perf_counter()
            big = {lang: predict(tagger, feat, s, labels, batch_size=4 * int(hp["eval_batch_size"]), pad_id=pad_id,
                                 device=torch.device("cpu")) for lang, s in tests.items()}
            big_s = time.perf_counter() - t0
            if not reference:
                reference = {"state": state, "preds": preds}
            same_weights = all(torch.equal(state[k], reference["state"][k]) for k in state)
            hidden, ff = int(cfg.hidden_size), int(getattr(cfg, "intermediate_size", 4 * cfg.hidden_size))
            peak, how = cpu_peak_gflops(threads)
            mean_tokens = statistics.fmean(tokens)
            rows.append({
                "threads": threads, "forward": statistics.fmean(timing["forward"]),
                "backward": statistics.fmean(timing["backward"]), "optimizer": statistics.fmean(timing["optimizer"]),
                "fwd_gflops": flops["forward"] / 1e9, "bwd_gflops": flops["backward"] / 1e9,
                "tokens": mean_tokens, "test_s": test_s, "test_gflop": test_flops / 1e9, "test_big_s": big_s,
                "same_preds_big_batch": big == preds, "same_weights": same_weights,
                "same_preds": preds == reference["preds"],
                "attainable": attainable_gflops(int(mean_tokens), hidden, ff), "peak": peak, "peak_how": how,
            })
        # the retrieval pass (SR-T's sentence vectors): the pivot's sentences and one other language's, encoded
        # as the task encodes them (the layer its rule picks for the objective, the forward stopped there)
        torch.set_num_threads(thread_counts[0])
        model.eval()
        n_layers = num_layers(model)
        layer = retrieval_layer(n_layers) if objective == "mlm" else pooled_layer(objective, n_layers)
        other = next(lang for lang in TASKS.get("sr-t")().languages(world) if lang != world.pivot)
        texts = [t for lang in (world.pivot, other)
                 for t in list(read_id_texts(world.task_dir("sr-t") / f"{lang}.jsonl").values())
                 [:args.retrieval_sentences]]
        enc_kw = {"layer": layer, "n_layers": n_layers, "batch_size": 32,
                  "max_length": max_input_length(model, tok, 512)}
        encode_sentences(model, tok, texts[:32], **enc_kw)  # warm-up
        counter = FlopCounterMode(display=False)
        t0 = time.perf_counter()
        with counter:
            encode_sentences(model, tok, texts, **enc_kw)
        retr_s = time.perf_counter() - t0
        retr_gflop = counter.get_total_flops() / 1e9
        n_tokens = sum(len(ids) for ids in tok(texts, truncation=True, max_length=enc_kw["max_length"])["input_ids"])
    console.print(f"retrieval pass ({thread_counts[0]} thread(s)): {len(texts)} sentences of {world.pivot} and "
                  f"{other}, {n_tokens:,} tokens, layer {layer} of {n_layers}: {retr_s:.1f} s, {retr_gflop:.1f} "
                  f"GFLOP, {retr_gflop / retr_s:.1f} GFLOP/s")
    t = Table(title=f"ner fine-tuning step and zero-shot test in fp32 ({args.world}/{source}, {args.method}; times "
                    f"are the mean of {args.steps} steps)")
    for c in ("threads", "forward s", "backward s", "optimizer s", "step GFLOP", "pass GFLOP/s",
              "attainable GFLOP/s", "nominal peak", "test s", "test GFLOP/s", "test s at 4x batch",
              "same weights", "same tags", "4x batch: same tags"):
        t.add_column(c, justify="right")
    for r in rows:
        passes = r["forward"] + r["backward"]
        t.add_row(str(r["threads"]), f"{r['forward']:.3f}", f"{r['backward']:.3f}", f"{r['optimizer']:.3f}",
                  f"{r['fwd_gflops'] + r['bwd_gflops']:.1f}",
                  f"{(r['fwd_gflops'] + r['bwd_gflops']) / passes:.1f}", f"{r['attainable']:.1f}",
                  "—" if r["peak"] is None else f"{r['peak']:.0f}", f"{r['test_s']:.1f}",
                  f"{r['test_gflop'] / r['test_s']:.1f}", f"{r['test_big_s']:.1f}",
                  "yes" if r["same_weights"] else "NO", "yes" if r["same_preds"] else "NO",
                  "yes" if r["same_preds_big_batch"] else "NO")
    console.print(t)
    r0 = rows[0]
    step = r0["forward"] + r0["backward"] + r0["optimizer"]
    console.print(f"a step on {r0['threads']} thread(s): {step:.3f} s for {r0['tokens']:.0f} tokens; the optimizer "
                  f"(clipping + fused AdamW over every parameter) is {r0['optimizer'] / step:.0%} of it; the passes "
                  f"run at {(r0['fwd_gflops'] + r0['bwd_gflops']) / (r0['forward'] + r0['backward']):.1f} GFLOP/s "
                  f"against {r0['attainable']:.1f} attainable by a matmul of the feed-forward shape here; nominal "
                  f"peak: {r0['peak_how']}")
    return {"source": source, "objective": objective, "params_m": n_params / 1e6, "threads": r0["threads"],
            "step_s": step, "pass_gflops": (r0["fwd_gflops"] + r0["bwd_gflops"]) / (r0["forward"] + r0["backward"]),
            "test_gflops": r0["test_gflop"] / r0["test_s"], "retrieval_gflops": retr_gflop / retr_s,
            "attainable": r0["attainable"]}


def compare(summary: list[dict[str, Any]], console: Any) -> None:
    """The achieved rates of every source beside the first one's (the baseline): NER's training passes, its
    zero-shot test and the retrieval pass."""
    from rich.table import Table

    base = summary[0]
    t = Table(title=f"achieved fp32 rate on {base['threads']} thread(s), against {base['source']} "
                    f"({base['objective']})")
    for c in ("source", "objective", "M params", "NER passes GFLOP/s", "x", "NER test GFLOP/s", "x",
              "retrieval GFLOP/s", "x", "FFN matmul GFLOP/s"):
        t.add_column(c, justify="left" if c in ("source", "objective") else "right")
    for r in summary:
        t.add_row(r["source"], r["objective"], f"{r['params_m']:.1f}",
                  *(v for k in ("pass_gflops", "test_gflops", "retrieval_gflops")
                    for v in (f"{r[k]:.1f}", f"{r[k] / base[k]:.2f}")), f"{r['attainable']:.1f}")
    console.print(t)


if __name__ == "__main__":
    main()
