"""The resume policy of a run (``harness run --rerun never|failed|all``, the config key ``rerun``).

A cell is found again by its identity (:meth:`harness.runner.Runner.cell_identity`; the policy is no part of it):

- ``never`` (the default): nothing already logged is computed or logged again. A finished cell is left as it is
  (passed over before anything is built when every evaluation the command asks for is logged:
  :mod:`harness.finished`); a failed or killed one resumes from its last finished stage in its own runs.
- ``failed``: a cell whose run ended FAILED or KILLED starts over; finished cells are left as they are.
- ``stale``: a cell whose run recorded another version of its method's code (the digest of the method's module and
  of the modules of its package it imports, :func:`harness.core.declarations.code_digest`) starts over; without
  it, such a finished cell is passed over and named at the end of the run as stale.
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

RERUN_POLICIES = ("never", "failed", "stale", "all")


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


def changed_files(recorded: dict[str, str] | None, code: dict[str, str]) -> list[str]:
    """The files of a method's code that differ between what a run recorded and now (added or removed ones too)."""
    if recorded is None:
        return []
    return sorted(f for f in set(recorded) | set(code) if recorded.get(f) != code.get(f))
