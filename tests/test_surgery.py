"""Model surgery, save/load, factorized embeddings and the initialize_model entry point."""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError, HarnessError, MissingResourceError
from harness.core.registry import METHODS
from harness.core.surgery import FactorizedDecoder, FactorizedEmbedding, assemble_model, is_factorized
from harness.initialize import initialize_model, load_model, save_model
from methods.base import InitResult, Provenance
from methods.factorize import factorize
from methods.overlap import build_mapping
from tests._surgery_fixtures import (
    make_world,
    tiny_bert,
    tiny_xlmr,
    wordpiece_tokenizer,
    xlmr_replacement_tokenizer,
    xlmr_source_tokenizer,
    xlmr_target_tokenizer,
)

X = torch.tensor([[0, 4, 6, 25, 30, 9, 2], [0, 26, 27, 5, 2, 1, 1]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])


def body(model):
    """Every parameter except token embeddings and the vocabulary projection (weight and bias)."""
    skip = ("word_embeddings", "decoder", "lm_head.bias", "predictions.bias")
    return {k: v for k, v in model.state_dict().items() if not any(s in k for s in skip)}


def new_matrix(n, d, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


# -- full-dimension surgery ------------------------------------------------------------------------------------
def test_tied_extension_xlmr(tmp_path):
    s, t = xlmr_source_tokenizer(), xlmr_target_tokenizer()
    src = tiny_xlmr(len(s))
    ref = tiny_xlmr(len(s))  # same seed: an untouched copy of the source
    m = build_mapping(s, t, "ofa")
    mat = new_matrix(len(t), 16)
    rep = assemble_model(src, s, t, mat, m.copy)
    assert rep["mode"] == "extension" and rep["source_tied"] and not rep["factorized"]
    emb, out = src.get_input_embeddings(), src.get_output_embeddings()
    assert torch.equal(emb.weight, mat) and out.weight is emb.weight
    # body unchanged, bit for bit
    a, b = body(src), body(ref)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # bias remapped by token: copied tokens keep the source bias of their source token, the others 0
    old_bias = ref.get_output_embeddings().bias.detach()
    new_bias = out.bias.detach()
    for tid in range(len(t)):
        want = old_bias[m.copy[tid]] if tid in m.copy else torch.tensor(0.0)
        assert torch.equal(new_bias[tid], want)
    assert rep["bias_copied"] == len(m.copy)
    assert src.roberta.embeddings.word_embeddings.padding_idx == 1
    cfg = src.config
    assert cfg.vocab_size == len(t) and cfg.pad_token_id == 1 and cfg.bos_token_id == 0 and cfg.eos_token_id == 2
    # saved, reloaded with the plain HF class, identical logits
    save_model(src, tmp_path / "m", tokenizer=t)
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    back = AutoModelForMaskedLM.from_pretrained(tmp_path / "m").eval()
    assert torch.equal(src(input_ids=X, attention_mask=MASK).logits, back(input_ids=X, attention_mask=MASK).logits)
    assert len(AutoTokenizer.from_pretrained(tmp_path / "m")) == len(t)
    assert not (tmp_path / "m" / "factorization.json").exists()


def test_untied_bert_output_matrix_and_bias(tmp_path):
    s, t = wordpiece_tokenizer(), xlmr_target_tokenizer()
    src = tiny_bert(len(s), tie=False)
    ref = tiny_bert(len(s), tie=False)
    m = build_mapping(s, t, "ofa")
    mat = new_matrix(len(t), 16, seed=2)
    rep = assemble_model(src, s, t, mat, m.copy, untied_output="method")
    assert rep["mode"] == "replacement" and not rep["source_tied"]
    assert rep["untied_output"] == {"policy": "method", "copied_rows": len(m.copy)}
    out = src.get_output_embeddings()
    assert out.weight is not src.get_input_embeddings().weight
    ref_out = ref.get_output_embeddings()
    for tid in range(len(t)):
        if tid in m.copy:  # the same mapping on the output side: the source OUTPUT row
            assert torch.equal(out.weight[tid], ref_out.weight[m.copy[tid]])
            assert torch.equal(out.bias[tid], ref_out.bias[m.copy[tid]])
        else:  # the method's row, bias 0
            assert torch.equal(out.weight[tid], mat[tid])
            assert out.bias[tid] == 0
    assert src.config.pad_token_id == 1 and src.config.bos_token_id == 0
    # the untied decoder bias survives save/load (transformers keeps two bias parameters when untied)
    save_model(src, tmp_path / "m", tokenizer=t)
    back = load_model(tmp_path / "m")
    assert torch.equal(back.get_output_embeddings().bias, out.bias)
    assert torch.equal(src(input_ids=X, attention_mask=MASK).logits, back(input_ids=X, attention_mask=MASK).logits)


def test_untied_zero_policy_and_bias_zero():
    s, t = wordpiece_tokenizer(), xlmr_target_tokenizer()
    src = tiny_bert(len(s), tie=False)
    m = build_mapping(s, t, "ofa")
    assemble_model(src, s, t, new_matrix(len(t), 16), m.copy, untied_output="zero", bias="zero")
    out = src.get_output_embeddings()
    new = [i for i in range(len(t)) if i not in m.copy]
    assert (out.weight[new] == 0).all() and (out.bias == 0).all()
    with pytest.raises(HarnessError):
        assemble_model(tiny_bert(len(s)), s, t, new_matrix(len(t), 16), m.copy, bias="keep")
    # the default policy computes the output table with the method: without that matrix it is refused
    with pytest.raises(HarnessError, match="no output matrix"):
        assemble_model(tiny_bert(len(s), tie=False), s, t, new_matrix(len(t), 16), m.copy)


def test_replacement_bias_follows_tokens_not_ids():
    s, t = xlmr_source_tokenizer(), xlmr_replacement_tokenizer()
    src = tiny_xlmr(len(s))
    old_bias = src.get_output_embeddings().bias.detach().clone()
    m = build_mapping(s, t, "ofa")
    rep = assemble_model(src, s, t, new_matrix(len(t), 16), m.copy)
    assert rep["mode"] == "replacement"
    tid, sid = t.convert_tokens_to_ids("▁the"), s.convert_tokens_to_ids("▁the")
    assert tid != sid
    assert torch.equal(src.get_output_embeddings().bias[tid], old_bias[sid])


def test_changed_pad_id_is_refused_for_roberta_positions():
    s, t = xlmr_source_tokenizer(), wordpiece_tokenizer()  # WordPiece pad id 0, XLM-R positions expect 1
    m = build_mapping(s, t, "ofa")
    with pytest.raises(HarnessError, match="position ids"):
        assemble_model(tiny_xlmr(len(s)), s, t, new_matrix(len(t), 16), m.copy)


# -- factorized embeddings -------------------------------------------------------------------------------------
def test_factorization_reconstruction_error_equals_svd():
    e = new_matrix(200, 16, seed=4) @ torch.diag(torch.linspace(3, 0.1, 16))
    for dim in (4, 8, 16):
        f = factorize(e, dim)
        assert f.coords.shape == (200, dim) and f.primitive.shape == (dim, 16)
        err = float(((e.double() - f.coords.double() @ f.primitive.double()) ** 2).sum())
        s = torch.linalg.svdvals(e.double())
        assert err == pytest.approx(float((s[dim:] ** 2).sum()), rel=1e-4, abs=1e-6)
        assert f.discarded_energy == pytest.approx(float((s[dim:] ** 2).sum()), rel=1e-9, abs=1e-9)
        # F_s has orthonormal columns; P = diag(S) Vh: its rows have the singular values as norms
        assert torch.allclose(f.coords.T @ f.coords, torch.eye(dim), atol=1e-5)
        assert torch.allclose(f.primitive.norm(dim=1).double(), s[:dim], rtol=1e-5)
    with pytest.raises(ValueError):
        factorize(e, 17)


def _factorized(s, t, dim=6):
    src = tiny_xlmr(len(s))
    old = src.get_output_embeddings().bias.detach().clone()
    f = factorize(src.get_input_embeddings().weight.detach()[: len(s)], dim)
    m = build_mapping(s, t, "ofa")
    ft = new_matrix(len(t), dim, seed=5) * 0.1
    for tid, sid in m.copy.items():
        ft[tid] = f.coords[sid]
    rep = assemble_model(src, s, t, ft, m.copy, primitive=f.primitive)
    return src, f, ft, m, old, rep


def test_factorized_model_structure_and_head():
    s, t = xlmr_source_tokenizer(), xlmr_target_tokenizer()
    model, f, ft, m, old_bias, rep = _factorized(s, t)
    assert rep["factorized"] and rep["dim"] == 6 and is_factorized(model)
    emb, dec = model.get_input_embeddings(), model.get_output_embeddings()
    assert isinstance(emb, FactorizedEmbedding) and isinstance(dec, FactorizedDecoder)
    assert dec.weight is emb.coords.weight and dec.primitive is emb.primitive  # tied to F_t and P
    assert model.lm_head.bias is dec.bias
    # copied tokens are reconstructed exactly as the truncated SVD of their source row
    assert torch.allclose(emb(torch.tensor([5])), f.coords[5] @ f.primitive)
    # the head: h -> dense -> GELU -> LN -> h P^T -> F_t^T + bias
    h = torch.randn(3, 16)
    x = model.lm_head.layer_norm(torch.nn.functional.gelu(model.lm_head.dense(h)))
    want = (x @ f.primitive.T) @ ft.T + dec.bias
    assert torch.allclose(model.lm_head(h), want, atol=1e-5)
    for tid in range(len(t)):
        assert dec.bias[tid] == (old_bias[m.copy[tid]] if tid in m.copy else 0)
    assert model.config.tie_word_embeddings is False
    # one parameter each for F_t and P (no duplicates for the optimizer)
    names = [n for n, _ in model.named_parameters()]
    assert sum("coords" in n or n.endswith("decoder.weight") for n in names) == 1


def test_factorized_save_load_identical_logits(tmp_path):
    s, t = xlmr_source_tokenizer(), xlmr_target_tokenizer()
    model, *_ = _factorized(s, t)
    save_model(model, tmp_path / "f", tokenizer=t)
    info = json.loads((tmp_path / "f" / "factorization.json").read_text())
    assert info["dim"] == 6 and info["vocab_size"] == len(t) and info["tied"] is True
    back = load_model(tmp_path / "f")
    assert is_factorized(back)
    assert torch.equal(model(input_ids=X, attention_mask=MASK).logits,
                       back(input_ids=X, attention_mask=MASK).logits)
    # the description also travels in config.json, so save_pretrained folders (Trainer checkpoints) load too
    model.save_pretrained(tmp_path / "g")
    assert not (tmp_path / "g" / "factorization.json").exists()
    again = load_model(tmp_path / "g")
    assert torch.equal(model(input_ids=X).logits, again(input_ids=X).logits)


def test_factorized_trains_with_plain_torch_loop():
    s, t = xlmr_source_tokenizer(), xlmr_target_tokenizer()
    model, *_ = _factorized(s, t)
    model.train()
    emb = model.get_input_embeddings()
    p0, f0 = emb.primitive.detach().clone(), emb.coords.weight.detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    labels = X.clone()
    labels[:, ::2] = -100
    losses = []
    for _ in range(15):
        out = model(input_ids=X, attention_mask=MASK, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(float(out.loss.detach()))
    assert losses[-1] < losses[0]
    assert not torch.equal(emb.primitive, p0) and not torch.equal(emb.coords.weight, f0)
    assert model.get_output_embeddings().weight is emb.coords.weight


def test_factorized_trains_with_hf_trainer(tmp_path):
    pytest.importorskip("accelerate")
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    s, t = xlmr_source_tokenizer(), xlmr_target_tokenizer()
    model, *_ = _factorized(s, t)
    p0 = model.get_input_embeddings().primitive.detach().clone()
    ds = Dataset.from_dict({"text": ["the cat sat", "nyumba ya paka", "Haus Apple 123 !"] * 4})
    ds = ds.map(lambda b: t(b["text"], truncation=True, max_length=12), batched=True, remove_columns=["text"])
    args = TrainingArguments(output_dir=str(tmp_path / "tr"), max_steps=2, per_device_train_batch_size=4,
                             use_cpu=True, report_to="none", save_strategy="steps", save_steps=2,
                             learning_rate=1e-2, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=ds,
            data_collator=DataCollatorForLanguageModeling(t, mlm_probability=0.3, seed=0)).train()
    assert not torch.equal(model.get_input_embeddings().primitive, p0)
    ckpt = next((tmp_path / "tr").glob("checkpoint-*"))
    back = load_model(ckpt)
    model.eval()
    assert torch.equal(model(input_ids=X).logits, back(input_ids=X).logits)


# -- initialize_model ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory, harness_home):
    return make_world(tmp_path_factory.mktemp("world"))


@pytest.mark.parametrize("source,dim", [("xlmr", None), ("xlmr", 8), ("bert", None), ("bert", 4)])
def test_initialize_model_random(world, tmp_path, source, dim):
    out = tmp_path / "init"
    rep = initialize_model(world, source, "random", dim=dim, seed=3, params={}, out_dir=out,
                           mapping_cache_dir=tmp_path / "maps")
    t = xlmr_target_tokenizer()
    assert sum(rep["counts"].values()) == len(t) == rep["target_vocab_size"]
    assert rep["counts"]["copied"] == rep["overlap"]["copied"] and rep["counts"]["random"] > 0
    assert rep["overlap_rule"] == "ofa" and rep["method"] == "random" and rep["seed"] == 3
    assert rep["world_hash"] == world.hash and rep["dim"] == dim and rep["seconds"] > 0
    assert rep["memory"]["peak_rss_mb"] > 0
    assert json.loads((out / "init_report.json").read_text()) == rep
    prov = np.load(out / "provenance.npy")
    assert prov.shape == (len(t),) and int((prov == Provenance.COPIED).sum()) == rep["counts"]["copied"]
    model = load_model(out)
    assert is_factorized(model) == (dim is not None)
    # the copied rows are the source rows (through the factorization when dim is set)
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    src = AutoModelForMaskedLM.from_pretrained(world.source_dir(source))
    src_tok = AutoTokenizer.from_pretrained(world.source_dir(source))
    e_s = src.get_input_embeddings().weight.detach()
    e_t = model.get_input_embeddings().weight.detach()
    mapping = build_mapping(src_tok, t, "ofa")
    assert len(src_tok) == e_s.shape[0]
    for tid, sid in mapping.copy.items():
        if dim is None:
            assert torch.equal(e_t[tid], e_s[sid])
        else:
            f = factorize(e_s, dim)
            assert torch.allclose(e_t[tid], f.coords[sid] @ f.primitive, atol=1e-6)
    # the same seed gives the same model, bit for bit
    rep2 = initialize_model(world, source, "random", dim=dim, seed=3, params={}, out_dir=tmp_path / "again",
                            mapping_cache_dir=tmp_path / "maps")
    assert rep2["counts"] == rep["counts"]
    a, b = load_model(out), load_model(tmp_path / "again")
    assert torch.equal(a(input_ids=X).logits, b(input_ids=X).logits)


def test_initialize_model_refusals(world, tmp_path):
    with pytest.raises(ConfigError, match="factorized"):
        initialize_model(world, "xlmr", "random-map", dim=8, seed=0, params={}, out_dir=tmp_path / "a")
    with pytest.raises(ConfigError, match="no source model"):
        initialize_model(world, "nope", "random", dim=None, seed=0, params={}, out_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match="dim"):
        initialize_model(world, "xlmr", "random", dim=0, seed=0, params={}, out_dir=tmp_path / "b")

    calls = []

    class NeedsVectors:
        name: ClassVar[str] = "needs-vectors-test"
        description: ClassVar[str] = "test"
        requires: ClassVar[frozenset[str]] = frozenset({"word_vectors"})
        overlap_rule: ClassVar[str] = "ofa"
        supports_factorized: ClassVar[bool] = True

        def initialize(self, ctx):
            calls.append(1)
            raise AssertionError("must not run")

    METHODS.register("needs-vectors-test", NeedsVectors)
    try:
        with pytest.raises(MissingResourceError, match="word_vectors"):
            initialize_model(world, "xlmr", "needs-vectors-test", dim=None, seed=0, params={},
                             out_dir=tmp_path / "c")
        assert calls == [] and not (tmp_path / "c").exists()
    finally:
        METHODS.unregister("needs-vectors-test")


def test_initialize_model_rejects_zero_rows(world, tmp_path):
    class Lazy:
        name: ClassVar[str] = "lazy-test"
        description: ClassVar[str] = "test"
        requires: ClassVar[frozenset[str]] = frozenset()
        overlap_rule: ClassVar[str] = "ofa"
        supports_factorized: ClassVar[bool] = False

        def initialize(self, ctx):
            n = len(ctx.target_tokenizer)
            return InitResult(matrix=torch.zeros(n, ctx.source_matrix.shape[1]),
                              provenance=np.full(n, Provenance.METHOD, dtype=np.int8))

    METHODS.register("lazy-test", Lazy)
    try:
        with pytest.raises(HarnessError, match="all-zero rows"):
            initialize_model(world, "xlmr", "lazy-test", dim=None, seed=0, params={}, out_dir=tmp_path / "z")
    finally:
        METHODS.unregister("lazy-test")
