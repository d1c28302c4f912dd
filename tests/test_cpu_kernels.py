"""One CPU kernel set on every x86-64 machine (:mod:`harness.core.kernels`): every harness process pins MKL's,
ATen's, OpenBLAS's and oneDNN's AVX2 kernels before torch or numpy loads, so a model trained on a machine with
AVX-512 computes the same bits as on a machine with AVX2 alone; ``HARNESS_CPU_KERNELS=native`` keeps each library's
own choice, which on such a machine computes other bits (the premise, checked where the CPU has AVX-512). What a
process computes with is measured (a fingerprint against the pinned set's golden one), refused when it cannot be
what the run asks, and named on the board."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import kernels
from tests.conftest import cpu_vendor, pinned_labels

REPO = Path(__file__).resolve().parents[1]
X86_AVX2 = kernels.can_pin()
PINNED_LABEL, PINNED_LABEL_BF16 = pinned_labels()  # "avx2", "avx2-onednn" where the pins give the golden bits
GOLDEN_HERE = PINNED_LABEL == kernels.PINNED

# a model of the harness's kind trained a few steps in fp32 on one thread (matrix products, softmax, GELU, layer
# norm, AdamW), a numpy matrix product and torch's exp: the digests of what they computed, and the process's kernels
WORKLOAD = r"""
import hashlib, json, os, sys
if sys.argv[1] == "numpy":
    import numpy  # loaded before the harness
from harness.core import kernels
kernels.pin()  # what a harness process does first
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
                  "kernels": kernels.cpu_kernels(), "label": kernels.cpu_kernels(), "pinned": kernels.pin()}))
"""


def _compute(env: dict[str, str], first: str = "harness") -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in (*kernels.PINS, kernels.ENV, kernels.PINNED_ENV, "MKL_ENABLE_INSTRUCTIONS")}
    proc = subprocess.run([sys.executable, "-c", WORKLOAD, first], capture_output=True, text=True, cwd=REPO,
                          env={**clean, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not X86_AVX2, reason="the pinned kernels need an x86-64 CPU with AVX2 and FMA")
def test_a_pinned_process_computes_what_an_avx2_machine_computes():
    pinned = _compute({})
    assert pinned["kernels"] == PINNED_LABEL and pinned["label"] == PINNED_LABEL
    # the same process told its CPU had AVX2 at most (MKL's own cap) or loaded with two threads' worth of cores:
    # the pin leaves nothing to the CPU
    assert _compute({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}) == pinned
    # an AVX2 machine computing natively (each library's own choice, capped as such a machine caps it, oneDNN's
    # GELU included): the same bits, and the same label, measured (its fingerprint is the golden one)
    avx2_machine = _compute(kernels.avx2_emulation())
    assert avx2_machine["pinned"] is False and avx2_machine["kernels"] == PINNED_LABEL
    assert {k: avx2_machine[k] for k in ("model", "numpy", "exp")} == {k: pinned[k] for k in ("model", "numpy", "exp")}
    if "avx512f" in kernels.cpu_flags():  # the premise: this machine's own kernels compute other bits
        native = _compute({kernels.ENV: "native"})
        assert native["pinned"] is False and re.fullmatch(r"native:[0-9a-f]{8}", native["kernels"]), native
        assert native["model"] != pinned["model"] and native["kernels"] != pinned["kernels"]
        if GOLDEN_HERE:  # (an AMD CPU's MKL computes exp alike pinned or not: it is not the pins' to change there)
            assert native["exp"] != pinned["exp"]
        # the pins of before (MKL, ATen, OpenBLAS) without oneDNN's: its AVX-512 GELU moves the model's bits, and
        # the label says so (it was labelled avx2)
        no_onednn = _compute({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"})
        assert no_onednn["model"] != pinned["model"] and no_onednn["kernels"].startswith("native:")


def test_a_process_that_loaded_the_libraries_first_is_not_pinned_unless_its_parent_was():
    loaded_first = _compute({}, first="numpy")
    assert loaded_first["pinned"] is False
    if X86_AVX2:
        if "avx512f" in kernels.cpu_flags():  # measured: its own kernels, not the pinned set's
            assert loaded_first["kernels"].startswith("native:")
        # a worker of a pinned harness process: the pins are in the environment it inherited
        inherited = _compute(dict(kernels.PINS), first="numpy")
        assert inherited["pinned"] is True and inherited["kernels"] == PINNED_LABEL
        assert inherited["model"] == _compute({})["model"]


def test_only_an_avx2_x86_cpu_is_pinned(monkeypatch):
    monkeypatch.setattr(kernels.platform, "machine", lambda: "x86_64")
    assert kernels.can_pin({"sse2", "avx", "avx2", "fma", "avx512f"})
    assert not kernels.can_pin({"sse2", "avx"}) and not kernels.can_pin({"avx2"})
    monkeypatch.setattr(kernels.platform, "machine", lambda: "aarch64")
    assert not kernels.can_pin({"avx2", "fma"})


def test_the_test_processes_compute_with_the_pinned_kernels():
    """conftest imports the harness first: the in-process runs of the suite are pinned where the CPU can be."""
    assert kernels.pin() is X86_AVX2
    label = kernels.cpu_kernels()
    assert label == PINNED_LABEL and re.fullmatch(r"avx2|native:[0-9a-f]{8}", label)
    assert kernels.identity() == {"cpu_kernels": label}  # in every identity, native too
    if X86_AVX2 and cpu_vendor() == "GenuineIntel":  # the premise of the pins, on the CPUs whose MKL honours them
        assert label == "avx2"


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
    from harness.core.record_read import CellRecord
    from leaderboard.claims import numerics
    from leaderboard.tables import _variant, precision_label, variant_labels

    def cell(seed: str, kernels_logged: str | None) -> CellRecord:
        params = {"eval_precision": "fp32", "cpt.precision": "fp32", "method.x": "1"}
        if kernels_logged:
            params["cpu_kernels"] = kernels_logged
        return CellRecord(run_id=seed, method="ofa", source="src", dim="full", seed=seed, profile="cpu", world="w",
                       status="FINISHED", final_step=0, params=params, metrics={})

    pinned, native, before = cell("1", "avx2"), cell("2", "native:1a2b3c4d"), cell("3", None)
    other = cell("4", "native:5e6f7a8b")  # another machine's (or precision's) measured kernels
    keys = [_variant(c, c, per_seed=False) for c in (pinned, native, before, other)]
    assert len(set(keys)) == 4  # a cell logged before the kernels were in the identity is no measured one's
    labels = variant_labels(keys[:2])
    assert labels == {keys[0]: "ofa d=full kernels=avx2", keys[1]: "ofa d=full kernels=native:1a2b3c4d"}
    assert numerics(keys[0]) != numerics(keys[1]) != numerics(keys[3])
    assert "CPU kernels native:1a2b3c4d" in numerics(keys[1])
    assert variant_labels(keys[:1]) == {keys[0]: "ofa d=full"}  # one kind of row: nothing added
    assert precision_label([pinned]) == "evaluation fp32, CPT fp32, CPU kernels avx2"
    assert precision_label([pinned, before]) == "evaluation fp32, CPT fp32, CPU kernels avx2 / native"


# -- the label is measured -------------------------------------------------------------------------------------
@pytest.mark.skipif(not X86_AVX2, reason="the pinned kernels need an x86-64 CPU with AVX2 and FMA")
def test_the_label_is_the_fingerprint_against_the_golden_one_of_the_avx2_emulation():
    """The pinned default and the AVX2 emulation (where the golden fingerprint is taken) compute the same fp32 and
    bf16 fingerprints: one label, ``avx2``. The same process computing natively on an AVX-512 / AMX CPU gets
    ``native:<fingerprint>``, other for fp32 alone and with its bf16 kernels; oneDNN left to the CPU under
    ``--precision bf16`` (AMX tiles or AVX-512 BF16 pairs) is another label than oneDNN pinned to AVX2."""
    pinned, emulated = kernels.measure_in_child({}), kernels.measure_in_child(kernels.avx2_emulation())
    golden = json.loads(kernels.GOLDEN.read_text())
    if GOLDEN_HERE:  # (an AMD CPU's MKL computes otherwise under the emulation's caps too: nothing to compare)
        assert emulated["fp32"] == golden["fp32"] and emulated["bf16"] == golden["bf16"], \
            "the golden fingerprint is stale (another torch or numpy?): python -m harness.core.kernels --write-golden"
    else:  # what it computes is labelled by what it computes
        assert pinned["label"] == "native:" + pinned["fp32"]["digest"][:8] != golden["fp32"]["digest"][:8]
    assert pinned["fp32"] == emulated["fp32"] and pinned["bf16"] == emulated["bf16"]
    assert (pinned["label"], pinned["label_bf16"]) == (PINNED_LABEL, PINNED_LABEL_BF16) == (emulated["label"],
                                                                                            emulated["label_bf16"])
    flags = kernels.cpu_flags()
    if flags & {"avx512f", "amx_bf16", "avx512_bf16"}:  # the premise: this CPU's own kernels compute otherwise
        native = kernels.measure_in_child({kernels.ENV: "native"})
        assert native["label"] == "native:" + native["fp32"]["digest"][:8] not in ("avx2", pinned["label"])
        assert native["label_bf16"] == "native:" + native["bf16"]["digest"][:8] not in (native["label"], "avx2")
    if flags & {"amx_bf16", "avx512_bf16"}:  # pinned but for oneDNN's, as before ONEDNN_MAX_CPU_ISA was pinned
        own_onednn = kernels.measure_in_child({"ONEDNN_MAX_CPU_ISA": "ALL"})
        assert own_onednn["label_bf16"].startswith("native:") and own_onednn["label_bf16"] != pinned["label_bf16"]
        assert own_onednn["bf16"]["bf16_matmul"] != pinned["bf16"]["bf16_matmul"]


@pytest.mark.skipif(not X86_AVX2, reason="the pinned kernels need an x86-64 CPU with AVX2 and FMA")
def test_a_users_own_mkl_cbwr_is_kept_named_and_labelled_by_what_it_computes():
    code = ("import os, json\nfrom harness.core import kernels\nkernels.pin()\nimport torch\n"
            "print(json.dumps({'env': os.environ['MKL_CBWR'], 'kept': kernels.kept_by_user(),"
            " 'label': kernels.cpu_kernels(), 'describe': kernels.describe(), 'aten': os.environ['ATEN_CPU_CAPABILITY']}))")
    clean = {k: v for k, v in os.environ.items() if k not in (*kernels.PINS, kernels.ENV, kernels.PINNED_ENV)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**clean, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["env"] == "COMPATIBLE" and got["kept"] == {"MKL_CBWR": "COMPATIBLE"}  # not overwritten
    assert got["aten"] == "avx2"  # the other pins still made
    assert "MKL_CBWR=COMPATIBLE (the user's, kept)" in got["describe"]
    assert got["label"].startswith("native:")  # MKL's compatible path computes other bits than its AVX2 path


def test_the_fingerprint_is_computed_once_a_process_on_one_thread(monkeypatch):
    import torch

    calls = []
    real = kernels._workload

    def counted(bf16):
        calls.append((bf16, torch.get_num_threads()))
        return real(bf16)

    monkeypatch.setattr(kernels, "_workload", counted)
    monkeypatch.setattr(kernels, "_fingerprints", {})
    monkeypatch.setattr(kernels, "_labels", {})
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first = kernels.cpu_kernels()
        assert kernels.cpu_kernels() == first and kernels.fingerprint() == kernels.fingerprint()
        assert torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(threads)
    assert calls == [(False, 1)]
    kernels.cpu_kernels(bf16=True)
    assert calls == [(False, 1), (True, 1)]


def test_a_run_in_bf16_on_the_cpu_is_labelled_with_its_bf16_kernels(synthetic_world, monkeypatch):
    """The cells' label is the one of the kernels they use: fp32 alone, or with the bf16 kernels where the run
    computes in bf16 on the CPU; two labels are two identities, two seed groups, and the cell's logged param."""
    from harness.aggregate import group_key
    from harness.cell import cell_params
    from harness.config import make_config
    from harness.spec import resolve

    monkeypatch.setattr(kernels, "_labels", {False: "avx2", True: "native:0badf00d"})
    for var in ("HARNESS_EMULATE_ACCELERATOR", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)

    def spec(**over):
        return resolve(make_config(overrides={"world": "synthetic", "methods": ["random"], "tasks": ["sr-t"],
                                              "device": "cpu", **over}), synthetic_world)

    fp32, bf16, cpt_bf16 = spec(), spec(precision="bf16"), spec(cpt={"precision": "bf16"})
    assert (fp32.cpu_kernels, bf16.cpu_kernels, cpt_bf16.cpu_kernels) == ("avx2", "native:0badf00d", "native:0badf00d")
    monkeypatch.setattr(kernels, "_labels", {})  # measured: the pinned set with its bf16 kernels is labelled apart
    if X86_AVX2:  # from the cells labelled avx2 before oneDNN was pinned, which computed bf16 with the CPU's own
        assert (spec().cpu_kernels, spec(precision="bf16").cpu_kernels) == (PINNED_LABEL, PINNED_LABEL_BF16)
        assert PINNED_LABEL != PINNED_LABEL_BF16
    monkeypatch.setattr(kernels, "_labels", {False: "avx2", True: "native:0badf00d"})
    cell = fp32.plan.cells[0]
    assert fp32.keys(cell).identity["cpu_kernels"] == "avx2"
    assert cpt_bf16.keys(cell).identity["cpu_kernels"] == "native:0badf00d"
    assert cell_params(cpt_bf16, cell)["cpu_kernels"] == "native:0badf00d"
    monkeypatch.setattr(kernels, "_labels", {False: "native:11111111", True: "native:22222222"})
    other = spec()  # another machine's fp32 kernels
    assert len({s.keys(cell).key for s in (fp32, cpt_bf16, other)}) == 3
    assert len({group_key(s, cell.source, cell.method, cell.dim, [cell]) for s in (fp32, cpt_bf16, other)}) == 3


def test_importing_the_harness_changes_no_environment_and_its_command_pins_first():
    """No import has a side effect: ``import harness`` leaves ``os.environ`` as it was; the command line's first step
    pins the kernels (what every process the harness starts then inherits)."""
    code = ("import os, json\nbefore = dict(os.environ)\nimport harness, harness.cli, harness.core.kernels\n"
            "same = dict(os.environ) == before\nfrom harness.cli import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\n"
            "print(json.dumps({'same': same, 'pinned': os.environ.get(harness.core.kernels.PINNED_ENV)}))")
    clean = {k: v for k, v in os.environ.items() if k not in (*kernels.PINS, kernels.ENV, kernels.PINNED_ENV)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**clean, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["same"] is True
    assert got["pinned"] == ("1" if X86_AVX2 else None)
