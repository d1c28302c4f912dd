"""Every decision that depends on the device, in one place, and the switch that lets a CPU take a GPU's side.

A run on an accelerator differs from a run on a CPU in *how* it computes, never in *what*: cells in processes of
their own, data-loader workers and pinned memory, no attention mask over packed CPT blocks, the loss read back
every few steps, the CPT batch searched to fit the card, a device fault stopping a run in one process. CI has no
GPU, so a branch only a GPU takes would never run there; ``HARNESS_EMULATE_ACCELERATOR=1`` makes a run on the CPU
take each of these branches (the computation itself stays on the CPU, in fp32). Each decision below asks
:func:`accelerator_branches` instead of reading the device's name; docs/architecture.md ("Where the device
matters") lists every one with the test that takes it.
"""

from __future__ import annotations

import os

EMULATE_ENV = "HARNESS_EMULATE_ACCELERATOR"


def emulating() -> bool:
    """Whether this process (and the processes it starts) take the accelerator's branches on the CPU."""
    return os.environ.get(EMULATE_ENV, "").strip().lower() not in {"", "0", "false", "no", "off"}


def is_accelerator(device: str) -> bool:
    """Whether ``device`` names an accelerator (cuda, cuda:N, mps)."""
    return not str(device).startswith("cpu")


def accelerator_branches(device: str) -> bool:
    """Whether a run on ``device`` takes the accelerator's side of each device decision: on an accelerator, or on
    the CPU under :data:`EMULATE_ENV`."""
    return is_accelerator(device) or emulating()
