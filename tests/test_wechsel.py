"""WECHSEL: Procrustes and its dictionary pairs by hand, token strings, rows recomputed in the aligned space,
invariants, determinism, user-provided vectors and missing dictionaries on the synthetic world."""

from __future__ import annotations

import platform

import numpy as np
import pytest
import torch

from harness.core.registry import METHODS
from methods import pinned_blas
from methods.base import Provenance
from methods.fasttext_util import load_model, word_vectors
from methods.multilang import dictionary_for, read_dictionary
from methods.pinned_blas import PINNED_CORETYPE, align_all
from methods.wechsel import alignment_pairs, decoded_tokens
from tests.test_focus import HidingWorld, check_invariants, synthetic_ctx

TINY = {"dim": 16, "epochs": 2, "bucket": 20_000, "minn": 3, "maxn": 5, "min_count": 2}


class FakeVectors:
    """A stand-in fastText model: a fixed vocabulary of word vectors."""

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = {w: np.asarray(v, dtype=np.float32) for w, v in vectors.items()}

    def get_word_id(self, w: str) -> int:
        return list(self.vectors).index(w) if w in self.vectors else -1

    def get_word_vector(self, w: str) -> np.ndarray:
        return self.vectors[w]

    def get_dimension(self) -> int:
        return len(next(iter(self.vectors.values())))


def test_alignment_pairs_case_variants_by_hand():
    src = FakeVectors({"cat": [1, 0], "Cat": [0, 1], "dog": [1, 1]})
    tgt = FakeVectors({"paka": [2, 0], "Paka": [0, 2], "mbwa": [3, 3]})
    # ("cat", "paka"): source variants cat, cat, Cat; target variants paka, paka, Paka -> 3 x 3 = 9 pairs, all in
    # both vocabularies (duplicates kept as the reference code does). ("Dog", "mbwa"): source variants Dog (no),
    # dog, Dog (no); target variants mbwa, mbwa, Mbwa (no) -> 2 pairs. ("cow", "ng'ombe"): none.
    x_s, x_t = alignment_pairs(src, tgt, [("cat", "paka"), ("Dog", "mbwa"), ("cow", "ng'ombe")])
    assert len(x_s) == len(x_t) == 11
    assert (x_s == np.array([1, 0], np.float32)).all(axis=1).sum() == 6  # "cat" (twice) x 3 target variants
    assert (x_s == np.array([0, 1], np.float32)).all(axis=1).sum() == 3  # "Cat" x 3 target variants
    assert (x_t == np.array([0, 2], np.float32)).all(axis=1).sum() == 3  # "Paka" with each source variant
    assert (x_s == np.array([1, 1], np.float32)).all(axis=1).sum() == 2


def test_the_alignment_recovers_a_rotation_on_pinned_kernels_and_on_this_processs(monkeypatch):
    """The reference's float32 Procrustes and ``u_s @ R``: in a child on OpenBLAS's pinned kernels (one thread) and in
    this process with its own; both recover the rotation, and the child says which kernels it ran."""
    g = np.random.default_rng(0)
    q, _ = np.linalg.qr(g.standard_normal((8, 8)))
    x_s = g.standard_normal((50, 8)).astype(np.float32)
    u_s = g.standard_normal((30, 8))
    pairs = {"one": (x_s, x_s @ q.astype(np.float32)), "two": (x_s[:20], x_s[:20] @ q.astype(np.float32))}
    for mode in ("pinned", "native"):
        out, blas = align_all(u_s, pairs, blas=mode)
        assert set(out) == {"one", "two"}
        for u, residual in out.values():
            assert u.dtype == np.float64 and np.allclose(u, u_s @ q, atol=1e-4)
            assert residual < 1e-5
        if mode == "pinned" and platform.machine().lower() in ("x86_64", "amd64"):
            assert PINNED_CORETYPE in blas and "1 thread" in blas, blas
    with pytest.raises(ValueError, match="blas"):
        align_all(u_s, pairs, blas="fast")
    # a memory budget of one language's mapped vectors: a child per language, the same bytes, in the pairs' order
    whole, _ = align_all(u_s, pairs)
    calls = []
    monkeypatch.setattr(pinned_blas, "align_all", lambda *a, **k: calls.append(list(a[1])) or align_all(*a, **k))
    got = list(pinned_blas.aligned_in_groups(u_s, pairs, budget=u_s.nbytes))
    assert calls == [["one"], ["two"]] and [g[0] for g in got] == ["one", "two"]
    for lang, u, residual, _blas in got:
        assert np.array_equal(u, whole[lang][0]) and residual == whole[lang][1]
    calls.clear()
    assert [g[0] for g in pinned_blas.aligned_in_groups(u_s, pairs)] == ["one", "two"] and calls == [["one", "two"]]


@pytest.fixture(scope="module")
def wechsel_run(synthetic_world, tmp_path_factory):
    cache = tmp_path_factory.mktemp("wechsel-cache")
    ctx = synthetic_ctx(synthetic_world, cache, TINY)
    return ctx, METHODS.get("wechsel")().initialize(ctx), cache


def test_the_overlap_variant_copies_the_shared_tokens_and_keeps_every_other_row(wechsel_run):
    """wechsel+overlap: the ofa rule's overlap copied; each other row is computed exactly as wechsel computes it
    (a token's row depends on its own vector only), from the same cached word vectors."""
    ctx, plain, cache = wechsel_run
    variant = METHODS.get("wechsel+overlap")().initialize(synthetic_ctx(ctx.world, cache, TINY))
    overlap = ctx.mapping_for("ofa").copy
    assert len(overlap) > len(plain.copy) and set(variant.copy) == set(overlap)
    check_invariants(variant, ctx, overlap)
    for t, s in overlap.items():
        assert torch.equal(variant.matrix[t], ctx.source_matrix[s].float())
    rest = np.array([t for t in range(len(ctx.target_tokenizer)) if t not in overlap])
    assert torch.equal(variant.matrix[rest], plain.matrix[rest])
    assert np.array_equal(variant.provenance[rest], plain.provenance[rest])
    assert variant.stats["source_vectors"]["cached"]  # trained once, for both


def test_wechsel_token_strings_drop_the_word_start_marker(wechsel_run):
    ctx, _, _ = wechsel_run
    tt = ctx.target_tokenizer
    strings = decoded_tokens(tt)
    for i, tok in enumerate(tt.convert_ids_to_tokens(list(range(len(tt))))):
        if tok.startswith("▁") and i not in tt.all_special_ids:
            assert strings[i] == tok[1:].strip()
    assert strings[tt.convert_tokens_to_ids("▁")] == ""


def test_wechsel_invariants_only_specials_copied(wechsel_run):
    ctx, result, _ = wechsel_run
    mapping = ctx.mapping_for("wechsel")
    check_invariants(result, ctx, mapping.copy)
    assert set(result.copy) == set(ctx.target_tokenizer.all_special_ids)
    c = result.counts()
    assert c["copied"] == 5 and c["unk"] == 0 and c["method"] > 0 and c["random"] > 0
    s = result.stats
    assert s["missing"] == {}
    assert s["languages"]["qaa_Latn"]["alignment"].startswith("identity")
    for lang in ("qab_Latn", "qac_Latn", "qad_Cyrl", "qae_Grek"):
        assert s["languages"][lang]["alignment_pairs"] > 0
        assert s["per_language"][lang]["method"] == s["languages"][lang]["method"]
    # tokens of no language fall back (or are specials)
    assert s["per_language"]["none"]["method"] == 0


def test_wechsel_rows_recomputed_in_the_aligned_space(wechsel_run, synthetic_world):
    ctx, result, _ = wechsel_run
    s = result.stats
    src_model = load_model(s["source_vectors"]["path"])
    u_s = word_vectors(src_model, decoded_tokens(ctx.source_tokenizer)).astype(np.float64)
    tgt_strings = decoded_tokens(ctx.target_tokenizer)
    lang_counts = {}
    for lang in ("qab_Latn", "qaa_Latn"):
        if lang == "qaa_Latn":
            tgt_model, u_src = src_model, u_s
        else:
            tgt_model = load_model(s["languages"][lang]["vectors"]["path"])
            path, rev = dictionary_for(synthetic_world, "qaa_Latn", lang)
            x_s, x_t = alignment_pairs(src_model, tgt_model, read_dictionary(path, reverse=rev))
            u_src = align_all(u_s, {lang: (x_s, x_t)})[0][lang][0]
        u_src = u_src / (np.linalg.norm(u_src, axis=1, keepdims=True) + 1e-8)
        ids = [i for i, p in enumerate(result.provenance) if p == Provenance.METHOD
               and result.stats["per_language"] and _lang_of(ctx, i, lang)]
        lang_counts[lang] = len(ids)
        for i in ids[:15]:
            v = tgt_model.get_word_vector(tgt_strings[i]).astype(np.float64)
            sims = u_src @ (v / np.linalg.norm(v))
            top = np.argsort(-sims, kind="stable")[:10]  # ties: the lower source id first
            w = np.exp(sims[top] / 0.1) / np.exp(sims[top] / 0.1).sum()
            expected = w @ ctx.source_matrix.double().numpy()[top]
            assert np.allclose(result.matrix[i].double().numpy(), expected, atol=1e-5), (lang, i)
    assert all(n > 0 for n in lang_counts.values())


_ASSIGN: dict = {}


def _lang_of(ctx, i: int, lang: str) -> bool:
    if "a" not in _ASSIGN:
        from methods.multilang import assign_languages, language_token_counts, text_files

        counts = language_token_counts(ctx.target_tokenizer, text_files(ctx.world))
        _ASSIGN["a"] = assign_languages(counts, len(ctx.target_tokenizer)).lang_of
    return _ASSIGN["a"][i] == lang


def test_wechsel_zero_vector_tokens_fall_back(wechsel_run):
    ctx, result, _ = wechsel_run
    ids = np.flatnonzero(result.provenance == Provenance.RANDOM)
    from methods.shared import fallback_matrix

    expected = fallback_matrix(ctx.source_matrix, len(ctx.target_tokenizer), ctx.generator(0))
    assert torch.equal(result.matrix[ids], expected[ids])
    assert result.stats["per_language"]["none"]["random"] > 0


def test_wechsel_deterministic_global_rng_and_user_vectors(wechsel_run, synthetic_world, tmp_path):
    ctx, result, cache = wechsel_run
    torch.manual_seed(99)
    np.random.seed(99)
    _ = torch.randn(10), np.random.rand(10)
    fresh = METHODS.get("wechsel")().initialize(synthetic_ctx(synthetic_world, tmp_path / "fresh", TINY))
    assert torch.equal(fresh.matrix, result.matrix)
    # the same vectors given as paths (the route for cc.*.300.bin files) give the same matrix
    paths = {lang: v["vectors"]["path"] for lang, v in result.stats["languages"].items() if "vectors" in v}
    given = METHODS.get("wechsel")().initialize(synthetic_ctx(
        synthetic_world, tmp_path / "given",
        {**TINY, "source_vectors": result.stats["source_vectors"]["path"], "target_vectors": paths}))
    assert torch.equal(given.matrix, result.matrix)
    assert given.stats["source_vectors"]["trained"] is False


def test_wechsel_missing_dictionary_falls_back_and_is_reported(synthetic_world, tmp_path):
    world = HidingWorld(synthetic_world, {"qaa_Latn-qac_Latn.tsv"})
    result = METHODS.get("wechsel")().initialize(synthetic_ctx(world, tmp_path, TINY))
    assert result.stats["missing"] == {"qac_Latn": ["dictionary"]}
    row = result.stats["per_language"]["qac_Latn"]
    assert row["method"] == 0 and row["random"] + row["copied"] == row["tokens"] > 0
    assert result.stats["per_language"]["qab_Latn"]["method"] > 0


def test_specials_parameter_reaches_the_overlap_rule(wechsel_run):
    """``specials`` is a method parameter: "string" (default, the reference's) or "role"; it selects the wechsel
    rule's option (and the ofa rule's for wechsel+overlap), so it is logged and shows in the row label when it
    differs from the default."""
    import dataclasses

    from harness.core.errors import ConfigError

    ctx, plain, cache = wechsel_run
    assert METHODS.get("wechsel").defaults["specials"] == "string"
    seen: list[tuple[str, dict]] = []

    def spy(rule, **options):
        seen.append((rule, options))
        return ctx.mapping_for(rule, **options)

    for name, rule in (("wechsel", "wechsel"), ("wechsel+overlap", "ofa")):
        for value in ("string", "role"):
            seen.clear()
            spied = dataclasses.replace(ctx, mapping_for=spy, params={**TINY, "specials": value})
            res = METHODS.get(name)().initialize(spied)
            assert seen == [(rule, {"specials": value})], (name, value)
            assert res.copy == ctx.mapping_for(rule, specials=value).copy
    # the default is the reference's rule: the specials copied by their string
    assert plain.copy == ctx.mapping_for("wechsel", specials="string").copy
    with pytest.raises(ConfigError, match="specials"):
        METHODS.get("wechsel")().initialize(dataclasses.replace(ctx, params={**TINY, "specials": "id"}))


def _knn_float64(u_t, u_s, f_s, k, temperature):
    """The all-float64 search the screened one must reproduce: ties to the lower source id."""
    us = u_s / np.maximum(np.linalg.norm(u_s, axis=1, keepdims=True), 1e-300)
    rows, nbs = [], []
    for u in u_t:
        sims = us @ (u / np.linalg.norm(u))
        top = np.argsort(-sims, kind="stable")[:k]
        w = np.exp((sims[top] - sims[top].max()) / temperature)
        rows.append((w / w.sum()) @ f_s[top])
        nbs.append(top)
    return np.array(rows), np.array(nbs)


@pytest.mark.parametrize("screen", ["faiss", "torch"])
@pytest.mark.parametrize("kind", ["random", "nearly parallel", "tied"])
def test_screened_neighbour_search_is_the_float64_search(kind, screen, monkeypatch):
    """knn_softmax screens candidates in float32 (faiss, or torch where faiss is missing) and ranks them in
    float64; its neighbours and rows are the all-float64 search's, also where cosines differ by less than float32
    can tell (nearly parallel vectors fall back to the float64 search) and where source vectors are equal (ties
    go to the lower id)."""
    import sys

    from methods.wechsel import knn_softmax

    if screen == "torch":
        monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss raises ImportError
    else:
        pytest.importorskip("faiss")

    g = np.random.default_rng(1)
    u_s, u_t = g.standard_normal((4000, 24)), g.standard_normal((300, 24))
    if kind == "nearly parallel":
        u_s, u_t = 1 + 1e-3 * u_s, 1 + 1e-3 * u_t  # cosines 1 - O(1e-6): float32 cannot rank them
    if kind == "tied":
        u_s[2000:] = u_s[:2000]  # every vector twice
        u_s[::7] = u_s[3]  # and one of them 572 times
    u_s[5] = 0  # a zero vector scores 0
    f_s = g.standard_normal((4000, 6)).astype(np.float32)
    rows, nbs, _ = knn_softmax(u_t, u_s, torch.from_numpy(f_s), k=10, temperature=0.1, block_size=128)
    want_rows, want_nbs = _knn_float64(u_t, u_s, f_s.astype(np.float64), 10, 0.1)
    assert np.array_equal(nbs, want_nbs)
    np.testing.assert_allclose(rows.numpy(), want_rows, atol=1e-6)


def test_batch_decoding_is_decode():
    """decoded_tokens' batch path gives tokenizer.decode(i).strip() for every id (WordPiece with its clean-up, and
    SentencePiece), and falls back to decode when the batch path disagrees."""
    from transformers import AutoTokenizer

    from harness.worlds import get_world
    from tests.test_ofa import source_tokenizer

    w = get_world("synthetic", build=True)
    for tok in (source_tokenizer(), AutoTokenizer.from_pretrained(w.target_tokenizer_dir)):
        assert decoded_tokens(tok) == [tok.decode(i).strip() for i in range(len(tok))]

    class Odd:  # a backend whose batch decoding is wrong
        def __init__(self, tok):
            self.tok = tok
            self.backend_tokenizer = type("B", (), {"decode_batch": lambda s, ids, **k: ["x"] * len(ids),
                                                    "model": None})()
            self.all_special_ids = tok.all_special_ids

        def __len__(self):
            return len(self.tok)

        def decode(self, i):
            return self.tok.decode(i)

    tok = source_tokenizer()
    assert decoded_tokens(Odd(tok)) == [tok.decode(i).strip() for i in range(len(tok))]
