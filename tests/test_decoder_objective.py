"""The source objective (harness.core.objective): which objective a config declares, the Auto class, the
tables, special tokens by role, the CPT collators, the pooled layer, and bits per byte by hand."""

from __future__ import annotations

import math

import pytest
import torch

from harness.core import objective
from harness.core.errors import ConfigError
from tests._decoder_fixtures import PADDING_ROWS, source_tokenizer, tiny_decoder
from tests._surgery_fixtures import tiny_xlmr, xlmr_source_tokenizer


def test_objective_of_configs():
    assert objective.objective_of({"architectures": ["XLMRobertaForMaskedLM"]}) == "mlm"
    assert objective.objective_of({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}) == "clm"
    assert objective.objective_of({"architectures": ["GPT2LMHeadModel"]}) == "clm"
    assert objective.objective_of({"model_type": "qwen2"}) == "clm"
    assert objective.objective_of({"model_type": "bert"}) == "mlm"
    with pytest.raises(ConfigError, match="architectures"):
        objective.objective_of({"model_type": "t5-like"})
    with pytest.raises(ConfigError, match="architectures"):  # an encoder-decoder is neither
        objective.objective_of({"architectures": ["T5ForConditionalGeneration"], "model_type": "t5"})
    with pytest.raises(ConfigError, match="objective must be"):
        objective.auto_class("seq2seq")


def test_load_and_tables_of_a_decoder_and_an_encoder(tmp_path):
    tok = source_tokenizer()
    for tie in (True, False):
        model = tiny_decoder("qwen2", len(tok) + PADDING_ROWS, tie=tie)
        model.save_pretrained(tmp_path / str(tie))
        back = objective.load_pretrained(tmp_path / str(tie))
        assert type(back).__name__ == "Qwen2ForCausalLM" and objective.objective_of_dir(tmp_path / str(tie)) == "clm"
        t = objective.tables(back, len(tok))
        assert t.tied == tie and t.padding_rows == PADDING_ROWS and t.bias is None
        assert t.token_rows(t.input).shape == (len(tok), 16)
        if not tie:
            assert torch.equal(t.output, back.get_output_embeddings().weight)
    enc = tiny_xlmr(len(xlmr_source_tokenizer()))
    t = objective.tables(enc, len(xlmr_source_tokenizer()))
    assert t.tied and t.padding_rows == 0 and t.bias is not None
    assert objective.objective_of_model(enc) == "mlm"
    with pytest.raises(ConfigError, match="fewer than"):
        objective.tables(enc, len(xlmr_source_tokenizer()) + 1)


def test_causal_collator_predicts_every_position_without_masking():
    tok = source_tokenizer()
    blocks = [{"input_ids": list(range(3, 11))}, {"input_ids": [0] * 8}]  # an eos id is a target too
    batch = objective.collator("clm", tok, 0.15)(blocks)
    assert torch.equal(batch["labels"], batch["input_ids"]) and bool(batch["attention_mask"].all())
    assert (batch["labels"] != -100).all()
    mlm = objective.collator("mlm", xlmr_source_tokenizer(), 0.15)
    assert type(mlm).__name__ == "DataCollatorForLanguageModeling" and mlm.mlm


def test_pooled_layer_and_label_subtoken():
    assert objective.pooled_layer("mlm", 12) == 8 and objective.pooled_layer("mlm", 2) == 1
    assert objective.pooled_layer("clm", 30) == 15 and objective.pooled_layer("clm", 18) == 9
    assert objective.pooled_layer("clm", 1) == 1
    assert objective.label_subtoken("clm") == "last" and objective.label_subtoken("mlm") == "first-nonmarker"


def test_bits_per_byte_by_hand():
    text = "Kwa heri, dunia!"  # 16 bytes
    assert objective.utf8_bytes(text) == 16 and objective.utf8_bytes("ü") == 2
    # 8 tokens of 2 nats each: 16 nats over 16 bytes = 1 nat a byte = 1 / ln 2 bits
    assert objective.bits_per_byte(16.0, 16) == pytest.approx(1 / math.log(2))
    assert objective.bits_per_byte(16.0 * math.log(2), 8) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        objective.bits_per_byte(1.0, 0)


def test_the_batch_search_probes_a_decoder_with_its_own_step():
    """The batch search's probe step (harness.cpt_batch.probe_step) trains a decoder on every position, as causal
    CPT does; an encoder on 15 % of them."""
    from harness.cpt_batch import probe_step

    seen = []

    def spy(model):
        forward = model.forward

        def wrapped(*args, **kwargs):
            seen.append(kwargs["labels"])
            return forward(*args, **kwargs)

        model.forward = wrapped
        return model

    probe_step(spy(tiny_decoder("llama", 40, tie=True)), 2, 16, "cpu", "fp32", 0)
    assert (seen[-1] != -100).all()
    probe_step(spy(tiny_xlmr(len(xlmr_source_tokenizer()))), 2, 16, "cpu", "fp32", 0)
    assert 0 < float((seen[-1] != -100).float().mean()) < 0.5


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "gpt2", "phi"])
def test_clm_scoring_from_body_and_head_equals_the_models_own_logits(arch, monkeypatch):
    """The clm task computes the vocabulary logits at the scored positions only, a few rows at a time; every
    sentence's nats equal those of the model's own logits (padding in the batch, a soft-capped Gemma head, Phi's
    output bias), and the split path is the one taken."""
    import tasks.clm as clm

    model = tiny_decoder(arch, 40, tie=arch != "phi", seed=3, bias=arch == "phi").eval()
    if arch == "gemma3":
        model.config.final_logit_softcapping = 0.5  # small enough to bend these logits
    monkeypatch.setattr(clm, "HEAD_ROWS", 3)  # chunks that cut through sentences
    g = torch.Generator().manual_seed(0)
    seqs = [[0, *torch.randint(2, 40, (n,), generator=g).tolist()] for n in (7, 3, 11, 1, 5)]
    assert clm._split_head(model) is not None
    used = []
    real = clm._nats_split
    monkeypatch.setattr(clm, "_nats_split", lambda *a: used.append(1) or real(*a))
    got = clm.sentence_nats(model, seqs, 1, 2, torch.device("cpu"), "fp32")
    with torch.inference_mode():
        want = [float(clm._nats_full(model, torch.tensor([s]), torch.ones(1, len(s), dtype=torch.long))[0])
                for s in seqs]
    assert len(used) > 1 and got == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert got[3] == 0.0 or abs(got[3] - want[3]) < 1e-5  # one token after BOS: one scored position


def test_clm_scoring_falls_back_to_the_models_logits_for_a_head_it_does_not_know():
    """A model whose logits are not its output layer's (here scaled after it) fails the first sequence's check and
    is scored from its own logits throughout."""
    import tasks.clm as clm

    class Scaled(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config, self.base_model = inner, inner.config, inner.base_model

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

        def forward(self, **kw):
            out = self.inner(**kw)
            out.logits = out.logits * 3.0
            return out

    model = Scaled(tiny_decoder("llama", 40, tie=True, seed=4).eval())
    seqs = [[0, 5, 9, 12, 30], [0, 7, 8]]
    got = clm.sentence_nats(model, seqs, 1, 2, torch.device("cpu"), "fp32")
    with torch.inference_mode():
        want = [float(clm._nats_full(model, torch.tensor([s]), torch.ones(1, len(s), dtype=torch.long))[0])
                for s in seqs]
        split = [float(clm._nats_split(clm._split_head(model), torch.tensor([s]),
                                       torch.ones(1, len(s), dtype=torch.long))[0]) for s in seqs]
    assert got == pytest.approx(want, rel=1e-5) and split != pytest.approx(want, rel=1e-3)
