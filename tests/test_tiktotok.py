"""Tik-to-Tok: the weights, the bigram corpus and the tags by hand; a hand-computed example on a tiny world
(every route, every weight); invariants and determinism on the synthetic world."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.registry import METHODS
from harness.core.tokenization import make_xlmr_tokenizer, xlmr_vocab
from harness.worlds.base import load_world_dir
from methods.base import InitContext, Provenance
from methods.combine import rank_weights
from methods.fasttext_util import load_model, word_vectors
from methods.overlap import mapping_cache
from methods.tiktotok import bigram_corpus, clean_pairs, token_form
from tests.test_focus import check_invariants, synthetic_ctx

TINY = {"dim": 16, "epochs": 3, "bucket": 20_000}


def test_rank_weights_by_hand():
    assert rank_weights(1) == [1.0]  # the formula's 0.9 is undefined by the seed: a convex combination
    assert np.allclose(rank_weights(2), [0.6, 0.4])  # Fig. 1: VRIJHEID = 0.6 LIBERTY + 0.4 FREEDOM
    assert np.allclose(rank_weights(3), [0.5, 0.3, 0.2])  # Table 1
    assert np.allclose(rank_weights(4), [0.45, 0.25, 0.15, 0.15])
    assert np.allclose(rank_weights(6), [0.4, 0.2, 0.1, 0.1, 0.1, 0.1])
    assert rank_weights(0) == []
    assert rank_weights(1, single=0.9) == [0.9]


def test_bigram_corpus_and_tags_by_hand():
    lines = bigram_corpus([("liberty", "vrijheid")], "S", "T", compound_augmentation=False, shuffle_seed=None)
    assert lines == ["TvrijheidT TvrijheidT", "TvrijheidT SlibertyS", "SlibertyS TvrijheidT", "SlibertyS SlibertyS"]
    aug = bigram_corpus([("liberty", "vrijheid")], "S", "T", shuffle_seed=None)
    assert aug[:4] == lines and len(aug) == 12
    assert aug[4:8] == ["Tvrijheid Tvrijheid", "Tvrijheid Sliberty", "Sliberty Tvrijheid", "Sliberty Sliberty"]
    assert aug[8:] == ["vrijheidT vrijheidT", "vrijheidT libertyS", "libertyS vrijheidT", "libertyS libertyS"]
    assert sorted(bigram_corpus([("a", "b")], "S", "T", shuffle_seed=3)) == sorted(
        bigram_corpus([("a", "b")], "S", "T", shuffle_seed=None))
    assert clean_pairs([("a", "b"), ("a", "b"), ("a b", "c"), ("x", "")]) == [("a", "b")]
    assert token_form(" heid", "T", "bow") == "Theid"  # word-start: the start tag
    assert token_form("heid", "T", "bow") == "heidT"  # in-word: the end tag
    assert token_form("heid", "T", "start") == "heid" and token_form(" heid", "T", "none") == "heid"


# ---------------------------------------------------------------------------------------------------------------
# a hand-computed example
# ---------------------------------------------------------------------------------------------------------------
LETTERS = [(c, -9.0) for c in "abcdefghijklmnopqrstuvwxyz"]
SOURCE_PIECES = [("▁liberty", -3.0), ("▁freedom", -3.0), ("▁free", -3.0), ("▁liber", -4.0), ("▁one", -3.0),
                 ("▁equal", -3.0), ("▁the", -2.0), (",", -3.0), ("ty", -4.0), ("ity", -4.0), ("dom", -4.0),
                 ("▁uni", -4.0), ("s", -5.0)] + LETTERS
TARGET_PIECES = [("▁vrijheid", -3.0), ("▁vrij", -3.0), ("heid", -3.0), ("▁een", -3.0), ("▁gelijk", -3.0),
                 ("▁de", -3.0), (",", -3.0), ("?", -4.0), ("▁liberty", -3.0), ("▁freedoms", -2.0)] + LETTERS
DICTIONARY = """liberty\tvrijheid
freedom\tvrijheid
liberation\tvrijheid
free\tvrij
liberated\tvrij
one\teen
equal\tgelijk
unity\teenheid
"""
# frequencies in the source text: freedom 3, liberty 2, liberation 1, free 1, liberated 0
PIVOT_TEXT = "freedom freedom freedom liberty\nliberty liberation free\nfreedoms one\n"
TARGET_TEXT = "vrijheid vrij een , de ?\ngelijk vrijheid heid een\n"


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiktotok-world")
    (root / "resources" / "text").mkdir(parents=True)
    (root / "resources" / "dictionaries").mkdir(parents=True)
    (root / "resources" / "text" / "qaa_Latn.txt").write_text(PIVOT_TEXT, encoding="utf-8")
    (root / "resources" / "text" / "qab_Latn.txt").write_text(TARGET_TEXT, encoding="utf-8")
    (root / "resources" / "dictionaries" / "qaa_Latn-qab_Latn.tsv").write_text(DICTIONARY, encoding="utf-8")
    (root / "manifest.json").write_text(json.dumps({"name": "hand", "pivot_language": "qaa_Latn",
                                                    "sources": {"src": {}}}))
    (root / "languages.json").write_text(json.dumps({"qaa_Latn": {}, "qab_Latn": {}, "qac_Latn": {}}))
    world = load_world_dir("hand", root)
    st = make_xlmr_tokenizer(xlmr_vocab(SOURCE_PIECES))
    tt = make_xlmr_tokenizer(xlmr_vocab(TARGET_PIECES))
    e_s = torch.randn(len(st), 8, generator=torch.Generator().manual_seed(0))
    ctx = InitContext(source_matrix=e_s, source_tokenizer=st, target_tokenizer=tt,
                      mapping_for=mapping_cache(st, tt, None), world=world, seed=0,
                      params={**TINY, "save_plan": True}, cache_dir=tmp_path_factory.mktemp("tt-cache"),
                      workdir=tmp_path_factory.mktemp("tt-work"))
    result = METHODS.get("tiktotok")().initialize(ctx)
    plan = {}
    with open(result.artifacts["plan"], encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            plan[tt.convert_ids_to_tokens(row["id"])] = (row["route"], [st.convert_ids_to_tokens(s)
                                                                         for s in row["sources"]], row["weights"])
    return ctx, result, plan


def test_hand_example_routes_and_weights(hand):
    ctx, result, plan = hand
    # b. dictionary: translations sorted by source-text frequency; "liberation" is not a source token, so its
    # first source sub-token (▁liber) stands for it
    assert plan["▁vrijheid"][0] == "dictionary"
    assert plan["▁vrijheid"][1] == ["▁freedom", "▁liberty", "▁liber"]
    assert np.allclose(plan["▁vrijheid"][2], [0.5, 0.3, 0.2])
    assert plan["▁vrij"][1] == ["▁free", "▁liber"] and np.allclose(plan["▁vrij"][2], [0.6, 0.4])
    assert plan["▁een"] == ("dictionary", ["▁one"], [1.0])
    assert plan["▁gelijk"] == ("dictionary", ["▁equal"], [1.0])
    # a. non-alphabetic: shared -> copied, unshared -> UNK; specials by role
    assert plan[","] == ("copy", [","], [1.0])
    assert plan["?"] == ("unk", ["<unk>"], [1.0])
    for tok in ("<s>", "</s>", "<pad>", "<unk>", "<mask>"):
        assert plan[tok] == ("copy", [tok], [1.0])
    # source language (identity): a shared word is copied, an unshared word-start token takes its first
    # source sub-token
    assert plan["▁liberty"] == ("copy", ["▁liberty"], [1.0])
    assert plan["▁freedoms"] == ("dictionary", ["▁freedom"], [1.0])
    # every row is the weighted sum of its source rows; provenance follows the route
    tt = ctx.target_tokenizer
    code = {"copy": Provenance.COPIED, "unk": Provenance.UNK, "dictionary": Provenance.METHOD,
            "fasttext": Provenance.METHOD}
    for tok, (route, sources, weights) in plan.items():
        i = tt.convert_tokens_to_ids(tok)
        expected = torch.tensor(weights, dtype=torch.float64) @ ctx.source_matrix.double()[
            ctx.source_tokenizer.convert_tokens_to_ids(sources)]
        assert torch.allclose(result.matrix[i].double(), expected, atol=1e-6), tok
        assert result.provenance[i] == code[route], tok
    assert abs(sum(plan["▁vrijheid"][2]) - 1) < 1e-12
    assert result.counts()["random"] == 0


def test_hand_example_fasttext_route(hand):
    ctx, result, plan = hand
    st = ctx.source_tokenizer
    info = result.stats["languages"]["qab_Latn"]["fasttext_model"]
    model = load_model(info["path"])
    canon = ctx.mapping_for("tiktotok").source_tokens
    cands = [i for i, c in enumerate(canon) if not c.startswith("\x00")]
    src_vecs = word_vectors(model, [("Ⓢ" + c[1:]) if c.startswith(" ") else (c + "Ⓢ") for c in
                                    (canon[i] for i in cands)]).astype(np.float64)
    keep = np.abs(src_vecs).sum(axis=1) > 0
    src_unit = src_vecs[keep] / np.linalg.norm(src_vecs[keep], axis=1, keepdims=True)
    cand_ids = np.array(cands)[keep]
    checked = 0
    for tok, form in (("heid", "heidⓉ"), ("▁de", "Ⓣde")):  # in-word: end tag; word start: start tag
        route, sources, weights = plan[tok]
        v = model.get_word_vector(form).astype(np.float64)
        if not np.abs(v).sum():
            assert route == "unk"
            continue
        sims = src_unit @ (v / np.linalg.norm(v))
        top = cand_ids[np.argsort(-sims, kind="stable")[:3]]
        assert route == "fasttext"
        assert sources == st.convert_ids_to_tokens(top.tolist())
        assert np.allclose(weights, [0.5, 0.3, 0.2])
        checked += 1
    assert checked >= 1
    assert result.stats["routes"]["fasttext"] >= 1


def test_hand_example_report(hand):
    _, result, _ = hand
    s = result.stats
    assert s["missing"] == {"qac_Latn": ["target_text", "dictionary"]}
    assert s["frequency"] == "source_text"
    assert set(s["per_language"]) == {"qaa_Latn", "qab_Latn", "none"}
    assert sum(v["tokens"] for v in s["per_language"].values()) == len(result.provenance)
    assert sum(s["routes"].values()) == len(result.provenance)


def test_rejects_bad_params(hand):
    ctx, _, _ = hand
    for bad in ({"tag_policy": "sideways"}, {"weights": [0.3, 0.1]}, {"source_tag": "Ⓣ"}, {"nope": 1}):
        ctx.params = {**TINY, **bad}
        with pytest.raises(ConfigError):
            METHODS.get("tiktotok")().initialize(ctx)
    ctx.params = dict(TINY)


# ---------------------------------------------------------------------------------------------------------------
# the synthetic world
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def synthetic_run(synthetic_world, tmp_path_factory):
    ctx = synthetic_ctx(synthetic_world, tmp_path_factory.mktemp("tt-syn"), TINY)
    return ctx, METHODS.get("tiktotok")().initialize(ctx)


def test_synthetic_invariants(synthetic_run):
    ctx, result = synthetic_run
    mapping = ctx.mapping_for("tiktotok")
    check_invariants(result, ctx, mapping.copy)
    c = result.counts()
    assert c["random"] == 0  # Tik-to-Tok never draws random rows
    unk = ctx.source_matrix[ctx.source_tokenizer.unk_token_id]
    for i in np.flatnonzero(result.provenance == Provenance.UNK):
        assert torch.equal(result.matrix[i], unk)
    for t in mapping.stats["unk"]:
        assert result.provenance[t] == Provenance.UNK
    s = result.stats
    assert s["routes"]["dictionary"] > 0 and s["routes"]["fasttext"] > 0
    for lang in ("qab_Latn", "qac_Latn", "qad_Cyrl", "qae_Grek"):
        assert s["per_language"][lang]["method"] > 0
    assert s["per_language"]["qaa_Latn"]["copied"] > 0  # identity: shared source-language tokens
    assert s["missing"] == {}


def test_synthetic_deterministic_and_global_rng(synthetic_run, synthetic_world, tmp_path):
    ctx, result = synthetic_run
    torch.manual_seed(7)
    np.random.seed(7)
    _ = torch.rand(5), np.random.rand(5)
    again = METHODS.get("tiktotok")().initialize(synthetic_ctx(synthetic_world, tmp_path, TINY, seed=3))
    assert torch.equal(again.matrix, result.matrix)  # no random draw at all: the run seed does not matter
    assert np.array_equal(again.provenance, result.provenance)


def test_no_usable_dictionary_is_an_error(synthetic_world, tmp_path):
    from tests.test_focus import HidingWorld

    hide = {p.name for p in synthetic_world.resource_files("dictionary")}
    with pytest.raises(MissingResourceError, match="dictionary"):
        METHODS.get("tiktotok")().initialize(synthetic_ctx(HidingWorld(synthetic_world, hide), tmp_path, TINY))
