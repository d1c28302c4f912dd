"""The synthetic world's decoder source ``dec``: causal CPT (next-token loss, no masking; the accelerator
emulation's bf16 + SDPA), the clm task against a hand computation, retrieval and tagging protocols on a decoder,
and the world's identity (the decoder carries its own, so every encoder cell keeps its key)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from harness.core import objective
from tasks.base import TaskSettings

DEC = "dec"


def _cpt_settings(**over) -> dict:
    return {"steps": 3, "lr": 1e-3, "effective_batch": 8, "per_device_batch": 8, "block_size": 32,
            "mlm_probability": 0.15, "warmup_steps": 0, "weight_decay": 0.0, "precision": "fp32",
            "max_sentences_per_language": 60, "save_every": 0, "dataloader_workers": 0, "logging_steps": 1,
            "auto_batch": False, "masked_head": True, "attention_mask": False, **over}


def _cpt(world, product: Path, eval_steps=(), **over) -> tuple[list[float], dict]:
    from transformers import AutoTokenizer

    from harness.cpt import read_train_log, run_cpt
    from harness.initialize import load_model, save_model

    src = world.source_dir(DEC)
    langs = sorted(p.stem for p in world.resource_files("cpt_text"))
    run_cpt(model_dir=src, tokenizer=AutoTokenizer.from_pretrained(src), world=world, languages=langs,
            settings=_cpt_settings(**over), seed=1, device="cpu", product_dir=product, eval_steps=list(eval_steps),
            load_fn=lambda p: load_model(p, device="cpu"), save_fn=save_model)
    return [r["loss"] for r in read_train_log(product)], json.loads((product / "_DONE.json").read_text())


def _mean_causal_loss(world, blocks: int = 64) -> float:
    """The decoder's mean next-token loss over CPT blocks of 32 tokens (every position a target)."""
    from transformers import AutoTokenizer

    from harness.cpt import cpt_blocks

    src = world.source_dir(DEC)
    tok = AutoTokenizer.from_pretrained(src)
    model = objective.load_pretrained(src).eval()
    langs = sorted(p.stem for p in world.resource_files("cpt_text"))
    ids = torch.tensor(cpt_blocks(tok, world, langs, 32, 60, seed=1)[:blocks])
    with torch.no_grad():
        return float(model(input_ids=ids, labels=ids).loss)


def test_the_decoder_source_is_a_causal_lm_outside_the_worlds_hash(synthetic_world):
    from harness.core.hashing import hash_obj

    assert synthetic_world.sources == ["src", DEC]
    assert synthetic_world.source_objective(DEC) == "clm" and synthetic_world.source_objective("src") == "mlm"
    entry = synthetic_world.manifest["sources"][DEC]
    assert entry["own_identity"] and len(entry["sha256"]) == 64
    # the world's hash is the manifest's without the decoder: an encoder cell's key does not move
    without = {**synthetic_world.manifest, "sources": {"src": synthetic_world.manifest["sources"]["src"]}}
    assert synthetic_world.hash == hash_obj(without) != hash_obj(synthetic_world.manifest)
    assert synthetic_world.source_identity(DEC) == hash_obj(entry) and synthetic_world.source_identity("src") is None
    model = objective.load_pretrained(synthetic_world.source_dir(DEC))
    assert type(model).__name__ == "LlamaForCausalLM" and objective.is_tied(model)


def test_a_decoder_cells_identity_holds_its_source(synthetic_world):
    from harness.config import make_config
    from harness.spec import resolve

    def keys(source):
        cfg = make_config(overrides={"methods": ["random"], "tasks": ["sr-t"], "world": "synthetic",
                                     "device": "cpu", "source": source})
        spec = resolve(cfg, synthetic_world)
        (cell,) = spec.plan.cells
        return spec.keys(cell)

    dec, src = keys(DEC), keys("src")
    assert dec.identity["source_identity"] == synthetic_world.source_identity(DEC)
    assert "source_identity" not in src.identity
    assert dec.identity["world"] == src.identity["world"] == synthetic_world.hash


def test_causal_cpt_is_the_next_token_loss_on_every_position(synthetic_world, tmp_path):
    """With the learning rate at 0 the logged step losses are the source's own next-token loss on CPT blocks (an
    MLM collator's masked inputs would give several nats more); a real step then lowers it."""
    frozen, done = _cpt(synthetic_world, tmp_path / "frozen", lr=0.0)
    want = _mean_causal_loss(synthetic_world)
    assert all(abs(x - want) / want < 0.15 for x in frozen), (frozen, want)
    losses, done = _cpt(synthetic_world, tmp_path / "cpt", eval_steps=[3], steps=3, lr=3e-3)
    back = objective.load_pretrained(tmp_path / "cpt" / "step-3")
    assert type(back).__name__ == "LlamaForCausalLM" and done["attention"] == "eager" and len(losses) == 3


def test_the_emulation_trains_a_decoder_in_bf16_with_sdpa(synthetic_world, tmp_path, monkeypatch):
    """As for encoders (tests/test_accelerator_emulation.py): bf16 autocast with SDPA under the emulation, close
    to the fp32 eager losses, not equal."""
    from harness.core.precision import resolve_precision

    fp32, done32 = _cpt(synthetic_world, tmp_path / "fp32", steps=5)
    monkeypatch.setenv("HARNESS_EMULATE_ACCELERATOR", "1")
    bf16, done16 = _cpt(synthetic_world, tmp_path / "bf16", steps=5, precision=resolve_precision("auto", "cpu"))
    assert done32["attention"] == "eager" and (done16["precision"], done16["attention"]) == ("bf16", "sdpa")
    gaps = [abs(a - b) / b for a, b in zip(bf16, fp32, strict=True)]
    assert 1e-6 < max(gaps) < 0.01, (bf16, fp32)


def test_clm_task_equals_a_hand_computation(synthetic_world):
    from transformers import AutoTokenizer

    from harness.core.registry import TASKS
    from harness.worlds.base import read_lines

    src = synthetic_world.source_dir(DEC)
    tok = AutoTokenizer.from_pretrained(src)
    model = objective.load_pretrained(src).eval()
    lang = "qab_Latn"
    res = TASKS.get("clm")().evaluate(model, tok, synthetic_world, [lang], TaskSettings(max_sentences=3))
    nats, n_tokens, n_bytes = 0.0, 0, 0
    for text in read_lines(synthetic_world.task_dir("mlm") / f"{lang}.txt")[:3]:
        ids = [tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        logp = torch.log_softmax(logits.double(), dim=-1)
        nats -= sum(float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1))
        n_tokens += len(ids) - 1
        n_bytes += len(text.encode("utf-8"))
    assert res.scores["loss"][lang] == pytest.approx(nats / n_tokens, rel=1e-5)
    assert res.scores["bpb"][lang] == pytest.approx(nats / (math.log(2) * n_bytes), rel=1e-5)
    assert res.items["bpb"][lang].value() == pytest.approx(res.scores["bpb"][lang], rel=1e-9)
    assert res.extras["protocol"] == "clm-rolling-bos" and res.extras["counts"][lang]["bytes"] == n_bytes


def test_retrieval_and_tagging_name_their_decoder_protocol(synthetic_world):
    from transformers import AutoTokenizer

    from harness.core.registry import TASKS
    from tasks.tagger import Featurizer

    src = synthetic_world.source_dir(DEC)
    tok = AutoTokenizer.from_pretrained(src)
    model = objective.load_pretrained(src).eval()
    res = TASKS.get("sr-t")().evaluate(model, tok, synthetic_world, ["qab_Latn"], TaskSettings(max_sentences=20))
    assert res.extras["layer"] == 1 and res.extras["n_layers"] == 2 and res.extras["objective"] == "clm"
    assert "Skean" in res.extras["layer_rule"]
    feat = Featurizer(tok, 64, "last")
    word = "Kamalosa"
    pieces = feat.pieces([word])[0]
    assert len(pieces) > 1 and feat.label_offset(word) == len(pieces) - 1


def test_mlm_bits_per_byte_equals_a_hand_computation(synthetic_world):
    """The encoder's bits per byte: every token masked in turn, its negative log-likelihood summed, over ln 2 x the
    text's bytes, recomputed here with the full forward one masked copy at a time."""
    from transformers import AutoTokenizer

    from harness.core.registry import TASKS
    from harness.worlds.base import read_lines

    src = synthetic_world.source_dir("src")
    tok = AutoTokenizer.from_pretrained(src)
    model = objective.load_pretrained(src).eval()
    lang = "qad_Cyrl"
    res = TASKS.get("mlm-bpb")().evaluate(model, tok, synthetic_world, [lang], TaskSettings(max_sentences=2))
    nats, n_bytes, n_tokens = 0.0, 0, 0
    for text in read_lines(synthetic_world.task_dir("mlm") / f"{lang}.txt")[:2]:
        ids = tok(text)["input_ids"]
        n_bytes += len(text.encode("utf-8"))
        for p in range(1, len(ids) - 1):  # every token between <s> and </s>
            masked = list(ids)
            masked[p] = tok.mask_token_id
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=torch.tensor([masked])).logits[0, p].double(), dim=-1)
            nats -= float(logp[ids[p]])
            n_tokens += 1
    assert res.scores["bpb"][lang] == pytest.approx(nats / (math.log(2) * n_bytes), rel=1e-5)
    assert res.scores["loss"][lang] == pytest.approx(nats / n_tokens, rel=1e-5)
    assert res.extras["protocol"] == "mlm-pll" and res.extras["counts"][lang]["bytes"] == n_bytes
