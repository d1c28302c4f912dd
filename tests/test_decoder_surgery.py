"""Surgery on decoder-only models: tiny random Llama, Qwen2, Gemma 3 and GPT-2 (tied and untied), with padding rows
beyond the tokenizer, special and chat tokens mapped by role, an untied output table initialized by the same method
(the ``untied_output`` setting), an output bias (Phi); FVT checked row by row against a direct computation."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest
import torch

from harness.core import objective
from harness.core.errors import ConfigError
from harness.core.registry import METHODS
from harness.initialize import initialize_model, load_model
from methods.base import InitResult, Provenance
from tests._decoder_fixtures import (
    ARCHS,
    CHAT,
    HIDDEN,
    PADDING_ROWS,
    make_decoder_world,
    source_name,
    source_tokenizer,
    target_tokenizer,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory, harness_home):
    return make_decoder_world(tmp_path_factory.mktemp("decoders"))


def fvt_rows(table: torch.Tensor, src_tok, tgt_tok) -> dict[int, torch.Tensor]:
    """FVT computed directly: each ordinary target token's text tokenized by the source tokenizer, the mean of
    those source rows (or the source row itself when the token is a source token of the same string)."""
    src_vocab = src_tok.get_vocab()
    out = {}
    for tid in range(len(tgt_tok)):
        if tid in tgt_tok.all_special_ids:
            continue
        piece = tgt_tok.convert_ids_to_tokens(tid)
        if piece in src_vocab:
            out[tid] = table[src_vocab[piece]]
            continue
        ids = src_tok(tgt_tok.convert_tokens_to_string([piece]), add_special_tokens=False)["input_ids"]
        out[tid] = table[ids].mean(dim=0)
    return out


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("arch", ARCHS)
def test_fvt_on_a_decoder_equals_the_direct_computation(world, tmp_path, arch, tie):
    name = source_name(arch, tie)
    out = tmp_path / "init"
    rep = initialize_model(world, name, "fvt", dim=None, seed=1, params={}, out_dir=out,
                           mapping_cache_dir=tmp_path / "maps")
    src_tok, tgt_tok = source_tokenizer(), target_tokenizer()
    src = objective.load_pretrained(world.source_dir(name))
    model = load_model(out)
    assert objective.objective_of_model(model) == "clm" and rep["surgery"]["objective"] == "clm"
    assert type(model).__name__ == type(src).__name__
    # padding rows: neither copied nor counted; the target has one row per token
    assert src.get_input_embeddings().weight.shape[0] == len(src_tok) + PADDING_ROWS
    assert rep["surgery"]["source_padding_rows"] == PADDING_ROWS and rep["source_vocab_size"] == len(src_tok)
    assert sum(rep["counts"].values()) == len(tgt_tok) == model.get_input_embeddings().weight.shape[0]
    e_s, e_t = src.get_input_embeddings().weight.detach(), model.get_input_embeddings().weight.detach()
    padding = e_s[len(src_tok):]
    assert not any(torch.equal(row, pad) for row in e_t for pad in padding)
    # tied stays tied; untied stays untied and its output table is FVT computed on the source's output table
    assert objective.is_tied(model) == tie
    assert rep["surgery_params"] == ({} if tie else {"untied_output": "recompute"})
    tables = [(e_s, e_t)]
    if not tie:
        tables.append((src.get_output_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()))
        assert rep["surgery"]["untied_output"]["policy"] == "recompute"
        assert rep["surgery"]["output_counts"] == rep["counts"]
    for s_table, t_table in tables:
        want = fvt_rows(s_table, src_tok, tgt_tok)
        assert len(want) == len(tgt_tok) - len(tgt_tok.all_special_ids)
        for tid, row in want.items():
            assert torch.allclose(t_table[tid], row, atol=1e-6), (arch, tie, tid)
        # special tokens by role (bos/eos/unk, pad) and chat tokens by string, at other ids in the target
        for tok in ["<|endoftext|>", "<pad>", *CHAT]:
            t_id, s_id = tgt_tok.convert_tokens_to_ids(tok), src_tok.convert_tokens_to_ids(tok)
            assert t_id != s_id
            assert torch.equal(t_table[t_id], s_table[s_id]), tok
    assert model.config.pad_token_id == tgt_tok.pad_token_id and model.config.eos_token_id == tgt_tok.eos_token_id
    if arch == "gemma3":  # the stored table is what the method wrote; the model still scales it by sqrt(D)
        assert float(model.get_input_embeddings().embed_scale) == pytest.approx(math.sqrt(HIDDEN))
    ids = tgt_tok(" the Haus sat", return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], len(tgt_tok))


def test_output_bias_of_a_decoder_follows_the_tokens(world, tmp_path):
    rep = initialize_model(world, "phi-untied", "fvt", dim=None, seed=1, params={}, out_dir=tmp_path / "p",
                           mapping_cache_dir=tmp_path / "maps")
    src_tok, tgt_tok = source_tokenizer(), target_tokenizer()
    src = objective.load_pretrained(world.source_dir("phi-untied"))
    model = load_model(tmp_path / "p")
    b_s, b_t = objective.output_bias(src).detach(), objective.output_bias(model).detach()
    assert b_t.shape == (len(tgt_tok),) and rep["surgery"]["bias_copied"] > 0
    src_vocab = src_tok.get_vocab()
    for tid in range(len(tgt_tok)):
        piece = tgt_tok.convert_ids_to_tokens(tid)
        if piece in src_vocab:  # a copied token keeps its own bias (by string, not by id)
            assert b_t[tid] == b_s[src_vocab[piece]], piece
        else:
            assert b_t[tid] == 0, piece


def test_untied_policies_are_named_and_logged(world, tmp_path):
    src_tok, tgt_tok = source_tokenizer(), target_tokenizer()
    src = objective.load_pretrained(world.source_dir("llama-untied"))
    for policy in ("method", "zero"):
        rep = initialize_model(world, "llama-untied", "fvt", dim=None, seed=1, params={"untied_output": policy},
                               out_dir=tmp_path / policy, mapping_cache_dir=tmp_path / "maps")
        assert rep["surgery_params"] == {"untied_output": policy}
        assert rep["surgery"]["untied_output"]["policy"] == policy
        model = load_model(tmp_path / policy)
        e_t, o_t = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        o_s = src.get_output_embeddings().weight
        new = tgt_tok.convert_tokens_to_ids("ĠHaus")
        assert torch.equal(o_t[new], e_t[new] if policy == "method" else torch.zeros(HIDDEN))
        the = tgt_tok.convert_tokens_to_ids("Ġthe")
        assert torch.equal(o_t[the], o_s[src_tok.convert_tokens_to_ids("Ġthe")])  # copied: the output row


class _InputOnly:
    """A method that declares it cannot compute an untied output table."""

    name: ClassVar[str] = "input-only"
    description: ClassVar[str] = "test"
    requires: ClassVar[frozenset[str]] = frozenset()
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = False
    serves_untied_output: ClassVar[bool] = False

    def initialize(self, ctx):
        import numpy as np

        n = len(ctx.target_tokenizer)
        return InitResult(torch.ones(n, ctx.source_matrix.shape[1]), np.full(n, Provenance.METHOD, dtype=np.int8))


def test_a_method_that_cannot_serve_an_untied_head_is_refused(world, tmp_path):
    METHODS.register("input-only", _InputOnly)
    try:
        with pytest.raises(ConfigError, match="untied output table"):
            initialize_model(world, "qwen2-untied", "input-only", dim=None, seed=1, params={},
                             out_dir=tmp_path / "r")
        # with another policy, or on a tied source, it runs
        rep = initialize_model(world, "qwen2-untied", "input-only", dim=None, seed=1,
                               params={"untied_output": "method"}, out_dir=tmp_path / "m")
        assert rep["counts"]["method"] == len(target_tokenizer())
        initialize_model(world, "qwen2-tied", "input-only", dim=None, seed=1, params={}, out_dir=tmp_path / "t")
    finally:
        METHODS.unregister("input-only")
