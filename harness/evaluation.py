"""A cell's evaluations at one CPT step: each task of the plan, then the held-out MLM loss (the CPT diagnostic)
when the run has CPT. Each result is handed to the run record (:class:`harness.core.record.RunRecord`), which
logs it once and marks it done; a resumed cell skips what is marked."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.core.paths import harness_home
from harness.core.profiles import profile as get_profile
from harness.core.record import Done, RunRecord
from harness.core.registry import TASKS
from harness.plan import last_task_step

HELDOUT_TASK = "mlm"  # the task whose loss is the held-out MLM diagnostic (its ``heldout_metric``)


def task_tags(task: Any) -> dict[str, str]:
    """What the leaderboard reads of a task from its runs (it imports no task): the headline metric, its
    direction and the task's metrics (``harness.task.*``)."""
    return {"task.headline": task.headline, "task.higher_is_better": str(bool(task.higher_is_better)).lower(),
            "task.metrics": ",".join(task.metrics)}


def task_run_tags(runner: Any, cell: Any, task: Any) -> dict[str, Any]:
    """The tags of a cell's task run: the cell's variant and seed, the task's headline and metrics."""
    return {"method": cell.method, "source": cell.source, "seed": cell.seed,
            "dim": "full" if cell.dim is None else cell.dim, "profile": runner.cfg.profile,
            "world": runner.world.name, **task_tags(task)}


def evaluate_step(runner: Any, exp: str, parent: str, key: str, cell: Any, step: int, model_dir: Path,
                  tokenizer: Any, load_model: Any, tasks: list[str] | None = None) -> None:
    """Evaluate ``tasks`` (default: the plan's) on the model at ``step``, then the held-out MLM loss when the run
    has CPT."""
    from tasks.base import TaskSettings

    record = RunRecord(runner.tracker)
    cpt, profile = runner.cpt, runner.cfg.profile
    model = None
    heldout: float | None = None
    last = last_task_step(cpt)
    for task_name in runner.plan.tasks if tasks is None else tasks:
        task = TASKS.get(task_name)()
        trun = record.open_task(exp, key, task_name, parent, task_run_tags(runner, cell, task))
        if record.done(trun, Done.evaluated(step)):
            runner.say(f"  {task_name} @ step {step}: already logged")
            if step == last:
                runner.tracker.finish(trun)  # a resumed run whose work is done ends FINISHED
            continue
        if model is None:
            model = load_model(model_dir, device=runner.device)
        settings = TaskSettings(profile=profile, seed=cell.seed, device=runner.device,
                                max_sentences=get_profile(profile).get("eval_max_sentences"),
                                params=runner.cfg.task_params.get(task_name, {}),
                                cache_dir=harness_home() / "products" / "tasks", model_key=f"{key}:{step}",
                                precision=runner.eval_precision)
        t0 = time.time()
        res = task.evaluate(model, tokenizer, runner.world, runner.plan.languages[task_name], settings)
        seconds = time.time() - t0
        record.log_evaluation(trun, parent, task_name, step, res, seconds)
        head = res.averages().get(task.headline)
        shown = f"{task.headline} avg {head:.4f}" if head is not None else "done"
        runner.say(f"  {task_name} @ step {step}: {shown} ({seconds:.1f}s)")
        metric = getattr(task, "heldout_metric", None)
        if metric and cpt["eval_tasks"]:
            heldout = res.averages().get(metric)  # the diagnostic's figure (not when only it runs after CPT)
        if step == last:
            runner.tracker.finish(trun)
    if int(cpt["steps"]) <= 0 or record.done(parent, Done.heldout(step)):
        return
    diagnostic = TASKS.get(HELDOUT_TASK)()
    if heldout is None and HELDOUT_TASK in runner.plan.tasks and cpt["eval_tasks"]:
        # the task at this step was logged before a kill: the same figure, not a second sample
        heldout = record.logged_average(parent, HELDOUT_TASK, diagnostic.heldout_metric, step)
    if heldout is None:
        if model is None:
            model = load_model(model_dir, device=runner.device)
        t_h = time.time()
        langs = [lang for lang in diagnostic.languages(runner.world) if not runner.cfg.langs
                 or lang in runner.cfg.langs or lang == runner.world.pivot]
        heldout = diagnostic.heldout(model, tokenizer, runner.world, langs, TaskSettings(
            profile=profile, seed=cell.seed, device=runner.device,
            max_sentences=get_profile(profile).get("heldout_max_sentences"), precision=runner.eval_precision))
        runner.say(f"  held-out MLM loss @ step {step}: {heldout:.4f} ({time.time() - t_h:.1f}s)")
    record.log_heldout(parent, step, heldout)


def convergence(curve: list[tuple[int, float]], threshold: float | None = None) -> dict[str, float]:
    """The convergence figure of the held-out MLM loss curve ``[(step, loss), ...]``: its area (the trapezoid mean
    over the steps, lower is better) and the first evaluated step that reaches the threshold (``threshold`` if
    given, otherwise 90 % of the curve's own drop from its first point to its minimum); {} with fewer than two
    points."""
    if len(curve) < 2:
        return {}
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(curve, curve[1:], strict=False))
    area /= max(curve[-1][0] - curve[0][0], 1)
    thr = threshold
    if thr is None:
        lo = min(v for _, v in curve)
        thr = curve[0][1] - 0.9 * (curve[0][1] - lo)
    reached = next((s for s, v in curve if v <= thr), None)
    metrics = {"cpt/heldout_auc": area, "cpt/loss_threshold": float(thr)}
    if reached is not None:
        metrics["cpt/steps_to_threshold"] = float(reached)
    return metrics
