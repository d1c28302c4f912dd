"""Golden tests for the task metrics: top-k retrieval accuracy and seqeval (NER, and POS with the bare-tag quirk)."""

from __future__ import annotations

import warnings

import pytest
import torch

from tasks.metrics import (
    SEQEVAL_METRIC_DIR,
    l2_normalize,
    load_seqeval,
    ner_scores,
    pos_scores,
    search_topk,
    seqeval_scores,
    token_accuracy,
    topk_accuracy,
)

pytestmark = pytest.mark.usefixtures("private_hf_home")


# A score matrix S chosen by hand: queries = rows of S, candidates = unit basis vectors, so q @ c.T = S.
S = torch.tensor([
    [0.9, 0.1, 0.3, 0.2],  # gold 0: rank 1
    [0.5, 0.4, 0.8, 0.1],  # gold 1: rank 3 (0.8 and 0.5 above it)
    [0.2, 0.7, 0.1, 0.6],  # gold 2: rank 4
])
CANDS = torch.eye(4)
GOLD = torch.tensor([0, 1, 2])


@pytest.mark.parametrize("backend", ["torch", "faiss", "auto"])
def test_search_topk_golden(backend):
    scores, idx = search_topk(S, CANDS, 3, backend=backend)
    assert idx.tolist() == [[0, 2, 3], [2, 0, 1], [1, 3, 0]]
    assert torch.allclose(scores, torch.tensor([[0.9, 0.3, 0.2], [0.8, 0.5, 0.4], [0.7, 0.6, 0.2]]))


def test_search_topk_blocks_and_k_cap():
    # k larger than the candidate count is capped; blocking over queries changes nothing
    _, whole = search_topk(S, CANDS, 10)
    _, blocked = search_topk(S, CANDS, 10, block=1)
    assert whole.shape == (3, 4)
    assert torch.equal(whole, blocked)


def test_topk_accuracy_golden():
    _, idx = search_topk(S, CANDS, 10)
    acc = topk_accuracy(idx, GOLD, ks=(1, 2, 3, 10))
    assert acc == pytest.approx({"acc@1": 1 / 3, "acc@2": 1 / 3, "acc@3": 2 / 3, "acc@10": 1.0})


def test_cosine_ignores_vector_length():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(20, 8, generator=g)
    c = torch.randn(30, 8, generator=g)
    scaled = c * torch.rand(30, 1, generator=g).add(0.1) * 50
    _, a = search_topk(l2_normalize(q), l2_normalize(c), 5)
    _, b = search_topk(l2_normalize(q), l2_normalize(scaled), 5)
    assert torch.equal(a, b)
    # and equals a brute-force cosine ranking
    cos = torch.nn.functional.cosine_similarity(q[:, None, :], c[None, :, :], dim=-1)
    assert torch.equal(a, cos.argsort(dim=1, descending=True)[:, :5])


def test_torch_and_faiss_agree_on_random_vectors():
    g = torch.Generator().manual_seed(1)
    q = l2_normalize(torch.randn(50, 16, generator=g))
    c = l2_normalize(torch.randn(200, 16, generator=g))
    st, it = search_topk(q, c, 10, backend="torch", block=7)
    sf, if_ = search_topk(q, c, 10, backend="faiss")
    assert torch.equal(it, if_)
    assert torch.allclose(st, sf, atol=1e-5)


def test_search_rejects_bad_input():
    with pytest.raises(ValueError):
        search_topk(S, torch.eye(3), 2)
    with pytest.raises(ValueError):
        search_topk(S, CANDS, 2, backend="annoy")
    with pytest.raises(ValueError):
        topk_accuracy(torch.zeros((2, 3), dtype=torch.long), GOLD)


# -- seqeval ------------------------------------------------------------------------------------------------
NER_GOLD = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["B-ORG", "O", "B-PER"]]
NER_PRED = [["B-PER", "I-PER", "O", "B-ORG", "O"], ["B-ORG", "O", "O"]]


def test_metric_module_loads_offline_from_the_repo():
    m = load_seqeval()
    assert (SEQEVAL_METRIC_DIR / "seqeval_metric.py").is_file()
    r = m.compute(predictions=[["B-PER", "O"]], references=[["B-PER", "O"]])
    assert r["overall_f1"] == 1.0
    assert load_seqeval() is m  # loaded once per process


def test_ner_golden():
    # gold entities: PER(0-1), LOC(3) | ORG(0), PER(2) = 4; predicted: PER(0-1), ORG(3) | ORG(0) = 3; correct: 2
    r = ner_scores(NER_PRED, NER_GOLD)
    assert r["precision"] == pytest.approx(2 / 3)
    assert r["recall"] == pytest.approx(2 / 4)
    assert r["f1"] == pytest.approx(4 / 7)
    full = seqeval_scores(NER_PRED, NER_GOLD)
    assert full["overall_accuracy"] == pytest.approx(6 / 8)
    assert full["per_type"]["PER"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "number": 2}
    assert full["per_type"]["LOC"]["number"] == 1 and full["per_type"]["LOC"]["f1"] == 0.0


def test_ner_matches_seqeval_default_mode():
    from seqeval.metrics import f1_score

    assert ner_scores(NER_PRED, NER_GOLD)["f1"] == pytest.approx(f1_score(NER_GOLD, NER_PRED))
    # the default (non-strict) mode of the reference: a chunk may start with I-
    assert ner_scores([["I-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])["f1"] == 1.0


@pytest.mark.parametrize("kind", ["ner", "ner-invalid", "pos", "sparse"])
def test_tagging_scores_equal_the_seqeval_module_bit_for_bit(kind):
    """The tasks' one-pass scorer gives exactly the numbers of the seqeval module through ``evaluate``."""
    import random

    from tasks.metrics import tagging_scores

    rng = random.Random(kind)
    tags = {"ner": ["O"] * 6 + ["B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"],
            "ner-invalid": ["O", "I-PER", "I-LOC", "B-PER", "E-ORG", "S-LOC", "B-ORG"],
            "pos": ["NOUN", "VERB", "DET", "ADJ", "PUNCT", "PROPN"],
            "sparse": ["O"] * 40 + ["B-PER"]}[kind]
    for trial in range(30):
        gold = [[rng.choice(tags) for _ in range(rng.randint(1, 30))] for _ in range(rng.randint(1, 25))]
        pred = [[t if rng.random() < 0.6 else rng.choice(tags) for t in s] for s in gold]
        if trial == 0:
            pred = [["O"] * len(s) for s in gold]  # nothing predicted
        ref = seqeval_scores(pred, gold)
        got, items = tagging_scores(pred, gold)
        assert got["f1"] == ref["overall_f1"]
        assert got["precision"] == ref["overall_precision"]
        assert got["recall"] == ref["overall_recall"]
        assert got["acc"] == ref["overall_accuracy"]
        assert len(items["f1"]["num"]) == len(gold)
    with pytest.raises(ValueError, match="gold tags"):
        tagging_scores([["O"]], [["O", "O"]])
    with pytest.raises(ValueError, match="no sentences"):
        tagging_scores([], [])


def test_pos_bare_tag_quirk_vs_token_accuracy():
    gold = [["NOUN", "NOUN", "VERB", "DET", "NOUN"]]
    pred = [["NOUN", "ADJ", "VERB", "DET", "NOUN"]]
    # seqeval reads N|OUN, V|ERB ...: gold chunks OUN(0-1) ERB(2) ET(3) OUN(4) = 4;
    # predicted OUN(0) DJ(1) ERB(2) ET(3) OUN(4) = 5; correct ERB, ET, OUN(4) = 3 -> P 3/5, R 3/4, F1 2/3
    r = pos_scores(pred, gold)
    assert r["f1"] == pytest.approx(2 / 3)
    assert r["acc"] == pytest.approx(4 / 5)
    assert token_accuracy(pred, gold) == pytest.approx(4 / 5)
    # two adjacent NOUNs are ONE chunk: half the tokens right, but F1 zero
    r2 = pos_scores([["NOUN", "VERB"]], [["NOUN", "NOUN"]])
    assert r2["f1"] == 0.0 and r2["acc"] == 0.5
    # sentences do not merge across their boundary
    r3 = pos_scores([["NOUN"], ["NOUN"]], [["NOUN"], ["NOUN"]])
    assert r3 == {"f1": 1.0, "acc": 1.0}


def test_pos_quirk_is_silent():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pos_scores([["NOUN", "PROPN", "X"]], [["NOUN", "VERB", "X"]])
    assert not [w for w in caught if "NE tag" in str(w.message)]


def test_seqeval_rejects_misaligned_input():
    with pytest.raises(ValueError):
        seqeval_scores([["O"]], [["O"], ["O"]])
    with pytest.raises(ValueError):
        load_seqeval().compute(predictions=[["O", "O"]], references=[["O"]])
    with pytest.raises(ValueError):
        token_accuracy([["O"]], [["O", "O"]])


def test_tagging_item_stats_recompute_seqeval_exactly():
    from tasks.base import ItemStats
    from tasks.metrics import ner_scores, pos_scores, tagging_item_stats

    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "O"], ["B-LOC", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["O", "B-ORG", "O", "O"], ["B-LOC", "B-PER"]]
    st = tagging_item_stats(pred, gold)
    ner = ner_scores(pred, gold)
    for m in ("f1", "precision", "recall"):
        assert ItemStats(**st[m]).value() == pytest.approx(ner[m])
    # per sentence (tp, fp, fn): (1, 0, 1), (0, 1, 1) (the ORG span is cut short), (1, 1, 0)
    assert st["f1"]["num"] == [2.0, 0.0, 2.0] and st["f1"]["den"] == [3.0, 2.0, 3.0]
    upos_gold = [["NOUN", "NOUN", "VERB"], ["DET", "NOUN"]]
    upos_pred = [["NOUN", "VERB", "VERB"], ["DET", "NOUN"]]
    pos = pos_scores(upos_pred, upos_gold)
    st = tagging_item_stats(upos_pred, upos_gold)
    assert ItemStats(**st["f1"]).value() == pytest.approx(pos["f1"])
    assert ItemStats(**st["acc"]).value() == pytest.approx(pos["acc"]) == pytest.approx(4 / 5)
