"""benchmarks/bench_glot500_init.py runs OFA and HyperOFA end to end at a tiny scale on the CPU and reports every
step of both methods (and the paper-network path, with the tiny preset) in its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

OFA_STEPS = ["source_subwords", "target_subwords", "fallback", "neighbours", "place", "copy", "rest", "total"]
HYPEROFA_STEPS = ["source_word_sets", "target_word_sets", "hash", "train", "fallback", "predict", "place", "copy",
                  "rest", "total"]


def test_glot500_benchmark_times_every_step_of_both_methods(tmp_path):
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_glot500_init.py"), "--scale", "0.002", "--device", "cpu",
           "--max-epochs", "2", "--hn-paper", "--hn-preset", "tiny", "--threads", "1", "--json", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())

    head = report["header"]
    assert head["device"] == "cpu" and head["torch_threads"] == 1 and head["scale"] == 0.002
    assert head["target_tokens"] == 802 and head["source_tokens"] == 500 and head["words"] == 7200
    assert head["copied"] + head["wise"] <= head["target_tokens"]
    for name, expected in (("ofa", OFA_STEPS), ("hyperofa", HYPEROFA_STEPS)):
        rows = report["methods"][name]
        assert [r["id"] for r in rows] == expected, name
        assert all(r["seconds"] > 0 for r in rows), rows
        assert all(r["cuda_peak_mb"] is None for r in rows)
        assert rows[-1]["seconds"] >= sum(r["seconds"] for r in rows[:-2])
        assert f"whole initialize() ({name})" in proc.stdout
    total = report["methods"]["ofa"][-1]["detail"]
    assert f"copied {head['copied']:,}" in total and f"method {head['wise']:,}" in total
    train = next(r for r in report["methods"]["hyperofa"] if r["id"] == "train")
    assert 1 <= train["epochs"] <= 2 and train["pairs_per_s"] > 0

    # each step's line is printed as the step finishes, before its method's table
    assert proc.stdout.index("  ofa: neighbour search + softmax combination:") < proc.stdout.index("\nOFA at scale")
    assert head["generation_seconds"] > 0

    hn = report["hn_paper"]
    assert hn["preset"] == "tiny" and hn["epochs"] <= 2 and hn["pairs_per_s"] > 0 and hn["seconds"] > 0


def test_the_inputs_are_the_same_on_any_number_of_threads():
    import numpy as np

    sys.path.insert(0, str(REPO / "benchmarks"))
    import glot500_inputs as bench

    draws = []
    for threads in (1, 3):
        bench.GENERATION_THREADS[0] = threads
        draws.append(bench.normal(np.random.default_rng(5), (1000, 7)))
    assert np.array_equal(draws[0], draws[1]) and abs(float(draws[0].std()) - 1) < 0.05
