"""Continued pre-training (CPT) through the HF Trainer (one GPU, several GPUs with torchrun/accelerate, or CPU).

The source's objective (:mod:`harness.core.objective`): MLM with BERT masking (15 %) for an encoder, the
next-token loss on every position (no masking) for a decoder; text concatenated and cut into blocks, blocks of all languages shuffled together
(each step draws from every language; ``[cpt] language_sampling = "smoothed"`` samples languages as XLM-R and
Glot500-m), the blocks read from the world's CPT corpus, tokenized once and memory-mapped (:mod:`harness.corpus`;
:func:`cpt_blocks` is the reference it is checked against), linear learning-rate decay, the effective batch kept at the profile's value
whatever the number of devices. Checkpoints needed for evaluation are written as loadable model folders
(``step-<N>/``: config and weights; the tokenizer is the initialized model's, ``model_dir``, and is not copied);
the Trainer's own checkpoints (with optimizer state) let a killed CPT resume where it stopped, and are removed when
it finishes: the finished product holds only the evaluated steps' weights and the training-loss log, and is
renamed into place atomically.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import cpt_batch
from harness.core import hooks
from harness.core.cache import DONE, discard_damaged, file_digests, lease
from harness.core.devices import EMULATE_ENV, accelerator_branches, emulating, rank_device
from harness.core.masked_head import use_masked_only_head
from harness.core.objective import collator as objective_collator
from harness.core.objective import objective_of_model
from harness.core.precision import training_attention
from harness.corpus import CorpusDataset, ensure_corpus, sampling_settings, write_order
from harness.cpt_batch import batch_layout
from harness.cpt_spec import CptSpec
from harness.worlds.base import read_lines

log = logging.getLogger(__name__)


def cpt_blocks(tokenizer: Any, world: Any, languages: list[str], block_size: int,
               max_sentences: int | None, seed: int) -> list[list[int]]:
    """Tokenized CPT text of ``languages`` as blocks of ``block_size`` ids, shuffled across languages."""
    blocks: list[list[int]] = []
    files = {p.stem: p for p in world.resource_files("cpt_text")}
    for lang in languages:
        if lang not in files:
            continue
        lines = read_lines(files[lang])
        if max_sentences:
            lines = lines[:max_sentences]
        ids: list[int] = []
        for chunk in range(0, len(lines), 1000):
            for seq in tokenizer(lines[chunk: chunk + 1000], truncation=False)["input_ids"]:
                ids.extend(seq)
        blocks.extend(ids[i: i + block_size] for i in range(0, len(ids) - block_size + 1, block_size))
    random.Random(seed).shuffle(blocks)
    return blocks


def launch_distributed_cpt(*, n_procs: int, spec: dict[str, Any], work_dir: Path) -> None:
    """Run :func:`run_cpt` in ``n_procs`` processes through torch's launcher (torchrun)."""
    import subprocess
    import sys

    work_dir.mkdir(parents=True, exist_ok=True)
    spec_path = work_dir / "cpt_spec.json"
    spec_path.write_text(json.dumps(spec, default=str))
    env = {**os.environ}
    if spec["device"] == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    from harness.core.processes import child_command

    # the launcher dies with this process (and its ranks with the launcher), whatever kills it
    cmd = child_command([sys.executable, "-m", "torch.distributed.run", "--standalone",
                         f"--nproc_per_node={n_procs}", "-m", "harness.cpt_worker", str(spec_path)])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        from harness.core.errors import OtherProcessFailed

        raise OtherProcessFailed(f"distributed CPT failed ({proc.returncode}): {proc.stderr[-3000:]}")


def cpt_speed(settings: dict[str, Any], device: str) -> dict[str, Any]:
    """How the CPT steps are computed (never what): each lever can be set in ``settings`` (the benchmark measures
    them one at a time, ``benchmarks/bench_cpt.py``); by default an accelerator (or a CPU emulating one,
    :mod:`harness.core.devices`) gets every lever that measured as a gain there -- the masked positions' head, no
    attention mask over packed blocks (all of one length, so the SDPA/flash kernels run unmasked), a loss logged
    every 10 steps (each logged loss waits for the device) and at the last step, two data-loader workers kept
    across epochs (a spawned worker costs seconds to start, and an epoch of a small world is a step or two) -- and
    a CPU keeps the path it was measured with (its results bit for bit). Both get fused AdamW and pinned memory
    (the Trainer's defaults). ``compile`` (torch.compile) is off unless asked for: its gain on a GPU is not yet
    measured net of its compile time; nor are, until measured as gains on a GPU, ``fused_ce`` (the output layer and
    its cross-entropy chunked over the positions, :mod:`harness.core.fused_ce`) and ``prefetch_factor`` (batches
    each loader worker prepares ahead; None: the loader's default, 2)."""
    gpu = accelerator_branches(device)
    default = {"masked_head": True, "attention_mask": not gpu, "optim": "adamw_torch_fused",
               "logging_steps": 10 if gpu else 1, "dataloader_workers": 2 if gpu else 0, "pin_memory": True,
               "persistent_workers": gpu, "compile": False, "fused_ce": False, "prefetch_factor": None}
    return {k: settings.get(k, v) if settings.get(k) is not None else v for k, v in default.items()}


class WithoutPaddingMask:
    """A collator that drops the attention mask when every position of the batch is a token (packed blocks).
    A class at module level, not a closure: loader workers of a spawned process receive the collator by pickle."""

    def __init__(self, collator: Any):
        self.collator = collator

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(examples)
        mask = batch.get("attention_mask")
        if mask is not None and bool(mask.all()):
            del batch["attention_mask"]
        return batch


def train_cell(*, model_dir: Path, tokenizer: Any, world: Any, settings: dict[str, Any], seed: int, device: str,
               product_dir: Path, load_fn: Callable[[Path], Any], prog: Any = None,
               say: Callable[[str], None] = log.info) -> dict[int, Path]:
    """A cell's CPT on every language's CPT text: on ``settings["devices"]`` processes through torchrun when more
    than one, else here, with a progress bar on ``prog``; returns {step: model folder} as :func:`run_cpt`."""
    from harness.initialize import save_model

    steps = int(settings["steps"])
    product_dir.parent.mkdir(parents=True, exist_ok=True)
    languages = sorted({p.stem for p in world.resource_files("cpt_text")})
    bar = prog.add_task("  CPT", total=steps) if prog is not None else None

    def on_progress(step: int, total: int, loss: float | None) -> None:
        if bar is not None:
            prog.update(bar, completed=step, description=f"  CPT loss {loss:.3f}" if loss else "  CPT")

    t0 = time.time()
    n_procs = int(settings.get("devices", 1) or 1)
    if n_procs > 1 and not (product_dir / DONE).is_file():
        # the batch is searched here, once, on the first GPU of this cell's group (all of one kind), before the
        # ranks start; each rank then reads the layout, and this process gives its memory back to the ranks
        work = product_dir.with_name(product_dir.name + ".work")
        work.mkdir(parents=True, exist_ok=True)
        if cpt_batch.search_wanted(device, settings):  # (a resumed CPT reads the layout it had reached)
            speed = cpt_speed(settings, device)
            layouts = start_layouts(work, settings, device, n_procs, lambda: prepare_model(
                load_fn(model_dir), speed, device))
            (work / "layout.json").write_text(json.dumps(layouts))
        cpt_batch.free_memory(device)
        say(f"  CPT on {n_procs} processes (torchrun)")
        from harness.core.progress import STARTUP_HEARTBEAT_S, still_running

        with still_running(f"  CPT on {n_procs} processes (torchrun)", STARTUP_HEARTBEAT_S):  # (its ranks are quiet)
            launch_distributed_cpt(n_procs=n_procs, work_dir=product_dir.with_name(product_dir.name + ".launch"),
                                   spec={"world": world.name, "model_dir": str(model_dir), "languages": languages,
                                         "settings": settings, "seed": seed, "device": device,
                                         "product_dir": str(product_dir), "eval_steps": settings["checkpoints"]})
    ckpts = run_cpt(model_dir=model_dir, tokenizer=tokenizer, world=world, languages=languages, settings=settings,
                    seed=seed, device=device, product_dir=product_dir, eval_steps=settings["checkpoints"],
                    load_fn=load_fn, save_fn=save_model, progress=on_progress, say=say)
    if bar is not None:
        prog.remove_task(bar)
    say(f"  CPT: {steps} steps in {time.time() - t0:.1f}s")
    return ckpts


def prepare_model(model: Any, speed: dict[str, Any], device: str) -> Any:
    """``model`` made ready for CPT: the vocabulary projection at the masked positions only (same loss, see
    :mod:`harness.core.masked_head`; a masked LM's lever: a causal LM predicts every position), the CPU's training
    attention, the memory limits installed from outside."""
    objective = objective_of_model(model)
    if speed["masked_head"] and objective == "mlm":
        use_masked_only_head(model)
    if speed.get("fused_ce"):
        from harness.core.fused_ce import use_fused_ce

        why = use_fused_ce(model, objective)
        if why:
            log.warning("CPT: the fused cross-entropy is not used for this model: %s", why)
    training_attention(model, device)
    for limit in hooks.MEMORY_LIMITS:
        limit.attach(model)
    return model


def start_layouts(work: Path, settings: dict[str, Any], device: str, n_dev: int,
                  get_model: Callable[[], Any]) -> list[dict[str, Any]]:
    """The batch layouts a CPT starts from: those recorded in ``work`` (a resumed CPT, or the ranks of a torchrun
    CPT, whose launching process searched), else the largest per-device batch the device holds (searched on the
    model ``get_model`` gives, moved to ``device``), else the profile's."""
    layout_file = work / "layout.json"
    if layout_file.is_file():
        return json.loads(layout_file.read_text())
    effective = int(settings["effective_batch"])
    per_dev, accum = batch_layout(effective, int(settings["per_device_batch"]), n_dev)
    if not cpt_batch.search_wanted(device, settings):
        return [{"from_step": 0, "per_device": per_dev, "accumulation": accum, "why": "the profile's"}]
    model = get_model().to(device)
    precision = str(settings["precision"])  # resolved with the run's settings (harness.spec)
    reserve = cpt_batch.held_state_bytes(model)
    per_dev, tried = cpt_batch.find_per_device_batch(
        effective, per_dev, n_dev, lambda b: cpt_batch.probe_step(
            model, b, int(settings["block_size"]), device, precision, reserve))
    return [{"from_step": 0, "per_device": per_dev, "accumulation": effective // (per_dev * n_dev),
             "why": "batch search: " + ", ".join(f"{b} {r}" for b, r in tried)}]


def run_cpt(*, model_dir: Path, tokenizer: Any, world: Any, languages: list[str], settings: dict[str, Any],
            seed: int, device: str, product_dir: Path, eval_steps: list[int],
            load_fn: Callable[[Path], Any], save_fn: Callable[[Any, Path], None],
            progress: Callable[[int, int, float | None], None] | None = None,
            say: Callable[[str], None] = log.info) -> dict[int, Path]:
    """Train and return {step: model folder} for ``eval_steps`` (the last step included). The blocks come from the
    world's CPT corpus (:mod:`harness.corpus`: tokenized by the first cell that needs it, memory-mapped by every
    other); ``say`` tells whether it was built or reused, and the language sampling.

    ``product_dir`` is the final location; work happens in ``<product_dir>.work`` and survives a kill.
    """
    spec = CptSpec({**settings, "checkpoints": eval_steps})
    steps, eval_steps = spec.steps, spec.eval_steps()
    if (product_dir / DONE).is_file() and not discard_damaged(product_dir, "cpt"):
        return {s: product_dir / f"step-{s}" for s in eval_steps}
    work = product_dir.with_name(product_dir.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    corpus, dataset = _cpt_dataset(tokenizer, world, languages, settings, seed, work, say)
    n_dev, effective = int(os.environ.get("WORLD_SIZE", "1")), int(settings["effective_batch"])
    device = _this_ranks_device(device, n_dev)
    precision = str(settings["precision"])  # resolved with the run's settings (harness.spec)
    speed = cpt_speed(settings, device)
    training = _Training(work=work, settings=settings, seed=seed, device=device, n_dev=n_dev, effective=effective,
                         precision=precision, steps=steps, eval_steps=eval_steps, speed=speed,
                         save_every=spec.save_every())
    trainer = _train(training, lambda: prepare_model(load_fn(model_dir), speed, device), tokenizer, dataset,
                     _step_hooks(training, save_fn, progress), say)
    if training.distributed:
        trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():
        _finish(trainer, training, product_dir, world=world, model_dir=model_dir, corpus=corpus, blocks=len(dataset))
    return {s: product_dir / f"step-{s}" for s in eval_steps}


def _cpt_dataset(tokenizer: Any, world: Any, languages: list[str], settings: dict[str, Any], seed: int, work: Path,
                 say: Callable[[str], None]) -> tuple[Any, CorpusDataset]:
    """The world's CPT corpus of ``languages`` (built or reused) and the dataset that reads it in this CPT's order
    (written in ``work``); ``say`` tells which, and the language sampling."""
    corpus = ensure_corpus(tokenizer, world, languages, int(settings["block_size"]),
                           settings.get("max_sentences_per_language"))
    if not corpus.n_blocks:
        from harness.core.errors import MissingResourceError

        raise MissingResourceError(f"world {world.name!r} has no CPT text for {', '.join(languages)}")
    dataset = CorpusDataset(corpus, write_order(corpus, settings, seed, work))
    sampling = sampling_settings(settings)
    say(f"  CPT corpus {'built' if corpus.built else 'reused'}: {corpus.n_blocks} blocks of {corpus.block_size} "
        f"tokens ({corpus.dtype.name}, {corpus.path.name}); language sampling "
        + (sampling[0] if sampling[0] == "shuffled" else f"{sampling[0]} (alpha {sampling[1]})"))
    return corpus, dataset


def _this_ranks_device(device: str, n_dev: int) -> str:
    """The device this process trains on: a rank of a torchrun CPT (``n_dev`` > 1) takes its own GPU, before
    anything is loaded or probed on it."""
    if n_dev > 1:
        device = rank_device(device, int(os.environ.get("LOCAL_RANK", "0")))
        if device.startswith("cuda"):
            import torch

            torch.cuda.set_device(device)
    return device


@dataclass(frozen=True)
class _Training:
    """What every Trainer of one CPT is built from (a CPT that runs out of memory builds another)."""

    work: Path
    settings: dict[str, Any]
    seed: int
    device: str
    n_dev: int
    effective: int  # the effective batch, kept whatever the number of devices
    precision: str
    steps: int
    eval_steps: list[int]
    speed: dict[str, Any]
    save_every: int  # Trainer checkpoints (optimizer state included) for resuming a killed CPT (0: none)

    @property
    def distributed(self) -> bool:
        return self.n_dev > 1

    def args(self, per_device: int, accumulation: int) -> Any:
        """The Trainer's arguments for a batch of ``per_device`` sequences per device x ``accumulation``."""
        from transformers import TrainingArguments

        settings, speed, save_every = self.settings, self.speed, self.save_every
        use_cpu = self.device == "cpu"
        bf16, fp16 = self.precision == "bf16", self.precision == "fp16"  # mixed precision (autocast), on CPU too
        args = TrainingArguments(
            output_dir=str(self.work / "trainer"), max_steps=self.steps, learning_rate=float(settings["lr"]),
            lr_scheduler_type="linear", warmup_steps=int(settings.get("warmup_steps", 0)),
            weight_decay=float(settings.get("weight_decay", 0.0)), per_device_train_batch_size=per_device,
            gradient_accumulation_steps=accumulation, logging_steps=speed["logging_steps"],
            save_strategy="steps" if save_every > 0 else "no", save_steps=max(save_every, 1),
            save_total_limit=2, report_to="none", seed=self.seed, data_seed=self.seed, use_cpu=use_cpu, bf16=bf16,
            fp16=fp16, dataloader_num_workers=speed["dataloader_workers"], dataloader_pin_memory=speed["pin_memory"],
            dataloader_persistent_workers=bool(speed["persistent_workers"] and speed["dataloader_workers"]),
            dataloader_prefetch_factor=speed["prefetch_factor"] if speed["dataloader_workers"] else None,
            optim=speed["optim"], torch_compile=speed["compile"],
            disable_tqdm=True, remove_unused_columns=False, adam_epsilon=1e-8,
            ddp_backend=("gloo" if use_cpu else "nccl") if self.distributed else None,
        )
        # never nn.DataParallel (the Trainer's choice for one process that sees several GPUs): it would multiply
        # the effective batch by the GPUs; a cell process sees the GPUs of its group only (harness.core.devices)
        if args.n_gpu > 1:
            args._n_gpu = 1
        return args


def _step_hooks(training: _Training, save_fn: Callable[[Any, Path], None],
                progress: Callable[[int, int, float | None], None] | None) -> type:
    """The Trainer callback of a CPT: each logged loss appended to ``train_log.jsonl`` (and told to ``progress``),
    the last step's loss logged, the memory limits told each step, the evaluated steps' models saved."""
    from transformers import TrainerCallback

    work, steps, eval_steps = training.work, training.steps, training.eval_steps
    train_log = work / "train_log.jsonl"

    class _Hooks(TrainerCallback):
        def on_log(self, a, state, control, logs=None, **kw):  # noqa: ANN001
            if logs and "loss" in logs and state.is_world_process_zero:
                with open(train_log, "a") as f:
                    f.write(json.dumps({"step": state.global_step, "loss": logs["loss"], "time": time.time(),
                                        "lr": logs.get("learning_rate")}) + "\n")
                if progress:
                    progress(state.global_step, steps, logs["loss"])

        def on_step_end(self, a, state, control, model=None, **kw):  # noqa: ANN001
            if state.global_step >= state.max_steps:  # the last step's loss, whatever the logging interval
                control.should_log = True
            for limit in hooks.MEMORY_LIMITS:
                limit.at_step(state.global_step)
            if state.global_step in eval_steps and state.is_world_process_zero:
                out = work / f"step-{state.global_step}"
                if not out.exists():
                    tmp = work / f".tmp-step-{state.global_step}"
                    shutil.rmtree(tmp, ignore_errors=True)
                    save_fn(model, tmp)  # the weights only: the tokenizer is the initialized model's
                    os.replace(tmp, out)

    return _Hooks


def _first_layouts(training: _Training, model: Any, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The batch layouts the CPT starts from (:func:`start_layouts`, searched on ``model``), said and recorded in
    ``layout.json``."""
    work, settings, device, speed = training.work, training.settings, training.device, training.speed
    if not (work / "layout.json").is_file() and cpt_batch.search_wanted(device, settings):
        say("  CPT: searching the largest per-device batch the device holds (a training step per candidate)")
    layouts = start_layouts(work, settings, device, training.n_dev, lambda: model)
    per_dev, accum = int(layouts[-1]["per_device"]), int(layouts[-1]["accumulation"])
    say(f"  CPT: {per_dev} sequences per device x {accum} accumulation x {training.n_dev} device(s) "
        f"({layouts[-1]['why']}), {training.precision}, "
        f"{'no attention mask' if not speed['attention_mask'] else 'masked'}"
        + (f" ({EMULATE_ENV}: a CPU taking an accelerator's branches)" if emulating() and device == "cpu" else ""))
    if int(os.environ.get("RANK", "0")) == 0:  # one writer: the ranks of a torchrun CPT share the folder
        (work / "layout.json").write_text(json.dumps(layouts))
    return layouts


def _collator(model: Any, tokenizer: Any, training: _Training) -> Any:
    """The batches' collator: the model's objective (MLM masking or none), the attention mask dropped over packed
    blocks when the speed settings say so."""
    collator = objective_collator(objective_of_model(model), tokenizer, float(training.settings["mlm_probability"]))
    if not training.speed["attention_mask"]:
        collator = WithoutPaddingMask(collator)
    return collator


def _train(training: _Training, fresh_model: Callable[[], Any], tokenizer: Any, dataset: CorpusDataset,
           step_hooks: type, say: Callable[[str], None]) -> Any:
    """Train to the last step (resuming from the last Trainer checkpoint, if any) and return the Trainer. Out of
    memory mid-run (one process): half the per-device batch, twice the accumulation, from the last checkpoint."""
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback

    work, device, n_dev = training.work, training.device, training.n_dev
    model = fresh_model()
    layouts = _first_layouts(training, model, say)
    per_dev, accum = int(layouts[-1]["per_device"]), int(layouts[-1]["accumulation"])
    collator = _collator(model, tokenizer, training)
    while True:
        trainer = Trainer(model=model, args=training.args(per_dev, accum), train_dataset=dataset,
                          data_collator=collator, callbacks=[step_hooks()])
        trainer.remove_callback(PrinterCallback)  # the loss goes to MLflow and the progress bar, not to stdout
        last = _last_checkpoint(work / "trainer")
        try:
            trainer.train(resume_from_checkpoint=str(last) if last else None)
            return trainer
        except Exception as exc:
            if not cpt_batch.is_out_of_memory(exc) or training.distributed:
                raise
            why = str(exc)[:200]
        # Out of the except block, so that the error's traceback (whose frames hold the failed model, its
        # gradients and the optimizer's state) is gone before the next model is loaded
        step = int(last.name.split("-")[1]) if last else 0
        per_dev, accum = cpt_batch.halve(training.effective, per_dev, n_dev)
        log.warning("CPT ran out of memory (%s); resuming from step %d with %d sequences per device x %d "
                    "accumulation", why, step, per_dev, accum)
        layouts.append({"from_step": step, "per_device": per_dev, "accumulation": accum,
                        "why": f"out of memory during CPT: {why}"})
        (work / "layout.json").write_text(json.dumps(layouts))
        del trainer, model
        for limit in hooks.MEMORY_LIMITS:
            limit.at_step(step)
        cpt_batch.free_memory(device)
        model = fresh_model()  # the initialized weights; the checkpoint, if any, replaces them


def _finish(trainer: Any, training: _Training, product_dir: Path, *, world: Any, model_dir: Path, corpus: Any,
            blocks: int) -> None:
    """The finished product (by the first process): the training-loss log kept to one entry per step, the
    Trainer's checkpoints and the work files removed, the done-marker written, the work folder renamed into place."""
    work, settings = training.work, training.settings
    # keep only the last training-loss entry per step (a resumed run may repeat steps)
    train_log = work / "train_log.jsonl"
    rows = {}
    if train_log.exists():
        for line in train_log.read_text().splitlines():
            r = json.loads(line)
            rows[r["step"]] = r
    train_log.write_text("".join(json.dumps(rows[s]) + "\n" for s in sorted(rows)))
    shutil.rmtree(work / "trainer", ignore_errors=True)
    for stale in [*work.glob(".tmp-step-*"), *work.glob(".order-*")]:
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    (work / DONE).write_text(json.dumps({"kind": "cpt", "settings": settings, "seed": training.seed,
                                         "blocks": blocks, "corpus": corpus.path.name, "precision": training.precision,
                                         "attention": getattr(getattr(trainer.model, "config", None),
                                                              "_attn_implementation", None),
                                         "eval_steps": training.eval_steps, "world": getattr(world, "name", None),
                                         "model_dir": str(model_dir), "created": time.time(),
                                         "files": file_digests(work)}, default=str))
    if product_dir.exists():
        shutil.rmtree(product_dir)
    os.replace(work, product_dir)
    lease(product_dir)  # read by the evaluations next: no prune removes it meanwhile


def _last_checkpoint(trainer_dir: Path) -> Path | None:
    if not trainer_dir.is_dir():
        return None
    ckpts = sorted((p for p in trainer_dir.glob("checkpoint-*") if p.is_dir()),
                   key=lambda p: int(p.name.split("-")[1]))
    return ckpts[-1] if ckpts else None


def read_layouts(product_dir: Path) -> list[dict[str, Any]]:
    """The batch layouts a CPT used (``[{from_step, per_device, accumulation, why}, ...]``; [] before they were
    recorded)."""
    p = product_dir / "layout.json"
    return json.loads(p.read_text()) if p.is_file() else []


def read_train_log(product_dir: Path) -> list[dict[str, Any]]:
    p = product_dir / "train_log.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []
