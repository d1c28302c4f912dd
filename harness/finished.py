"""A finished cell: found before anything is built, and its init and CPT products removed.

A cell whose MLflow run is FINISHED with every evaluation a command asks for logged has nothing left to do: the
runner passes over it (no initialization, no CPT, nothing logged). Its init and CPT products are read by nothing
else of the command, so the runner removes them once the run finished (unless ``keep_products``): a later
evaluation of the cell builds them again, with the same numbers. A product another cell of the command is keyed
to, or that a live run of another command names (its ``init_product`` / ``cpt_product`` tag), is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.cache import cpt_product_key
from harness.core.hashing import hash_obj
from harness.core.record import Done, RunRecord
from harness.core.tracking import Tracker

INIT_INPUTS = ("world", "source", "method", "params", "dim", "seed", "init_version")


def init_inputs(ident: dict[str, Any], code: str | None = None) -> dict[str, Any]:
    """What a cell's init product is keyed by: its identity without the profile and CPT settings, and the digest of
    its method's code (``code``: an edited method builds its products again)."""
    return {**{k: ident[k] for k in INIT_INPUTS}, **({"code": code} if code else {})}


def product_keys(ident: dict[str, Any], code: str | None = None) -> tuple[str, str | None]:
    """(init product key, CPT product key or None without CPT) of the cell with this identity and method code,
    known before either is built (:class:`harness.core.cache.ProductCache` keys a product by the hash of its
    inputs)."""
    init_key = hash_obj(init_inputs(ident, code))
    if int(ident["cpt"]["steps"]) <= 0:
        return init_key, None
    return init_key, cpt_product_key(init_key, ident["cpt"], ident["seed"])


def finished_run(record: RunRecord, exp: str, key: str, tasks: list[str], cpt: dict[str, Any]) -> str | None:
    """The cell's run when it is FINISHED with every evaluation asked for logged (the initialization, each task
    at step 0 and, when the tasks are evaluated after CPT, at each evaluated step; the CPT loss and the held-out
    MLM loss at each evaluated step); else None (a new task, a new checkpoint, an unfinished run: the cell runs,
    and finds what it logged before)."""
    from harness.cpt import cpt_eval_steps

    steps = int(cpt["steps"])
    evaluated = [0, *cpt_eval_steps(steps, cpt["checkpoints"])] if steps > 0 else [0]
    need = [Done.INIT, *([Done.CPT_LOG, *(Done.heldout(s) for s in evaluated)] if steps > 0 else [])]
    return record.finished_cell(exp, key, need, tasks, task_steps(cpt))


def task_steps(cpt: dict[str, Any]) -> list[int]:
    """The CPT steps at which a cell's tasks are evaluated: step 0, and each evaluated CPT step when the tasks are
    evaluated after CPT."""
    from harness.cpt import cpt_eval_steps

    steps = int(cpt["steps"])
    if steps <= 0 or not cpt["eval_tasks"]:
        return [0]
    return [0, *cpt_eval_steps(steps, cpt["checkpoints"])]


def pending_cells(runner: Any) -> list[Any]:
    """The cells of ``runner``'s plan that have work to do, found in this process before any worker is started: a
    cell is left out when its run is FINISHED with every evaluation the command asks for logged
    (:func:`finished_run`) and the command's ``--rerun`` policy does not start it over (``all``; ``failed`` with a
    FAILED or KILLED run of the cell; ``stale`` with a run that recorded other code of its method). Nothing is
    created or deleted here: a cell left out is passed over by :meth:`harness.runner.Runner.run_cell` as before."""
    from harness.rerun import changed_files, starts_over

    record = RunRecord(runner.tracker)
    policy = runner.cfg.rerun
    experiments: dict[str, str | None] = {}
    out = []
    for cell in runner.plan.cells:
        name = runner.experiment_name(cell.source)
        if name not in experiments:
            exp = runner.tracker.client.get_experiment_by_name(name)
            experiments[name] = exp.experiment_id if exp is not None and exp.lifecycle_stage == "active" else None
        exp_id = experiments[name]
        key = hash_obj(runner.cell_identity(cell))
        if policy == "all" or exp_id is None or finished_run(record, exp_id, key, runner.plan.tasks, runner.cpt) is None:
            out.append(cell)
        elif policy == "failed" and any(starts_over(s, policy) for s in record.cell_status(exp_id, key)):
            out.append(cell)
        elif policy == "stale" and changed_files(record.cell_code(exp_id, key), runner.method_code(cell.method)):
            out.append(cell)
    return out


def release_products(tracker: Tracker, home: Path, keys: tuple[str, str | None], run_id: str,
                     keep: set[str], say: Callable[[str], None]) -> int:
    """Remove the init and CPT products ``keys`` of the finished cell whose run is ``run_id`` (the same removal as
    ``harness cache prune --finished``), but those in ``keep`` (keyed to another cell of the command) and those
    a live run of another command names. Returns the bytes freed."""
    from harness.cache_admin import cell_products, human, remove

    items = []
    for item in cell_products(home, *keys):
        tag = "init_product" if item.kind == "init" else "cpt_product"
        if item.path.name in keep or any(r.info.run_id != run_id for r in tracker.live_runs({tag: item.path.name})):
            continue
        items.append(item)
    try:
        freed = remove(items, home)
    except OSError as exc:  # the cell's results are logged: a product left behind only takes disk
        say(f"  [yellow]could not remove the finished cell's products: {exc}[/yellow]")
        return 0
    if items:
        say(f"  removed the finished cell's {' and '.join(i.kind for i in items)} product(s) ({human(freed)}; "
            f"`--keep-products` keeps them)")
    return freed
