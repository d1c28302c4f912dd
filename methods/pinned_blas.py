"""WECHSEL's alignment (scipy's float32 ``orthogonal_procrustes`` and the mapping ``u_s @ R``, exactly as the
reference code computes them) on one fixed set of BLAS kernels and one thread, so that it gives the same bytes on
every x86-64 machine.

Why: numpy and scipy call OpenBLAS, which picks its kernels by the CPU it finds (SSE, AVX2 on a Haswell or a Zen,
AVX-512 on a Skylake-X) and splits a product over its threads. A float32 product summed by other kernels or over
other threads rounds differently: on the synthetic world the rotation moved in its fifth digit, 113 WECHSEL rows
moved with another kernel set and 64 with two threads, and the main job's WECHSEL rows differed between two
machines (SR-T 0.276 and 0.277). OpenBLAS chooses its kernels once, when it is loaded (``OPENBLAS_CORETYPE``), so
the alignment runs in a short child process that loads numpy and scipy with the kernels pinned: ``Nehalem``, the
SSE kernels every x86-64 CPU runs, and one thread. The child imports numpy and scipy only (this file is run as a
script, never as part of the package), so it starts in well under a second.

The arithmetic is the reference's: float32 ``orthogonal_procrustes(x_s, x_t)`` (scipy forms ``x_t^T x_s``, takes
its SVD and returns ``U V^T``), then ``u_s @ R`` with ``u_s`` in float64. The parity tests run the authors'
``wechsel`` package under the same pin (``tests/parity/run.sh``) and find the same rows. On a CPU that is not
x86-64 (no such kernel set), the machine's own kernels run on one thread, and the statistics say so.

What it costs (one language, 30,522 source tokens, on a 2-core Intel Xeon; ``benchmarks/bench_pinned_blas.py``):
20,000 pairs of dimension 50 (the cpu profile's size) 0.51 s pinned against 0.02 s native, the child's start
included; 100,000 pairs of dimension 300 (crawl vectors) 3.6 s against 0.9 s. Against a WECHSEL initialization's
minutes of fastText training, seconds.

``blas="native"`` computes the same in the calling process, with whatever kernels and threads it has loaded: what
the reference computes on that machine, which another machine may not reproduce.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

PINNED_CORETYPE = "Nehalem"  # OpenBLAS's SSE4 kernel set: present on every x86-64 CPU
BLAS_MODES = ("pinned", "native")


def align(u_s: np.ndarray, x_s: np.ndarray, x_t: np.ndarray) -> tuple[np.ndarray, float]:
    """``(u_s @ R, relative residual ||x_s R - x_t|| / ||x_t||)`` with ``R = orthogonal_procrustes(x_s, x_t)``
    (the reference's float32 Procrustes), in this process with its BLAS."""
    from scipy.linalg import orthogonal_procrustes

    r, _ = orthogonal_procrustes(x_s, x_t)
    residual = float(np.linalg.norm(x_s @ r - x_t) / max(np.linalg.norm(x_t), 1e-12))
    return u_s @ r, residual


def blas_in_use() -> str:
    """The BLAS numpy and scipy run with in this process, in words: library, kernel set, threads."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    seen = sorted({f"{i.get('internal_api')} {i.get('architecture') or '?'}, {i.get('num_threads')} thread(s)"
                   for i in threadpool_info() if i.get("user_api") == "blas"})
    return "; ".join(seen) or "unknown"


def pinned_env() -> dict[str, str]:
    """The child's environment: one thread for every BLAS and OpenMP runtime; OpenBLAS's SSE kernels on x86-64 (and
    MKL's compatible code path, where numpy was built against MKL)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("OPENBLAS_CORETYPE", None)
    if platform.machine().lower() in ("x86_64", "amd64"):
        env["OPENBLAS_CORETYPE"] = PINNED_CORETYPE
        env["MKL_CBWR"] = "COMPATIBLE"
    return env


def align_all(u_s: np.ndarray, pairs: dict[str, tuple[np.ndarray, np.ndarray]], *, blas: str = "pinned"
              ) -> tuple[dict[str, tuple[np.ndarray, float]], str]:
    """:func:`align` for every language of ``pairs`` (``{lang: (x_s, x_t)}``): ``({lang: (u_s @ R, residual)},
    the BLAS it ran with)``. ``pinned``: in one child process with the kernels and threads pinned; ``native``: here."""
    if blas not in BLAS_MODES:
        raise ValueError(f"blas: expected one of {', '.join(BLAS_MODES)}, got {blas!r}")
    if not pairs:
        return {}, "none (no language aligned)"
    if blas == "native":
        return {lang: align(u_s, x_s, x_t) for lang, (x_s, x_t) in pairs.items()}, blas_in_use()
    langs = list(pairs)
    with tempfile.TemporaryDirectory(prefix="wechsel-align-") as tmp:
        d = Path(tmp)
        np.save(d / "u_s.npy", np.ascontiguousarray(u_s))
        for i, lang in enumerate(langs):
            np.save(d / f"x_s{i}.npy", np.ascontiguousarray(pairs[lang][0]))
            np.save(d / f"x_t{i}.npy", np.ascontiguousarray(pairs[lang][1]))
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(d), str(len(langs))],
                              env=pinned_env(), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"wechsel: the alignment's child process failed (exit {proc.returncode}): "
                               f"{proc.stderr.strip()[-2000:]}")
        info = json.loads((d / "out.json").read_text())
        out = {lang: (np.load(d / f"u{i}.npy"), float(info["residuals"][i])) for i, lang in enumerate(langs)}
    return out, info["blas"]


ALIGN_BUDGET = 1 << 30  # bytes of mapped source vectors (u_s @ R, float64) one child returns at once


def aligned_in_groups(u_s: np.ndarray, pairs: dict[str, tuple[np.ndarray, np.ndarray]], *, blas: str = "pinned",
                      budget: int = ALIGN_BUDGET) -> Iterator[tuple[str, np.ndarray, float, str]]:
    """``(lang, u_s @ R, residual, the BLAS it ran with)`` for every language of ``pairs``, in their order, computed
    by :func:`align_all` for as many languages at a time as ``budget`` bytes of mapped vectors hold (at least one):
    the bible world's 23 languages in one child, a 250k-token vocabulary with 300-dimensional vectors (600 MB a
    language) one language at a time, so that memory does not grow with the languages."""
    per = max(1, budget // max(1, u_s.shape[0] * u_s.shape[1] * 8))
    langs = list(pairs)
    for start in range(0, len(langs), per):
        group = langs[start:start + per]
        out, used = align_all(u_s, {lang: pairs[lang] for lang in group}, blas=blas)
        for lang in group:
            u, residual = out.pop(lang)
            yield lang, u, residual, used


def _child(folder: str, n: int) -> None:
    d = Path(folder)
    u_s = np.load(d / "u_s.npy")
    residuals = []
    for i in range(n):
        u, res = align(u_s, np.load(d / f"x_s{i}.npy"), np.load(d / f"x_t{i}.npy"))
        np.save(d / f"u{i}.npy", u)
        residuals.append(res)
    payload: dict[str, Any] = {"residuals": residuals, "blas": blas_in_use()}
    (d / "out.json").write_text(json.dumps(payload))


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
