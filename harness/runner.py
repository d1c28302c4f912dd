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

from rich.console import Console

from harness.config import RunConfig
from harness.core.cache import ProductCache
from harness.core.errors import DeviceFault, HarnessError, is_device_fault
from harness.core.hashing import hash_obj
from harness.core.lifecycle import device_fault, fault_after
from harness.core.paths import harness_home
from harness.core.precision import resolve_precision
from harness.core.profiles import profile as get_profile
from harness.core.registry import METHODS, TASKS
from harness.core.tracking import Tracker, metric_key
from harness.core.versions import git_commit, library_versions
from harness.finished import finished_run, init_inputs, product_keys, release_products
from harness.fit import fit_cpt
from harness.plan import Cell, cpt_settings, last_task_step, make_plan, resolve_device, without_devices
from harness.rerun import start_over

log = logging.getLogger(__name__)
console = Console(stderr=True)
INIT_VERSION = 3  # bump when the initialization path changes its output for the same inputs (2: FOCUS's
# overlap follows deepfocus by default, and its fastText corpus is written as deepfocus writes it; 3: OFA, HyperOFA
# and WECHSEL copy special tokens by their text as the authors' code does, WECHSEL's float32-screened search)


def task_tags(task: Any) -> dict[str, str]:
    """What the leaderboard reads of a task from its runs (it imports no task): the headline metric, its
    direction and the task's metrics (``harness.task.*``)."""
    return {"task.headline": task.headline, "task.higher_is_better": str(bool(task.higher_is_better)).lower(),
            "task.metrics": ",".join(task.metrics)}


def method_tags(method: Any) -> dict[str, str]:
    """What the leaderboard reads of a method from its cell runs (it imports no method): its declared parameter
    defaults (``harness.method_defaults``, JSON of the logged strings), by which a row's label names only the
    parameters set away from them, and what it was checked against (``harness.method_reference``, the one line of
    :meth:`methods.base.Reference.line`, or "not declared"), shown beside its rows."""
    from methods.base import reference_line

    defaults = json.dumps({k: str(v) for k, v in (getattr(method, "defaults", None) or {}).items()}, sort_keys=True)
    tags = {"method_defaults": defaults, "method_reference": reference_line(method)}
    return {k: v for k, v in tags.items() if len(v) <= 5000}  # MLflow's limit on a tag's value


def _torch_threads() -> int:
    """The intra-op threads this cell computes with (results can differ in the last digits between counts)."""
    import torch

    return int(torch.get_num_threads())


class Runner:
    def __init__(self, cfg: RunConfig, world: Any, tracker: Tracker | None = None):
        self.cfg = cfg
        self.world = world
        self.tracker = tracker or Tracker(cfg.tracking_uri)
        self.cache = ProductCache()
        self.device = resolve_device(cfg.device)
        self.cpt = cpt_settings(cfg)
        # precisions resolved for this device ("auto" never reaches a product key or a logged param)
        self.cpt["precision"] = resolve_precision(self.cpt.get("precision"), self.device)
        self.eval_precision = resolve_precision(get_profile(cfg.profile).get("eval_precision"), self.device)
        self.plan = make_plan(cfg, world)
        # settings the source models bound (the CPT block size), clamped to what they take (harness.fit)
        self.cpt, self.fitted = fit_cpt(self.cpt, world, sorted({c.source for c in self.plan.cells}))
        self.prefix = ""  # put before each line this runner prints (cells side by side)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # per-load "Loading weights" bars: the run has its own progress lines

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
        if any(len(c) > 1 for c in self.seed_groups().values()):
            self.aggregate_seeds()
        return results

    # ------------------------------------------------------------------------------------------------------
    def seed_groups(self) -> dict[tuple[str, str, int | None], list[Cell]]:
        groups: dict[tuple[str, str, int | None], list[Cell]] = {}
        for c in self.plan.cells:
            groups.setdefault((c.source, c.method, c.dim), []).append(c)
        return groups

    def aggregate_seeds(self) -> None:
        """Per-language mean and standard deviation (ddof=1) across seeds, one aggregate run per (variant, task),
        metrics ``{task}/{metric}/{lang}/mean`` and ``.../std`` at every evaluated step."""
        import statistics

        tr = self.tracker
        for (source, method, dim), cells in self.seed_groups().items():
            if len(cells) < 2:
                continue
            exp = tr.experiment(self.experiment_name(source))
            dim_s = "full" if dim is None else str(dim)
            group = hash_obj({"source": source, "method": method, "dim": dim, "world": self.world.hash,
                              "profile": self.cfg.profile, "cpt": self.cpt,
                              "params": self.method_params(method),
                              "seeds": sorted(c.seed for c in cells)})
            for task_name in self.plan.tasks:
                values: dict[tuple[str, int], list[float]] = {}
                for cell in cells:
                    key = hash_obj(self.cell_identity(cell))
                    for run in tr.find_runs(exp, {"cell": key, "kind": "task", "task": task_name}):
                        for mkey in run.data.metrics:
                            if not mkey.startswith(task_name + "/") or mkey.count("/") != 2:
                                continue
                            # one value per run and step: a run killed between logging an evaluation and
                            # marking it done logs it again when resumed (the same value, a second point)
                            history = tr.client.get_metric_history(run.info.run_id, mkey)
                            last = {m.step: m.value for m in sorted(history, key=lambda m: m.timestamp)}
                            for st, value in last.items():
                                values.setdefault((mkey, st), []).append(value)
                if not values:
                    continue
                run_id, _ = tr.get_or_create_run(exp, {"kind": "aggregate", "group": group, "task": task_name},
                                                  f"{method}-{dim_s}-seeds-{task_name}")
                tr.set_tags(run_id, {"method": method, "source": source, "dim": dim_s, "task": task_name,
                                     "profile": self.cfg.profile, "world": self.world.name,
                                     "seeds": ",".join(str(c.seed) for c in cells)})
                by_step: dict[int, dict[str, float]] = {}
                for (mkey, step), vals in values.items():
                    if len(vals) < 2:
                        continue
                    by_step.setdefault(step, {})[f"{mkey}/mean"] = statistics.fmean(vals)
                    by_step[step][f"{mkey}/std"] = statistics.stdev(vals)
                    by_step[step][f"{mkey}/n"] = float(len(vals))
                for step, metrics in sorted(by_step.items()):
                    if not tr.is_done(run_id, f"agg_{step}_{len(cells)}"):
                        tr.log_metrics(run_id, metrics, step=step)
                        tr.mark_done(run_id, f"agg_{step}_{len(cells)}")
                tr.finish(run_id)

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
        """The profile's defaults for the method, overridden by the run's ``method_params``."""
        defaults = get_profile(self.cfg.profile).get("method_params", {}).get(method, {})
        return {**defaults, **self.cfg.method_params.get(method, {})}

    def cell_identity(self, cell: Cell) -> dict[str, Any]:
        return {"world": self.world.hash, "source": cell.source, "method": cell.method,
                "params": self.method_params(cell.method), "dim": cell.dim, "seed": cell.seed,
                "profile": self.cfg.profile, "cpt": without_devices(self.cpt), "init_version": INIT_VERSION}

    def experiment_name(self, source: str) -> str:
        return self.cfg.experiment or f"{self.world.name}/{source}"

    def release_products(self, cell: Cell, run_id: str) -> int:
        """Remove a finished cell's init and CPT products, unless the run keeps them (:mod:`harness.finished`)."""
        if self.cfg.keep_products:
            return 0
        others = {k for c in self.plan.cells if c != cell for k in product_keys(self.cell_identity(c))}
        return release_products(self.tracker, self.cache.root.parent, product_keys(self.cell_identity(cell)), run_id,
                                others, self.say)

    def run_cell(self, cell: Cell, prog: Any = None) -> dict[str, Any]:
        from harness.core.progress import PlainProgress, callbacks, mode, set_prefix
        from harness.initialize import initialize_model, load_model

        if prog is None and mode(console) == "lines":  # a worker process: its own progress lines, prefixed
            set_prefix(self.prefix)
            prog = PlainProgress(console.file)

        tr = self.tracker
        ident = self.cell_identity(cell)
        key = hash_obj(ident)
        exp = tr.experiment(self.experiment_name(cell.source))
        dim_s = "full" if cell.dim is None else str(cell.dim)
        run_name = f"{cell.method}-{dim_s}-s{cell.seed}"
        variant = {"method": cell.method, "source": cell.source, "dim": dim_s, "profile": self.cfg.profile,
                   "world": self.world.name}
        if start_over(tr, exp, key, self.cfg.rerun, variant, cell.seed):
            self.say(f"  {cell.label}: its earlier runs deleted, it starts over (--rerun {self.cfg.rerun})")
        done = finished_run(tr, exp, key, self.plan.tasks, self.cpt)
        if done is not None:  # nothing to do: no product is built, nothing is logged
            self.say(f"  finished, every evaluation logged: {cell.label}")
            self.release_products(cell, done)  # (left by a command killed before it removed them)
            return {"cell": cell.label, "run_id": done, "experiment_id": exp, "skipped": True}
        parent, existed = tr.get_or_create_run(exp, {"cell": key, "kind": "cell"}, run_name)
        init_key, cpt_key = product_keys(ident)
        try:
            # the products it reads name the run (another command's cell then keeps them: release_products)
            tr.set_tags(parent, {"method": cell.method, "source": cell.source, "dim": dim_s,
                                 "seed": cell.seed, "profile": self.cfg.profile, "world": self.world.name,
                                 **method_tags(METHODS.get(cell.method)),
                                 "init_product": init_key, **({"cpt_product": cpt_key} if cpt_key else {})})
            params = {"method": cell.method, "source": cell.source, "dim": dim_s, "seed": cell.seed,
                      "profile": self.cfg.profile, "world": self.world.name, "world_hash": self.world.hash,
                      "device": self.device, "eval_precision": self.eval_precision,
                      "torch_threads": _torch_threads(),
                      "git_revision": git_commit() or "not a checkout",
                      # every parameter, defaults included, so a row says which rule it ran with
                      **{f"method.{k}": v for k, v in {**getattr(METHODS.get(cell.method), "defaults", {}),
                                                        **ident["params"]}.items()},
                      **{f"cpt.{k}": v for k, v in self.cpt.items()},
                      **{f"fitted.{k}": v for k, v in self.fitted.items()},
                      **{f"version.{k}": v for k, v in library_versions().items()}}
            tr.log_params(parent, params)
            device_fault(cell.method)  # a simulated poisoned accelerator (tests: HARNESS_FAULT_DEVICE)

            # 1. initialize (cached product)
            t0 = time.time()
            prod = self.cache.get_or_build(
                "init", init_inputs(ident),
                lambda d: {"report": initialize_model(self.world, cell.source, cell.method, dim=cell.dim,
                                                      seed=cell.seed, params=ident["params"], out_dir=d,
                                                      device=self.device, profile=self.cfg.profile,
                                                      progress=callbacks(prog) if prog is not None else None)})
            report = json.loads((prod.path / "init_report.json").read_text())
            self.say(f"  init {'(cached) ' if prod.cached else ''}{cell.label}: {report.get('counts')} "
                     f"in {time.time() - t0:.1f}s")
            if not tr.is_done(parent, "init"):
                counts = report.get("counts", {})
                scalars = {f"init/{k}": float(v) for k, v in (report.get("method_stats") or {}).items()
                           if isinstance(v, (int, float)) and not isinstance(v, bool)}
                mem = report.get("memory") or {}
                if isinstance(mem.get("peak_rss_mb"), (int, float)):
                    scalars["init/peak_rss_mb"] = float(mem["peak_rss_mb"])
                tr.log_metrics(parent, {**scalars, **{f"init/{k}": v for k, v in counts.items()},
                                        "init/seconds": float(report.get("seconds", 0.0)),
                                        # what this cell spent (init/seconds is the product's own computation,
                                        # which a cached product did not repeat)
                                        "init/wall_seconds": time.time() - t0, "init/cached": float(prod.cached)},
                               step=0)
                tr.log_dict(parent, report, "init_report.json")
                self.log_init_artifacts(parent, prod.path / "artifacts")
                tr.log_dict(parent, {code: {"script": lang.script, "seen": lang.seen.get(cell.source),
                                            "resource_level": lang.resource_level, "text_chars": lang.text_chars}
                                     for code, lang in self.world.languages.items()}, "languages.json")
                tr.mark_done(parent, "init")
            fault_after("init")

            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(prod.path)

            # 2. evaluate at step 0
            self.evaluate(exp, parent, key, cell, 0, prod.path, tokenizer, load_model)
            fault_after("step0")

            # 3. CPT and evaluation at each checkpoint
            steps = int(self.cpt["steps"])
            if steps > 0:
                cpt_dir = self.cache.root / "cpt" / str(cpt_key)
                cpt_dir.parent.mkdir(parents=True, exist_ok=True)
                languages = sorted({p.stem for p in self.world.resource_files("cpt_text")})
                bar = prog.add_task("  CPT", total=steps) if prog is not None else None

                def on_progress(step: int, total: int, loss: float | None) -> None:
                    if prog is not None and bar is not None:
                        prog.update(bar, completed=step, description=f"  CPT loss {loss:.3f}" if loss else "  CPT")

                from harness.cpt import launch_distributed_cpt, read_layouts, read_train_log, run_cpt
                from harness.initialize import save_model

                t_cpt = time.time()
                n_procs = int(self.cpt.get("devices", 1) or 1)
                if n_procs > 1 and not (cpt_dir / "_DONE.json").is_file():
                    self.say(f"  CPT on {n_procs} processes (torchrun)")
                    launch_distributed_cpt(n_procs=n_procs, work_dir=cpt_dir.with_name(cpt_dir.name + ".launch"),
                                           spec={"world": self.world.name, "model_dir": str(prod.path),
                                                 "languages": languages, "settings": self.cpt, "seed": cell.seed,
                                                 "device": self.device, "product_dir": str(cpt_dir),
                                                 "eval_steps": self.cpt["checkpoints"]})
                ckpts = run_cpt(model_dir=prod.path, tokenizer=tokenizer, world=self.world, languages=languages,
                                settings=self.cpt, seed=cell.seed, device=self.device, product_dir=cpt_dir,
                                eval_steps=self.cpt["checkpoints"],
                                load_fn=lambda p: load_model(p, device=self.device),
                                save_fn=save_model, progress=on_progress)
                if prog is not None and bar is not None:
                    prog.remove_task(bar)
                self.say(f"  CPT: {steps} steps in {time.time() - t_cpt:.1f}s")
                if not tr.is_done(parent, "cpt_log"):
                    # the wall time of this call (a resumed CPT counts only what was left): benchmarks/bench_main_job.py
                    tr.log_metrics(parent, {"cpt/seconds": time.time() - t_cpt}, step=steps)
                    tr.log_series(parent, "cpt/train_loss", [(r["step"], r["loss"]) for r in read_train_log(cpt_dir)])
                    layouts = read_layouts(cpt_dir)  # the batch layout(s) CPT used (harness.cpt_batch)
                    for lay in layouts:
                        tr.log_metrics(parent, {"cpt/per_device_batch": float(lay["per_device"]),
                                                "cpt/grad_accumulation": float(lay["accumulation"])},
                                       step=int(lay["from_step"]))
                    if layouts:
                        tr.log_dict(parent, layouts, "cpt_layout.json")
                    tr.mark_done(parent, "cpt_log")
                fault_after("cpt")
                for step, path in sorted(ckpts.items()):
                    self.evaluate(exp, parent, key, cell, step, path, tokenizer, load_model,
                                  tasks=self.plan.tasks if self.cpt["eval_tasks"] else [])
            if steps > 0:
                self.log_convergence(parent, steps)
            tr.set_tags(parent, {"final_step": steps, "task_final_step": last_task_step(self.cpt)})
            tr.finish(parent)
        except BaseException as exc:
            if not isinstance(exc, KeyboardInterrupt):
                tr.fail(parent, exc)
            else:
                tr.fail(parent, "interrupted")
            raise
        fault_after("finished")
        self.release_products(cell, parent)
        return {"cell": cell.label, "run_id": parent, "experiment_id": exp}

    def log_init_artifacts(self, parent: str, folder: Path) -> None:
        """What a method kept in its workdir goes to MLflow under ``init/``; a ``curves.json`` there
        ({name: [[step, value], ...]}, e.g. the hypernetwork's training curve) becomes metrics ``init/<name>``."""
        if not folder.is_dir():
            return
        for f in sorted(folder.rglob("*")):
            if f.is_file() and f.stat().st_size < 200 * 2**20:
                rel = f.parent.relative_to(folder)
                self.tracker.log_artifact(parent, f, "init" if str(rel) == "." else f"init/{rel}")
        curves = folder / "curves.json"
        if curves.is_file():
            for name, points in json.loads(curves.read_text()).items():
                self.tracker.log_series(parent, metric_key("init", name), [(int(st), float(v)) for st, v in points])

    def log_convergence(self, parent: str, steps: int) -> None:
        """The convergence figure of the held-out MLM loss curve: its area (the trapezoid mean over [0, steps],
        lower is better) and the first evaluated step that reaches the threshold (``cpt.loss_threshold`` if set,
        otherwise 90 % of the curve's own drop from step 0 to its minimum)."""
        hist = sorted((m.step, m.value) for m in self.tracker.client.get_metric_history(parent, "cpt/heldout_loss"))
        if len(hist) < 2:
            return
        area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(hist, hist[1:], strict=False))
        area /= max(hist[-1][0] - hist[0][0], 1)
        thr = self.cpt.get("loss_threshold")
        if thr is None:
            lo = min(v for _, v in hist)
            thr = hist[0][1] - 0.9 * (hist[0][1] - lo)
        reached = next((s for s, v in hist if v <= thr), None)
        metrics = {"cpt/heldout_auc": area, "cpt/loss_threshold": float(thr)}
        if reached is not None:
            metrics["cpt/steps_to_threshold"] = float(reached)
        self.tracker.log_metrics(parent, metrics, step=steps)

    # ------------------------------------------------------------------------------------------------------
    def evaluate(self, exp: str, parent: str, key: str, cell: Cell, step: int, model_dir: Path, tokenizer: Any,
                 load_model: Any, tasks: list[str] | None = None) -> None:
        """Evaluate ``tasks`` (default: the plan's) on the model at ``step``, then the held-out MLM loss when
        the run has CPT."""
        from tasks.base import TaskSettings

        tr = self.tracker
        model = None
        heldout: float | None = None
        last = last_task_step(self.cpt)
        for task_name in self.plan.tasks if tasks is None else tasks:
            task = TASKS.get(task_name)()
            trun, _ = tr.get_or_create_run(exp, {"cell": key, "kind": "task", "task": task_name}, task_name,
                                           parent_run_id=parent)
            tr.set_tags(trun, {"method": cell.method, "source": cell.source, "seed": cell.seed,
                               "dim": "full" if cell.dim is None else cell.dim, "profile": self.cfg.profile,
                               "world": self.world.name, "parent": parent, **task_tags(task)})
            if tr.is_done(trun, f"step_{step}"):
                self.say(f"  {task_name} @ step {step}: already logged")
                if step == last:
                    tr.finish(trun)  # a resumed run whose work is done ends FINISHED
                continue
            if model is None:
                model = load_model(model_dir, device=self.device)
            settings = TaskSettings(
                profile=self.cfg.profile, seed=cell.seed, device=self.device,
                max_sentences=get_profile(self.cfg.profile).get("eval_max_sentences"),
                params=self.cfg.task_params.get(task_name, {}),
                cache_dir=harness_home() / "products" / "tasks", model_key=f"{key}:{step}",
                precision=self.eval_precision,
            )
            langs = self.plan.languages[task_name]
            t0 = time.time()
            res = task.evaluate(model, tokenizer, self.world, langs, settings)
            seconds = time.time() - t0
            hp = res.extras.get("hyperparameters") or {}  # the task's resolved protocol settings, as params
            tr.log_params(trun, {f"{task_name}.{k}": v for k, v in hp.items()})
            metrics: dict[str, float] = {}
            for metric, per_lang in res.scores.items():
                for lang, v in per_lang.items():
                    metrics[metric_key(task_name, metric, lang)] = v
            avgs = res.averages()
            for metric, v in avgs.items():
                metrics[metric_key(task_name, metric, "avg")] = v
            metrics[metric_key(task_name, "seconds")] = seconds
            tr.log_metrics(trun, metrics, step=step)
            tr.log_metrics(parent, {metric_key(task_name, m, "avg"): v for m, v in avgs.items()}, step=step)
            tr.log_dict(trun, {"task": task_name, "step": step, "scores": res.scores, "averages": avgs,
                               "label_source": res.label_source, "extras": res.extras, "seconds": seconds},
                        f"tables/{task_name}_step{step}.json")
            if res.items:
                tr.log_dict(trun, {m: {lang: st.to_dict() for lang, st in per.items()} for m, per in res.items.items()},
                            f"items/{task_name}_step{step}.json")
            tr.mark_done(trun, f"step_{step}")
            head = avgs.get(task.headline)
            shown = f"{task.headline} avg {head:.4f}" if head is not None else "done"
            self.say(f"  {task_name} @ step {step}: {shown} ({seconds:.1f}s)")
            if task_name == "mlm" and "loss" in avgs and self.cpt["eval_tasks"]:
                heldout = avgs["loss"]  # the same figure at every step (not when only the diagnostic runs after CPT)
            if step == last:
                tr.finish(trun)
        # the held-out MLM loss at every evaluated step, whatever the chosen tasks (the CPT diagnostic)
        if int(self.cpt["steps"]) > 0 and not tr.is_done(parent, f"heldout_{step}"):
            if heldout is None and "mlm" in self.plan.tasks and self.cpt["eval_tasks"]:
                # the mlm task at this step was logged before a kill: the same figure, not a second sample
                logged = [m.value for m in tr.client.get_metric_history(parent, metric_key("mlm", "loss", "avg"))
                          if m.step == step]
                heldout = logged[-1] if logged else None
            if heldout is None:
                if model is None:
                    model = load_model(model_dir, device=self.device)
                mlm = TASKS.get("mlm")()
                t_h = time.time()
                langs = [lang for lang in mlm.languages(self.world) if not self.cfg.langs
                         or lang in self.cfg.langs or lang == self.world.pivot]
                res = mlm.evaluate(model, tokenizer, self.world, langs, TaskSettings(
                    profile=self.cfg.profile, seed=cell.seed, device=self.device,
                    max_sentences=get_profile(self.cfg.profile).get("heldout_max_sentences"),
                    precision=self.eval_precision))
                heldout = res.averages().get("loss")
                self.say(f"  held-out MLM loss @ step {step}: {heldout:.4f} ({time.time() - t_h:.1f}s)")
            if heldout is not None:
                tr.log_metrics(parent, {"cpt/heldout_loss": heldout}, step=step)
            tr.mark_done(parent, f"heldout_{step}")
