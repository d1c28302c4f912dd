"""WECHSEL gives the same bits on every machine: its alignment and similarities are summed in a fixed order, not by
the machine's BLAS (whose kernels, AVX2 or AVX-512, and thread count moved the Procrustes rotation in its fifth
digit and every WECHSEL row with it). Shown by running it with other BLAS kernels and thread counts."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from methods.wechsel import ordered_dot, ordered_matmul, procrustes

REPO = Path(__file__).resolve().parents[1]


def test_ordered_products_match_blas_and_keep_equal_rows_equal():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 40)).astype(np.float32)
    a[7] = a[250] = a[3]  # equal rows at positions a BLAS kernel treats differently
    b = rng.standard_normal((40, 40))
    got = ordered_matmul(a, b)
    assert got.dtype == np.float64 and np.allclose(got, a.astype(np.float64) @ b, rtol=0, atol=1e-12)
    assert np.array_equal(got[3], got[7]) and np.array_equal(got[3], got[250])
    long = ordered_matmul(a.T, a)  # the Procrustes cross-product: few rows, a long inner index
    assert np.allclose(long, a.T.astype(np.float64) @ a.astype(np.float64), rtol=0, atol=1e-9)
    t = torch.from_numpy(got)
    dots = ordered_dot(t[:, None, :], t[None, :5, :])
    assert torch.allclose(dots, t @ t[:5].T, rtol=0, atol=1e-10) and torch.equal(dots[3], dots[7])
    q, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    r = procrustes(a, (a.astype(np.float64) @ q).astype(np.float32))
    assert r.dtype == np.float64 and np.allclose(r, q, atol=1e-5) and np.allclose(r.T @ r, np.eye(40), atol=1e-12)


_RUN = """
import hashlib, json, sys
from pathlib import Path
import numpy as np
from harness.core.registry import METHODS
from harness.worlds import get_world
from tests.test_focus import synthetic_ctx
rng = np.random.default_rng(1)
x = rng.standard_normal((4000, 50)).astype(np.float32)
blas = hashlib.sha256((x.T @ x).tobytes()).hexdigest()  # what the BLAS of this process computes
params = {"dim": 50, "epochs": 5, "bucket": 200_000, "max_lines": None, "source_max_lines": None}
ctx = synthetic_ctx(get_world("synthetic", build=False), Path(sys.argv[1]), params)
res = METHODS.get("wechsel")().initialize(ctx)
print(json.dumps({"matrix": hashlib.sha256(res.matrix.numpy().tobytes()).hexdigest(), "blas": blas,
                  "method_rows": int(res.counts()["method"])}))
"""


def test_wechsel_is_the_same_with_other_blas_kernels_and_threads(synthetic_world, harness_home, tmp_path):
    """The synthetic world's WECHSEL matrix, computed in processes whose BLAS runs other kernels (OpenBLAS forced to
    its SSE kernels, torch to AVX2) or two threads: the same bytes. The premise is checked: the forced kernels do
    compute a float32 product differently."""
    cache = tmp_path / "cache"
    base = {**os.environ, "HARNESS_HOME": str(harness_home), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO)}

    def run(**env: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", _RUN, str(cache)], cwd=REPO, env={**base, **env},
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run()
    assert first["method_rows"] > 100
    variants = {"two BLAS threads": {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}}
    if platform.machine() in ("x86_64", "AMD64"):
        variants["OpenBLAS's SSE kernels"] = {"OPENBLAS_CORETYPE": "Nehalem"}
        variants["torch's AVX2 kernels"] = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    seen = {name: run(**env) for name, env in variants.items()}
    for name, got in seen.items():
        assert got["matrix"] == first["matrix"], f"WECHSEL's matrix differs with {name}"
    if "OpenBLAS's SSE kernels" in seen:
        assert seen["OpenBLAS's SSE kernels"]["blas"] != first["blas"]  # the kernels were other kernels
