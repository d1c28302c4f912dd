"""A cell's evaluations at one CPT step: each task of the plan, then the held-out MLM loss (the CPT diagnostic)
when the run has CPT. Each result is handed to the run record (:class:`harness.core.record.RunRecord`), which
logs it once and marks it done; a resumed cell skips what is marked."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.core.paths import harness_home
from harness.core.record import Done
from harness.core.registry import TASKS

HELDOUT_TASK = "mlm"  # the task whose loss is the held-out MLM diagnostic (its ``heldout_metric``)
HELDOUT_TASKS = {"mlm": HELDOUT_TASK, "clm": "clm"}  # the held-out diagnostic of each source objective


def heldout_task(run: Any) -> str:
    """The task whose loss is the cell's held-out diagnostic: the masked-LM loss for an encoder source, the
    causal-LM loss for a decoder (:mod:`harness.core.objective`)."""
    of = getattr(run.world, "source_objective", None)
    return HELDOUT_TASKS[of(run.cell.source) if of is not None else "mlm"]


def task_tags(task: Any) -> dict[str, str]:
    """What the leaderboard reads of a task from its runs (it imports no task): the headline metric, its
    direction and the task's metrics (``harness.task.*``)."""
    return {"task.headline": task.headline, "task.higher_is_better": str(bool(task.higher_is_better)).lower(),
            "task.metrics": ",".join(task.metrics)}


def task_run_tags(spec: Any, cell: Any, task: Any) -> dict[str, Any]:
    """The tags of a cell's task run: the cell's variant and seed, the task's headline and metrics."""
    return {"method": cell.method, "source": cell.source, "seed": cell.seed,
            "dim": "full" if cell.dim is None else cell.dim, "profile": spec.profile, "world": spec.world,
            **task_tags(task)}


def evaluate_step(run: Any, step: int, model_dir: Path, tokenizer: Any, tasks: list[str] | None = None) -> None:
    """Evaluate ``tasks`` (default: the plan's) on the model at ``step`` of the cell ``run``
    (:class:`harness.cell.CellRun`), then the held-out MLM loss when the run has CPT. A task evaluated at the step
    before on fewer languages than the plan's evaluates the languages it lacks, and only those."""
    spec, model = run.spec, None
    heldout: float | None = None
    shown_lm = False
    for task_name in spec.plan.tasks if tasks is None else tasks:
        task = TASKS.get(task_name)()
        trun = run.record.open_task(run.exp, run.keys.key, task_name, run.parent,
                                    task_run_tags(spec, run.cell, task))
        asked = list(spec.plan.languages[task_name])
        _references(run, task_name, task, asked)
        missing = run.record.missing(trun, task_name, step, asked)
        if not missing:
            run.say(f"  {task_name} @ step {step}: already logged")
            if step == spec.cpt.last_task_step():
                run.tracker.finish(trun)  # a resumed run whose work is done ends FINISHED
            continue
        if model is None:
            model = _load(run, model_dir)
        lm = _evaluate_task(run, task, task_name, step, model, tokenizer, trun, asked, missing)
        shown_lm = shown_lm or lm is not None  # a language-model loss printed at this step
        if lm is not None and spec.cpt["eval_tasks"] and missing == asked and \
                _heldout_languages_of(spec, asked, task_name):
            heldout = lm  # the diagnostic's figure (not when only it runs after CPT)
    if spec.cpt.steps <= 0 or run.record.done(run.parent, Done.heldout(step)):
        return
    _heldout(run, step, model_dir, tokenizer, model, heldout, quiet=shown_lm)


def _references(run: Any, task_name: str, task: Any, languages: list[str]) -> None:
    """A derived world's bits-per-byte references for ``task_name`` (:mod:`harness.transplant`: the source with its
    own tokenizer, the donor with the target tokenizer), computed once per world, source and task settings and
    logged once to the experiment; nothing for any other world or task."""
    from harness.transplant import applies, log_references

    if not applies(run.world, task_name):
        return
    from harness.core.errors import HarnessError

    settings = _settings(run, task_name, seed=0, model_key=f"reference:{task_name}")
    try:
        log_references(run.record, run.exp, run.world, run.cell.source, task_name, task, settings, languages,
                       run.say)
    except (HarnessError, ValueError, OSError) as e:  # the cell's own evaluation goes on without its references
        run.say(f"  {task_name} references not computed ({type(e).__name__}: {e}); the board shows no BPB retained")


def _settings(run: Any, task_name: str, seed: int, model_key: str) -> Any:
    """The settings a task is evaluated with in the run ``run``."""
    from tasks.base import TaskSettings

    spec = run.spec
    return TaskSettings(profile=spec.profile, seed=seed, device=run.device, max_sentences=spec.eval_max_sentences,
                        params=spec.cfg.task_params.get(task_name, {}),
                        cache_dir=harness_home() / "products" / "tasks", model_key=model_key,
                        precision=spec.eval_precision)


def _load(run: Any, model_dir: Path) -> Any:
    from harness.initialize import load_model

    return load_model(model_dir, device=run.device)


def _heldout_languages_of(spec: Any, languages: list[str], task: str = HELDOUT_TASK) -> bool:
    """Whether the language-model task ``task`` on ``languages`` computes what the held-out diagnostic does (its
    average is then the diagnostic's figure, not a second sample): the same languages, the same sentence cap, no
    parameters of the run's own. Else the diagnostic is computed on its own, so that a cell's held-out curve is the
    same whichever tasks the command that computed it asked for."""
    return (sorted(languages) == sorted(spec.heldout_languages)
            and spec.eval_max_sentences == spec.heldout_max_sentences and not spec.cfg.task_params.get(task))


def _evaluate_task(run: Any, task: Any, task_name: str, step: int, model: Any, tokenizer: Any, trun: str,
                   asked: list[str], missing: list[str]) -> float | None:
    """One task at ``step`` on the languages it ``missing`` of those ``asked``, logged; the average of its
    held-out language-model metric when it has one (else None)."""
    spec = run.spec
    pivot = getattr(run.world, "pivot", None)
    langs = asked if missing == asked else [lang for lang in asked if lang in missing or lang == pivot]
    res, seconds = _evaluate(run, task, task_name, step, model, tokenizer, langs)
    run.record.log_evaluation(trun, run.parent, task_name, step, res, seconds, languages=langs)
    head = res.averages().get(task.headline)
    more = "" if missing == asked else f" (the {len(missing)} language(s) it lacked: {', '.join(missing)})"
    shown = f"{task.headline} avg {head:.4f}" if head is not None else "done"
    run.say(f"  {task_name} @ step {step}: {shown}{more} ({seconds:.1f}s)")
    if step == spec.cpt.last_task_step():
        run.tracker.finish(trun)
    metric = getattr(task, "heldout_metric", None)
    return res.averages().get(metric) if metric else None


def _evaluate(run: Any, task: Any, task_name: str, step: int, model: Any, tokenizer: Any,
              languages: list[str]) -> tuple[Any, float]:
    settings = _settings(run, task_name, seed=run.cell.seed, model_key=f"{run.keys.key}:{step}")
    t0 = time.time()
    res = task.evaluate(model, tokenizer, run.world, languages, settings)
    return res, time.time() - t0


def _heldout(run: Any, step: int, model_dir: Path, tokenizer: Any, model: Any, heldout: float | None,
             quiet: bool = False) -> None:
    """The held-out MLM loss at ``step`` (the CPT diagnostic, ``cpt/heldout_loss``), logged once; printed (after
    CPT with its step-0 value) unless the step printed a task's language-model loss: one such number a step."""
    from harness.initialize import load_model
    from tasks.base import TaskSettings

    spec = run.spec
    name = heldout_task(run)
    diagnostic = TASKS.get(name)()
    if heldout is None and name in spec.plan.tasks and spec.cpt["eval_tasks"] and \
            _heldout_languages_of(spec, spec.plan.languages[name], name):
        # the task at this step was logged before a kill: the same figure, not a second sample
        heldout = run.record.logged_average(run.parent, name, diagnostic.heldout_metric, step)
    if heldout is None:
        if model is None:
            model = load_model(model_dir, device=run.device)
        t_h = time.time()
        heldout = diagnostic.heldout(model, tokenizer, run.world, list(spec.heldout_languages), TaskSettings(
            profile=spec.profile, seed=run.cell.seed, device=run.device, max_sentences=spec.heldout_max_sentences,
            precision=spec.eval_precision))
        if not quiet:
            first = next((v for s, v in run.record.heldout_curve(run.parent) if s == 0), None) if step else None
            run.say(f"  CPT diagnostic (held-out {name.upper()} loss) @ step {step}: {heldout:.4f}"
                    + (f" (step 0: {first:.4f})" if first is not None else "") + f" ({time.time() - t_h:.1f}s)")
    run.record.log_heldout(run.parent, step, heldout)


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
