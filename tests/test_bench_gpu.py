"""``benchmarks/bench_gpu.sh`` runs its checks on a CPU at small sizes and prints one table."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO


def test_bench_gpu_runs_on_the_cpu(tmp_path):
    out = tmp_path / "bench"
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    import sys

    proc = subprocess.run(["bash", "benchmarks/bench_gpu.sh", "--device", "cpu", "--small", "--budget", "1200",
                           "--out", str(out)], cwd=REPO, env={**env, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "2", "3", "4"]
    assert all(r.split("|")[3].strip() == "0" for r in rows), rows
    assert "cells: 3 finished" in rows[0] and "cells: 2 finished" in rows[1]
    assert "run_cpt" in rows[2] and "x" in rows[2].split("|")[5]
    assert "ofa" in rows[3] and "hyperofa" in rows[3] and "pairs/s" in rows[3]
    assert "| stock HF path" in proc.stdout  # the CPT table follows the summary
    assert (out / "home" / "mlflow.db").is_file()
