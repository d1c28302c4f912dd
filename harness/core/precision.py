"""Numeric precision of the model passes: ``fp32``, ``bf16`` (autocast), ``fp16`` (CUDA) or ``auto``.

``auto`` resolves to bf16 on a CUDA GPU that computes it natively (compute capability 8.0 or more) and to **fp32 on
every CPU**, so that the default numbers of a run on the CPU do not depend on the CPU's instruction set (except
under the accelerator's emulation, ``HARNESS_EMULATE_ACCELERATOR`` of :mod:`harness.core.devices`: a CPU there takes
an H100's numerics, ``auto`` is bf16, and training keeps the SDPA attention, :func:`training_attention`). bf16 on a
CPU is a named setting (``--precision bf16``, ``[cpt] precision = "bf16"``), never a default, even where the CPU
computes it natively (AMX-BF16 / AVX512-BF16, on which oneDNN runs bf16 matmuls faster than fp32:
``benchmarks/bench_precision.py`` measures the gain). The resolved value, not ``auto``, is what runs record, so a
result always says how it was computed; bf16 autocast keeps weights, optimizer states, losses and softmaxes in
fp32.

Resolving ``auto`` for a CUDA device creates no CUDA context in the calling process (the parent of the cells, which
would otherwise hold GPU memory for nothing and could not fork): the compute capability is read through NVML, as
``nvidia-smi`` does; where NVML cannot be read, a short child process asks torch.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a pass needs it: checking a precision's name does not
    import torch

from harness.core.devices import emulating
from harness.core.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16", "auto")
DEFAULT_EVAL_PRECISION = "fp32"  # the evaluation precision every cell had before it was part of the cell's identity
# what the CPU reports (tests: make a CPU report bf16 support, or none, in this process and the ones it starts):
# a space- or comma-separated list of /proc/cpuinfo flags that replaces the ones read there
CPU_FLAGS_ENV = "HARNESS_CPU_FLAGS"
NATIVE_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})
BF16_MIN_CAPABILITY = (8, 0)  # CUDA: Ampere and later compute bf16 natively


@functools.lru_cache(maxsize=1)
def _cpuinfo_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags: ``HARNESS_CPU_FLAGS`` when set, else /proc/cpuinfo's (Linux; none elsewhere)."""
    forced = os.environ.get(CPU_FLAGS_ENV)
    if forced is not None:
        return frozenset(forced.replace(",", " ").split())
    return _cpuinfo_flags()


def cpu_has_native_bf16() -> bool:
    """True when the CPU lists amx_bf16 or avx512_bf16 (it computes bf16 natively). Informative only: no default
    depends on it (``auto`` is fp32 on every CPU)."""
    return bool(cpu_flags() & NATIVE_BF16_FLAGS)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), for benchmark tables; "unknown CPU" where it cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def _nvml_min_capability() -> tuple[int, int] | None:
    """The lowest compute capability among this machine's NVIDIA GPUs, read through NVML (no CUDA context is
    created); None where NVML cannot be loaded or lists no GPU."""
    from ctypes import CDLL, byref, c_int, c_void_p

    try:
        nvml = CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
        count = c_int(0)
        if nvml.nvmlDeviceGetCount_v2(byref(count)) != 0 or count.value <= 0:
            return None
        caps = []
        for i in range(count.value):
            handle, major, minor = c_void_p(), c_int(0), c_int(0)
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, byref(handle)) != 0:
                return None
            if nvml.nvmlDeviceGetCudaComputeCapability(handle, byref(major), byref(minor)) != 0:
                return None
            caps.append((major.value, minor.value))
        return min(caps)
    except AttributeError:  # an NVML too old to have one of these calls
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _child_says_bf16() -> bool:
    """Ask torch in a child process (its CUDA context dies with it) whether the GPU computes bf16 natively."""
    import subprocess
    import sys

    code = ("import torch; p = torch.cuda.get_device_properties(torch.cuda.current_device()); "
            f"print(int((p.major, p.minor) >= {BF16_MIN_CAPABILITY!r}))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "1"


@functools.lru_cache(maxsize=1)
def cuda_has_native_bf16() -> bool:
    """Whether this machine's CUDA GPUs compute bf16 natively (every one of them: compute capability 8.0+; ROCm
    GPUs: always, as torch says), found without creating a CUDA context in this process."""
    import torch

    if torch.version.hip:
        return True
    if not torch.cuda.is_available():
        return False
    if torch.cuda.is_initialized():  # a context exists already: asking torch costs nothing more
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return (props.major, props.minor) >= BF16_MIN_CAPABILITY
    cap = _nvml_min_capability()
    if cap is not None:
        return cap >= BF16_MIN_CAPABILITY
    return _child_says_bf16()


def resolve_precision(precision: str | None, device: str) -> str:
    """The concrete precision (``fp32``, ``bf16`` or ``fp16``) for ``precision`` on ``device``: ``auto`` is bf16 on
    a CUDA GPU that computes it natively and fp32 on any other device, whatever the CPU's instruction set."""
    p = (precision or "fp32").lower()
    if p not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    is_cuda = str(device).startswith("cuda")
    if p == "auto":
        if not is_cuda and emulating():  # the emulated accelerator computes as an H100 does
            return "bf16"
        return "bf16" if is_cuda and cuda_has_native_bf16() else "fp32"
    if p == "fp16" and not is_cuda:
        raise ConfigError("precision fp16 needs a CUDA device; use bf16 or fp32 on the CPU")
    return p


@contextlib.contextmanager
def autocast(device: str | torch.device, precision: str) -> Iterator[None]:
    """``torch.autocast`` for a resolved ``precision`` (a no-op for fp32)."""
    import torch

    if precision == "fp32":
        yield
        return
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    device_type = torch.device(device).type
    with torch.autocast(device_type=device_type, dtype=dtype):
        yield


def training_attention(model: torch.nn.Module, device: str | torch.device) -> str | None:
    """Use the eager attention kernels to *train* on a CPU: torch's CPU SDPA backward with a padding mask is 2-3x
    slower than the eager path there (a 6-layer 384-d encoder, batch 32 x 42 tokens: 0.89 s vs 0.37 s per
    backward), while inference runs at the same speed either way. GPUs keep their default, and so does a CPU
    under the accelerator's emulation (it computes with the GPU's SDPA kernels, over unmasked packed blocks).
    Returns the implementation set (None when left alone)."""
    import torch

    if torch.device(device).type != "cpu" or emulating():
        return None
    setter = getattr(model, "set_attn_implementation", None)
    if setter is None:
        return None
    try:
        setter("eager")
    except (ValueError, ImportError, AttributeError):  # a model class without an eager path
        return None
    return "eager"


def run_precisions(cfg: Any, device: str, prof: dict[str, Any], resolve: bool = True) -> tuple[str, str]:
    """(CPT precision, evaluation precision) of a run, resolved for ``device``: ``[cpt] precision`` for CPT, else
    the run's ``precision`` (``--precision``), else the profile's (``prof``: the run's profile, already read); the
    run's ``precision`` for evaluation, else the profile's ``eval_precision``. ``resolve=False``: as given, ``auto``
    left unresolved (a plan asks nothing of the machine)."""
    given = getattr(cfg, "precision", None)
    cpt = (cfg.cpt or {}).get("precision") or given or prof["cpt"].get("precision")
    evaluation = given or prof.get("eval_precision")
    if not resolve:
        return cpt, evaluation
    return resolve_precision(cpt, device), resolve_precision(evaluation, device)
