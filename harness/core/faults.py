"""Faults injected from outside, for the tests: nothing here runs unless its environment variable is set, and no
production step calls it. :func:`install` wraps the stages of a cell's lifecycle and gives CPT a memory limit
through the run's extension points (:mod:`harness.core.hooks`); every process of a run calls it when it
starts (the ``harness`` process, its workers, the CPT ranks, fastText's training children).

* ``HARNESS_FAULT_AT=module:qualname[@n][/after]`` signals the ``harness`` process before (or after) the n-th call of
  that function in this process (``HARNESS_FAULT_SIGNAL``: KILL (default), TERM or INT); e.g. a corpus build killed
  midway: ``harness.corpus:append_blocks@1/after`` (its first chunk's blocks written);
* ``HARNESS_FAULT_AFTER=<stage>`` kills this process right after a cell's stage (``init``, ``step0``, ``cpt``,
  ``finished``);
* ``HARNESS_FAULT_DEVICE=<method>`` poisons this process's (simulated) accelerator at that method's first cell;
* ``HARNESS_SIMULATED_MEMORY=T`` or ``T@S:T2`` gives a CPU a memory limit: a training forward of more than T tokens
  raises ``torch.OutOfMemoryError`` (T2 from optimizer step S on: a card whose free memory shrinks during the run);
* ``HARNESS_FAULT_MARKER=<file>`` makes each fault fire once across processes (the file records that it fired).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from harness.core import hooks
from harness.core.errors import ConfigError
from harness.core.processes import MAIN_PID_ENV

SIMULATED_MEMORY_ENV = "HARNESS_SIMULATED_MEMORY"


def install() -> None:
    """Every fault its environment asks for, in this process (nothing when none is set)."""
    install_fault_hook()
    if os.environ.get("HARNESS_FAULT_AFTER") or os.environ.get("HARNESS_FAULT_DEVICE"):
        for hook in (device_fault, fault_after):
            if hook not in hooks.STAGE_HOOKS:
                hooks.STAGE_HOOKS.append(hook)
    sim = simulated_memory()
    if sim is not None:
        hooks.MEMORY_LIMITS[:] = [sim]


@dataclass
class SimulatedMemory:
    """A token budget per training forward, optionally smaller from an optimizer step on."""

    tokens: int
    from_step: int | None = None
    later_tokens: int | None = None
    step: int = 0  # the optimizer steps done (kept up to date through :meth:`at_step`)

    def limit(self) -> int:
        if self.from_step is not None and self.later_tokens is not None and self.step >= self.from_step:
            return self.later_tokens
        return self.tokens

    def check(self, tokens: int) -> None:
        import torch

        if tokens > self.limit():
            raise torch.OutOfMemoryError(f"CUDA out of memory (simulated: a forward of {tokens} tokens, the limit "
                                         f"is {self.limit()})")

    def at_step(self, step: int) -> None:
        self.step = int(step)

    def attach(self, model: Any) -> None:
        """Make every training forward of ``model`` check its size against this budget."""
        import torch

        def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            if not module.training:
                return
            ids = kwargs.get("input_ids") if "input_ids" in kwargs else (args[0] if args else None)
            if isinstance(ids, torch.Tensor):
                self.check(int(ids.numel()))

        model.register_forward_pre_hook(hook, with_kwargs=True)


def simulated_memory() -> SimulatedMemory | None:
    spec = os.environ.get(SIMULATED_MEMORY_ENV)
    if not spec:
        return None
    try:
        first, _, later = spec.partition("@")
        if not later:
            return SimulatedMemory(int(first))
        step, _, tokens = later.partition(":")
        return SimulatedMemory(int(first), int(step), int(tokens))
    except ValueError:
        raise ConfigError(f"{SIMULATED_MEMORY_ENV}={spec!r}: expected TOKENS or TOKENS@STEP:TOKENS") from None


def fault_after(stage: str, cell: Any = None) -> None:
    """``HARNESS_FAULT_AFTER=<stage>`` kills this process (SIGKILL) right after the cell's stage of that name
    (``init``, ``step0``, ``cpt``, ``finished``); with ``HARNESS_FAULT_MARKER=<file>`` only the first time (the
    file records that it fired), so a retry survives."""
    if os.environ.get("HARNESS_FAULT_AFTER") != stage or not _first_time():
        return
    sys.stderr.write(f"HARNESS_FAULT_AFTER={stage}: killing the process\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


_POISONED: list[str] = []  # the simulated device of this process failed (HARNESS_FAULT_DEVICE)


def device_fault(stage: str, cell: Any) -> None:
    """``HARNESS_FAULT_DEVICE=<method>`` simulates a poisoned accelerator: the first cell of that method raises the
    error a CUDA device-side assert raises, and every later cell of the same process raises it too, as a real
    CUDA context does once it has failed. (With ``HARNESS_FAULT_MARKER`` only once across processes.)"""
    if stage != "start":
        return
    method = cell.method
    if _POISONED:
        raise RuntimeError(f"CUDA error: device-side assert triggered (simulated: the device of this process "
                           f"failed in an earlier cell, {_POISONED[0]})")
    if os.environ.get("HARNESS_FAULT_DEVICE") == method and _first_time():
        _POISONED.append(method)
        raise RuntimeError("CUDA error: device-side assert triggered (simulated)")


def _first_time() -> bool:
    """False when ``HARNESS_FAULT_MARKER`` names a file that exists (the fault fired before); else creates it."""
    marker = os.environ.get("HARNESS_FAULT_MARKER")
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
    return True


def _fire(sig: int) -> None:
    if not _first_time():
        return
    main = int(os.environ.get(MAIN_PID_ENV) or os.getpid())
    sys.stderr.write(f"HARNESS_FAULT_AT={os.environ.get('HARNESS_FAULT_AT')}: "
                     f"{signal.Signals(sig).name} to the harness process\n")
    sys.stderr.flush()
    try:
        os.kill(main, sig)
    except ProcessLookupError:
        pass
    if main != os.getpid():  # a worker: it must end with its parent, not go on
        time.sleep(60)
        os._exit(99)


def install_fault_hook() -> None:
    """Wrap the function named by ``HARNESS_FAULT_AT`` (a testing hook; nothing happens when it is unset)."""
    spec = os.environ.get("HARNESS_FAULT_AT")
    if not spec or getattr(install_fault_hook, "_installed", None) == spec:
        return
    import functools
    import importlib

    target, _, rest = spec.partition("@")
    nth, _, when = rest.partition("/")
    nth_call = int(nth or 1)
    module_name, _, qualname = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    original = getattr(owner, parts[-1])
    if isinstance(original, staticmethod | classmethod):
        raise ValueError(f"HARNESS_FAULT_AT: {spec}: static and class methods are not supported")
    sig = getattr(signal, "SIG" + os.environ.get("HARNESS_FAULT_SIGNAL", "KILL").upper())
    calls = [0]

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        hit = calls[0] == nth_call
        if hit and when != "after":
            _fire(sig)
        out = original(*args, **kwargs)
        if hit and when == "after":
            _fire(sig)
        return out

    setattr(owner, parts[-1], wrapper)
    install_fault_hook._installed = spec  # type: ignore[attr-defined]
