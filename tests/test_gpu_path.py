"""The GPU path's checks that run on a CPU: the paper profile finishes on the synthetic world (its CPT block size
fitted to the source model), a device fault stays in its cell (a simulated poisoned device), and the choice of a
fresh process per cell."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest


def _runs(db: Path, experiment: str) -> dict[str, tuple[str, dict[str, str]]]:
    """{cell run name: (status, params)} of the experiment's cell runs."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT r.run_uuid, r.name, r.status FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
            "JOIN tags t ON t.run_uuid = r.run_uuid WHERE e.name = ? AND r.lifecycle_stage = 'active' "
            "AND t.key = 'harness.kind' AND t.value = 'cell'", (experiment,)).fetchall()
        out = {}
        for run_id, name, status in rows:
            params = dict(con.execute("SELECT key, value FROM params WHERE run_uuid = ?", (run_id,)).fetchall())
            out[name] = (status, params)
    return out


def _tags(db: Path, experiment: str, key: str) -> dict[str, str]:
    """{cell run name: the value of its tag ``key``}."""
    with sqlite3.connect(db) as con:
        return dict(con.execute(
            "SELECT r.name, t.value FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
            "JOIN tags t ON t.run_uuid = r.run_uuid WHERE e.name = ? AND t.key = ?", (experiment, key)).fetchall())


def _metric(db: Path, experiment: str, key: str) -> dict[str, float]:
    """{run name: the last value of its metric ``key``}."""
    with sqlite3.connect(db) as con:
        return dict(con.execute(
            "SELECT r.name, m.value FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
            "JOIN latest_metrics m ON m.run_uuid = r.run_uuid WHERE e.name = ? AND m.key = ?",
            (experiment, key)).fetchall())


PAPER_METHODS = ["clp", "clp+", "focus", "fvt", "hyperofa", "mean-cov", "ofa", "omp", "random", "random-map",
                 "tiktotok", "tokdist", "wechsel", "wechsel+overlap"]


# the methods' own training made small (a one-layer hypernetwork of width 32 for one epoch, no control network;
# one epoch of each fastText model, 16-d vectors; the helper model of CLP, CLP+ and OMP one layer of 32 for 20 steps,
# shared by the three): what this test checks is the run around them, at the paper's CPT and evaluation settings (the
# paper-size hypernetwork takes minutes on a CPU: bench_glot500_init.py; the paper-size helper, hours)
LIGHT_HELPER = """helper_hidden = 32
helper_layers = 1
helper_heads = 2
helper_steps = 20
helper_batch = 8
helper_seq_len = 32
helper_max_lines = 2000
"""
LIGHT_METHODS = """
[method_params.hyperofa]
epochs = 1
hidden = 32
layers = 1
control = false
[method_params.focus]
epochs = 1
dim = 16
[method_params.wechsel]
epochs = 1
dim = 16
[method_params."wechsel+overlap"]
epochs = 1
dim = 16
[method_params.tiktotok]
epochs = 1
dim = 16
""" + "".join(f"[method_params.{json.dumps(m)}]\n{LIGHT_HELPER}" for m in ("clp", "clp+", "omp"))


def test_paper_profile_finishes_on_the_synthetic_world(run_cli, harness_home, synthetic_world, tmp_path):
    """``--profile paper`` with every method, as a GPU node with two GPUs runs it, every branch of the accelerator
    taken on the CPU (HARNESS_EMULATE_ACCELERATOR): each cell in a spawned process of its own, pinned to one of
    the two GPUs (two cells side by side); CPT with two loader workers, pinned memory, no padding mask, the GPU's
    logging interval and the batch search, at the paper's effective batch of 512, and the GPU's numerics: bf16
    autocast for CPT (the profile's evaluation is fp32 on an H100 too), the SDPA attention over unmasked packed
    blocks. The CPT block size (512) is
    clamped to the source model's 128 positions before any cell, said when the run starts, logged on the cell run
    and named under the board; every task is evaluated at step 0 and after CPT; every cell finishes. The cells
    share one CPT corpus, tokenized once."""
    exp = "gpu-path-paper"
    config = tmp_path / "light.toml"
    config.write_text(LIGHT_METHODS)
    proc = run_cli("run", "--world", "synthetic", "--methods", "all", "--tasks", "sr-t", "--profile", "paper",
                   "--cpt-steps", "1", "--experiment", exp, "--config", str(config), "--keep-products",
                   env={"HARNESS_EMULATE_ACCELERATOR": "1", "HARNESS_EMULATE_GPUS": "2"}, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fitted to the source model: cpt.block_size 512 -> 128" in proc.stderr
    db = harness_home / "mlflow-tests.db"
    runs = _runs(db, exp)
    assert sorted(runs) == sorted(f"{m}-full-s1" for m in PAPER_METHODS)
    for status, params in runs.values():
        assert status == "FINISHED"
        assert params["cpt.block_size"] == "128" and params["cpt.effective_batch"] == "512"
        assert params["fitted.cpt.block_size"].startswith("512 -> 128")
        assert params["profile"] == "paper"
        # CPT in bf16 as on an H100; the paper profile evaluates in fp32 there too (its eval_precision)
        assert params["cpt.precision"] == "bf16" and params["eval_precision"] == "fp32"
    cpts = [json.loads((p / "_DONE.json").read_text()) for p in (harness_home / "products" / "cpt").glob("*")
            if (p / "_DONE.json").is_file() and json.loads((p / "_DONE.json").read_text())["settings"].get(
                "effective_batch") == 512]
    assert len(cpts) == len(runs) and {(d["precision"], d["attention"]) for d in cpts} == {("bf16", "sdpa")}
    assert len({d["corpus"] for d in cpts}) == 1
    gpus = _tags(db, exp, "harness.gpus")
    assert sorted(gpus) == sorted(runs) and set(gpus.values()) == {"0", "1"}  # one GPU per cell, both used
    # the batch searched (32 per device fits: 16 accumulation steps of 32 x 128), the one step's loss logged
    assert set(_metric(db, exp, "cpt/per_device_batch").values()) == {32.0}
    assert len(_metric(db, exp, "cpt/train_loss")) == len(runs)
    board = run_cli("leaderboard", "--experiment", exp, "--task", "sr-t", "--step", "final")
    assert board.returncode == 0, board.stderr[-2000:]
    assert "settings fitted to the source model" in board.stdout + board.stderr


def test_fit_leaves_what_the_model_takes(tmp_path):
    from harness.spec import fit_cpt

    src = tmp_path / "sources" / "s"
    src.mkdir(parents=True)
    world = SimpleNamespace(source_dir=lambda s: tmp_path / "sources" / s)
    (src / "config.json").write_text('{"model_type": "xlm-roberta", "max_position_embeddings": 514, '
                                     '"pad_token_id": 1}')
    assert fit_cpt({"block_size": 512}, world, ["s"]) == ({"block_size": 512}, {})
    fitted, notes = fit_cpt({"block_size": 1024}, world, ["s"])
    assert fitted["block_size"] == 512 and notes["cpt.block_size"].startswith("1024 -> 512")
    (src / "config.json").write_text('{"model_type": "bert", "max_position_embeddings": 64}')
    assert fit_cpt({"block_size": 128}, world, ["s"])[0]["block_size"] == 64
    assert fit_cpt({"block_size": 128}, world, ["missing"]) == ({"block_size": 128}, {})


def test_mlm_task_length_fitted_to_the_model(synthetic_world):
    """The mlm task's paper max_length (512) is capped by the model's positions and logged as its protocol."""
    from transformers import AutoTokenizer

    from harness.initialize import load_model
    from tasks.base import TaskSettings
    from tasks.mlm import MLMLoss

    src = synthetic_world.source_dir(synthetic_world.default_source)
    model, tok = load_model(src, device="cpu"), AutoTokenizer.from_pretrained(src)
    lang = MLMLoss().languages(synthetic_world)[:1]
    res = MLMLoss().evaluate(model, tok, synthetic_world, lang, TaskSettings(profile="paper", seed=1, device="cpu",
                                                                               max_sentences=4))
    assert res.extras["hyperparameters"]["max_length"] == 128


def test_cells_isolated_on_an_accelerator():
    from harness.executors import isolate_cells

    auto = SimpleNamespace(isolate_cells=None)
    assert isolate_cells(auto, "cuda") and isolate_cells(auto, "cuda:1")
    assert not isolate_cells(auto, "cpu")
    assert isolate_cells(SimpleNamespace(isolate_cells=True), "cpu")
    assert not isolate_cells(SimpleNamespace(isolate_cells=False), "cuda")


def test_device_fault_detection():
    import torch

    from harness.core.errors import is_device_fault

    assert is_device_fault(RuntimeError("CUDA error: device-side assert triggered"))
    try:
        try:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        except RuntimeError as inner:
            raise ValueError("while writing the model") from inner
    except ValueError as outer:
        assert is_device_fault(outer)
    assert not is_device_fault(RuntimeError("index 130 is out of bounds for dimension 1 with size 130"))
    assert not is_device_fault(ValueError("CUDA error"))  # only what torch raises (RuntimeError and kin)
    # the device is usable again once the memory is freed: the run goes on (the CPT retries with a smaller batch)
    assert not is_device_fault(RuntimeError("CUDA error: out of memory"))
    assert not is_device_fault(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))


def test_a_failed_torchrun_launch_is_not_a_fault_of_this_process():
    """The ranks' stderr of a failed launch names their CUDA errors; the harness process's device is healthy, so
    a run in one process goes on with its next cell."""
    from harness.core.errors import OtherProcessFailed, is_device_fault

    assert not is_device_fault(OtherProcessFailed(
        "distributed CPT failed (1): [rank1]: RuntimeError: CUDA error: device-side assert triggered"))


JOB = ["run", "--world", "synthetic", "--methods", "random,ofa,fvt", "--tasks", "mlm", "--cpt-steps", "1"]


def test_device_fault_stays_in_its_cell(run_cli, harness_home, synthetic_world):
    """Each cell in a process of its own (the GPU default, asked for here on the CPU): the poisoned device fails its
    cell only; the cells after it finish; the same command then finishes the failed cell."""
    exp = "gpu-path-isolated"
    proc = run_cli(*JOB, "--experiment", exp, "--workers", "1", "--isolate-cells",
                   env={"HARNESS_FAULT_DEVICE": "ofa"}, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    runs = _runs(harness_home / "mlflow-tests.db", exp)
    assert {n: s for n, (s, _) in runs.items()} == {"ofa-full-s1": "FAILED", "random-full-s1": "FINISHED",
                                                     "fvt-full-s1": "FINISHED"}
    assert "device-side assert" in proc.stderr
    again = run_cli(*JOB, "--experiment", exp, "--workers", "1", "--isolate-cells", timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {s for s, _ in _runs(harness_home / "mlflow-tests.db", exp).values()} == {"FINISHED"}


def test_device_fault_in_process_stops_the_run(run_cli, harness_home, synthetic_world):
    """Cells in this process (``--workers 1``, no isolation): the run stops at the poisoned cell with one line
    naming it and the cause, no traceback; what finished is kept and the same command resumes."""
    exp = "gpu-path-in-process"
    proc = run_cli(*JOB, "--experiment", exp, "--workers", "1", env={"HARNESS_FAULT_DEVICE": "ofa"}, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    line = [x for x in proc.stderr.splitlines() if "the device failed" in x]
    assert len(line) == 1 and "ofa" in line[0] and "device-side assert" in line[0], proc.stderr[-2000:]
    before = _runs(harness_home / "mlflow-tests.db", exp)
    assert before["ofa-full-s1"][0] == "FAILED"
    assert "fvt-full-s1" not in before or before["fvt-full-s1"][0] != "FAILED"
    again = run_cli(*JOB, "--experiment", exp, "--workers", "1", timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    after = _runs(harness_home / "mlflow-tests.db", exp)
    assert sorted(after) == ["fvt-full-s1", "ofa-full-s1", "random-full-s1"]
    assert {s for s, _ in after.values()} == {"FINISHED"}


def test_isolate_cells_is_a_run_setting():
    from harness.config import make_config

    assert make_config(overrides={"isolate_cells": True}).isolate_cells is True
    assert make_config(file_values={"isolate_cells": False}).isolate_cells is False
    assert make_config().isolate_cells is None


# -- the batch fits the card by itself ------------------------------------------------------------------------
def test_batch_candidates_halve_and_keep_the_effective_batch():
    from harness.cpt_batch import candidates

    assert candidates(512, 32, 1) == [32, 16, 8, 4, 2, 1]
    assert candidates(384, 12, 4) == [12, 6, 3, 1]
    for b in candidates(512, 32, 4):
        assert 512 % (b * 4) == 0


def test_the_probe_holds_room_for_the_optimizer_and_the_accumulated_gradients():
    """AdamW's two moments and the fp32 gradients kept across accumulation steps: 12 bytes a trainable weight."""
    from torch import nn

    from harness.cpt_batch import held_state_bytes

    model = nn.Linear(10, 3)  # 33 weights
    model.bias.requires_grad_(False)
    assert held_state_bytes(model) == 12 * 30


def test_batch_search_under_a_simulated_memory_limit():
    """A card that holds 4,096 tokens per forward: blocks of 512 give 8 sequences per device, 64 accumulation."""
    import torch

    from harness.core.faults import SimulatedMemory
    from harness.cpt_batch import find_per_device_batch

    sim = SimulatedMemory(4096)
    got, tried = find_per_device_batch(512, 32, 1, lambda b: sim.check(b * 512))
    assert got == 8 and 512 // got == 64
    assert tried == [(32, "out of memory"), (16, "out of memory"), (8, "fits")]
    with pytest.raises(torch.OutOfMemoryError):
        find_per_device_batch(512, 32, 1, lambda b: SimulatedMemory(100).check(b * 512))
    with pytest.raises(ValueError):  # any other error is the caller's, not a reason to shrink the batch
        find_per_device_batch(512, 32, 1, lambda b: (_ for _ in ()).throw(ValueError("bad")))


def _cpt(world, tmp_path, monkeypatch, memory: str, load_fn=None, **settings):
    from transformers import AutoTokenizer

    from harness.core import faults, hooks
    from harness.cpt import read_layouts, read_train_log, run_cpt
    from harness.initialize import load_model, save_model

    monkeypatch.setenv("HARNESS_SIMULATED_MEMORY", memory)
    monkeypatch.setattr(hooks, "MEMORY_LIMITS", [])
    faults.install()  # as every process of a run does when it starts
    src = world.source_dir(world.default_source)
    base = {"steps": 4, "lr": 1e-4, "effective_batch": 8, "per_device_batch": 8, "block_size": 32,
            "mlm_probability": 0.15, "warmup_steps": 0, "weight_decay": 0.0, "precision": "fp32",
            "max_sentences_per_language": 50, "save_every": 1, **settings}
    product = tmp_path / "cpt"
    langs = sorted(p.stem for p in world.resource_files("cpt_text"))
    run_cpt(model_dir=src, tokenizer=AutoTokenizer.from_pretrained(src), world=world, languages=langs,
            settings=base, seed=1, device="cpu", product_dir=product, eval_steps=[],
            load_fn=load_fn or (lambda p: load_model(p, device="cpu")), save_fn=save_model)
    return read_layouts(product), read_train_log(product)


def test_cpt_finds_the_batch_at_its_start(synthetic_world, tmp_path, monkeypatch):
    layouts, train_log = _cpt(synthetic_world, tmp_path, monkeypatch, "64")  # 2 blocks of 32 tokens
    assert [(x["per_device"], x["accumulation"]) for x in layouts] == [(2, 4)]
    assert "8 out of memory" in layouts[0]["why"] and "2 fits" in layouts[0]["why"]
    assert [r["step"] for r in train_log] == [1, 2, 3, 4]


def test_an_out_of_memory_error_mid_run_halves_the_batch_and_resumes(synthetic_world, tmp_path, monkeypatch):
    """The card's free memory shrinks after step 2: CPT goes on from its step-2 checkpoint with smaller batches,
    the same effective batch, and every step logged once."""
    layouts, train_log = _cpt(synthetic_world, tmp_path, monkeypatch, "256@2:64")
    got = [(x["from_step"], x["per_device"], x["accumulation"]) for x in layouts]
    assert got[0] == (0, 8, 1) and got[-1] == (2, 2, 4), got
    assert all(p * a == 8 for _, p, a in got)
    assert all("out of memory during CPT" in x["why"] for x in layouts[1:])
    assert [r["step"] for r in train_log] == [1, 2, 3, 4]


def test_the_model_that_ran_out_of_memory_is_freed_before_the_next_is_loaded(synthetic_world, tmp_path,
                                                                             monkeypatch):
    """The retry after an out-of-memory error holds one model, not two: the failed one (its gradients, its
    optimizer state) is gone when the next is loaded."""
    import weakref

    from harness.initialize import load_model

    loaded: list = []

    def load(p):
        assert all(ref() is None for ref in loaded), "the model that ran out of memory is still alive"
        model = load_model(p, device="cpu")
        loaded.append(weakref.ref(model))
        return model

    layouts, _ = _cpt(synthetic_world, tmp_path, monkeypatch, "256@2:64", load_fn=load)
    assert len(loaded) == len(layouts) >= 2
