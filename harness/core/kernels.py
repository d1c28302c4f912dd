"""The CPU kernels every harness process computes with: one fixed set on every x86-64 machine, so that a number does
not depend on the CPU's instruction set.

torch computes an fp32 matrix product with MKL and its elementwise and reduction kernels with ATen's vectorized
code; numpy and scipy call OpenBLAS. Each library picks its kernels by the CPU it finds: on a machine with AVX-512,
MKL's AVX-512 GEMM and ATen's 16-wide reductions (softmax, log-softmax) round differently from the AVX2 ones an
AVX2-only machine or MKL on an AMD CPU runs, and training carries the difference into every number downstream
(HyperOFA's rows moved in the printed digits between two machines). The harness therefore pins, before torch or
numpy is loaded, the AVX2 kernel set that every x86-64 CPU of the last decade has:

- ``MKL_CBWR=AVX2``: MKL's conditional numerical reproducibility on its AVX2 code path, which computes what MKL
  computes natively on a CPU whose best is AVX2 (tested); a cell computes on one thread
  (:func:`harness.runner.cell_threads`), so MKL's strict mode, which also fixes the bits across thread counts (and
  rounds otherwise), is not needed;
- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels;
- ``OPENBLAS_CORETYPE=Haswell``: OpenBLAS's AVX2 kernels (numpy's and scipy's; WECHSEL's alignment pins its own,
  :mod:`methods.pinned_blas`).

``HARNESS_CPU_KERNELS=native`` keeps each library's own choice (the harness before the pin; faster on AVX-512, and
machine-dependent). A CPU without AVX2 and FMA, or another architecture, computes natively. What a process computes
with (:func:`cpu_kernels`: ``avx2`` or ``native``) is part of every cell's identity (away from ``native``, so homes
made before keep their keys), logged with each cell run, and named on the board; ``benchmarks/bench_ner_flops.py``
measures what the pin costs.
"""

from __future__ import annotations

import os
import platform
import sys

ENV = "HARNESS_CPU_KERNELS"
PINNED = "avx2"
NATIVE = "native"
PINS = {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell"}
# the libraries that read those variables when they load (or at their first kernel): pinned before any of them
LOADERS = ("torch", "numpy", "scipy")

_state: str | None = None  # what this process computes with, fixed by the first pin()


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux: ``/proc/cpuinfo``); empty where they cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def wanted() -> str:
    """The kernels asked for: ``HARNESS_CPU_KERNELS`` (``avx2``, the default, or ``native``)."""
    value = os.environ.get(ENV, PINNED).strip().lower() or PINNED
    if value not in (PINNED, NATIVE):
        from harness.core.errors import HarnessError

        raise HarnessError(f"{ENV}={value!r}: use {PINNED} (the default: the same numbers on every x86-64 CPU) "
                           f"or {NATIVE}")
    return value


def can_pin(flags: set[str] | None = None) -> bool:
    """Whether this machine runs the pinned set: an x86-64 CPU with AVX2 and FMA."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    flags = cpu_flags() if flags is None else flags
    return {"avx2", "fma"} <= flags


def pin() -> str:
    """Pin the kernels in this process's environment (and so in every process it starts), once, before torch,
    numpy or scipy is loaded; returns what the process computes with. A library loaded before the first call, a
    machine that cannot run the set, or ``HARNESS_CPU_KERNELS=native``: ``native``, and nothing is set."""
    global _state
    if _state is not None:
        return _state
    try:
        asked = wanted()
    except Exception:  # noqa: BLE001 - a bad value is refused where the run's inputs are checked
        asked = NATIVE
    loaded = [m for m in LOADERS if m in sys.modules]
    if asked == PINNED and not loaded and can_pin():
        os.environ.update(PINS)
        _state = PINNED
    elif asked == PINNED and loaded and all(os.environ.get(k) == v for k, v in PINS.items()) and can_pin():
        _state = PINNED  # pinned by the process that started this one, before it loaded them
    else:
        _state = NATIVE
    return _state


def cpu_kernels() -> str:
    """What this process computes with: ``avx2`` (pinned) or ``native``."""
    return pin()


def identity() -> dict[str, str]:
    """What a product computed in this process is keyed by, of its kernels: ``{"cpu_kernels": "avx2"}`` when pinned,
    nothing when native (the keys of the products made before the pin stay theirs)."""
    state = cpu_kernels()
    return {} if state == NATIVE else {"cpu_kernels": state}


def check() -> None:
    """Refuse a run whose ``HARNESS_CPU_KERNELS`` is neither value, and one that asks for the pinned set on a
    machine that has it but got another (a library loaded first): its numbers would differ from its identity's."""
    from harness.core.errors import HarnessError

    if wanted() == PINNED and can_pin() and cpu_kernels() != PINNED:
        raise HarnessError(f"the CPU kernels could not be pinned: {', '.join(m for m in LOADERS if m in sys.modules)}"
                           f" was loaded before the harness; import harness first, or set {ENV}=native")


def label() -> str:
    """What the kernels are, for the run's record: ``avx2`` or ``native (AVX512)`` (ATen's choice)."""
    state = cpu_kernels()
    if state == PINNED:
        return PINNED
    try:
        import torch

        return f"{NATIVE} ({torch.backends.cpu.get_cpu_capability()})"
    except Exception:  # noqa: BLE001
        return NATIVE
