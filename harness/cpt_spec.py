"""The CPT settings of a run, read-only (:class:`CptSpec`), and the one owner of their step arithmetic."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# CPT settings that do not change what CPT computes: the number of devices (the effective batch is fixed), whether
# the tasks are evaluated after it, whether the batch is searched
NOT_PRODUCT = frozenset({"devices", "eval_tasks", "auto_batch"})


class CptSpec(Mapping):
    """The CPT settings of a run, read-only, and the one owner of their step arithmetic: which steps are
    evaluated, at which the tasks run, how often a killed CPT can resume."""

    def __init__(self, settings: Mapping[str, Any]):
        self._settings = dict(settings)

    def __getitem__(self, key: str) -> Any:
        return self._settings[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def __repr__(self) -> str:
        return f"CptSpec({self._settings!r})"

    @property
    def steps(self) -> int:
        return int(self._settings["steps"])

    @property
    def devices(self) -> int:
        """The processes (GPUs) one cell's CPT spans; the effective batch is the same on any number."""
        return max(1, int(self._settings.get("devices") or 1))

    def product(self) -> dict[str, Any]:
        """The settings that define a CPT product (and a cell): all but :data:`NOT_PRODUCT`."""
        return {k: v for k, v in self._settings.items() if k not in NOT_PRODUCT}

    def eval_steps(self) -> list[int]:
        """The CPT steps a cell is evaluated at: the checkpoints within the budget and the last step."""
        return cpt_eval_steps(self.steps, list(self._settings.get("checkpoints") or []))

    def task_steps(self) -> list[int]:
        """The steps at which a cell's tasks are evaluated: 0, and each evaluated CPT step when the tasks are
        evaluated after CPT (``eval_tasks``)."""
        if self.steps <= 0 or not self._settings.get("eval_tasks", True):
            return [0]
        return [0, *self.eval_steps()]

    def last_task_step(self) -> int:
        """The last step at which a cell's tasks are evaluated."""
        return self.task_steps()[-1]

    def heldout_steps(self) -> list[int]:
        """The steps at which the held-out MLM loss is logged (none without CPT)."""
        return [0, *self.eval_steps()] if self.steps > 0 else []

    def evaluations(self) -> int:
        """How many times a cell's tasks are evaluated."""
        return len(self.task_steps())

    def save_every(self) -> int:
        """Trainer checkpoints (optimizer state included, for resuming a killed CPT) every this many steps:
        ``save_every``, by default a quarter of the run; 0 turns them off."""
        every = self._settings.get("save_every")
        return max(1, self.steps // 4) if every is None else int(every)


def cpt_eval_steps(steps: int, checkpoints: list[int]) -> list[int]:
    """The checkpoints within a budget of ``steps`` and the last step."""
    return sorted({s for s in checkpoints if 0 < s <= steps} | {steps})
