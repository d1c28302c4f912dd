"""The accelerator's branches, taken on the CPU (``HARNESS_EMULATE_ACCELERATOR=1``): CI has no GPU, so every branch
only a GPU run takes is taken here -- CPT in a spawned cell with the GPU's loader workers, pinned memory, no padding
mask and logging interval; cells in processes of their own; the batch search; one GPU per cell on a node of many."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest

EMULATE = {"HARNESS_EMULATE_ACCELERATOR": "1"}


@pytest.fixture(autouse=True)
def _environment_left_as_found():
    """No test here leaves the process's environment changed (a pinned GPU or an emulated accelerator left behind
    would change what every later test in the process runs on)."""
    def now() -> dict:
        return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's own, per phase

    before = now()
    yield
    after = now()
    changed = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert not changed, f"the test left the environment changed: {changed}"


def _spawned_cpt(home: str, product: str, settings: dict, out) -> None:  # runs in a spawned process
    os.environ.update({"HARNESS_HOME": home, "OMP_NUM_THREADS": "1", **EMULATE})
    try:
        from transformers import AutoTokenizer

        from harness.cpt import read_layouts, read_train_log, run_cpt
        from harness.initialize import load_model, save_model
        from harness.worlds import get_world

        world = get_world("synthetic", build=False)
        src = world.source_dir(world.default_source)
        langs = sorted(p.stem for p in world.resource_files("cpt_text"))
        run_cpt(model_dir=src, tokenizer=AutoTokenizer.from_pretrained(src), world=world, languages=langs,
                settings=settings, seed=1, device="cpu", product_dir=Path(product), eval_steps=[],
                load_fn=lambda p: load_model(p, device="cpu"), save_fn=save_model)
        out.put({"layouts": read_layouts(Path(product)), "log": read_train_log(Path(product))})
    except BaseException as exc:  # noqa: BLE001 -- reported to the test
        out.put({"error": f"{type(exc).__name__}: {exc}"})


def _cpt_settings(**over) -> dict:
    return {"steps": 3, "lr": 1e-4, "effective_batch": 4, "per_device_batch": 4, "block_size": 32,
            "mlm_probability": 0.15, "warmup_steps": 0, "weight_decay": 0.0, "precision": "fp32",
            "max_sentences_per_language": 20, "save_every": 0, **over}


def test_cpt_runs_in_a_spawned_cell_with_the_accelerator_defaults(synthetic_world, harness_home, tmp_path):
    """The failure a GPU run had in every CPT cell: a spawned cell's loader workers pickle the collator. Here the
    cell is spawned as on a GPU, with the GPU's defaults (two loader workers, no padding mask over packed blocks);
    CPT finishes, and the loss of the last step is logged although the run is shorter than the logging interval."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_spawned_cpt, args=(str(harness_home), str(tmp_path / "cpt"), _cpt_settings(), out))
    p.start()
    got = out.get(timeout=600)
    p.join(timeout=60)
    assert "error" not in got, got.get("error")
    assert [r["step"] for r in got["log"]] == [3]  # logged every 10 steps on a GPU, and at the last step
    assert "batch search" in got["layouts"][0]["why"]


def test_cpt_speed_takes_the_accelerator_side_under_emulation(monkeypatch):
    from harness.cpt import cpt_speed

    cpu = cpt_speed({}, "cpu")
    assert cpu["dataloader_workers"] == 0 and cpu["attention_mask"] and cpu["logging_steps"] == 1
    monkeypatch.setenv("HARNESS_EMULATE_ACCELERATOR", "1")
    assert cpt_speed({}, "cpu") == cpt_speed({}, "cuda")
    gpu = cpt_speed({}, "cuda")
    assert gpu["dataloader_workers"] == 2 and gpu["persistent_workers"] and not gpu["attention_mask"]


def test_the_collator_without_padding_mask_pickles():
    """Loader workers of a spawned process receive the collator by pickle."""
    import pickle

    import torch

    from harness.cpt import WithoutPaddingMask

    wrapped = WithoutPaddingMask(_collate_ones)
    again = pickle.loads(pickle.dumps(wrapped))
    batch = again([{"input_ids": [1, 2]}])
    assert "attention_mask" not in batch and torch.equal(batch["input_ids"], torch.tensor([[1, 2]]))


def _collate_ones(examples):
    import torch

    ids = torch.tensor([e["input_ids"] for e in examples])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


# -- a node of several GPUs: one group of GPUs per cell process, never DataParallel ---------------------------------
def test_gpu_slots_one_cell_per_gpu_or_per_group(monkeypatch):
    from harness.core.devices import gpu_slots
    from harness.core.errors import ConfigError

    monkeypatch.setenv("HARNESS_EMULATE_ACCELERATOR", "1")
    monkeypatch.setenv("HARNESS_EMULATE_GPUS", "4")
    assert gpu_slots("cpu") == ["0", "1", "2", "3"]
    assert gpu_slots("cpu", 2) == ["0,1", "2,3"]
    assert gpu_slots("cpu", 3) == ["0,1,2"]
    with pytest.raises(ConfigError, match="this machine has 4 GPU"):
        gpu_slots("cpu", 5)
    monkeypatch.delenv("HARNESS_EMULATE_ACCELERATOR")
    assert gpu_slots("cpu") == []


def test_gpu_slots_follow_cuda_visible_devices(monkeypatch):
    """On a real node: the GPUs CUDA_VISIBLE_DEVICES names (counted through torch), ``cuda:N`` the Nth of them."""
    import torch

    from harness.core.devices import gpu_slots
    from harness.core.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert gpu_slots("cuda") == ["4", "5", "6", "7"]
    assert gpu_slots("cuda:1") == ["5"]
    assert gpu_slots("cuda:2", 2) == ["6,7"]
    with pytest.raises(ConfigError, match="needs GPUs 3 to 4"):
        gpu_slots("cuda:3", 2)


def test_a_pinned_process_computes_on_its_first_gpu_and_each_rank_on_its_own(monkeypatch):
    from harness.core import devices

    # set before they are removed or written, so that monkeypatch restores them (a delenv of an absent variable
    # records nothing, and pin() writes os.environ itself)
    for name in (devices.PINNED_ENV, "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "")
    monkeypatch.delenv(devices.PINNED_ENV)
    assert devices.compute_device("cuda:3") == "cuda:3"
    devices.pin("3")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3" and devices.pinned() == "3"
    assert devices.compute_device("cuda:3") == "cuda" and devices.compute_device("cpu") == "cpu"
    assert devices.rank_device("cuda", 1) == "cuda:1" and devices.rank_device("cpu", 1) == "cpu"


def test_each_process_leases_its_own_slot(tmp_path):
    from harness.core.devices import SlotLease

    a, b = SlotLease(["0", "1"], str(tmp_path)), SlotLease(["0", "1"], str(tmp_path))
    assert {a.slot, b.slot} == {"0", "1"}
    with pytest.raises(TimeoutError):
        SlotLease(["0", "1"], str(tmp_path), timeout=0.2)
    os.close(a.fd)  # what the kernel does when a's process ends
    assert SlotLease(["0", "1"], str(tmp_path), timeout=1).slot == a.slot


def test_the_local_executor_on_a_node_of_gpus(monkeypatch):
    """Cells side by side, one GPU each, each in a fresh process; a run that keeps its cells in this process must
    see the GPUs of one cell (else the Trainer would spread a CPT over all of them or ignore cuda:N)."""
    from types import SimpleNamespace

    from harness.core.errors import ConfigError
    from harness.executors import choose
    from harness.executors import local_executor as executor_for

    def local_executor(cfg, device, n_cells, cpt_devices=1):
        return executor_for(choose(cfg, device, cpt_devices, 1), n_cells)

    monkeypatch.setenv("HARNESS_EMULATE_ACCELERATOR", "1")
    monkeypatch.setenv("HARNESS_EMULATE_GPUS", "4")
    cfg = SimpleNamespace(workers=None, isolate_cells=None, executor="local")
    ex = local_executor(cfg, "cpu", 10)
    assert (ex.workers, ex.fresh, ex.slots) == (4, True, ["0", "1", "2", "3"])
    ex = local_executor(cfg, "cpu", 10, cpt_devices=2)
    assert (ex.workers, ex.slots) == (2, ["0,1", "2,3"])
    ex = local_executor(SimpleNamespace(workers=8, isolate_cells=None, executor="local"), "cpu", 10)
    assert ex.workers == 4  # never more cell processes than GPUs
    in_process = SimpleNamespace(workers=1, isolate_cells=False, executor="local")
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES"):
        local_executor(in_process, "cpu", 10)
    assert local_executor(in_process, "cpu", 0) is None  # nothing left to run: nothing to refuse
    monkeypatch.setenv("HARNESS_EMULATE_GPUS", "1")
    assert local_executor(in_process, "cpu", 10) is None


def test_too_few_gpus_for_the_cpt_devices_is_refused_before_anything_is_written(run_cli, tmp_path):
    home = tmp_path / "home"
    proc = run_cli("run", "--world", "synthetic", "--methods", "random", "--tasks", "mlm", "--cpt-devices", "4",
                   env={"HARNESS_EMULATE_ACCELERATOR": "1", "HARNESS_EMULATE_GPUS": "2",
                        "HARNESS_HOME": str(home)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "this machine has 2 GPU(s)" in proc.stderr and "Traceback" not in proc.stderr
    assert not home.exists()


def test_peak_memory_asks_cuda_only_for_a_cuda_device_and_of_that_device(monkeypatch):
    """A CPU cell on a GPU host starts no CUDA context to measure memory; a cell on cuda:N reports cuda:N's peak."""
    import torch

    from harness.initialize import PeakMemory

    asked: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: asked.append(("reset", d)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: asked.append(("peak", d)) or 2**20)
    with PeakMemory(device="cpu") as mem:
        pass
    assert asked == [] and mem.as_dict()["cuda_peak_mb"] is None
    with PeakMemory(device="cuda:1") as mem:
        pass
    assert asked == [("reset", torch.device("cuda:1")), ("peak", torch.device("cuda:1"))]
    assert mem.as_dict()["cuda_peak_mb"] == 1.0


def _loss_log(world, product: Path, **over) -> tuple[list[float], dict]:
    import json

    from transformers import AutoTokenizer

    from harness.cpt import read_train_log, run_cpt
    from harness.initialize import load_model, save_model

    src = world.source_dir(world.default_source)
    langs = sorted(p.stem for p in world.resource_files("cpt_text"))
    # the same computation both ways but for the numerics: one process, no loader workers, every step logged,
    # the profile's batch (no search), the masked positions' head, no padding mask (packed blocks)
    settings = _cpt_settings(steps=5, lr=1e-3, max_sentences_per_language=60, dataloader_workers=0, logging_steps=1,
                             auto_batch=False, masked_head=True, attention_mask=False, **over)
    run_cpt(model_dir=src, tokenizer=AutoTokenizer.from_pretrained(src), world=world, languages=langs,
            settings=settings, seed=1, device="cpu", product_dir=product, eval_steps=[],
            load_fn=lambda p: load_model(p, device="cpu"), save_fn=save_model)
    return [r["loss"] for r in read_train_log(product)], json.loads((product / "_DONE.json").read_text())


def test_the_emulation_computes_in_bf16_with_sdpa_close_to_fp32_eager(synthetic_world, tmp_path, monkeypatch):
    """Under the emulation CPT resolves ``auto`` to bf16 autocast and keeps the SDPA attention (an H100's
    numerics); the same cell in fp32 with the CPU's eager attention gives losses close to it, not equal. The
    tolerance, 0.5 % of the loss at each of 5 steps: bf16 keeps 8 bits of mantissa (a relative rounding of 2 ** -9
    per operand) but the matmuls accumulate in fp32 and the loss, softmax, weights and AdamW states stay fp32, so a
    step's loss moves by a few hundredths of a percent, and five steps at lr 1e-3 on a tiny model compound it only
    a little (measured: 0.003 % to 0.025 %; 0.5 % leaves 20x room for other CPUs' kernels). Equal losses (a gap
    under 1e-6) would mean the emulation computed in fp32 again."""
    from harness.core.precision import resolve_precision

    fp32, done32 = _loss_log(synthetic_world, tmp_path / "fp32", precision="fp32")
    assert done32["precision"] == "fp32" and done32["attention"] == "eager"
    monkeypatch.setenv("HARNESS_EMULATE_ACCELERATOR", "1")
    assert resolve_precision("auto", "cpu") == "bf16"
    # CPT takes the precision the run resolved (harness.spec): auto, under the emulation
    bf16, done16 = _loss_log(synthetic_world, tmp_path / "bf16", precision=resolve_precision("auto", "cpu"))
    assert done16["precision"] == "bf16" and done16["attention"] == "sdpa"
    assert len(bf16) == len(fp32) == 5
    gaps = [abs(a - b) / b for a, b in zip(bf16, fp32, strict=True)]
    assert max(gaps) < 0.005, (bf16, fp32)
    assert max(gaps) > 1e-6, (bf16, fp32)  # computed otherwise, not the fp32 path again
