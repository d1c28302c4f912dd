"""WECHSEL gives the same bytes whatever BLAS kernels and threads the process that runs it has loaded: its alignment
(the reference's float32 Procrustes and ``u_s @ R``) runs on pinned kernels and one thread
(:mod:`methods.pinned_blas`). Shown by running it in processes whose OpenBLAS was loaded with other kernels (AVX2,
AVX) or two threads, after checking that those kernels do round a float32 product differently."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

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
params = {"dim": 50, "epochs": 5, "bucket": 200_000, "max_lines": None, "source_max_lines": None, "blas": sys.argv[2]}
ctx = synthetic_ctx(get_world("synthetic", build=False), Path(sys.argv[1]), params)
res = METHODS.get("wechsel")().initialize(ctx)
print(json.dumps({"matrix": hashlib.sha256(res.matrix.numpy().tobytes()).hexdigest(), "blas": blas,
                  "method_rows": int(res.counts()["method"]), "ran_with": res.stats["alignment_blas"]["ran_with"]}))
"""


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="OpenBLAS kernel sets of x86-64")
def test_wechsel_is_the_same_with_other_blas_kernels_and_threads(synthetic_world, harness_home, tmp_path):
    cache = tmp_path / "cache"
    base = {**os.environ, "HARNESS_HOME": str(harness_home), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO)}
    base.pop("OPENBLAS_CORETYPE", None)

    def run(mode: str = "pinned", **env: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", _RUN, str(cache), mode], cwd=REPO, env={**base, **env},
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run()
    assert first["method_rows"] > 100 and "Nehalem" in first["ran_with"] and "1 thread" in first["ran_with"]
    variants = {"AVX2 kernels": {"OPENBLAS_CORETYPE": "Haswell"}, "AVX kernels": {"OPENBLAS_CORETYPE": "Sandybridge"},
                "two BLAS threads": {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}}
    seen = {name: run(**env) for name, env in variants.items()}
    for name, got in seen.items():
        assert got["matrix"] == first["matrix"], f"WECHSEL's matrix differs with {name}"
    # the premise: those kernels compute a float32 product differently here, and so does the reference's alignment
    # run on them (``blas = "native"``)
    assert seen["AVX2 kernels"]["blas"] != seen["AVX kernels"]["blas"]
    native = {name: run("native", **variants[name]) for name in ("AVX2 kernels", "AVX kernels")}
    assert native["AVX2 kernels"]["matrix"] != native["AVX kernels"]["matrix"]
