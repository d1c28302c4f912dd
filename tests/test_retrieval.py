"""Sentence retrieval (sr-b, sr-t): layer choice, mean pooling with specials, id alignment, caps, metrics."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import BertConfig, BertForMaskedLM, XLMRobertaConfig, XLMRobertaForMaskedLM

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.registry import TASKS
from harness.core.tokenization import make_xlmr_tokenizer, xlmr_vocab
from harness.worlds.base import load_world_dir
from harness.worlds.writer import write_jsonl
from tasks.base import Task, TaskSettings
from tasks.retrieval import LayerEncoder, encode_sentences, find_layer_list, retrieval_layer

N_WORDS = 60


@pytest.fixture(scope="module")
def tok():
    pieces = [(f"▁w{i}", -2.0) for i in range(N_WORDS)] + [(c, -6.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    return make_xlmr_tokenizer(xlmr_vocab(pieces + [("▁", -4.0)]))


def tiny_bert(vocab: int, layers: int, seed: int = 0) -> BertForMaskedLM:
    torch.manual_seed(seed)  # model construction only; the code under test never touches the global RNG
    cfg = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, pad_token_id=1)
    return BertForMaskedLM(cfg).eval()


def tiny_xlmr(vocab: int, layers: int = 2, seed: int = 0) -> XLMRobertaForMaskedLM:
    torch.manual_seed(seed)
    cfg = XLMRobertaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=130, pad_token_id=1)
    return XLMRobertaForMaskedLM(cfg).eval()


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(N_WORDS)}" for _ in range(rng.randint(3, 12))) for _ in range(n)]


# -- layer and pooling ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("depth", "layer"), [(12, 8), (24, 16), (6, 4), (4, 3), (2, 1), (1, 1), (3, 2)])
def test_retrieval_layer_scaling(depth, layer):
    assert retrieval_layer(depth) == layer


def by_hand(model, tok, texts, layer):
    """hidden_states[layer] of the full forward, averaged over non-padding positions, specials included."""
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hs = model(**{k: enc[k] for k in ("input_ids", "attention_mask")}, output_hidden_states=True).hidden_states
    m = enc["attention_mask"].unsqueeze(-1).float()
    return (hs[layer] * m).sum(1) / m.sum(1), enc


@pytest.mark.parametrize(("depth", "layer"), [(12, 8), (4, 3)])
def test_pooled_vector_is_mean_of_hidden_state_layer_with_specials(tok, depth, layer):
    model = tiny_bert(len(tok), depth)
    texts = ["w1 w2 w3 w4 w5 w6 w7", "w9", "w3 w3 w10 w11"]
    want, enc = by_hand(model, tok, texts, layer)
    assert enc["input_ids"][1, 0] == tok.cls_token_id and enc["attention_mask"][1].sum() == 3  # <s> w9 </s>
    got = encode_sentences(model, tok, texts, layer=retrieval_layer(depth), n_layers=depth, batch_size=2)
    assert torch.allclose(got, want, atol=1e-5)
    # not another layer, and not pooling without the specials
    other, _ = by_hand(model, tok, texts, layer - 1)
    assert not torch.allclose(got, other, atol=1e-3)
    with torch.no_grad():
        hs = model(input_ids=enc["input_ids"][:1], output_hidden_states=True).hidden_states[layer]
    no_specials = hs[0, 1:-1].mean(0)  # row 0 has no padding: <s> w1 ... w7 </s>
    assert not torch.allclose(got[0], no_specials, atol=1e-3)
    assert torch.allclose(got[0], hs[0].mean(0), atol=1e-5)


def test_forward_stops_at_the_layer_needed(tok):
    model = tiny_bert(len(tok), 12)
    ran = []
    hooks = [lyr.register_forward_hook(lambda m, a, o, i=i: ran.append(i)) for i, lyr in enumerate(model.bert.encoder.layer)]
    encode_sentences(model, tok, ["w1 w2"], layer=8, n_layers=12)
    for h in hooks:
        h.remove()
    assert ran == list(range(8))  # layers 9..12 never ran
    assert len(model.bert.encoder.layer) == 12  # the model is left intact


class BaseOnly(nn.Module):
    """A model exposing only ``.base_model`` and ``.config`` (like a factorized-embedding model)."""

    def __init__(self, inner: XLMRobertaForMaskedLM):
        super().__init__()
        self.base_model_ = inner.roberta
        self.config = inner.config

    @property
    def base_model(self):
        return self.base_model_


def test_any_model_with_a_base_model_and_the_fallback_path(tok):
    inner = tiny_xlmr(len(tok), layers=3)
    texts = ["w1 w2 w3", "w4 w5 w6 w7 w8 w9"]
    want, _ = by_hand(inner, tok, texts, 2)
    wrapped = BaseOnly(inner)
    got = encode_sentences(wrapped, tok, texts, layer=2, n_layers=3)
    assert torch.allclose(got, want, atol=1e-5)
    # without a recognizable layer list the full forward with output_hidden_states gives the same vectors
    enc = LayerEncoder(wrapped, 2, 3)
    assert enc.layers is not None
    enc.layers = None
    ids = tok(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        fb = enc.pooled(ids["input_ids"], ids["attention_mask"])
    assert torch.allclose(fb, want, atol=1e-5)
    assert find_layer_list(nn.Sequential(nn.Linear(2, 2)), 3) is None


def test_batching_by_length_keeps_order(tok):
    model = tiny_xlmr(len(tok))
    texts = sentences(23, seed=3)
    a = encode_sentences(model, tok, texts, layer=1, n_layers=2, batch_size=4)
    b = torch.cat([encode_sentences(model, tok, [t], layer=1, n_layers=2) for t in texts])
    assert torch.allclose(a, b, atol=1e-5)


# -- the task on a tiny world -----------------------------------------------------------------------------------
def make_world(root: Path, n: int = 40) -> object:
    eng = sentences(n, seed=10)
    rows_eng = [{"id": f"s{i}", "text": t} for i, t in enumerate(eng)]
    # deu: the English sentences themselves (perfect retrieval), in reversed order, one id missing from English
    rows_deu = [{"id": f"s{i}", "text": eng[i]} for i in reversed(range(n))] + [{"id": "extra", "text": "w1"}]
    # fra: unrelated sentences
    rows_fra = [{"id": f"s{i}", "text": t} for i, t in enumerate(sentences(n, seed=99))]
    for task in ("sr-b", "sr-t"):
        d = root / "tasks" / task
        write_jsonl(d / "eng_Latn.jsonl", rows_eng)
        write_jsonl(d / "deu_Latn.jsonl", rows_deu)
        write_jsonl(d / "fra_Latn.jsonl", rows_fra)
        meta = {"languages": {"eng_Latn": {"label_source": "gold"}, "deu_Latn": {"label_source": "gold"},
                              "fra_Latn": {"label_source": "silver"}}}
        (d / "meta.json").write_text(json.dumps(meta))
    (root / "manifest.json").write_text(json.dumps({"name": "tiny", "pivot_language": "eng_Latn",
                                                    "sources": {"tiny": {}}}))
    (root / "languages.json").write_text(json.dumps({c: {"script": "Latn"} for c in ("eng_Latn", "deu_Latn",
                                                                                      "fra_Latn")}))
    return load_world_dir("tiny", root)


def test_tasks_are_registered_and_follow_the_contract():
    for name, cap in (("sr-b", 500), ("sr-t", 1000)):
        cls = TASKS.get(name)
        t = cls()
        assert isinstance(t, Task)
        assert t.name == name and t.max_pairs == cap
        assert t.headline == "acc@10" and set(t.metrics) == {"acc@10", "acc@1"} and t.higher_is_better


def test_sr_task_scores_counts_and_label_source(tmp_path, tok):
    world = make_world(tmp_path)
    task = TASKS.get("sr-b")()
    assert task.languages(world) == ["deu_Latn", "fra_Latn"]  # the pivot only gives the queries
    model = tiny_xlmr(len(tok), layers=3)
    res = task.evaluate(model, tok, world, ["eng_Latn", "deu_Latn", "fra_Latn"], TaskSettings())
    assert set(res.scores) == {"acc@10", "acc@1"}
    assert res.scores["acc@1"]["deu_Latn"] == 1.0 and res.scores["acc@10"]["deu_Latn"] == 1.0
    assert res.scores["acc@10"]["fra_Latn"] < 1.0
    assert res.scores["acc@1"]["fra_Latn"] <= res.scores["acc@10"]["fra_Latn"]
    assert "eng_Latn" not in res.scores["acc@1"]
    assert res.extras["n_pairs"] == {"deu_Latn": 40, "fra_Latn": 40}  # "extra" has no English side
    assert res.extras["layer"] == 2 and res.extras["n_layers"] == 3
    assert res.label_source == {"deu_Latn": "gold", "fra_Latn": "silver"}
    assert not model.training  # left in the mode it was given


def test_caps_and_params(tmp_path, tok):
    world = make_world(tmp_path, n=30)
    model = tiny_xlmr(len(tok))
    task = TASKS.get("sr-t")()
    res = task.evaluate(model, tok, world, ["deu_Latn"], TaskSettings(max_sentences=7))
    assert res.extras["n_pairs"] == {"deu_Latn": 7} and res.extras["max_pairs"] == 7
    res2 = task.evaluate(model, tok, world, ["fra_Latn"], TaskSettings(params={"max_pairs": 5, "layer": 2,
                                                                             "search": "faiss"}))
    assert res2.extras["n_pairs"] == {"fra_Latn": 5} and res2.extras["layer"] == 2
    assert res2.extras["search"] == "faiss"
    with pytest.raises(ConfigError, match="unknown param"):
        task.evaluate(model, tok, world, ["deu_Latn"], TaskSettings(params={"pooling": "cls"}))
    with pytest.raises(ConfigError, match="layer 5"):
        task.evaluate(model, tok, world, ["deu_Latn"], TaskSettings(params={"layer": 5}))
    with pytest.raises(MissingResourceError, match="swh_Latn"):
        task.evaluate(model, tok, world, ["swh_Latn"], TaskSettings())


def test_sr_b_caps_at_500_pairs(tmp_path, tok):
    world = make_world(tmp_path, n=520)
    res = TASKS.get("sr-b")().evaluate(tiny_xlmr(len(tok)), tok, world, ["deu_Latn"], TaskSettings(batch_size=128))
    assert res.extras["n_pairs"] == {"deu_Latn": 500}


def test_retrieval_is_deterministic_and_leaves_the_global_rng_alone(tmp_path, tok):
    world = make_world(tmp_path)
    model = tiny_xlmr(len(tok))
    state = torch.random.get_rng_state()
    task = TASKS.get("sr-t")()
    a = task.evaluate(model, tok, world, ["fra_Latn"], TaskSettings())
    b = task.evaluate(model, tok, world, ["fra_Latn"], TaskSettings())
    assert a.scores == b.scores
    assert torch.equal(state, torch.random.get_rng_state())


def test_long_sentences_are_cut_to_what_the_model_allows(tmp_path, tok):
    world = make_world(tmp_path, n=12)
    long = " ".join(f"w{i % N_WORDS}" for i in range(300))
    rows = [{"id": f"s{i}", "text": long if i == 0 else f"w{i}"} for i in range(12)]
    write_jsonl(world.task_dir("sr-t") / "fra_Latn.jsonl", rows)
    res = TASKS.get("sr-t")().evaluate(tiny_xlmr(len(tok)), tok, world, ["fra_Latn"], TaskSettings())
    assert res.extras["max_length"] == 128  # 130 positions, XLM-R offsets them by pad + 1
    assert 0.0 <= res.scores["acc@1"]["fra_Latn"] <= 1.0


def test_only_the_pivot_gives_an_empty_result(tmp_path, tok):
    world = make_world(tmp_path, n=5)
    res = TASKS.get("sr-b")().evaluate(tiny_xlmr(len(tok)), tok, world, ["eng_Latn"], TaskSettings())
    assert res.scores == {"acc@10": {}, "acc@1": {}}
