"""The runner: crosses methods x (factorized dims) x seeds (x source models) for a world, and for each cell
initializes -> evaluates at step 0 -> continues pre-training -> evaluates at each checkpoint and the final step.

Every expensive product is cached by the hash of its inputs (:mod:`harness.core.cache`), and every MLflow run is found
again by its identity tags (:mod:`harness.core.tracking`), so a run killed at any point and started again with the same
command finishes without recomputing finished products and without duplicate runs. Cells are independent and
idempotent: an executor may run them in any order, in any process.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from harness.config import RunConfig, method_params, resolve_device
from harness.core.cache import ProductCache
from harness.core.devices import compute_device, pinned
from harness.core.errors import DeviceFault, HarnessError, is_device_fault
from harness.core.hashing import hash_obj
from harness.core.lifecycle import device_fault, fault_after
from harness.core.precision import run_precisions
from harness.core.progress import log_console
from harness.core.record import INIT_REPORT, RunRecord
from harness.core.registry import METHODS
from harness.core.tracking import Tracker
from harness.core.versions import git_commit, library_versions
from harness.cpt import read_layouts, read_train_log, train_cell
from harness.evaluation import convergence, evaluate_step
from harness.finished import finished_run, init_inputs, product_keys, release_products
from harness.fit import fit_cpt
from harness.initialize import load_model
from harness.plan import Cell, cpt_settings, last_task_step, make_plan, without_devices
from harness.rerun import changed_files, start_over

log = logging.getLogger(__name__)
console = log_console()
INIT_VERSION = 3  # bump when the initialization path changes its output for the same inputs (2: FOCUS's
# overlap follows deepfocus by default, and its fastText corpus is written as deepfocus writes it; 3: OFA, HyperOFA
# and WECHSEL copy special tokens by their text as the authors' code does, WECHSEL's float32-screened search)


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
    stale cell (:mod:`harness.rerun`)."""
    text = json.dumps(code, sort_keys=True)
    return {"method_code": text} if len(text) <= 5000 else {}  # MLflow's limit on a tag's value


def _torch_threads() -> int:
    """The intra-op threads this cell computes with (results can differ in the last digits between counts)."""
    import torch

    return int(torch.get_num_threads())


class Runner:
    def __init__(self, cfg: RunConfig, world: Any, tracker: Tracker | None = None):
        self.cfg = cfg
        self.world = world
        if tracker is None:
            from harness.core.progress import STARTUP_HEARTBEAT_S, stage

            with stage("MLflow store: opening", heartbeat=STARTUP_HEARTBEAT_S):  # mlflow's import: seconds
                tracker = Tracker(cfg.tracking_uri)
        self.tracker = tracker
        self.cache = ProductCache()
        # the device this process computes on (a cell process pinned to its GPUs sees them from cuda:0 on)
        self.device = compute_device(resolve_device(cfg.device))
        self.cpt = cpt_settings(cfg)
        # precisions resolved for this device ("auto" never reaches a product key or a logged param)
        self.cpt["precision"], self.eval_precision = run_precisions(cfg, self.device)
        self.plan = make_plan(cfg, world)
        # settings the source models bound (the CPT block size), clamped to what they take (harness.fit)
        self.cpt, self.fitted = fit_cpt(self.cpt, world, sorted({c.source for c in self.plan.cells}))
        self.prefix = ""  # put before each line this runner prints (cells side by side)
        self._code: dict[str, dict[str, str]] = {}

    def say(self, message: str) -> None:
        from rich.markup import escape

        console.print(escape(self.prefix) + message if self.prefix else message)

    # ------------------------------------------------------------------------------------------------------
    def run(self, executor: Any = None) -> dict[str, Any]:
        plan = self.plan
        for s in plan.skipped:
            console.print(f"[yellow]skipped:[/yellow] {s}")
        console.print(f"world [bold]{self.world.name}[/bold] ({self.world.hash}), profile {self.cfg.profile}, "
                      f"device {self.device}: {len(plan.cells)} cell(s) x tasks {', '.join(plan.tasks)}")
        for setting, why in self.fitted.items():
            console.print(f"[yellow]fitted to the source model:[/yellow] {setting} {why}")
        self.cache.clean_stale()
        self.mark_orphans()
        results: dict[str, Any] = {"cells": [], "failed": []}
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        from harness.core.progress import Progress

        # rich bars on a terminal, plain progress lines when the output is piped
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as prog:
            bar = prog.add_task("cells", total=len(plan.cells))
            if executor is not None:
                prog.update(bar, description=f"cells on {type(executor).__name__}")
                workers = getattr(executor, "workers", None)
                console.print(f"cells: {f'{workers} worker process(es)' if workers else 'workers'} starting (each "
                              f"loads torch, the world and the MLflow store before its first cell)")
                try:
                    done, failed = executor.run(self, plan.cells, on_done=lambda c: prog.advance(bar))
                finally:
                    executor.shutdown()
                results["cells"].extend(done)
                results["failed"].extend(failed)
                for f in failed:
                    console.print(f"[red]cell {f['cell']} failed:[/red] {f['error']}")
            for cell in plan.cells if executor is None else []:
                prog.update(bar, description=f"cell {cell.label}")
                try:
                    results["cells"].append(self.run_cell(cell, prog))
                except KeyboardInterrupt:
                    raise
                except Exception as exc:
                    if is_device_fault(exc):  # the device of this process is gone: no later cell can run here
                        raise DeviceFault(
                            f"cell {cell.label}: the device failed ({type(exc).__name__}: {str(exc)[:300]}); "
                            f"every later cell of this process would fail with it, so the run stops here. "
                            f"Finished cells are kept; the same command resumes (with --isolate-cells, the default "
                            f"on a GPU, each cell runs in a process of its own and the others go on)") from exc
                    log.exception("cell %s failed", cell.label)
                    results["failed"].append({"cell": cell.label, "error": f"{type(exc).__name__}: {exc}"})
                    console.print(f"[red]cell {cell.label} failed:[/red] {type(exc).__name__}: {exc}")
                    if self.cfg.fail_fast or isinstance(exc, HarnessError):
                        raise
                prog.advance(bar)
        from harness.aggregate import aggregate_seeds, seed_groups

        if any(len(c) > 1 for c in seed_groups(plan.cells).values()):
            from harness.core.progress import STARTUP_HEARTBEAT_S, stage

            with stage("seed aggregates: mean and sd over seeds, per variant and task", heartbeat=STARTUP_HEARTBEAT_S):
                aggregate_seeds(self)
        stale = [c for c in results["cells"] if c.get("stale")]
        if stale:
            files = sorted({f for c in stale for f in c["stale"]})
            console.print(f"[yellow]{len(stale)} finished cell(s) ran an older version of their method's code "
                          f"({', '.join(files)} changed since): their numbers are the old code's; "
                          f"`--rerun stale` runs them again[/yellow]: " + "; ".join(c["cell"] for c in stale))
        return results

    # ------------------------------------------------------------------------------------------------------
    def mark_orphans(self) -> None:
        """Runs left RUNNING by a dead process become KILLED (this run's cells resume theirs and finish them)."""
        ids = []
        for source in sorted({c.source for c in self.plan.cells}):
            exp = self.tracker.client.get_experiment_by_name(self.experiment_name(source))
            if exp is not None:
                ids.append(exp.experiment_id)
        n = self.tracker.mark_orphans_killed(ids)
        if n:
            console.print(f"[yellow]{n} MLflow run(s) left RUNNING by a process that died are marked KILLED; "
                          f"the cells of this command resume theirs[/yellow]")

    # ------------------------------------------------------------------------------------------------------
    def method_params(self, method: str) -> dict[str, Any]:
        return method_params(self.cfg, method)

    def cell_identity(self, cell: Cell) -> dict[str, Any]:
        return {"world": self.world.hash, "source": cell.source, "method": cell.method,
                "params": self.method_params(cell.method), "dim": cell.dim, "seed": cell.seed,
                "profile": self.cfg.profile, "cpt": without_devices(self.cpt), "init_version": INIT_VERSION}

    def method_code(self, method: str) -> dict[str, str]:
        """The digest of a method's code (its module and the modules of its package it imports), computed once."""
        if method not in self._code:
            from harness.core.declarations import code_digest

            self._code[method] = code_digest(METHODS.get(method).__module__)
        return self._code[method]

    def code_key(self, method: str) -> str:
        return hash_obj(self.method_code(method))

    def experiment_name(self, source: str) -> str:
        return self.cfg.experiment or f"{self.world.name}/{source}"

    def release_products(self, cell: Cell, run_id: str) -> int:
        """Remove a finished cell's init and CPT products, unless the run keeps them (:mod:`harness.finished`)."""
        if self.cfg.keep_products:
            return 0
        others = {k for c in self.plan.cells if c != cell
                  for k in product_keys(self.cell_identity(c), self.code_key(c.method))}
        return release_products(self.tracker, self.cache.root.parent,
                                product_keys(self.cell_identity(cell), self.code_key(cell.method)), run_id, others,
                                self.say)

    def run_cell(self, cell: Cell, prog: Any = None) -> dict[str, Any]:
        """Initialize, evaluate at step 0, continue pre-training, evaluate at each checkpoint; every result is
        handed to the run record, which logs it once (a resumed cell skips what it marked done)."""
        from harness.core.progress import PlainProgress, mode, set_prefix

        if prog is None and mode(console) == "lines":  # a worker process: its own progress lines, prefixed
            set_prefix(self.prefix)
            prog = PlainProgress(console.file)
        tr, record = self.tracker, RunRecord(self.tracker)
        ident = self.cell_identity(cell)
        key = hash_obj(ident)
        exp = tr.experiment(self.experiment_name(cell.source))
        dim_s = "full" if cell.dim is None else str(cell.dim)
        variant = self.cell_variant(cell)
        code = self.method_code(cell.method)
        if start_over(record, exp, key, self.cfg.rerun, variant, cell.seed, code):
            self.say(f"  {cell.label}: its earlier runs deleted, it starts over (--rerun {self.cfg.rerun})")
        done = finished_run(record, exp, key, self.plan.tasks, self.cpt)
        if done is not None:  # nothing to do: no product is built, nothing is logged
            stale = changed_files(record.cell_code(exp, key), code)
            self.say(f"  finished, every evaluation logged: {cell.label}"
                     + (f" (with older code of its method: {', '.join(stale)} changed since)" if stale else ""))
            self.release_products(cell, done)  # (left by a command killed before it removed them)
            return {"cell": cell.label, "run_id": done, "experiment_id": exp, "skipped": True, "stale": stale}
        started = time.monotonic()
        self.say(f"  init {cell.label}: start")  # the source model loaded, the method's rows computed: seconds
        from transformers.utils import logging as hf_logging  # imported once a cell has work to do (seconds)

        hf_logging.disable_progress_bar()  # per-load "Loading weights" bars: the run has its own progress lines
        init_key, cpt_key = product_keys(ident, self.code_key(cell.method))
        # the products it reads name the run (another command's cell then keeps them: release_products)
        parent = record.open_cell(exp, key, f"{cell.method}-{dim_s}-s{cell.seed}",
                                  self.cell_tags(cell, code, init_key, cpt_key))
        try:
            tr.log_params(parent, self.cell_params(cell, ident))
            device_fault(cell.method)  # a simulated poisoned accelerator (tests: HARNESS_FAULT_DEVICE)
            model_dir, tokenizer = self.initialize(cell, ident, parent, record, prog, since=started)
            fault_after("init")
            evaluate_step(self, exp, parent, key, cell, 0, model_dir, tokenizer, load_model)
            fault_after("step0")
            steps = int(self.cpt["steps"])
            if steps > 0:
                t_cpt = time.time()
                cpt_dir = self.cache.root / "cpt" / str(cpt_key)
                ckpts = train_cell(model_dir=model_dir, tokenizer=tokenizer, world=self.world, settings=self.cpt,
                                   seed=cell.seed, device=self.device, product_dir=cpt_dir, prog=prog, say=self.say,
                                   load_fn=lambda p: load_model(p, device=self.device))
                # the wall time of this call (a resumed CPT counts only what was left): benchmarks/bench_main_job.py
                record.log_cpt(parent, steps, time.time() - t_cpt, read_train_log(cpt_dir), read_layouts(cpt_dir))
                fault_after("cpt")
                for step, path in sorted(ckpts.items()):
                    evaluate_step(self, exp, parent, key, cell, step, path, tokenizer, load_model,
                                  tasks=self.plan.tasks if self.cpt["eval_tasks"] else [])
                record.log_cell_metrics(parent, convergence(record.heldout_curve(parent),
                                                            self.cpt.get("loss_threshold")), steps)
            tr.set_tags(parent, {"final_step": steps, "task_final_step": last_task_step(self.cpt)})
            tr.finish(parent)
        except BaseException as exc:
            tr.fail(parent, "interrupted" if isinstance(exc, KeyboardInterrupt) else exc)
            raise
        fault_after("finished")
        self.release_products(cell, parent)
        return {"cell": cell.label, "run_id": parent, "experiment_id": exp}

    def cell_variant(self, cell: Cell) -> dict[str, Any]:
        return {"method": cell.method, "source": cell.source, "dim": "full" if cell.dim is None else str(cell.dim),
                "profile": self.cfg.profile, "world": self.world.name}

    def cell_tags(self, cell: Cell, code: dict[str, str], init_key: str, cpt_key: str | None) -> dict[str, Any]:
        """The tags of a cell's run: its variant and seed, its method's defaults and code, the GPUs it ran on, the
        products it reads."""
        return {**self.cell_variant(cell), "seed": cell.seed, **method_tags(METHODS.get(cell.method)),
                **code_tag(code), **({"gpus": pinned()} if pinned() else {}),  # CUDA_VISIBLE_DEVICES of the cell
                "init_product": init_key, **({"cpt_product": cpt_key} if cpt_key else {})}

    def cell_params(self, cell: Cell, ident: dict[str, Any]) -> dict[str, Any]:
        """What a cell run records as params: its identity, device, precision, threads, revision, every method
        parameter (defaults included, so a row says which rule it ran with), the CPT settings, what was fitted to
        the source model, the libraries' versions."""
        return {"method": cell.method, "source": cell.source, "dim": "full" if cell.dim is None else str(cell.dim),
                "seed": cell.seed, "profile": self.cfg.profile, "world": self.world.name,
                "world_hash": self.world.hash, "device": resolve_device(self.cfg.device), "eval_precision": self.eval_precision,
                "torch_threads": _torch_threads(), "git_revision": git_commit() or "not a checkout",
                **{f"method.{k}": v for k, v in {**getattr(METHODS.get(cell.method), "defaults", {}),
                                                  **ident["params"]}.items()},
                **{f"cpt.{k}": v for k, v in self.cpt.items()},
                **{f"fitted.{k}": v for k, v in self.fitted.items()},
                **{f"version.{k}": v for k, v in library_versions().items()}}

    def initialize(self, cell: Cell, ident: dict[str, Any], parent: str, record: RunRecord,
                   prog: Any, since: float | None = None) -> tuple[Path, Any]:
        """The cell's initialized model (a cached product), its report handed to the record; (folder, tokenizer).
        ``since``: when its start line was said (``time.monotonic()``), which its still-running lines count from."""
        from transformers import AutoTokenizer

        from harness.core.progress import STARTUP_HEARTBEAT_S, callbacks, mode, still_running
        from harness.initialize import initialize_model

        t0 = time.time()
        # its start line is run_cell's (before the run is opened); on a loaded machine it says it still runs
        beat = STARTUP_HEARTBEAT_S if mode(console) == "lines" else None  # a terminal shows the cells' bar
        with still_running(f"  init {cell.label}", beat, console=console, since=since):
            prod = self.cache.get_or_build(
                "init", init_inputs(ident, self.code_key(cell.method)),
                lambda d: {"report": initialize_model(self.world, cell.source, cell.method, dim=cell.dim,
                                                      seed=cell.seed, params=ident["params"], out_dir=d,
                                                      device=self.device, profile=self.cfg.profile,
                                                      progress=callbacks(prog) if prog is not None else None)})
        report = json.loads((prod.path / INIT_REPORT).read_text())
        self.say(f"  init {cell.label}: done in {time.time() - t0:.1f}s · {'cached, ' if prod.cached else ''}"
                 f"{report.get('counts')}")
        languages = {code: {"script": lang.script, "seen": lang.seen.get(cell.source),
                            "resource_level": lang.resource_level, "text_chars": lang.text_chars}
                     for code, lang in self.world.languages.items()}
        record.log_init(parent, report, languages, wall_seconds=time.time() - t0, cached=prod.cached,
                        artifacts=prod.path / "artifacts")
        return prod.path, AutoTokenizer.from_pretrained(prod.path)
