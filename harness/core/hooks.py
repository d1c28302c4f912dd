"""Where a run can be observed or constrained from outside, without its steps knowing who does it.

* :data:`STAGE_HOOKS`: ``hook(stage, cell)`` after each stage of a cell's lifecycle (``start``, ``init``,
  ``step0``, ``cpt``, ``finished``; :class:`harness.cell.CellRun`);
* :data:`MEMORY_LIMITS`: device memory budgets that ``attach(model)`` to each model CPT trains and follow its
  optimizer steps (``at_step(step)``); with one installed, CPT searches its per-device batch as on an accelerator.

Both are empty in a run; the tests' faults (:mod:`harness.core.faults`) fill them when their environment asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

STAGE_HOOKS: list[Callable[[str, Any], None]] = []
MEMORY_LIMITS: list[Any] = []
