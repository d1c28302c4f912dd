"""The CPU kernels every harness process computes with: one fixed set on every x86-64 machine, so that a number does
not depend on the CPU's instruction set; and the label a cell's numbers carry, measured, not assumed.

torch computes an fp32 matrix product with MKL, its elementwise and reduction kernels with ATen's vectorized code,
GELU and every bf16 matrix product on a CPU with oneDNN; numpy and scipy call OpenBLAS. Each library picks its
kernels by the CPU it finds: on a machine with AVX-512 or AMX, MKL's AVX-512 GEMM, ATen's 16-wide reductions
(softmax, log-softmax), oneDNN's AVX-512 GELU and its AMX bf16 tiles round differently from the AVX2 ones an
AVX2-only machine or MKL on an AMD CPU runs, and training carries the difference into every number downstream
(HyperOFA's rows differ in the printed digits between two such machines). The harness therefore pins, before torch or
numpy is loaded, the AVX2 kernel set that every x86-64 CPU of the last decade has:

- ``MKL_CBWR=AVX2``: MKL's conditional numerical reproducibility on its AVX2 code path (a cell computes on one
  thread, :func:`harness.runner.cell_threads`, so MKL's strict mode, which also fixes the bits across thread
  counts, is not needed);
- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels;
- ``OPENBLAS_CORETYPE=Haswell``: OpenBLAS's AVX2 kernels (numpy's and scipy's; WECHSEL's alignment pins its own,
  :mod:`methods.pinned_blas`);
- ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN's AVX2 kernels (torch's fp32 GELU and, under ``--precision bf16`` on a CPU,
  every autocast matrix product: natively an AMX CPU computes them on its tiles, in another order).

A variable the user set to another value is kept, and named (:func:`kept_by_user`): ``MKL_CBWR=COMPATIBLE`` is
the user's choice, and the label below says what it computes.

**The label is measured.** What a pin promises (the same bits as an AVX2 machine) is not taken on trust: MKL does
not honour ``MKL_CBWR=AVX2`` on every CPU, a library loaded before the pin keeps its own kernels, another version of
torch may compute otherwise. Once a process, after the pins, :func:`fingerprint` computes a small fixed-input
workload of the kernels a cell uses -- an fp32 GEMM and Linear (MKL), ``exp``, softmax, log-softmax, layer norm,
GELU (ATen, oneDNN), a numpy product (OpenBLAS) and, where the run computes in bf16 on the CPU, a bf16 autocast
Linear and matmul (oneDNN) whose inputs put each output on a rounding boundary, so that the order of the
accumulation shows in the bf16 result -- on one thread, and hashes the bits. A cell is labelled ``avx2`` (in bf16
on the CPU ``avx2-onednn``, oneDNN's pinned bf16 kernels: a label of its own, apart from the fp32 set's) only when that fingerprint equals the golden one of the pinned set (:data:`GOLDEN`, taken under the AVX2
emulation of :func:`avx2_emulation`: ``python -m harness.core.kernels --write-golden``); otherwise
``native:<8 hex of the fingerprint>``. The label (:func:`cpu_kernels`) is part of every cell's identity, of its
init product's, of HyperOFA's hypernetwork product's and of the seed aggregates' groups, logged with each cell run (``cpu_kernels``)
and named on the board: cells computed with other kernels (ARM, an x86 without AVX2, ``HARNESS_CPU_KERNELS=native``
on AVX-512, AMX bf16) are never another cell's, nor pooled with it. A cell whose identity holds no label is read as
:data:`NATIVE` (each library's own kernels, unmeasured), a label no process measures.

``HARNESS_CPU_KERNELS=native`` keeps each library's own choice (faster on AVX-512 and AMX, and machine-dependent);
``benchmarks/bench_ner_flops.py`` measures what the pin costs. The fingerprint costs milliseconds once the libraries
are loaded (``python -m harness.core.kernels`` prints it and its time) and is computed once a process, in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

ENV = "HARNESS_CPU_KERNELS"
PINNED = "avx2"
# the pinned set's label where the run computes in bf16 on the CPU (oneDNN's AVX2 bf16 kernels included), apart
# from the fp32 set's
PINNED_BF16 = "avx2-onednn"
NATIVE = "native"  # each library's own kernels (HARNESS_CPU_KERNELS=native), unmeasured: the label of a cell whose
# identity holds none, and what a plan assumes of a process that does not pin
PINS = {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell", "ONEDNN_MAX_CPU_ISA": "AVX2"}
PINNED_ENV = "HARNESS_CPU_KERNELS_PINNED"  # set by the process that pinned: the processes it starts inherit the pins
# the libraries that read those variables when they load (or at their first kernel): pinned before any of them
LOADERS = ("torch", "numpy", "scipy")
# the golden fingerprints of the pinned set (fp32 alone; fp32 and bf16 on the CPU), taken under avx2_emulation()
GOLDEN = Path(__file__).with_name("kernels_golden.json")

_pinned: bool | None = None  # whether this process runs pinned, fixed by the first pin()
_kept: dict[str, str] = {}  # the pin variables the user had set to values of their own, kept
_fingerprints: dict[bool, dict[str, str]] = {}  # this process's fingerprint (by bf16 on the CPU), computed once
_labels: dict[bool, str] = {}  # this process's label (by bf16 on the CPU), computed once
_recorded: set[tuple[bool, str, str]] = set()  # (bf16, label, file) this process recorded (measured_kernels)
# the labels this process, or the harness process that started it, took from the record without measuring them:
# ``<conditions>=<label>`` separated by spaces; a cell that measures another label under the same conditions
# knows the run's label came from a stale record, which it has replaced (check_measured)
TAKEN_ENV = "HARNESS_CPU_KERNELS_TAKEN"


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


def pin() -> bool:
    """Pin the kernels in this process's environment (and so in every process it starts), once, before torch,
    numpy or scipy is loaded; returns whether the process runs pinned. A variable the
    user set to a value of their own is kept (:func:`kept_by_user`); a library loaded before the first call, a
    machine that cannot run the set, or ``HARNESS_CPU_KERNELS=native``: ``native``, and nothing is set. What the
    process then computes with is measured (:func:`cpu_kernels`), whatever this returns."""
    global _pinned
    if _pinned is not None:
        return _pinned
    try:
        asked = wanted()
    except Exception:  # noqa: BLE001 - a bad value is refused where the run's inputs are checked
        asked = NATIVE
    loaded = [m for m in LOADERS if m in sys.modules]
    own = {k: v for k in PINS if (v := (os.environ.get(k) or "").strip()) and v != PINS[k]}
    if asked == PINNED and not loaded and can_pin():
        _kept.update(own)  # the user's (or, inherited, the user's of the process that started this one): named
        os.environ.update({k: v for k, v in PINS.items() if k not in own})
        os.environ[PINNED_ENV] = "1"
        _pinned = True
    elif asked == PINNED and loaded and can_pin() and (
            os.environ.get(PINNED_ENV) == "1" or all(os.environ.get(k) == v for k, v in PINS.items())):
        _kept.update(own)
        _pinned = True  # pinned by the process that started this one, before it loaded them
    else:
        _pinned = False
    return _pinned


def kept_by_user() -> dict[str, str]:
    """The pin variables the user had set to values of their own, which the pin kept (``{"MKL_CBWR": "COMPATIBLE"}``)."""
    pin()
    return dict(_kept)


# -- the fingerprint -------------------------------------------------------------------------------------------
def _values(torch: Any, n: int, seed: int, scale: float = 1.0) -> Any:
    """``n`` fixed fp32 values in [-scale/2, scale/2), exact on every machine (integer arithmetic, 16-bit steps)."""
    i = torch.arange(n, dtype=torch.int64)
    return (((i * 2654435761 + seed * 40503) % 65536).to(torch.float32) / 65536.0 - 0.5) * scale


def _bf16_probe(torch: Any, m: int = 64, k: int = 256, n: int = 32) -> tuple[Any, Any]:
    """(a, b) whose product puts each output on a bf16 rounding boundary (1 + 2**-8) plus small terms of both
    signs (2**-20 .. 2**-29) that an fp32 accumulator absorbs or keeps depending on the order it adds them in: the
    bf16 result shows the kernel's accumulation order (AMX tiles, AVX-512 BF16 pairs and AVX2 FMAs differ)."""
    h = (torch.arange(m * k, dtype=torch.int64).view(m, k) * 2654435761 + 12345) % 1000003
    a = torch.where(h % 2 == 0, 1.0, -1.0) * torch.pow(2.0, -(20 + (h // 2) % 10).to(torch.float32))
    row = torch.arange(m)
    a[row, (row * 97 + 3) % k] = 1.0
    a[row, (row * 41 + 11) % k] = 2.0 ** -8
    b = torch.ones(k, n)
    b[:, 1::2] = 0.5
    return a, b


def _workload(bf16: bool) -> dict[str, Any]:
    """The results (tensors or arrays) of the fingerprint's workload, by kernel."""
    import numpy as np
    import torch

    f = torch.nn.functional
    out: dict[str, Any] = {}
    a, b = _values(torch, 64 * 96, 1).view(64, 96), _values(torch, 96 * 80, 2).view(96, 80)
    w, bias = _values(torch, 80 * 96, 3).view(80, 96), _values(torch, 80, 4)
    out["gemm"] = torch.matmul(a, b)  # MKL
    out["linear"] = f.linear(a, w, bias)
    out["exp"] = torch.exp(_values(torch, 4099, 5, 16.0))  # ATen
    x = _values(torch, 32 * 257, 6, 12.0).view(32, 257)
    out["softmax"] = torch.softmax(x, -1)
    out["log_softmax"] = torch.log_softmax(x, -1)
    y = _values(torch, 32 * 96, 7, 6.0).view(32, 96)
    out["layer_norm"] = f.layer_norm(y, (96,), _values(torch, 96, 8) + 1.0, _values(torch, 96, 9))
    out["gelu"] = f.gelu(_values(torch, 4099, 10, 8.0))  # oneDNN (fp32)
    na, nb = _values(torch, 48 * 80, 11).view(48, 80).numpy(), _values(torch, 80 * 32, 12).view(80, 32).numpy()
    out["numpy_gemm"] = np.ascontiguousarray(na @ nb)  # OpenBLAS
    if bf16:
        pa, pb = _bf16_probe(torch)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # oneDNN (bf16)
            out["bf16_linear"] = f.linear(pa, pb.t().contiguous(), None)
            out["bf16_matmul"] = torch.matmul(pa, pb)
            out["bf16_gelu"] = f.gelu(_values(torch, 4099, 13, 8.0).to(torch.bfloat16))
    return out


def _digest(value: Any) -> str:
    import numpy as np

    arr = value if isinstance(value, np.ndarray) else value.detach().float().contiguous().numpy()
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def fingerprint(bf16: bool = False) -> dict[str, str]:
    """This process's kernels as they compute, measured once (on one thread, as a cell computes): ``{"digest":
    sha256 of every part, "<kernel>": its result's sha256, ...}``; ``bf16``: with the bf16 autocast kernels a run
    that computes in bf16 on the CPU uses."""
    bf16 = bool(bf16)
    if bf16 not in _fingerprints:
        pin()
        import torch

        threads = torch.get_num_threads()
        if threads != 1:
            torch.set_num_threads(1)
        try:
            parts = {k: _digest(v) for k, v in _workload(bf16).items()}
        finally:
            if threads != 1:
                torch.set_num_threads(threads)
        parts["digest"] = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
        _fingerprints[bf16] = parts
    return dict(_fingerprints[bf16])


def golden(bf16: bool = False) -> dict[str, str] | None:
    """The pinned set's golden fingerprint (:data:`GOLDEN`), or None where the file holds none."""
    try:
        data = json.loads(GOLDEN.read_text())
    except (OSError, ValueError):
        return None
    return data.get("bf16" if bf16 else "fp32")


def cpu_kernels(bf16: bool = False) -> str:
    """What this process computes with, measured: ``avx2`` when its :func:`fingerprint` is the pinned set's golden
    one, else ``native:<8 hex of the fingerprint>``; ``bf16``: the run computes in bf16 on the CPU (its bf16 kernels
    are then part of the fingerprint, and the pinned set's label is :data:`PINNED_BF16`).

    A process that has not loaded torch yet (``harness run`` deciding which cells are finished) takes the label
    measured by an earlier process under the same conditions (:func:`conditions`: the CPU, the kernel libraries'
    files, the variables that choose their kernels, this module's code), recorded in the harness home, as git
    trusts a file by its stat: loading torch to measure it again costs a second. A process that has loaded torch
    measures (a cell's process always does, and refuses to compute under a label other than its run's:
    :func:`check_measured`) and records what it found, in place of what the record said."""
    bf16 = bool(bf16)
    if bf16 not in _labels:
        key = None if "torch" in sys.modules else conditions(bf16)
        recorded = None if key is None else _recorded_label(bf16, key)
        if key is not None and recorded is not None:  # said to the cells' processes, which inherit it
            taken = [t for t in os.environ.get(TAKEN_ENV, "").split() if t != f"{key}={recorded}"]
            os.environ[TAKEN_ENV] = " ".join([*taken, f"{key}={recorded}"][-4:])
        _labels[bf16] = recorded if recorded is not None else measured_kernels(bf16)
    return _labels[bf16]


def _fingerprint_label(bf16: bool = False) -> str:
    """The label of this process's :func:`fingerprint` against the pinned set's golden one, recorded nowhere:
    ``avx2`` (``avx2-onednn`` with ``bf16``) where they are equal, else ``native:<8 hex of the fingerprint>``."""
    mine, want = fingerprint(bf16), golden(bf16)
    pinned = PINNED_BF16 if bf16 else PINNED
    return pinned if want is not None and mine["digest"] == want.get("digest") else f"{NATIVE}:{mine['digest'][:8]}"


def measured_kernels(bf16: bool = False) -> str:
    """The label of this process's kernels from its own :func:`fingerprint` (computed once a process), never from
    a record: what a cell checks before it computes (:func:`check_measured`). It is recorded for later processes
    under this one's :func:`conditions`, replacing what the record said there."""
    bf16 = bool(bf16)
    label = _fingerprint_label(bf16)
    where = (bf16, label, str(_labels_path()))
    if where not in _recorded:  # once a process and home (a worker checks before each of its cells)
        _record_label(bf16, label)
        _recorded.add(where)
    return label


def check_measured(run_label: str, bf16: bool = False) -> str:
    """This process's label, measured (:func:`measured_kernels`), where it is the run's ``run_label``: what a cell
    checks before it computes. Otherwise a refusal (HarnessError) whose one line says how to go on: where the run
    took its label from a stale record under this process's conditions (its harness process said so in
    :data:`TAKEN_ENV`), that record now holds what was measured here, and the same command runs."""
    from harness.core.errors import HarnessError

    label = measured_kernels(bf16)
    if label == run_label:
        return label
    head = f"this process computes with {label} CPU kernels, the run with {run_label}"
    key, path = conditions(bf16), _labels_path()
    if f"{key}={run_label}" in os.environ.get(TAKEN_ENV, "").split():
        if _recorded_label(bf16, key) == label:
            raise HarnessError(f"{head}, which the harness process took from a stale record of the kernels ({path}); "
                               f"the record now holds {label}: run the same command again")
        raise HarnessError(f"{head}, which the harness process took from a stale record of the kernels ({path}) "
                           f"that this process could not replace: remove that file and run the same command again")
    raise HarnessError(f"{head} (harness.core.kernels): its numbers would not be the cell's; the harness process and "
                       f"this one compute with other kernels (another machine or environment, or torch or numpy "
                       f"loaded before the harness): `python -m harness.core.kernels` on each says which")


# -- the labels measured, by the conditions they were measured under -------------------------------------------
# the environment variables that choose the kernel libraries' kernels (their prefixes) and the loader's; not those
# of their threads (OpenMP's OMP_*, KMP_*, GOMP_*; MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_DYNAMIC, ...): the
# fingerprint is computed on one thread, and each cell's process sets its own (the local executor's workers
# OMP_NUM_THREADS, harness.executors._init_process_worker; Ray its workers'), so that a cell's process records what
# it measured under the key its harness process reads
_LIBRARY_ENV = ("MKL_", "DNNL_", "ONEDNN_", "OPENBLAS_", "GOTO", "ATEN_")
_THREAD_ENV = ("_NUM_THREADS", "_DYNAMIC")  # (their suffixes)
_LOADER_ENV = ("LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", ENV, PINNED_ENV)
LABELS_FILE = "kernels.json"  # under <HARNESS_HOME>/cache: {conditions digest: label}


def _library_files() -> list[str]:
    """The files of the kernel libraries a fingerprint measures (torch's and numpy's shared libraries and version
    files), found without importing them: each as ``path size mtime_ns inode``."""
    import importlib.util

    out: list[str] = []
    for name in ("torch", "numpy"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            out.append(f"{name} -")
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        files = [root / "version.py", *sorted((root / "lib").glob("*.so*")), *sorted((root / "lib").glob("*.dll")),
                 *sorted((root / "_core").glob("*.so")), *sorted(root.parent.glob(f"{name}.libs/*"))]
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            out.append(f"{f} {st.st_size} {st.st_mtime_ns} {st.st_ino}")
    return out


def _cpu_identity() -> list[str]:
    """The CPU as its kernels are chosen by: the first processor's vendor, family, model, stepping and flags."""
    keep = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "Features", "CPU implementer",
            "CPU part")
    out: list[str] = [platform.machine(), platform.system()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block
                key = line.split(":", 1)[0].strip()
                if key in keep:
                    out.append(" ".join(line.split()))
    except OSError:
        out.append(platform.processor())
    return out


def conditions(bf16: bool) -> str:
    """A digest of everything a process's kernel label depends on besides chance: the CPU, the libraries' files,
    the variables that choose their kernels (the pins among them; not their threads' count), how this process
    pinned (and what it had loaded first), this module's code and golden fingerprints, and whether bf16 kernels
    are measured."""
    env = sorted(f"{k}={v}" for k, v in os.environ.items()
                 if (k.startswith(_LIBRARY_ENV) and not k.endswith(_THREAD_ENV)) or k in _LOADER_ENV)
    parts = [f"bf16={bool(bf16)}", f"pin={pin()}", f"python={sys.version}", *_cpu_identity(), *env,
             *_library_files()]
    for f in (Path(__file__), GOLDEN):
        try:
            parts.append(hashlib.sha256(f.read_bytes()).hexdigest())
        except OSError:
            parts.append(f"{f.name} -")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _labels_path() -> Path | None:
    """Where the measured labels are kept: the harness home's cache, where the home exists (never created here)."""
    from harness.core.paths import home_dir

    try:
        home = home_dir()
    except Exception:  # noqa: BLE001 - a bad home is refused where the command's inputs are checked
        return None
    return home / "cache" / LABELS_FILE if home.is_dir() else None


def _recorded_label(bf16: bool, key: str | None = None) -> str | None:
    """The label recorded under this process's conditions (``key``, computed where not given), or None."""
    path = _labels_path()
    if path is None or not path.is_file():
        return None
    try:
        label = json.loads(path.read_text()).get(key or conditions(bf16))
    except (OSError, ValueError, AttributeError):
        return None
    return label if isinstance(label, str) and label else None


def _record_label(bf16: bool, label: str) -> None:
    """Keep ``label`` under this process's conditions (written whole and atomically; a lost write costs one
    measurement later, never a wrong label: a worker measures again before it computes)."""
    path = _labels_path()
    if path is None:
        return
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        known = {}  # a damaged record: written anew
    try:
        if not isinstance(known, dict):
            known = {}
        key = conditions(bf16)
        if known.get(key) == label:
            return
        known[key] = label
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(list(known.items())[-64:]), indent=0, sort_keys=True))
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass


def planned_kernels() -> str:
    """The label a plan assumes without measuring (``harness plan`` asks nothing of the machine it plans from,
    and loads no torch): the pinned set's where this process pins, else ``native``."""
    return PINNED if pin() else NATIVE


def identity(bf16: bool = False) -> dict[str, str]:
    """What a product computed in this process is keyed by, of its kernels: ``{"cpu_kernels": <label>}``."""
    label = cpu_kernels(bf16)
    return {} if label == NATIVE else {"cpu_kernels": label}


def check() -> None:
    """Refuse a run whose ``HARNESS_CPU_KERNELS`` is neither value, and one that asks for the pinned set on a
    machine that has it but got another (a library loaded first): its numbers would differ from its identity's."""
    from harness.core.errors import HarnessError

    if wanted() == PINNED and can_pin() and not pin():
        raise HarnessError(f"the CPU kernels could not be pinned: {', '.join(m for m in LOADERS if m in sys.modules)}"
                           f" was loaded before the harness; import harness first, or set {ENV}=native")


def describe(bf16: bool = False) -> str:
    """The kernels in words, for a run's header: ``avx2`` or ``native:1a2b3c4d (HARNESS_CPU_KERNELS=native; ATen's
    AVX512)``, with the pin variables the user set to values of their own."""
    text = cpu_kernels(bf16)
    why = []
    if not pin():
        why.append(f"{ENV}=native" if os.environ.get(ENV, "").strip().lower() == NATIVE else "not pinned")
    why += [f"{k}={v} (the user's, kept)" for k, v in kept_by_user().items()]
    torch = sys.modules.get("torch")  # named only where loaded: a rerun with nothing to do loads no torch
    if text not in (PINNED, PINNED_BF16) and torch is not None:
        try:
            why.append(f"ATen's {torch.backends.cpu.get_cpu_capability()}")
        except Exception:  # noqa: BLE001
            pass
    return text + (f" ({'; '.join(why)})" if why else "")


# -- the golden fingerprint --------------------------------------------------------------------------------------
def avx2_emulation() -> dict[str, str]:
    """The environment of a process that computes as an AVX2-only x86-64 machine does, each library left to its
    own choice but capped at AVX2 (MKL's ``MKL_ENABLE_INSTRUCTIONS``, ATen's, OpenBLAS's and oneDNN's caps): where
    the golden fingerprint is taken."""
    return {ENV: NATIVE, "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
            "OPENBLAS_CORETYPE": "Haswell", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def measure_in_child(env: dict[str, str], bf16: bool = True, first: str = "") -> dict[str, Any]:
    """The fingerprint and label of a fresh process started with ``env`` over this one's environment without the
    pins (``first``: a module it imports before the harness)."""
    import subprocess

    clean = {k: v for k, v in os.environ.items()
             if k not in (*PINS, ENV, PINNED_ENV, "MKL_ENABLE_INSTRUCTIONS")}
    code = (f"import sys, json\n{'import ' + first if first else ''}\nfrom harness.core import kernels\n"
            f"print(json.dumps({{'fp32': kernels.fingerprint(False), 'bf16': kernels.fingerprint(True) if {bf16} "
            f"else None, 'label': kernels.cpu_kernels(False), 'label_bf16': kernels.cpu_kernels(True) if {bf16} "
            f"else None, 'pinned': kernels.pin(), 'kept': kernels.kept_by_user()}}))")
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**clean, "OMP_NUM_THREADS": "1", "PYTHONPATH": root, **env})
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_golden() -> dict[str, Any]:
    """Take the golden fingerprints under :func:`avx2_emulation` and write them to :data:`GOLDEN`."""
    import torch  # (the versions the fingerprints were taken with, for the record)

    got = measure_in_child(avx2_emulation())
    import numpy

    data = {"fp32": got["fp32"], "bf16": got["bf16"],
            "taken": {"environment": avx2_emulation(), "torch": torch.__version__, "numpy": numpy.__version__,
                      "machine": platform.machine()}}
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.core.kernels [--bf16] [--write-golden]``: this process's label, fingerprint and its
    cost; ``--write-golden`` takes the golden fingerprints anew (a change of torch, numpy or the workload)."""
    import time

    args = sys.argv[1:] if argv is None else argv
    if "--write-golden" in args:
        print(json.dumps(write_golden(), indent=1))
        return 0
    bf16 = "--bf16" in args
    pin()
    import numpy  # noqa: F401 - loaded first: the time below is the fingerprint's own
    import torch  # noqa: F401

    t = time.perf_counter()
    fp = fingerprint(bf16)
    ms = (time.perf_counter() - t) * 1e3
    print(f"label {describe(bf16)}; fingerprint {fp['digest'][:16]} in {ms:.1f} ms (bf16 on the CPU: {bf16})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
