"""HyperOFA as a method: on the synthetic world (same counts as OFA, the invariants every method keeps, caching,
artifacts, determinism) and end to end through ``initialize_model`` on a planted world whose source embeddings are a
function of the word vectors (the hypernetwork then beats its shuffled-target control)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.registry import METHODS
from methods.base import InitContext, Provenance
from methods.hyperofa import detect_source_kind
from methods.overlap import mapping_cache
from tests._surgery_fixtures import TinyWorld

TINY = {"preset": "tiny", "epochs": 3}
REFERENCE = Path(__file__).parent / "fixtures" / "reference" / "ofa"


@pytest.fixture(scope="module")
def synth(synthetic_world):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from methods.factorize import factorize

    s = AutoTokenizer.from_pretrained(synthetic_world.source_dir("src"))
    t = AutoTokenizer.from_pretrained(synthetic_world.target_tokenizer_dir)
    m = AutoModelForMaskedLM.from_pretrained(synthetic_world.source_dir("src"))
    e = m.get_input_embeddings().weight.detach()[: len(s)].float().clone()
    return synthetic_world, s, t, factorize(e, 16).coords


def ctx_for(synth, params=None, seed=0, cache_dir=None, workdir=None):
    world, s, t, f = synth
    return InitContext(source_matrix=f, source_tokenizer=s, target_tokenizer=t, mapping_for=mapping_cache(s, t, None),
                       world=world, seed=seed, factorized=True, params=dict(TINY if params is None else params),
                       cache_dir=cache_dir, workdir=workdir)


@pytest.fixture(scope="module")
def results(synth):
    ofa = METHODS.get("ofa")().initialize(ctx_for(synth, params={}))
    hyp = METHODS.get("hyperofa")().initialize(ctx_for(synth))
    return ofa, hyp


def test_same_counts_and_rows_as_ofa(synth, results):
    _, s, t, f = synth
    ofa, hyp = results
    assert hyp.counts() == ofa.counts()
    assert np.array_equal(hyp.provenance, ofa.provenance)  # the same tokens in each class, not only as many
    assert sum(hyp.counts().values()) == len(t) and hyp.matrix.shape == (len(t), 16)
    c = hyp.counts()
    assert c["copied"] > 0 and c["method"] > 0 and c["random"] > 0 and c["unk"] == 0
    assert hyp.stats["wise"] == c["method"] == ofa.stats["wise"]
    assert hyp.stats["no_word_match"] == ofa.stats["no_word_match"] == c["random"]
    st = hyp.stats
    assert st["train_pairs"] + st["val_pairs"] + st["test_pairs"] == st["source_subwords_matched"]
    assert st["source_subwords_matched"] == ofa.stats["source_subwords_matched"]
    # copied rows are the source rows; the specials among them
    for tid, sid in hyp.copy.items():
        assert torch.equal(hyp.matrix[tid], f[sid]) and hyp.provenance[tid] == Provenance.COPIED
    for sp in t.all_special_ids:
        assert hyp.provenance[sp] == Provenance.COPIED
        assert torch.equal(hyp.matrix[sp], f[s.convert_tokens_to_ids(t.convert_ids_to_tokens(sp))])
    # fallback rows are OFA's (and random's) rows for the same tokens; predicted rows are the hypernetwork's own
    rnd = hyp.provenance == Provenance.RANDOM
    assert torch.equal(hyp.matrix[torch.from_numpy(rnd)], ofa.matrix[torch.from_numpy(rnd)])
    wise = torch.from_numpy(hyp.provenance == Provenance.METHOD)
    assert not torch.allclose(hyp.matrix[wise], ofa.matrix[wise])
    assert torch.isfinite(hyp.matrix).all()


def test_stats_and_temperature(results):
    _, hyp = results
    st = hyp.stats
    for k in ("val_cosine", "control_val_cosine", "test_cosine", "val_cosine_max"):
        assert isinstance(st[k], float) and -1 <= st[k] <= 1, k
    assert st["val_cosine_gain"] == pytest.approx(st["val_cosine"] - st["control_val_cosine"])
    assert st["source_kind"] == "mono" and st["temperature"] == 0.5  # the synthetic source knows one language
    assert st["preset"] == "tiny" and st["hypernetwork"]["hidden"] == 32 and st["epochs"] <= 3
    assert st["hn_parameters"] > 0 and st["hypernetwork_cached"] is False
    wise = torch.from_numpy(hyp.provenance == Provenance.METHOD)
    assert st["predicted_row_norm"] == pytest.approx(hyp.matrix[wise].norm(dim=1).mean().item(), rel=1e-4)
    assert st["source_row_norm"] > 0
    assert json.loads(json.dumps(st)) == st  # JSON-safe for the init report


def test_deterministic_and_independent_of_global_rng(synth, results):
    _, hyp = results
    torch.manual_seed(999)
    np.random.seed(999)
    torch.rand(5)
    again = METHODS.get("hyperofa")().initialize(ctx_for(synth))
    assert torch.equal(again.matrix, hyp.matrix)
    other = METHODS.get("hyperofa")().initialize(ctx_for(synth, seed=1))
    wise = torch.from_numpy(hyp.provenance == Provenance.METHOD)
    assert not torch.equal(other.matrix[wise], hyp.matrix[wise])


def test_cache_and_artifacts(synth, tmp_path):
    params = {**TINY, "control": True}
    first = METHODS.get("hyperofa")().initialize(ctx_for(synth, params, cache_dir=tmp_path / "c",
                                                         workdir=tmp_path / "w1"))
    assert first.stats["hypernetwork_cached"] is False and first.stats["control_cached"] is False
    products = [p for p in (tmp_path / "c" / "products" / "hypernetwork").iterdir() if p.is_dir()]  # not locks
    assert len(products) == 2  # the network and its control
    assert all((p / "model.safetensors").is_file() and (p / "config.json").is_file() for p in products)
    curves = json.loads((tmp_path / "w1" / "curves.json").read_text())
    for k in ("train_loss", "val_loss", "val_cosine", "lr", "control_val_cosine", "control_train_loss"):
        assert len(curves[f"hypernetwork/{k}"]) == first.stats["epochs"], k
    assert [e for e, _ in curves["hypernetwork/val_cosine"]] == list(range(1, first.stats["epochs"] + 1))
    # the learning curve is in the stats too (so in the init report), column by column, as in curves.json
    curve, control_curve = first.stats["curve"], first.stats["control_curve"]
    assert curve["epoch"] == list(range(1, first.stats["epochs"] + 1))
    for k in ("train_loss", "val_loss", "val_cosine", "lr"):
        assert curve[k] == [round(v, 6) for _, v in curves[f"hypernetwork/{k}"]], k
    assert control_curve["val_cosine"] == [round(v, 6) for _, v in curves["hypernetwork/control_val_cosine"]]
    assert control_curve["epoch"] == list(range(1, first.stats["control_epochs"] + 1))
    assert curve["val_loss"][first.stats["best_epoch"] - 1] == round(first.stats["best_val_loss"], 6)
    assert (tmp_path / "w1" / "hypernetwork_curve.png").stat().st_size > 5000
    assert set(first.artifacts) == {"curves", "curve_plot", "hypernetwork"}

    second = METHODS.get("hyperofa")().initialize(ctx_for(synth, params, cache_dir=tmp_path / "c",
                                                          workdir=tmp_path / "w2"))
    assert second.stats["hypernetwork_cached"] is True and second.stats["control_cached"] is True
    assert torch.equal(second.matrix, first.matrix)
    assert second.stats["val_cosine"] == first.stats["val_cosine"]
    assert json.loads((tmp_path / "w2" / "curves.json").read_text()) == curves  # the curve is written again

    changed = METHODS.get("hyperofa")().initialize(ctx_for(synth, {**params, "lr": 1e-3, "control": False},
                                                           cache_dir=tmp_path / "c"))
    assert changed.stats["hypernetwork_cached"] is False and changed.stats["control_val_cosine"] is None
    assert len([p for p in (tmp_path / "c" / "products" / "hypernetwork").iterdir() if p.is_dir()]) == 3


def test_parameters_are_checked(synth, tmp_path):
    m = METHODS.get("hyperofa")()
    for bad in ({"hiden": 3}, {"arch": "gru"}, {"preset": "HN-Q-1"}, {"loss_form": "x"}, {"amp": "fp8"},
                {**TINY, "split": [0.5, 0.5]}, {**TINY, "augment_min_fraction": 0}):
        with pytest.raises(ConfigError):
            m.initialize(ctx_for(synth, bad))
    world, s, t, f = synth
    ctx = InitContext(source_matrix=f, source_tokenizer=s, target_tokenizer=t, mapping_for=mapping_cache(s, t, None),
                      world=TinyWorld(root=tmp_path, sources=[]), seed=0, params=TINY)
    with pytest.raises(MissingResourceError):
        m.initialize(ctx)
    cls = METHODS.get("hyperofa")
    assert cls.requires == frozenset({"word_vectors"}) and cls.supports_factorized and cls.overlap_rule == "ofa"


def test_source_kind_detection(tmp_path):
    tok = SimpleNamespace(name_or_path=str(tmp_path / "sources" / "b"))

    def world(sources, languages=None):
        return SimpleNamespace(manifest={"sources": sources}, languages=languages or {},
                               source_dir=lambda s: tmp_path / "sources" / s)

    assert detect_source_kind(world({"a": {"languages": ["eng_Latn"]}, "b": {"languages": ["x", "y"]}}), tok)[0] \
        == "multi"
    assert detect_source_kind(world({"a": {}, "b": {"kind": "mono"}}), tok)[0] == "mono"
    assert detect_source_kind(world({"b": {"multilingual": False}}), tok)[0] == "mono"
    seen = {"eng_Latn": SimpleNamespace(seen={"b": True}), "deu_Latn": SimpleNamespace(seen={"b": True})}
    assert detect_source_kind(world({"a": {}, "b": {}}, seen), tok)[0] == "multi"
    assert detect_source_kind(world({"a": {}, "b": {}}), tok)[0] is None
    assert detect_source_kind(world({"mono": {}}), SimpleNamespace(name_or_path="elsewhere"))[0] == "mono"


# -- end to end on a planted world --------------------------------------------------------------------------
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def planted_world(root: Path, seed: int = 0) -> TinyWorld:
    """Source pieces are syllables (word-initial and inner); every syllable has a latent vector z; a word's vector
    is a fixed linear map of the mean z of its syllables (plus noise); a source piece's embedding is another
    linear map of its syllable's z (plus noise). The target vocabulary adds two-syllable word-initial pieces."""
    from harness.core.tokenization import extend_pieces, make_xlmr_tokenizer, xlmr_vocab
    from tests._surgery_fixtures import tiny_xlmr

    rng = np.random.default_rng(seed)
    z = {syl: rng.standard_normal(6) for syl in SYLLABLES}
    src_pieces = [("▁" + syl, -3.0) for syl in SYLLABLES] + [(syl, -3.5) for syl in SYLLABLES]
    st = make_xlmr_tokenizer(xlmr_vocab(src_pieces))
    new = [("▁" + a + b, -2.0) for a, b in zip(rng.permutation(SYLLABLES)[:120], rng.permutation(SYLLABLES)[:120],
                                               strict=True)]
    tt = make_xlmr_tokenizer(xlmr_vocab(extend_pieces(src_pieces, new)))
    to_word = rng.standard_normal((6, 12))
    to_emb = rng.standard_normal((6, 16))
    lines: dict[str, str] = {}
    for _ in range(2500):
        sy = list(rng.choice(SYLLABLES, size=int(rng.integers(1, 4))))
        vec = np.mean([z[x] for x in sy], axis=0) @ to_word + 0.1 * rng.standard_normal(12)
        lines.setdefault(f"{rng.choice(['eng', 'deu', 'swh'])}:{''.join(sy)}", " ".join(f"{v:.4f}" for v in vec))
    model = tiny_xlmr(len(st), hidden=16)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        for piece, _ in src_pieces:
            emb[st.convert_tokens_to_ids(piece)] = torch.tensor(
                z[piece.lstrip("▁")] @ to_emb + 0.1 * rng.standard_normal(16) + (0.5 if piece[0] == "▁" else 0.0),
                dtype=emb.dtype)
    d = root / "sources" / "planted"
    model.save_pretrained(d)
    st.save_pretrained(d)
    tt.save_pretrained(root / "target_tokenizer")
    (root / "resources").mkdir(parents=True)
    (root / "resources" / "word_vectors.vec").write_text("".join(f"{k} {v}\n" for k, v in sorted(lines.items())),
                                                                encoding="utf-8")
    return TinyWorld(root=root, sources=["planted"], resources={"word_vectors"}, name="planted")


def test_end_to_end_on_a_planted_world(tmp_path, harness_home):
    from harness.initialize import initialize_model, load_model

    world = planted_world(tmp_path / "w")
    params = {"preset": "tiny", "epochs": 25, "patience": 25, "source_kind": "multi"}
    rep = initialize_model(world, "planted", "hyperofa", dim=8, seed=0, params=params, out_dir=tmp_path / "o")
    st = rep["method_stats"]
    assert st["temperature"] == 0.25 and st["temperature_from"].startswith("multi source (parameter")
    assert st["val_cosine"] > 0.6 and st["val_cosine"] > st["control_val_cosine"] + 0.3, st
    assert rep["counts"]["method"] == st["wise"] > 0 and sum(rep["counts"].values()) == rep["target_vocab_size"]
    art = tmp_path / "o" / "artifacts"
    assert (art / "curves.json").is_file() and (art / "hypernetwork_curve.png").is_file()
    assert load_model(tmp_path / "o")(input_ids=torch.tensor([[0, 5, 6, 2]])).logits.shape[-1] == \
        rep["target_vocab_size"]


def test_fast_matching_equals_ofa_edges(synth):
    """The faster edge collection gives OFA's graph (deduplicated) on SentencePiece, WordPiece and byte-level BPE."""
    from methods.hypernetwork_data import WordSets
    from methods.hyperofa_data import word_sets
    from methods.subwords import subword_word_edges
    from methods.wordvectors import load_word_vectors
    from tests._surgery_fixtures import bytelevel_tokenizer, wordpiece_tokenizer

    world, s, t, _ = synth
    wv = load_word_vectors(world.resource_files("word_vectors"))
    wv.keys[:3] = ["qaa:$new$york", "Cats", "qab:héllo"]  # a "$" key, an English key, a non-ASCII word
    for tok in (s, t, wordpiece_tokenizer(), bytelevel_tokenizer()):
        fast = word_sets(tok, wv)
        sub, wrd = subword_word_edges(tok, wv.keys)
        slow = WordSets.from_edges(sub, wrd, len(tok), len(wv))
        assert np.array_equal(fast.indptr, slow.indptr) and np.array_equal(fast.words, slow.words)
        assert fast.lengths.sum() > 0
    only = word_sets(t, wv, languages={"qab"})
    assert 0 < only.lengths.sum() < word_sets(t, wv).lengths.sum()


# -- HyperOFA's steps shared with OFA, against the authors' code (enesozeren/hyper-ofa) ---------------------------------
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from tests.test_ofa import reference_inputs

    return reference_inputs(tmp_path_factory.mktemp("hyperofa-reference"))


def test_word_sets_and_training_pairs_match_the_authors_code(reference):
    """The matched word sets of every source and target token (``get_subword_to_word_mappings``: the 4-variant
    tokenization of each word, duplicates removed) are the reference's, as sets, on the bible world's tokenizers
    and 2,000 of its word vectors; so are the hypernetwork's training pairs: every source token with a matched
    word, its F_s row the target (the reference's ``create_input_target_pairs``).

    Differs by design, not compared: the order inside a set (the reference's ``list(set())`` is hash-ordered; ours
    is word-file order), and the split (ours: a seeded generator with a floor of held-out pairs; the reference:
    ``np.random.seed(42)``, 97 / 2.5 / 0.5 %, here 1,899 / 48 / 11 pairs)."""
    from methods.hyperofa_data import word_sets
    from methods.wordvectors import load_word_vectors

    ref = reference
    wv = load_word_vectors(ref.world.resource_files("word_vectors"))
    with np.load(REFERENCE / "hyperofa.npz") as z:
        theirs = {side: (z[f"{side}_indptr"], z[f"{side}_words"]) for side in ("source", "target")}
        split = [len(z[f"split_{k}"]) for k in ("train", "val", "test")]
    for side, tok in (("source", ref.s), ("target", ref.t)):
        ws = word_sets(tok, wv)
        indptr, words = theirs[side]
        assert np.array_equal(ws.indptr, indptr), side
        assert np.array_equal(ws.words, words.astype(np.int64)), side
    ws_s = word_sets(ref.s, wv)
    train_tokens = np.flatnonzero(ws_s.lengths > 0)
    assert len(train_tokens) == ref.meta["hyperofa"]["matched_source"] == sum(split)
    assert int((word_sets(ref.t, wv).lengths > 0).sum()) == ref.meta["hyperofa"]["matched_target"]


def test_hyperofa_rows_are_copied_predicted_or_drawn_as_the_authors_assemble_them(reference):
    """Every target row has the provenance the reference's ``init_target_matrix.create_target_embeddings`` gives
    it (overlap copied from the same source rows, every other token with a matched word predicted, the rest
    Gaussian), so the counts are OFA's; the copied rows are the source rows."""
    ref = reference
    with np.load(REFERENCE / "hyperofa.npz") as z:
        prov = z["provenance"]
    with np.load(REFERENCE / "ofa.npz") as z:
        their_copy = dict(zip(z["copy_target"].tolist(), z["copy_source"].tolist(), strict=True))
    from tests.test_ofa import reference_ctx

    res = METHODS.get("hyperofa")().initialize(reference_ctx(
        ref, {"preset": "tiny", "epochs": 1, "control": False, "source_kind": "mono"}))
    assert np.array_equal(res.provenance, prov)
    assert res.counts() == {**ref.meta["hyperofa"]["counts"], "unk": 0} == {**ref.meta["ofa"]["counts"], "unk": 0}
    assert res.copy == their_copy
    ids = torch.tensor(sorted(their_copy))
    assert torch.equal(res.matrix[ids], ref.f_s[torch.tensor([their_copy[int(t)] for t in ids])])
    assert res.stats["source_subwords_matched"] == ref.meta["hyperofa"]["matched_source"]


@pytest.mark.parametrize(("capability", "expected"), [((7, 0), "off"), ((7, 5), "off"), ((8, 0), "bf16")])
def test_amp_auto_is_the_harness_auto_not_torchs_emulated_bf16(monkeypatch, capability, expected):
    """amp = "auto" trains in bf16 only where every precision of the harness would (a GPU that computes bf16
    natively): a V100 or a T4, on which torch counts emulated bf16 as supported, trains in fp32 like everything
    else; a CPU too. Named values are kept."""
    from harness.core import precision
    from methods.hyperofa import resolve_amp

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # torch's word
    monkeypatch.setattr(precision, "_nvml_min_capability", lambda: capability)  # what the GPU is
    precision.cuda_has_native_bf16.cache_clear()
    try:
        assert resolve_amp("auto", torch.device("cuda")) == expected
        assert resolve_amp("auto", torch.device("cuda:0")) == expected
        assert resolve_amp("auto", torch.device("cpu")) == "off"
        assert resolve_amp("bf16", torch.device("cpu")) == "bf16" and resolve_amp("off", torch.device("cuda")) == "off"
    finally:
        precision.cuda_has_native_bf16.cache_clear()
