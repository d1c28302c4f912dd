"""One CPU kernel set on every x86-64 machine (:mod:`harness.core.kernels`): every harness process pins MKL's,
ATen's and OpenBLAS's AVX2 kernels before torch or numpy loads, so a model trained on a machine with AVX-512
computes the same bits as on a machine with AVX2 alone; ``HARNESS_CPU_KERNELS=native`` keeps each library's own
choice, which on such a machine computes other bits (the premise, checked where the CPU has AVX-512). What a process
computes with is refused when it cannot be what the run asks, and named on the board."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import kernels

REPO = Path(__file__).resolve().parents[1]
X86_AVX2 = kernels.can_pin()

# a model of the harness's kind trained a few steps in fp32 on one thread (matrix products, softmax, GELU, layer
# norm, AdamW), a numpy matrix product and torch's exp: the digests of what they computed, and the process's kernels
WORKLOAD = r"""
import hashlib, json, os, sys
if sys.argv[1] == "numpy":
    import numpy  # loaded before the harness
from harness.core import kernels
import numpy as np
import torch
from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

torch.set_num_threads(1)
torch.manual_seed(0)
cfg = XLMRobertaConfig(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, max_position_embeddings=40, attn_implementation="eager")
model = XLMRobertaForMaskedLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(5, 300, (8, 24))
for _ in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
digest = lambda b: hashlib.sha256(b).hexdigest()[:16]
rng = np.random.default_rng(0)
a, b = rng.standard_normal((200, 300), dtype=np.float32), rng.standard_normal((300, 100), dtype=np.float32)
print(json.dumps({"model": digest(b"".join(p.detach().numpy().tobytes() for p in model.parameters())),
                  "numpy": digest((a @ b).tobytes()), "exp": digest(torch.randn(4096).exp().numpy().tobytes()),
                  "kernels": kernels.cpu_kernels(), "label": kernels.label()}))
"""


def _compute(env: dict[str, str], first: str = "harness") -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in (*kernels.PINS, kernels.ENV, "MKL_ENABLE_INSTRUCTIONS")}
    proc = subprocess.run([sys.executable, "-c", WORKLOAD, first], capture_output=True, text=True, cwd=REPO,
                          env={**clean, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not X86_AVX2, reason="the pinned kernels need an x86-64 CPU with AVX2 and FMA")
def test_a_pinned_process_computes_what_an_avx2_machine_computes():
    pinned = _compute({})
    assert pinned["kernels"] == "avx2" and pinned["label"] == "avx2"
    # the same process told its CPU had AVX2 at most (MKL's own cap) or loaded with two threads' worth of cores:
    # the pin leaves nothing to the CPU
    assert _compute({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}) == pinned
    # an AVX2 machine computing natively (each library's own choice, capped as such a machine caps it)
    avx2_machine = _compute({kernels.ENV: "native", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                             "OPENBLAS_CORETYPE": "Haswell"})
    assert avx2_machine["kernels"] == "native"
    assert {k: avx2_machine[k] for k in ("model", "numpy", "exp")} == {k: pinned[k] for k in ("model", "numpy", "exp")}
    if "avx512f" in kernels.cpu_flags():  # the premise: this machine's own kernels compute other bits
        native = _compute({kernels.ENV: "native"})
        assert native["kernels"] == "native" and native["label"] == "native (AVX512)"
        assert native["model"] != pinned["model"] and native["exp"] != pinned["exp"]


def test_a_process_that_loaded_the_libraries_first_is_not_pinned_unless_its_parent_was():
    loaded_first = _compute({}, first="numpy")
    assert loaded_first["kernels"] == "native"
    if X86_AVX2:  # a worker of a pinned harness process: the pins are in the environment it inherited
        inherited = _compute(dict(kernels.PINS), first="numpy")
        assert inherited["kernels"] == "avx2" and inherited["model"] == _compute({})["model"]


def test_only_an_avx2_x86_cpu_is_pinned(monkeypatch):
    monkeypatch.setattr(kernels.platform, "machine", lambda: "x86_64")
    assert kernels.can_pin({"sse2", "avx", "avx2", "fma", "avx512f"})
    assert not kernels.can_pin({"sse2", "avx"}) and not kernels.can_pin({"avx2"})
    monkeypatch.setattr(kernels.platform, "machine", lambda: "aarch64")
    assert not kernels.can_pin({"avx2", "fma"})


def test_the_test_processes_compute_with_the_pinned_kernels():
    """conftest imports the harness first: the in-process runs of the suite are pinned where the CPU can be."""
    assert kernels.cpu_kernels() == ("avx2" if X86_AVX2 else "native")
    assert kernels.identity() == ({"cpu_kernels": "avx2"} if X86_AVX2 else {})


def test_a_run_with_another_kernel_setting_is_refused_before_a_home_is_made(tmp_path):
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", "random",
                           "--tasks", "mlm"], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "HARNESS_HOME": str(home), kernels.ENV: "avx512",
                               "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "HARNESS_CPU_KERNELS='avx512'" in proc.stderr and "native" in proc.stderr
    assert not home.exists()


def test_the_board_names_the_kernels_and_never_pools_rows_computed_with_others():
    from harness.core.record import CellRun
    from leaderboard.claims import numerics
    from leaderboard.tables import _variant, precision_label, variant_labels

    def cell(seed: str, kernels_logged: str | None) -> CellRun:
        params = {"eval_precision": "fp32", "cpt.precision": "fp32", "method.x": "1"}
        if kernels_logged:
            params["cpu_kernels"] = kernels_logged
        return CellRun(run_id=seed, method="ofa", source="src", dim="full", seed=seed, profile="cpu", world="w",
                       status="FINISHED", final_step=0, params=params, metrics={})

    pinned, native, before = cell("1", "avx2"), cell("2", "native (AVX512)"), cell("3", None)
    keys = [_variant(c, c, per_seed=False) for c in (pinned, native, before)]
    assert keys[0] != keys[1] and keys[1] == keys[2]  # a cell logged before the pin computed natively
    labels = variant_labels(keys[:2])
    assert labels == {keys[0]: "ofa d=full kernels=avx2", keys[1]: "ofa d=full kernels=native"}
    assert numerics(keys[0]) != numerics(keys[1]) and "CPU kernels native" in numerics(keys[1])
    assert variant_labels(keys[:1]) == {keys[0]: "ofa d=full"}  # one kind of row: nothing added
    assert precision_label([pinned]) == "evaluation fp32, CPT fp32, CPU kernels avx2"
    assert precision_label([pinned, before]) == "evaluation fp32, CPT fp32, CPU kernels avx2 / native"
