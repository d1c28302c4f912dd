"""Parity of Token Distillation with the authors' code (konstantinjdobler/token-distillation, spec §3.7), against
the fixture their functions wrote (``tokdist_reference.py`` regenerates it from a checkout; their code is not in
this repository and CI has no network):

* ``transform_input_token_format`` on hand-made snippets (overlapping patterns, two in one snippet, one at the
  end): our :func:`methods.tokdist.merge_snippets` gives the same merged sequences, originals and masks, exactly;
* ``train_embeddings`` (MSE on the last hidden states, AdamW 1e-4, linear warm-up over half the epoch, original
  rows protected) on a tiny random Llama with three added tokens, in their batch order: our
  :func:`methods.tokdist.distill` on the model's backbone gives the first step's loss to 1e-6 (and every later
  step's), the new rows after the last step to 1e-5, and leaves every original row bit for bit.

The same two comparisons on real inputs, the real pair of :mod:`tests.parity.realpair` (``tokdist_reference.py
--real-pair`` wrote ``fixtures/tokdist_realpair.json``): the merge with every new French token's source pieces as
a pattern (thousands, overlapping) on windows of 50 ids of the French Bible tokenized by all-MiniLM-L6-v2's
WordPiece; the distillation on all-MiniLM-L6-v2 itself (the package's weights; their ``BertForMaskedLM`` with
dropout 0, our backbone ``BertModel``), 4 real new tokens with 8 real windows each, to the same tolerances. The
fixture's inputs are checked to be what our mining (:func:`tests.parity.realpair.tokdist_inputs`) finds on the
pair, so the fixture cannot drift from the pair.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from methods.tokdist import distill, merge_snippets
from tests.parity.common import report
from tests.parity.realpair import tokdist_inputs

pytestmark = pytest.mark.parity

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def fixture():
    return json.loads((FIXTURES / "tokdist.json").read_text())


def test_merge_matches_transform_input_token_format(fixture):
    m = fixture["merge"]
    ours = merge_snippets(m["snippets"], {tuple(p): i for p, i in m["patterns"]}, m["pad"])
    assert ours == m["out"]
    report(f"tokdist merge: {len(ours)} of {len(m['out'])} hand-made snippets identical ({fixture['reference']})")


def test_distill_matches_train_embeddings(fixture):
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    t = fixture["train"]
    vocab, k = t["vocab"], len(t["patterns"])
    cfg = LlamaConfig(**{**t["config"], "vocab_size": vocab + k}, attention_dropout=0.0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(load_file(str(FIXTURES / "tokdist_model.safetensors")))
    backbone = model.model.eval()
    full = backbone.get_input_embeddings().weight.detach().clone()
    backbone.set_input_embeddings(torch.nn.Embedding.from_pretrained(full[:vocab].clone(), freeze=True))
    samples = merge_snippets(t["snippets"], {tuple(p): vocab + j for j, p in enumerate(t["patterns"])}, t["pad"])
    rows, losses = distill(backbone, full[vocab:], samples, t["order"], lr=t["lr"])
    ref_rows = torch.tensor(t["new_rows"])
    assert len(losses) == len(t["losses"]) == len(t["order"])
    assert abs(losses[0] - t["losses"][0]) <= 1e-6
    assert max(abs(a - b) for a, b in zip(losses, t["losses"], strict=True)) <= 1e-6
    assert torch.allclose(rows, ref_rows, rtol=0, atol=1e-5)
    moved = (ref_rows - full[vocab:]).abs().max().item()
    assert moved > 1e-4  # the rows did move: agreeing to 1e-5 says something
    assert torch.equal(backbone.get_input_embeddings().weight, full[:vocab])  # original rows bit for bit
    report(f"tokdist train: {len(losses)} steps, first loss {losses[0]:.8f} vs {t['losses'][0]:.8f}; new rows "
           f"max |diff| {(rows - ref_rows).abs().max().item():.1e} (moved {moved:.1e}); original rows identical")


@pytest.fixture(scope="module")
def real_fixture():
    return json.loads((FIXTURES / "tokdist_realpair.json").read_text())


def test_merge_real_pair(real_pair, real_fixture):
    m, vocab = real_fixture["merge"], real_fixture["vocab"]
    mined = tokdist_inputs(real_pair, **m["settings"])
    assert mined["patterns"] == m["patterns"] and mined["snippets"] == m["snippets"], (
        "the fixture's inputs are not the real pair's: regenerate it (tests/parity/tokdist_reference.py --real-pair)")
    flat = [s for per in m["snippets"] for s in per]
    ours = merge_snippets(flat, {tuple(p): vocab + j for j, (p, _) in enumerate(m["patterns"])}, real_fixture["pad"])
    merged = sum(len(o["original_seq"]) - sum(t != real_fixture["pad"] for t in o["merged_seq"]) for o in ours)
    spans = sum(t >= vocab for o in ours for t in o["merged_seq"])
    assert ours == m["out"]
    assert spans > len(flat)  # every snippet holds its token, and others merge too
    report(f"tokdist merge, real pair: {len(ours)} of {len(m['out'])} snippets of the French Bible identical "
           f"({len(m['patterns'])} patterns, {spans} spans merged, {merged} ids saved)")


def test_distill_real_pair(real_pair, real_fixture):
    from transformers import AutoModel

    t, vocab, pad = real_fixture["train"], real_fixture["vocab"], real_fixture["pad"]
    mined = tokdist_inputs(real_pair, **t["settings"])
    assert mined["chosen"] == t["chosen"] and mined["snippets"] == t["snippets"], (
        "the fixture's inputs are not the real pair's: regenerate it (tests/parity/tokdist_reference.py --real-pair)")
    backbone = AutoModel.from_pretrained(real_pair.source_dir).float().eval()
    table = backbone.get_input_embeddings().weight.detach().clone()
    assert torch.equal(table, real_pair.source_matrix)
    init = torch.tensor(t["init_rows"])
    assert torch.allclose(init, torch.stack([table[p].mean(0) for p in t["chosen"]]), rtol=0, atol=1e-7)  # FVT
    flat = [s for per in t["snippets"] for s in per]
    samples = merge_snippets(flat, {tuple(p): vocab + j for j, p in enumerate(t["chosen"])}, pad)
    rows, losses = distill(backbone, init, samples, t["order"], lr=t["lr"])
    ref_rows = torch.tensor(t["new_rows"])
    assert len(losses) == len(t["losses"]) == len(t["order"])
    assert abs(losses[0] - t["losses"][0]) <= 1e-6
    assert max(abs(a - b) for a, b in zip(losses, t["losses"], strict=True)) <= 1e-6
    assert torch.allclose(rows, ref_rows, rtol=0, atol=1e-5)
    moved = (ref_rows - init).abs().max().item()
    assert moved > 1e-4  # the rows did move: agreeing to 1e-5 says something
    assert torch.equal(backbone.get_input_embeddings().weight, table)  # original rows bit for bit
    report(f"tokdist train, real pair (all-MiniLM-L6-v2, {len(t['chosen'])} French tokens x {len(t['snippets'][0])} "
           f"snippets): {len(losses)} steps, first loss {losses[0]:.8f} vs {t['losses'][0]:.8f}, largest step "
           f"difference {max(abs(a - b) for a, b in zip(losses, t['losses'], strict=True)):.1e}; new rows max |diff| "
           f"{(rows - ref_rows).abs().max().item():.1e} (moved {moved:.1e}); original rows identical")
