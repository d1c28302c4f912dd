"""CPT across several processes: ``python -m torch.distributed.run --nproc_per_node N -m harness.cpt_worker SPEC``.

The runner launches this when a cell's CPT asks for more than one device (``cpt.devices`` / ``--cpt-devices``):
each rank builds the same Trainer over the same shuffled blocks (the world's memory-mapped CPT corpus,
:mod:`harness.corpus`: tokenized once, by the first rank to take its lock, and mapped by every rank and loader
worker) and the HF Trainer/accelerate wraps the model in DDP
(NCCL on GPUs, gloo on CPUs). The per-device batch and the gradient accumulation are chosen so that the effective
batch stays the profile's whatever the number of processes (:func:`harness.cpt.run_cpt`). Only rank 0 writes the
evaluation checkpoints, the loss log and the finished product.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m harness.cpt_worker SPEC.json", file=sys.stderr)
        return 2
    from harness.core import faults
    from harness.core.processes import die_with_parent

    die_with_parent()  # a rank ends with its launcher (which ends with the harness process)
    faults.install()
    spec = json.loads(Path(args[0]).read_text())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    from harness.cpt import run_cpt
    from harness.initialize import load_model, save_model
    from harness.worlds import get_world

    world = get_world(spec["world"], build=False)
    model_dir = Path(spec["model_dir"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    run_cpt(model_dir=model_dir, tokenizer=tokenizer, world=world, languages=spec["languages"],
            settings=spec["settings"], seed=int(spec["seed"]), device=spec["device"],
            product_dir=Path(spec["product_dir"]), eval_steps=list(spec["eval_steps"]),
            load_fn=lambda p: load_model(p, device="cpu"), save_fn=save_model)
    _close_process_group()
    return 0


def _close_process_group() -> None:
    """Tear the process group down before a successful exit. Left to the interpreter's exit, a rank that finishes
    first (rank 0 still writing the product) can abort in the gloo backend's destructor ("terminate called without
    an active exception"), and torchrun then reports the whole run as failed. (Not after an error: other ranks may
    still be inside a collective, and tearing down would hang them; torchrun stops them instead.)"""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
