"""One cell of a run, from its identity to its record: :class:`CellRun`.

A cell is (source model, method, factorized dimension, seed) under a resolved run (:class:`harness.spec.RunSpec`).
Its stages, each handed to the run record (:class:`harness.core.record.RunRecord`), which logs a result once and
marks it done so that a resumed cell skips it:

    identity -> finished? (skip) / start over? -> open its run -> initialize (a cached product) -> evaluate at
    step 0 -> continue pre-training (a cached product) -> evaluate at each evaluated step -> finish -> release
    its products

An evaluation covers the languages it was asked for (:func:`harness.core.record.covered_languages`): a cell
evaluated with ``--langs`` on some languages is not finished for a command that asks for more, which evaluates
the languages it lacks (and only those) on the same products; the cell keeps its products while some language of
its tasks is left out, so that this costs no second initialization or CPT.

A cell whose run is FINISHED with every evaluation the command asks for logged has nothing left to do: it is
found before anything is built (:func:`pending`, in the parent, before any worker starts) and found again, the
same way, where it runs (a worker re-checks, idempotently). Its init and CPT products are read by nothing else of
the command once its run finished, so they are removed then (unless ``keep_products``): a later evaluation of the
cell builds them again, with the same numbers. A product another cell of the command is keyed to, or that a live
run of another command names (its ``init_product`` / ``cpt_product`` tag), is kept.

The resume policy (``harness run --rerun never|failed|stale|all``, the config key ``rerun``; no part of a cell's
identity):

- ``never`` (the default): nothing already logged is computed or logged again. A finished cell is left as it is;
  a failed or killed one resumes from its last finished stage in its own runs.
- ``failed``: a cell whose run ended FAILED or KILLED starts over; finished cells are left as they are.
- ``stale``: a cell whose run recorded another version of its method's code (the digest of the method's module and
  of the modules of its package it imports, :func:`harness.core.declarations.code_digest`) starts over; without
  it, such a finished cell is passed over and named at the end of the run as stale.
- ``all``: every cell starts over, finished ones included.

A cell that starts over has its earlier runs deleted (the cell run and its task runs; MLflow keeps deleted runs
restorable until ``mlflow gc``), together with the seed-aggregate runs of its variant that counted its seed (they
are computed again at the end of the command), and is evaluated and logged anew in new runs. The products in the
cache are reused: they are keyed by their inputs and checked when loaded. A cell whose run is RUNNING (another
live command, or a retry within this one) is never started over.

Observers of the stages (``hook(stage, cell)`` after ``start``, ``init``, ``step0``, ``cpt`` and ``finished``)
are installed from outside (:mod:`harness.core.hooks`); the tests' faults are (:mod:`harness.core.faults`).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.core.declarations import changed_files
from harness.core.record import INIT_REPORT, Done, RunRecord
from harness.plan import Cell


def starts_over(status: str, policy: str) -> bool:
    """Whether a cell whose run has ``status`` starts over under ``policy`` (``stale`` decides by code)."""
    if status == "RUNNING" or policy in ("never", "stale"):
        return False
    return policy == "all" or status in ("FAILED", "KILLED")


def start_over(record: Any, experiment_id: str, cell_key: str, policy: str, variant: dict[str, str],
               seed: int, code: dict[str, str] | None = None) -> int:
    """Delete the earlier runs of the cell ``cell_key`` when ``policy`` says it starts over (through the run record,
    :class:`harness.core.record.RunRecord`); ``variant``: its method, source, dim, profile and world tags (to find
    the aggregate runs that counted ``seed``); ``code``: its method's code now (for ``stale``). Returns how many
    runs were deleted."""
    if policy == "never":
        return 0
    if policy == "stale":
        recorded = record.cell_code(experiment_id, cell_key)
        if recorded is None or recorded == code or "RUNNING" in record.cell_status(experiment_id, cell_key):
            return 0
    elif not any(starts_over(status, policy) for status in record.cell_status(experiment_id, cell_key)):
        return 0
    return record.delete_cell(experiment_id, cell_key, variant, seed)


def method_tags(method: Any) -> dict[str, str]:
    """What the leaderboard reads of a method from its cell runs (it imports no method): its declared parameter
    defaults (``harness.method_defaults``, JSON of the logged strings), by which a row's label names only the
    parameters set away from them, and what it was checked against (``harness.method_reference``, the one line of
    :meth:`methods.base.Reference.line`, or "not declared"), shown beside its rows."""
    from methods.base import reference_line

    defaults = json.dumps({k: str(v) for k, v in (getattr(method, "defaults", None) or {}).items()}, sort_keys=True)
    tags = {"method_defaults": defaults, "method_reference": reference_line(method)}
    return {k: v for k, v in tags.items() if len(v) <= 5000}  # MLflow's limit on a tag's value


def code_tag(code: dict[str, str]) -> dict[str, str]:
    """The method code a cell ran with (``harness.method_code``: ``{file: digest}``), by which a later run tells a
    stale cell (the resume policy above)."""
    text = json.dumps(code, sort_keys=True)
    return {"method_code": text} if len(text) <= 5000 else {}  # MLflow's limit on a tag's value


def cell_variant(spec: Any, cell: Cell) -> dict[str, Any]:
    return {"method": cell.method, "source": cell.source, "dim": "full" if cell.dim is None else str(cell.dim),
            "profile": spec.profile, "world": spec.world}


def cell_tags(spec: Any, cell: Cell, code: dict[str, str], init_key: str, cpt_key: str | None) -> dict[str, Any]:
    """The tags of a cell's run: its variant and seed, its method's defaults and code, the GPUs it ran on, the
    products it reads."""
    from harness.core.devices import pinned
    from harness.core.registry import METHODS

    return {**cell_variant(spec, cell), "seed": cell.seed, **method_tags(METHODS.get(cell.method)),
            **code_tag(code), **({"gpus": pinned()} if pinned() else {}),  # CUDA_VISIBLE_DEVICES of the cell
            "init_product": init_key, **({"cpt_product": cpt_key} if cpt_key else {})}


def cell_params(spec: Any, cell: Cell) -> dict[str, Any]:
    """What a cell run records as params: its identity, device, precision, threads, revision, every method
    parameter (defaults included, so a row says which rule it ran with), the CPT settings, what was fitted to
    the source model, the libraries' versions."""
    import torch

    from harness.core.registry import METHODS
    from harness.core.versions import git_commit, library_versions

    params = spec.method_params[cell.method]
    return {"method": cell.method, "source": cell.source, "dim": "full" if cell.dim is None else str(cell.dim),
            "seed": cell.seed, "profile": spec.profile, "world": spec.world, "world_hash": spec.world_hash,
            "device": spec.device, "eval_precision": spec.eval_precision, "cpu_kernels": spec.cpu_kernels,
            "torch_threads": int(torch.get_num_threads()),  # results can differ in the last digits between counts
            "git_revision": git_commit() or "not a checkout",
            **{f"method.{k}": v for k, v in {**getattr(METHODS.get(cell.method), "defaults", {}), **params}.items()},
            **{f"cpt.{k}": v for k, v in spec.cpt.items()},
            **{f"fitted.{k}": v for k, v in spec.fitted.items()},
            **{f"version.{k}": v for k, v in library_versions().items()}}


def finished_run(record: RunRecord, exp: str, key: str, spec: Any) -> str | None:
    """The cell's run when it is FINISHED with every evaluation ``spec`` asks for logged (the initialization,
    each task at each of its steps; with CPT, the loss and the held-out MLM loss at each evaluated step); else
    None (a new task, a new checkpoint, an unfinished run: the cell runs, and finds what it logged before)."""
    run = finished_cell_run(record, exp, key, spec)
    return None if run is None else run.info.run_id


def finished_cell_run(record: RunRecord, exp: str, key: str, spec: Any) -> Any:
    """:func:`finished_run`'s run itself (with the code it recorded), or None. An evaluation covers the languages
    it was asked for: one asked for fewer (``--langs``) leaves the cell unfinished for a run that asks for more."""
    need = [Done.INIT, *([Done.CPT_LOG, *map(Done.heldout, spec.cpt.heldout_steps())] if spec.cpt.steps > 0 else [])]
    languages = {task: list(spec.plan.languages[task]) for task in spec.plan.tasks}
    return record.finished_cell_run(exp, key, need, languages, spec.cpt.task_steps())


def pending(spec: Any, tracker: Any, finished: dict[Cell, Any] | None = None) -> list[Cell]:
    """The cells of ``spec``'s plan that have work to do, found before any worker starts: a cell is left out when
    its run is FINISHED with every evaluation logged (:func:`finished_run`) and the ``--rerun`` policy does not
    start it over (``all``; ``failed`` with a FAILED or KILLED run; ``stale`` with a run that recorded other code
    of its method). Nothing is created or deleted here: a cell left out is passed over where it runs, too; its
    finished run is put in ``finished`` (when given), which a :class:`CellRun` in this process then reads instead of
    looking for it again."""
    record, policy = RunRecord(tracker), spec.cfg.rerun
    experiments: dict[str, str | None] = {}
    out = []
    for cell in spec.plan.cells:
        name = spec.experiment(cell.source)
        if name not in experiments:
            exp = tracker.reader.get_experiment_by_name(name)
            experiments[name] = exp.experiment_id if exp is not None and exp.lifecycle_stage == "active" else None
        exp_id, key = experiments[name], spec.keys(cell).key
        done = None if policy == "all" or exp_id is None else finished_cell_run(record, exp_id, key, spec)
        if done is None:
            out.append(cell)
            continue
        statuses = record.cell_status(exp_id, key) if policy == "failed" else []
        recorded = record.recorded_code(done) if policy == "stale" else None
        if any(starts_over(s, policy) for s in statuses) or changed_files(recorded, spec.method_code[cell.method]):
            out.append(cell)
        elif finished is not None:
            finished[cell] = done
    return out


def stale_report(results: list[dict[str, Any]]) -> str | None:
    """The line naming the finished cells of ``results`` that ran an older version of their method's code."""
    stale = [c for c in results if c.get("stale")]
    if not stale:
        return None
    files = sorted({f for c in stale for f in c["stale"]})
    return (f"[yellow]{len(stale)} finished cell(s) ran an older version of their method's code "
            f"({', '.join(files)} changed since): their numbers are the old code's; "
            f"`--rerun stale` runs them again[/yellow]: " + "; ".join(c["cell"] for c in stale))


@contextlib.contextmanager
def cell_lock(path: Path, waiting: Callable[[], None]) -> Iterator[None]:
    """Hold the lock of the file ``path`` for the block, first waiting (``waiting()`` is called once) for another
    process that holds it. A POSIX record lock: a child forked meanwhile (a loader's worker, a CPT rank) does not
    inherit it, and the system releases it when its process dies."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            waiting()
            fcntl.lockf(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class CellRun:
    """One cell of ``spec`` on ``world``, logged through ``tracker``; ``say`` prints a line of the run."""

    def __init__(self, spec: Any, world: Any, tracker: Any, cell: Cell, say: Callable[[str], None],
                 prog: Any = None, finished: Any = None):
        from harness.core.devices import compute_device
        from harness.core.hashing import hash_obj

        self.spec, self.world, self.tracker, self.cell, self.say, self.prog = spec, world, tracker, cell, say, prog
        self.keys = spec.keys(cell)
        # the lock its computation holds in a home (:meth:`run`): named by its experiment and its key
        self.lock_name = hash_obj({"experiment": spec.experiment(cell.source), "cell": self.keys.key}) + ".lock"
        self.record = RunRecord(tracker)
        # the device this process computes on (a cell process pinned to its GPUs sees them from cuda:0 on)
        self.device = compute_device(spec.device)
        self.code = spec.method_code[cell.method]
        self.exp = ""
        self.parent = ""
        self.known_finished = finished  # its finished run (with its tags), found by :func:`pending` moments ago

    def reached(self, stage: str) -> None:
        """The cell reached ``stage``: each observer of the stages (harness.core.hooks.STAGE_HOOKS) is told."""
        from harness.core.hooks import STAGE_HOOKS

        for hook in STAGE_HOOKS:
            hook(stage, self.cell)

    def run(self) -> dict[str, Any]:
        """Every stage the cell has left; ``{cell, run_id, experiment_id}`` (``skipped``, ``stale`` when it had
        none). One process computes a cell at a time in a home: a second command that comes to a cell another
        computes waits for it (saying so), then finds what it logged."""
        from harness.core.paths import harness_home

        with cell_lock(harness_home() / "locks" / "cells" / self.lock_name,
                       lambda: self.say(f"  {self.cell.label}: another process computes this cell; waiting for it")):
            return self._run()

    def _run(self) -> dict[str, Any]:
        spec, cell = self.spec, self.cell
        self.exp = self.tracker.experiment(spec.experiment(cell.source))
        if start_over(self.record, self.exp, self.keys.key, spec.cfg.rerun, cell_variant(spec, cell), cell.seed,
                      self.code):
            self.say(f"  {cell.label}: its earlier runs deleted, it starts over (--rerun {spec.cfg.rerun})")
        known = self.known_finished
        done = known.info.run_id if known is not None else finished_run(self.record, self.exp, self.keys.key, spec)
        if done is not None:  # nothing to do: no product is built, nothing is logged
            recorded = self.record.recorded_code(known) if known is not None else \
                self.record.cell_code(self.exp, self.keys.key)
            stale = changed_files(recorded, self.code)
            self.say(f"  finished, every evaluation logged: {cell.label}"
                     + (f" (with older code of its method: {', '.join(stale)} changed since)" if stale else ""))
            self.release_products(done)  # (left by a command killed before it removed them)
            return {"cell": cell.label, "run_id": done, "experiment_id": self.exp, "skipped": True, "stale": stale}
        started = time.monotonic()
        self.say(f"  init {cell.label}: start")  # the source model loaded, the method's rows computed: seconds
        from transformers.utils import logging as hf_logging  # imported once a cell has work to do (seconds)

        hf_logging.disable_progress_bar()  # per-load "Loading weights" bars: the run has its own progress lines
        dim_s = "full" if cell.dim is None else str(cell.dim)
        # the products it reads name the run (another command's cell then keeps them: release_products)
        self.parent = self.record.open_cell(self.exp, self.keys.key, f"{cell.method}-{dim_s}-s{cell.seed}",
                                            cell_tags(spec, cell, self.code, self.keys.init_key, self.keys.cpt_key))
        try:
            self.steps(started)
        except BaseException as exc:
            self.tracker.fail(self.parent, "interrupted" if isinstance(exc, KeyboardInterrupt) else exc)
            raise
        self.reached("finished")
        self.release_products(self.parent)
        return {"cell": cell.label, "run_id": self.parent, "experiment_id": self.exp}

    def steps(self, started: float) -> None:
        """Initialize, evaluate at step 0, continue pre-training, evaluate at each evaluated step, finish."""
        from harness.core.kernels import check_measured
        from harness.evaluation import convergence, evaluate_step

        # measured here: a worker that loaded torch or numpy before the harness, another machine of a cluster, a
        # run that took a stale record are refused in one line that says how to go on
        check_measured(self.spec.cpu_kernels, self.spec.cpu_bf16)
        cpt = self.spec.cpt
        self.tracker.log_params(self.parent, cell_params(self.spec, self.cell))
        self.reached("start")
        model_dir, tokenizer = self.initialize(since=started)
        self.reached("init")
        evaluate_step(self, 0, model_dir, tokenizer)
        self.reached("step0")
        if cpt.steps > 0:
            ckpts = self.continue_pretraining(model_dir, tokenizer)
            self.reached("cpt")
            for step, path in sorted(ckpts.items()):
                evaluate_step(self, step, path, tokenizer, tasks=self.spec.plan.tasks if cpt["eval_tasks"] else [])
            self.record.log_cell_metrics(self.parent, convergence(self.record.heldout_curve(self.parent),
                                                                  cpt.get("loss_threshold")), cpt.steps)
        self.tracker.set_tags(self.parent, {"final_step": cpt.steps, "task_final_step": cpt.last_task_step()})
        self.tracker.finish(self.parent)

    def initialize(self, since: float | None = None) -> tuple[Path, Any]:
        """The cell's initialized model (a cached product), its report handed to the record; (folder, tokenizer).
        ``since``: when its start line was said (``time.monotonic()``), which its still-running lines count from."""
        from transformers import AutoTokenizer

        from harness.core.cache import ProductCache
        from harness.core.progress import STARTUP_HEARTBEAT_S, callbacks, log_console, mode, still_running
        from harness.initialize import initialize_model

        cell, prog, console = self.cell, self.prog, log_console()
        t0 = time.time()
        # its start line is run()'s (before the run is opened); on a loaded machine it says it still runs
        beat = STARTUP_HEARTBEAT_S if mode(console) == "lines" else None  # a terminal shows the cells' bar
        bars = callbacks(prog) if prog is not None else None  # closed with the stage: no bar outlives it
        with still_running(f"  init {cell.label}", beat, console=console, since=since), \
                bars if bars is not None else contextlib.nullcontext():
            prod = ProductCache().get_or_build(
                "init", self.spec.init_inputs(cell),
                lambda d: {"report": initialize_model(self.world, cell.source, cell.method, dim=cell.dim,
                                                      seed=cell.seed, params=self.spec.method_params[cell.method],
                                                      out_dir=d, device=self.device, profile=self.spec.profile,
                                                      progress=bars)})
        report = json.loads((prod.path / INIT_REPORT).read_text())
        self.say(f"  init {cell.label}: done in {time.time() - t0:.1f}s · {'cached, ' if prod.cached else ''}"
                 f"{report.get('counts')}")
        languages = {code: {"script": lang.script, "seen": lang.seen.get(cell.source),
                            "resource_level": lang.resource_level, "text_chars": lang.text_chars}
                     for code, lang in self.world.languages.items()}
        self.record.log_init(self.parent, report, languages, wall_seconds=time.time() - t0, cached=prod.cached,
                             artifacts=prod.path / "artifacts")
        return prod.path, AutoTokenizer.from_pretrained(prod.path)

    def continue_pretraining(self, model_dir: Path, tokenizer: Any) -> dict[int, Path]:
        """The cell's CPT (a cached product), its loss and layouts handed to the record; {step: model folder}."""
        from harness.core.cache import ProductCache
        from harness.core.locks import exclusive
        from harness.cpt import read_layouts, read_train_log, train_cell
        from harness.initialize import load_model

        t_cpt = time.time()
        cpt_dir = ProductCache().root / "cpt" / str(self.keys.cpt_key)
        # its build lock, as every product's: prune passes over a CPT in progress, another cell waits for it
        with exclusive(cpt_dir, waiting=f"  CPT {self.cell.label}: another process builds it; waiting"):
            ckpts = train_cell(model_dir=model_dir, tokenizer=tokenizer, world=self.world,
                               settings=dict(self.spec.cpt), seed=self.cell.seed, device=self.device,
                               product_dir=cpt_dir, prog=self.prog, say=self.say,
                               load_fn=lambda p: load_model(p, device=self.device))
        # the wall time of this call (a resumed CPT counts only what was left): benchmarks/bench_main_job.py
        self.record.log_cpt(self.parent, self.spec.cpt.steps, time.time() - t_cpt, read_train_log(cpt_dir),
                            read_layouts(cpt_dir))
        return ckpts

    def release_products(self, run_id: str) -> int:
        """Remove the finished cell's init and CPT products (the same removal as ``harness cache prune
        --finished``), but those keyed to another cell of the command and those a live run of another command
        names. Returns the bytes freed."""
        if self.spec.cfg.keep_products or self.spec.plan.subset:
            return 0  # (a later run on more languages evaluates them on these products)
        from harness.cache_admin import cell_products, human, remove
        from harness.core.paths import harness_home

        home, items = harness_home(), []
        for item in cell_products(home, self.keys.init_key, self.keys.cpt_key):
            tag = "init_product" if item.kind == "init" else "cpt_product"
            if self.spec.shared(item.path.name) or any(
                    r.info.run_id != run_id for r in self.tracker.live_runs({tag: item.path.name})):
                continue
            items.append(item)
        kept: list[Any] = []
        try:
            freed = remove(items, home, skipped=kept)
        except OSError as exc:  # the cell's results are logged: a product left behind only takes disk
            self.say(f"  [yellow]could not remove the finished cell's products: {exc}[/yellow]")
            return 0
        gone = [i for i in items if i not in kept]
        if gone:
            self.say(f"  removed the finished cell's {' and '.join(i.kind for i in gone)} product(s) "
                     f"({human(freed)}; `--keep-products` keeps them)")
        for i in kept:
            self.say(f"  kept the finished cell's {i.kind} product: {i.why}")
        return freed
