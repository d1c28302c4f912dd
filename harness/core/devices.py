"""Every decision that depends on the device, in one place, and the switch that lets a CPU take a GPU's side.

A run on an accelerator differs from a run on a CPU in *how* it computes, never in *what*: cells in processes of
their own, data-loader workers and pinned memory, no attention mask over packed CPT blocks, the loss read back
every few steps, the CPT batch searched to fit the card, a device fault stopping a run in one process. CI has no
GPU, so a branch only a GPU takes would never run there; ``HARNESS_EMULATE_ACCELERATOR=1`` makes a run on the CPU
take each of these branches, with the GPU's numerics (the computation stays on the CPU, in bf16 autocast with
the SDPA attention: :mod:`harness.core.precision`). Each decision below asks
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


# -- several GPUs: one group of GPUs per cell process, never DataParallel ------------------------------------------
# A node with N GPUs runs N cells side by side, each in a process that sees one GPU (or, with --cpt-devices K, a
# group of K GPUs that its CPT spans through torchrun): CUDA_VISIBLE_DEVICES is set in the cell's process before
# CUDA starts there, as Ray does for its GPU tasks. A process that sees one GPU never makes the Trainer wrap the
# model in nn.DataParallel.
EMULATE_GPUS_ENV = "HARNESS_EMULATE_GPUS"
PINNED_ENV = "HARNESS_PINNED_GPUS"


def gpu_names() -> list[str]:
    """The GPUs this machine lets the run use, as CUDA_VISIBLE_DEVICES names them (their indices when it is not
    set). Under the emulation, ``HARNESS_EMULATE_GPUS`` of them (default 1). Counted through NVML by torch, so
    asking creates no CUDA context."""
    if emulating():
        return [str(i) for i in range(max(1, int(os.environ.get(EMULATE_GPUS_ENV) or 1)))]
    import torch

    n = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [x.strip() for x in visible.split(",") if x.strip()] if visible is not None else []
    return names[:n] if names else [str(i) for i in range(n)]


def gpu_slots(device: str, per_cell: int = 1) -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of each cell process a run on ``device`` uses: ``cuda`` gives every group of
    ``per_cell`` GPUs of the machine (one cell each, side by side), ``cuda:N`` the group that starts at GPU N;
    [] off the accelerator's branches (and on mps). Raises a one-line error when the machine has too few GPUs."""
    from harness.core.errors import ConfigError

    if not accelerator_branches(device) or str(device).startswith("mps"):
        return []
    names, per_cell = gpu_names(), max(1, int(per_cell))
    first = str(device).partition(":")[2]
    start = int(first) if first else 0
    if start + per_cell > len(names):
        need = f"GPUs {start} to {start + per_cell - 1}" if per_cell > 1 else f"GPU {start}"
        raise ConfigError(f"--device {device} with {per_cell} CPT device(s) per cell needs {need}; this machine "
                          f"has {len(names)} GPU(s). Give fewer --cpt-devices or another --device")
    if first:
        return [",".join(names[start:start + per_cell])]
    return [",".join(names[i:i + per_cell]) for i in range(0, len(names) - per_cell + 1, per_cell)]


def pin(slot: str) -> None:
    """Make this process (before CUDA starts in it) and the processes it starts see the GPUs of ``slot`` only."""
    os.environ["CUDA_VISIBLE_DEVICES"] = slot
    os.environ[PINNED_ENV] = slot


def pinned() -> str | None:
    """The GPUs this process was pinned to (:func:`pin`), or None."""
    return os.environ.get(PINNED_ENV) or None


def compute_device(device: str) -> str:
    """The device this process computes on for a run on ``device``: in a pinned process, ``cuda:N`` is the first GPU
    it sees (``cuda``); otherwise ``device`` itself."""
    if str(device).startswith("cuda") and pinned() is not None:
        return "cuda"
    return device


def describe(device: str) -> str:
    """The device a run computes on, as its header says it: ``cuda``, ``cpu``, or, under the emulation, the CPU
    and what it emulates (``cpu emulating 2 GPUs (HARNESS_EMULATE_ACCELERATOR): the accelerator's branches, bf16
    autocast``)."""
    device = compute_device(device)
    if is_accelerator(device) or not emulating():
        return device
    n = len(gpu_names())
    return (f"{device} emulating {n} GPU{'s' if n != 1 else ''} ({EMULATE_ENV}): the accelerator's branches and "
            f"numerics (auto precision bf16), computed on the CPU")


def rank_device(device: str, local_rank: int) -> str:
    """The device of one torchrun rank of a CPT on ``device``: the rank's own GPU among those its process group
    sees (each rank sets it before it loads or probes anything); the CPU for a CPU run."""
    return f"cuda:{int(local_rank)}" if str(device).startswith("cuda") else device


class SlotLease:
    """One of ``slots`` held by this process while it lives: a lock file per slot under ``lock_dir`` (``flock``,
    released by the kernel when the process ends, however it ends). A cell process started while the process it
    replaces is still ending waits for that one's slot."""

    def __init__(self, slots: list[str], lock_dir: str, timeout: float = 600.0):
        import fcntl
        import time

        self.slot: str | None = None
        deadline = time.monotonic() + timeout
        while self.slot is None:
            for i, slot in enumerate(slots):
                fd = os.open(os.path.join(lock_dir, f"slot-{i}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self.fd, self.slot = fd, slot  # the descriptor stays open as long as the process lives
                break
            else:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no free GPU slot among {slots} after {timeout:.0f}s")
                time.sleep(0.05)
