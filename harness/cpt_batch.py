"""The CPT batch fits the card by itself.

The paper's effective batch (512 sequences) never changes; the per-device batch is the largest that fits the
device's memory, at most the profile's ``per_device_batch``, and gradient accumulation makes up the rest
(:func:`batch_layout`):

* **at the start of CPT** (on an accelerator) :func:`find_per_device_batch` tries one training step's memory at the
  largest candidate -- a forward and a backward pass on a full batch of random blocks, with the optimizer's state
  (AdamW: two fp32 copies of the parameters) held aside -- and halves the batch while that runs out of memory, as
  accelerate's ``find_executable_batch_size`` and lm-evaluation-harness's ``--batch_size auto`` do;
* **during CPT** an out-of-memory error (another process took memory, a longer step than the probe) halves the
  per-device batch, doubles the accumulation, and resumes from the last Trainer checkpoint instead of failing the
  cell (:func:`harness.cpt.run_cpt`).

Every layout a CPT used is written to the product (``layout.json``: from which step, per-device batch,
accumulation, why) and logged on the cell's run. On a CPU nothing is searched: the profile's layout is used.

For the tests, ``HARNESS_SIMULATED_MEMORY`` gives a CPU a memory limit (:mod:`harness.core.faults`).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any

import torch

from harness.core.errors import ConfigError

log = logging.getLogger(__name__)




def batch_layout(effective: int, per_device_max: int, n_devices: int) -> tuple[int, int]:
    """(per-device batch, gradient accumulation) so that per-device x accumulation x devices == ``effective``,
    with the per-device batch as large as allowed (at most ``per_device_max``)."""
    for per_dev in range(min(per_device_max, effective // max(n_devices, 1)), 0, -1):
        if effective % (per_dev * n_devices) == 0:
            return per_dev, effective // (per_dev * n_devices)
    raise ConfigError(f"cpt: the effective batch {effective} cannot be split over {n_devices} device(s) "
                      f"with at most {per_device_max} sequences per device")


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def free_memory(device: str) -> None:
    gc.collect()
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def candidates(effective: int, per_device_max: int, n_devices: int) -> list[int]:
    """The per-device batches to try, largest first: each one divides the effective batch (with the devices), and
    each next one is at most half the one before (the halving of accelerate's search, on valid layouts only)."""
    out = [batch_layout(effective, per_device_max, n_devices)[0]]
    while out[-1] > 1:
        out.append(batch_layout(effective, out[-1] // 2, n_devices)[0])
    return out


def probe_step(model: torch.nn.Module, batch: int, block_size: int, device: str, precision: str,
               held_bytes: int) -> None:
    """One training step's memory: forward and backward on ``batch`` random blocks (15 % of positions masked for
    a masked LM, every position a target for a causal LM: the step CPT takes), with ``held_bytes`` held aside for
    what a training step keeps beside it (:func:`held_state_bytes`); gradients are dropped after it."""
    from harness.core.objective import objective_of_model
    from harness.core.precision import autocast

    vocab = int(model.get_input_embeddings().weight.shape[0])
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, max(vocab, 6), (batch, block_size), generator=g)
    labels = torch.where(torch.rand((batch, block_size), generator=g) < 0.15, ids, torch.full_like(ids, -100))
    labels[:, 0] = ids[:, 0]  # at least one position per row
    if objective_of_model(model) == "clm":
        labels = ids.clone()
    reserve = (torch.empty(held_bytes, dtype=torch.uint8, device=device)
               if held_bytes and str(device).startswith("cuda") else None)
    was_training = model.training
    model.train()
    try:
        with autocast(device, precision):
            out = model(input_ids=ids.to(device), attention_mask=torch.ones_like(ids).to(device),
                        labels=labels.to(device))
        out.loss.backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        del reserve
        free_memory(device)


def find_per_device_batch(effective: int, per_device_max: int, n_devices: int,
                          probe: Callable[[int], None], say: Callable[[str], None] = log.info) -> tuple[int, list]:
    """The largest per-device batch among :func:`candidates` for which ``probe`` raises no out-of-memory error,
    and what was tried ``[(batch, "fits" | "out of memory"), ...]``. Raises the error when even 1 does not fit."""
    tried: list[tuple[int, str]] = []
    for batch in candidates(effective, per_device_max, n_devices):
        try:
            probe(batch)
        except Exception as exc:
            if not is_out_of_memory(exc) or batch == 1:
                raise
            tried.append((batch, "out of memory"))
            say(f"CPT batch search: {batch} sequences per device run out of memory; trying fewer")
            continue
        tried.append((batch, "fits"))
        return batch, tried
    raise AssertionError("unreachable: the last candidate is 1")


def halve(effective: int, per_device: int, n_devices: int) -> tuple[int, int]:
    """The next smaller layout after an out-of-memory error (raises when the batch is already 1)."""
    if per_device <= 1:
        raise ConfigError("CPT runs out of memory with one sequence per device; use a shorter block_size or a "
                          "device with more memory")
    return batch_layout(effective, per_device // 2, n_devices)


def held_state_bytes(model: torch.nn.Module) -> int:
    """What a training step holds beside the probe's own forward and backward: AdamW's state (two fp32 tensors the
    size of the trainable parameters) and the fp32 gradients, which gradient accumulation keeps from one
    micro-batch's backward through the next one's forward."""
    return 3 * 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)


def search_wanted(device: str, settings: dict[str, Any]) -> bool:
    """Whether CPT searches its per-device batch: on an accelerator (or a CPU emulating one), or under a
    simulated memory limit, unless the run turns it off (``[cpt] auto_batch = false``)."""
    from harness.core.devices import accelerator_branches

    if not settings.get("auto_batch", True):
        return False
    from harness.core.hooks import MEMORY_LIMITS

    return accelerator_branches(device) or bool(MEMORY_LIMITS)
