"""The resume policy of a run (``harness run --rerun never|failed|all``, the config key ``rerun``).

A cell is found again by its identity (:meth:`harness.runner.Runner.cell_identity`; the policy is no part of it):

- ``never`` (the default): nothing already logged is computed or logged again. A finished cell is left as it is
  (passed over before anything is built when every evaluation the command asks for is logged:
  :mod:`harness.finished`); a failed or killed one resumes from its last finished stage in its own runs.
- ``failed``: a cell whose run ended FAILED or KILLED starts over; finished cells are left as they are.
- ``all``: every cell starts over, finished ones included.

A cell that starts over has its earlier runs deleted (the cell run and its task runs; MLflow keeps deleted runs
restorable until ``mlflow gc``), together with the seed-aggregate runs of its variant that counted its seed (they
are computed again at the end of the command), and is evaluated and logged anew in new runs. The products in the
cache (initialized models, CPT checkpoints) are reused: they are keyed by their inputs and checked when loaded (a
finished cell's were removed when it finished, unless the run kept them, and are built again). A
cell whose run is RUNNING (another live command, or a retry within this one) is never started over.
"""

from __future__ import annotations

from typing import Any

RERUN_POLICIES = ("never", "failed", "all")


def starts_over(status: str, policy: str) -> bool:
    """Whether a cell whose run has ``status`` starts over under ``policy``."""
    if status == "RUNNING" or policy == "never":
        return False
    return policy == "all" or status in ("FAILED", "KILLED")


def start_over(tracker: Any, experiment_id: str, cell_key: str, policy: str, variant: dict[str, str],
               seed: int) -> int:
    """Delete the earlier runs of the cell ``cell_key`` when ``policy`` says it starts over; ``variant``: its
    method, source, dim, profile and world tags (to find the aggregate runs that counted ``seed``). Returns how many
    runs were deleted."""
    if policy == "never":
        return 0
    cells = tracker.find_runs(experiment_id, {"cell": cell_key, "kind": "cell"})
    if not any(starts_over(r.info.status, policy) for r in cells):
        return 0
    runs = tracker.find_runs(experiment_id, {"cell": cell_key})  # the cell run and its task runs
    runs += [r for r in tracker.find_runs(experiment_id, {"kind": "aggregate", **variant})
             if str(seed) in r.data.tags.get("harness.seeds", "").split(",")]
    for r in runs:
        tracker.client.delete_run(r.info.run_id)
    return len(runs)
