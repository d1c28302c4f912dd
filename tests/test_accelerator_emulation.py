"""The accelerator's branches, taken on the CPU (``HARNESS_EMULATE_ACCELERATOR=1``): CI has no GPU, so every branch
only a GPU run takes is taken here -- CPT in a spawned cell with the GPU's loader workers, pinned memory, no padding
mask and logging interval; cells in processes of their own; the batch search; one GPU per cell on a node of many."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import pytest

EMULATE = {"HARNESS_EMULATE_ACCELERATOR": "1"}


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

    class Stub:  # a collator stand-in defined at module level would pickle too; the wrapper must not break that
        pass

    wrapped = WithoutPaddingMask(_collate_ones)
    again = pickle.loads(pickle.dumps(wrapped))
    batch = again([{"input_ids": [1, 2]}])
    assert "attention_mask" not in batch and torch.equal(batch["input_ids"], torch.tensor([[1, 2]]))
    del Stub


def _collate_ones(examples):
    import torch

    ids = torch.tensor([e["input_ids"] for e in examples])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
