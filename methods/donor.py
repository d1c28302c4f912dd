"""A donor model's token tables: the input table (and the output table, when untied) of an HF model folder whose
rows are indexed by the target tokenizer, as OMP (mergekit's donor) and CLP / CLP+ (the papers' helper model) read
them (spec ``methods-2026.md`` §1.5-1.6, §2).

The tables are read from the checkpoint's files by name, without building the model: the model's skeleton is made
on the meta device (no memory) only to learn which parameters are its input and output embeddings and whether
they are tied; those tensors alone are then read from the safetensors (or ``pytorch_model.bin``) files, sharded or
not. A checkpoint saved from another class of the same model (a base model without its head, a multimodal wrapper)
names them with another prefix: the longest suffix of the parameter's name that names one tensor of the checkpoint
is taken.

Rows beyond the target tokenizer's length (padding rows, as Gemma's) are dropped; a donor with fewer rows than the
target tokenizer has tokens does not own the target vocabulary and is refused. A donor whose output table is untied
but missing from its checkpoint is refused too (its head would be drawn at random).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.core.errors import ConfigError

_MEMO: dict[tuple, tuple[np.ndarray, np.ndarray | None, dict[str, Any]]] = {}  # the last folder read


def _skeleton(folder: Path) -> tuple[Any, str]:
    """The model of ``folder``'s config on the meta device (its head's class from ``architectures``) and those."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    cfg = AutoConfig.from_pretrained(folder)
    archs = " ".join(getattr(cfg, "architectures", None) or [])
    if "CausalLM" in archs or "ConditionalGeneration" in archs:
        autos = (AutoModelForCausalLM, AutoModelForMaskedLM, AutoModel)
    elif "MaskedLM" in archs:
        autos = (AutoModelForMaskedLM, AutoModelForCausalLM, AutoModel)
    else:
        autos = (AutoModelForCausalLM, AutoModelForMaskedLM, AutoModel)
    for auto in autos:
        try:
            with torch.device("meta"):
                return auto.from_config(cfg), archs
        except (ValueError, KeyError):
            continue
    raise ConfigError(f"the model at {folder} has a config that no transformers model class takes")


def _weight_files(folder: Path) -> list[Path]:
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            weight_map = json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"]
            return [folder / f for f in sorted(set(weight_map.values()))]
    for single in ("model.safetensors", "pytorch_model.bin"):
        if (folder / single).is_file():
            return [folder / single]
    return []


def _checkpoint_keys(files: list[Path]) -> dict[str, Path]:
    """Every tensor name of the checkpoint -> its file."""
    out: dict[str, Path] = {}
    for f in files:
        if f.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(f), framework="pt") as fh:
                out.update({k: f for k in fh.keys()})  # noqa: SIM118 - a safetensors handle is no dict
        else:
            out.update({k: f for k in torch.load(f, map_location="cpu", mmap=True, weights_only=True)})
    return out


def _read_tensor(key: str, file: Path) -> torch.Tensor:
    if file.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(file), framework="pt") as fh:
            return fh.get_tensor(key)
    return torch.load(file, map_location="cpu", mmap=True, weights_only=True)[key]


def checkpoint_name(names: list[str], keys: dict[str, Path]) -> str | None:
    """The checkpoint's name for a parameter known by ``names`` (its names in the model, tied ones included): the
    name itself, else the longest suffix of one that ends exactly one checkpoint name."""
    for n in names:
        if n in keys:
            return n
    for n in names:
        parts = n.split(".")
        for i in range(1, len(parts)):
            suffix = ".".join(parts[i:])
            found = [k for k in keys if k == suffix or k.endswith("." + suffix)]
            if len(found) == 1:
                return found[0]
    return None


def _names_of(model: Any, param: torch.nn.Parameter) -> list[str]:
    return [n for n, p in model.named_parameters(remove_duplicate=False) if p is param]


def donor_digest(inp: np.ndarray, out: np.ndarray | None) -> str:
    """The donor's identity as the methods use it: a hash of the rows they read (input, and output when untied)."""
    h = hashlib.sha256(np.ascontiguousarray(inp).tobytes())
    if out is not None:
        h.update(np.ascontiguousarray(out).tobytes())
    return h.hexdigest()[:16]


def read_donor(folder: Path, n_t: int, *, who: str, what: str = "donor model"
               ) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any]]:
    """``(input |V_t| x d, output |V_t| x d or None when tied, info)`` of the model at ``folder``, float32, rows
    beyond ``n_t`` dropped; ``info``: path, rows, dim, tied, architecture, identity."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{who}: the {what} {str(folder)!r} is not a model folder (no config.json); give the "
                          f"folder of a model that uses the target tokenizer")
    files = _weight_files(folder)
    if not files:
        raise ConfigError(f"{who}: the {what} at {folder} has no weights (model.safetensors or pytorch_model.bin)")
    memo_key = (str(folder.resolve()), n_t, tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files))
    if memo_key in _MEMO:
        inp, out, info = _MEMO[memo_key]
        return inp, out, dict(info)
    model, archs = _skeleton(folder)
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = head is None or head.weight is emb.weight
    keys = _checkpoint_keys(files)
    found = checkpoint_name(_names_of(model, emb.weight), keys)
    if found is None and tied and head is not None:
        found = checkpoint_name(_names_of(model, head.weight), keys)
    if found is None:
        raise ConfigError(f"{who}: the {what} at {folder} holds no input embedding table in its checkpoint")
    table = _read_tensor(found, keys[found])
    rows = int(table.shape[0])
    if rows < n_t:
        raise ConfigError(f"{who}: the {what} at {folder} has {rows} input rows, fewer than the target tokenizer's "
                          f"{n_t} tokens: it does not own the target vocabulary")
    inp = table[:n_t].float().numpy().copy()
    out = None
    if not tied:
        found_out = checkpoint_name(_names_of(model, head.weight), keys)
        if found_out is None:
            raise ConfigError(f"{who}: the {what} at {folder} unties its output table, and its checkpoint holds "
                              f"none")
        out_table = _read_tensor(found_out, keys[found_out])
        if int(out_table.shape[0]) < n_t:
            raise ConfigError(f"{who}: the {what} at {folder} has {int(out_table.shape[0])} output rows, fewer than "
                              f"the target tokenizer's {n_t} tokens")
        out = out_table[:n_t].float().numpy().copy()
    info = {"path": str(folder), "rows": rows, "dim": int(inp.shape[1]), "tied": bool(tied), "architecture": archs,
            "identity": donor_digest(inp, out)}
    _MEMO.clear()
    _MEMO[memo_key] = (inp, out, info)
    return inp, out, dict(info)
