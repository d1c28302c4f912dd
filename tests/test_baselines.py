"""The two tokenizer-only baselines, ``fvt`` and ``mean-cov``, and the surgery path's resize (no mean resizing)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError
from harness.core.registry import METHODS
from harness.core.tokenization import make_xlmr_tokenizer, xlmr_vocab
from methods.base import InitContext, InitMethod, Provenance
from methods.overlap import mapping_cache
from methods.shared import fallback_matrix
from tests._surgery_fixtures import (
    SOURCE_PIECES,
    make_world,
    tiny_bert,
    tiny_xlmr,
    wordpiece_tokenizer,
    xlmr_source_tokenizer,
    xlmr_target_tokenizer,
)
from tests.test_focus import synthetic_ctx


def make_ctx(source_tok, target_tok, matrix, seed=7, params=None, factorized=False):
    return InitContext(source_matrix=matrix, source_tokenizer=source_tok, target_tokenizer=target_tok,
                       mapping_for=mapping_cache(source_tok, target_tok, None), world=None, seed=seed,
                       params=params or {}, factorized=factorized)


def rows_of(tokenizer, matrix, pieces):
    """The rows of ``pieces`` (token strings) of ``tokenizer``, looked up by string (not through any helper)."""
    vocab = tokenizer.get_vocab()
    return matrix[[vocab[p] for p in pieces]]


# a target with tokens whose source tokenization is checked by hand: a word-initial and a word-internal piece
# the source lacks, a case variant, and pieces of a script the source never saw
HAND_PIECES = [("▁cats", -5.0), ("sat", -5.0), ("▁Mats", -5.0), ("▁ρο", -5.0), ("σα", -5.0)]


def hand_target():
    return make_xlmr_tokenizer(xlmr_vocab(SOURCE_PIECES + HAND_PIECES))


def test_registered_with_contract_attributes_and_in_all(synthetic_world):
    from harness.config import RunConfig
    from harness.plan import make_plan

    for name, rule in (("fvt", "ofa"), ("mean-cov", "ofa")):
        cls = METHODS.get(name)
        assert isinstance(cls(), InitMethod)
        assert cls.name == name and cls.overlap_rule == rule and cls.supports_factorized is True
        assert cls.requires == frozenset() and cls.description
    assert {"fvt", "mean-cov"} <= set(METHODS.resolve_list("all"))
    plan = make_plan(RunConfig(world="synthetic", tasks=["mlm"]), synthetic_world)
    assert {"fvt", "mean-cov"} <= {c.method for c in plan.cells}


# -- fvt ---------------------------------------------------------------------------------------------------------
def test_fvt_hand_checked_sentencepiece_source():
    s, t = xlmr_source_tokenizer(), hand_target()
    e = torch.randn(len(s), 8, generator=torch.Generator().manual_seed(0))
    ctx = make_ctx(s, t, e)
    res = METHODS.get("fvt")().initialize(ctx)
    v = t.get_vocab()
    # "▁cats" starts a word: the source has "▁cat" and "s"; "sat" is inside a word: "s" "a" "t" (not "▁sat")
    assert torch.equal(res.matrix[v["▁cats"]], rows_of(s, e, ["▁cat", "s"]).mean(0))
    assert torch.equal(res.matrix[v["sat"]], rows_of(s, e, ["s", "a", "t"]).mean(0))
    # "▁Mats": "▁" then an unknown "M", then "a" "t" "s" -- the UNK row counts in the mean, as in FVT's code
    assert torch.equal(res.matrix[v["▁Mats"]], rows_of(s, e, ["▁", "<unk>", "a", "t", "s"]).mean(0))
    for tok in ("▁cats", "sat", "▁Mats"):
        assert res.provenance[v[tok]] == Provenance.METHOD
    # Greek: only "▁" and UNK pieces -> the shared fallback row of that id
    fb = fallback_matrix(e, len(t), ctx.generator(0))
    for tok in ("▁ρο", "σα"):
        assert res.provenance[v[tok]] == Provenance.RANDOM
        assert torch.equal(res.matrix[v[tok]], fb[v[tok]])
    counts = res.counts()
    assert counts == {"copied": len(s), "method": 3, "random": 2, "unk": 0}
    for tid, sid in res.copy.items():
        assert torch.equal(res.matrix[tid], e[sid])


def test_fvt_hand_checked_wordpiece_source():
    """An uncased WordPiece source (the bible world's ``mono``): word-initial pieces plain, inner ones ``##``."""
    s, t = wordpiece_tokenizer(), hand_target()
    e = torch.randn(len(s), 8, generator=torch.Generator().manual_seed(1))
    res = METHODS.get("fvt")().initialize(make_ctx(s, t, e))
    v = t.get_vocab()
    assert torch.equal(res.matrix[v["▁cats"]], rows_of(s, e, ["cat", "##s"]).mean(0))
    assert torch.equal(res.matrix[v["sat"]], rows_of(s, e, ["##s", "##a", "##t"]).mean(0))
    assert torch.equal(res.matrix[v["▁Mats"]], rows_of(s, e, ["mat", "##s"]).mean(0))  # folded like the source
    # "▁The" is the uncased source's "the": copied (the OFA rule's case-insensitive step), not averaged
    assert res.copy[v["▁The"]] == s.get_vocab()["the"]
    assert torch.equal(res.matrix[v["▁The"]], rows_of(s, e, ["the"])[0])
    for tok in ("▁ρο", "σα", "ñ"):  # WordPiece makes the whole word [UNK]
        if tok in v:
            assert res.provenance[v[tok]] == Provenance.RANDOM
    assert sum(res.counts().values()) == len(t)


def test_fvt_factorized_means_coordinate_rows():
    s, t = xlmr_source_tokenizer(), hand_target()
    f = torch.randn(len(s), 3, generator=torch.Generator().manual_seed(2))
    res = METHODS.get("fvt")().initialize(make_ctx(s, t, f, factorized=True))
    assert res.matrix.shape == (len(t), 3) and res.stats["factorized"] is True
    assert torch.equal(res.matrix[t.get_vocab()["▁cats"]], rows_of(s, f, ["▁cat", "s"]).mean(0))


def test_fvt_refuses_parameters():
    s, t = xlmr_source_tokenizer(), hand_target()
    with pytest.raises(ConfigError, match="no parameters"):
        METHODS.get("fvt")().initialize(make_ctx(s, t, torch.randn(len(s), 4), params={"k": 1}))


@pytest.fixture(scope="module")
def fvt_synthetic(synthetic_world, tmp_path_factory):
    ctx = synthetic_ctx(synthetic_world, tmp_path_factory.mktemp("fvt-cache"), seed=5)
    return ctx, METHODS.get("fvt")().initialize(ctx)


def test_fvt_on_the_synthetic_world(fvt_synthetic):
    ctx, res = fvt_synthetic
    st, tt, e = ctx.source_tokenizer, ctx.target_tokenizer, ctx.source_matrix
    n_t = len(tt)
    mapping = ctx.mapping_for("ofa")
    counts = res.counts()
    assert sum(counts.values()) == n_t and counts["unk"] == 0
    assert counts["copied"] == len(mapping.copy) and counts["method"] > 100 and counts["random"] > 100
    assert res.copy == mapping.copy
    for tid, sid in mapping.copy.items():
        assert torch.equal(res.matrix[tid], e[sid])
    # every word-initial token the method computed: the mean of the source rows the source tokenizer's own
    # pipeline gives for its text (normalizer, pre-tokenizer, model), computed here independently
    tokens = tt.convert_ids_to_tokens(list(range(n_t)))
    unk, bare = st.unk_token_id, st.convert_tokens_to_ids("▁")
    checked = 0
    for tid, tok in enumerate(tokens):
        if tid in mapping.copy or tok in tt.all_special_tokens or not tok.startswith("▁"):
            continue
        ids = st(tok[1:], add_special_tokens=False)["input_ids"]
        if set(ids) <= {unk, bare}:
            assert res.provenance[tid] == Provenance.RANDOM, tok
        else:
            assert res.provenance[tid] == Provenance.METHOD, tok
            assert torch.allclose(res.matrix[tid], e[ids].mean(0), atol=1e-6), tok
            checked += 1
    assert checked > 50
    # the fallback rows are the shared per-dimension Gaussian draw; they are the tokens in scripts the Latin
    # source never saw (Greek, Cyrillic), and only those
    fb = fallback_matrix(e, n_t, ctx.generator(0))
    src_chars = {c for p in st.convert_ids_to_tokens(list(range(len(st)))) for c in p} - {"▁"}
    for tid, tok in enumerate(tokens):
        if tid in mapping.copy or tok in tt.all_special_tokens:
            continue
        unseen = not (set(tok) - {"▁"}) & src_chars
        assert (res.provenance[tid] == Provenance.RANDOM) == unseen, tok
        if unseen:
            assert torch.equal(res.matrix[tid], fb[tid])


def test_fvt_is_deterministic_and_the_seed_moves_only_fallback_rows(fvt_synthetic, synthetic_world, tmp_path):
    ctx, res = fvt_synthetic
    again = METHODS.get("fvt")().initialize(synthetic_ctx(synthetic_world, tmp_path, seed=5))
    assert torch.equal(again.matrix, res.matrix) and np.array_equal(again.provenance, res.provenance)
    other = METHODS.get("fvt")().initialize(synthetic_ctx(synthetic_world, tmp_path, seed=6))
    rand = torch.from_numpy(res.provenance == Provenance.RANDOM)
    assert np.array_equal(other.provenance, res.provenance)
    assert torch.equal(other.matrix[~rand], res.matrix[~rand])
    assert not torch.isclose(other.matrix[rand], res.matrix[rand]).all(dim=1).any()


# -- mean-cov ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def correlated():
    """A target with 4000 new pieces; a source matrix whose dimensions are strongly correlated."""
    s = xlmr_source_tokenizer()
    t = make_xlmr_tokenizer(xlmr_vocab(SOURCE_PIECES + [(f"▁w{i}", -8.0) for i in range(4000)]))
    g = torch.Generator().manual_seed(3)
    mix = torch.tensor([[1.0, 0.9, 0.0, -0.8], [0.0, 0.4, 0.0, 0.3], [0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.5]])
    e = torch.tensor([3.0, -1.0, 0.5, 0.0]) + torch.randn(len(s), 4, generator=g) @ mix
    return s, t, e


def _moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.double()
    mu = x.mean(0)
    return mu, (x - mu).T @ (x - mu) / x.shape[0]


def test_mean_cov_copies_and_reproduces_the_source_moments(correlated):
    s, t, e = correlated
    ctx = make_ctx(s, t, e, seed=1)
    res = METHODS.get("mean-cov")().initialize(ctx)
    mapping = ctx.mapping_for("ofa")
    assert res.copy == mapping.copy
    for tid, sid in mapping.copy.items():
        assert torch.equal(res.matrix[tid], e[sid]) and res.provenance[tid] == Provenance.COPIED
    drawn = res.provenance == Provenance.RANDOM
    assert res.counts() == {"copied": len(mapping.copy), "method": 0, "random": len(t) - len(mapping.copy),
                            "unk": 0}
    mu_s, cov_s = _moments(e)
    mu_d, cov_d = _moments(res.matrix[torch.from_numpy(drawn)])
    sd = cov_s.diagonal().sqrt()
    assert ((mu_d - mu_s).abs() / sd).max() < 0.08
    assert ((cov_d - cov_s).abs() / torch.outer(sd, sd)).max() < 0.08  # correlations within 0.08
    # the check has teeth: the per-dimension draw of `random` misses the correlations of the same source
    rnd = METHODS.get("random")().initialize(make_ctx(s, t, e, seed=1))
    _, cov_r = _moments(rnd.matrix[torch.from_numpy(rnd.provenance == Provenance.RANDOM)])
    assert ((cov_r - cov_s).abs() / torch.outer(sd, sd)).max() > 0.5


def test_mean_cov_singular_covariance_still_samples_from_it():
    """More dimensions than source rows: Sigma is singular (no Cholesky); the draw stays in its span."""
    s = xlmr_source_tokenizer()
    t = make_xlmr_tokenizer(xlmr_vocab(SOURCE_PIECES + [(f"▁w{i}", -8.0) for i in range(500)]))
    e = torch.randn(len(s), 40, generator=torch.Generator().manual_seed(4))
    res = METHODS.get("mean-cov")().initialize(make_ctx(s, t, e))
    assert res.stats["factor"].startswith("eigh") and torch.isfinite(res.matrix).all()
    drawn = res.matrix[torch.from_numpy(res.provenance == Provenance.RANDOM)].double()
    centered_src = (e - e.mean(0)).double()
    q, _ = torch.linalg.qr(centered_src.T)  # the span of the centered source rows
    off = (drawn - e.double().mean(0))
    assert (off - off @ q @ q.T).abs().max() < 1e-4


def test_mean_cov_determinism_seed_and_scale(correlated):
    s, t, e = correlated
    a = METHODS.get("mean-cov")().initialize(make_ctx(s, t, e, seed=1))
    b = METHODS.get("mean-cov")().initialize(make_ctx(s, t, e, seed=1))
    c = METHODS.get("mean-cov")().initialize(make_ctx(s, t, e, seed=2))
    assert torch.equal(a.matrix, b.matrix)
    drawn = torch.from_numpy(a.provenance == Provenance.RANDOM)
    assert torch.equal(a.matrix[~drawn], c.matrix[~drawn])
    assert not torch.isclose(a.matrix[drawn], c.matrix[drawn]).all(dim=1).any()
    # cov_scale scales the deviation from the mean by its square root (same draw z)
    d = METHODS.get("mean-cov")().initialize(make_ctx(s, t, e, seed=1, params={"cov_scale": 4.0}))
    mu = e.double().mean(0)
    assert torch.allclose(d.matrix[drawn].double() - mu, 2 * (a.matrix[drawn].double() - mu), atol=1e-4)
    for bad in ({"cov_scale": 0}, {"cov_scale": "big"}, {"scale": 1.0}):
        with pytest.raises(ConfigError, match="mean-cov"):
            METHODS.get("mean-cov")().initialize(make_ctx(s, t, e, params=bad))


# -- the surgery path never uses transformers' mean resizing -----------------------------------------------------
@pytest.fixture
def no_mean_resizing(monkeypatch):
    """Make transformers' mean/covariance init of added rows fail loudly wherever it would run."""
    from transformers import PreTrainedModel

    def trap(*args, **kwargs):
        raise AssertionError("resize_token_embeddings ran its mean/covariance initialization (mean_resizing=True)")

    monkeypatch.setattr(PreTrainedModel, "_init_added_embeddings_weights_with_mean", trap)
    monkeypatch.setattr(PreTrainedModel, "_init_added_lm_head_weights_with_mean", trap)
    calls: list[dict] = []
    original = PreTrainedModel.resize_token_embeddings

    def spy(self, *args, **kwargs):
        calls.append(dict(kwargs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "resize_token_embeddings", spy)
    return calls


def test_the_trap_catches_a_default_resize(no_mean_resizing):
    model = tiny_xlmr(30)
    with pytest.raises(AssertionError, match="mean_resizing=True"):
        model.resize_token_embeddings(40)  # transformers' default is mean_resizing=True


@pytest.mark.parametrize("tie", [True, False])
def test_surgery_resizes_without_mean_resizing_and_keeps_the_method_rows(no_mean_resizing, tie):
    from harness.core.surgery import assemble_model
    from methods.overlap import build_mapping

    s, t = wordpiece_tokenizer(), xlmr_target_tokenizer()  # the target is larger than the source: rows added
    model = tiny_bert(len(s), tie=tie)
    mapping = build_mapping(s, t, "ofa")
    res = METHODS.get("random")().initialize(make_ctx(s, t, model.get_input_embeddings().weight.detach().clone()))
    assemble_model(model, s, t, res.matrix, res.copy, untied_output="method")  # an untied head takes the method's rows
    assert no_mean_resizing and all(c.get("mean_resizing") is False for c in no_mean_resizing)
    assert torch.equal(model.get_input_embeddings().weight, res.matrix)
    if not tie:
        out = model.get_output_embeddings().weight
        new = [i for i in range(len(t)) if i not in mapping.copy]
        assert torch.equal(out[new], res.matrix[new])


def test_random_through_initialize_model_keeps_its_per_dimension_rows(no_mean_resizing, tmp_path, harness_home):
    from harness.initialize import initialize_model, load_model

    world = make_world(tmp_path / "world")
    out = tmp_path / "init"
    rep = initialize_model(world, "xlmr", "random", dim=None, seed=3, params={}, out_dir=out,
                           mapping_cache_dir=tmp_path / "maps")
    assert no_mean_resizing and all(c.get("mean_resizing") is False for c in no_mean_resizing)
    s, t = xlmr_source_tokenizer(), xlmr_target_tokenizer()
    e_s = tiny_xlmr(len(s)).get_input_embeddings().weight.detach()
    fb = fallback_matrix(e_s, len(t), InitContext(e_s, s, t, None, None, seed=3).generator(0))
    e_t = load_model(out).get_input_embeddings().weight.detach()
    prov = np.load(out / "provenance.npy")
    drawn = np.flatnonzero(prov == Provenance.RANDOM)
    assert len(drawn) == rep["counts"]["random"] > 0
    assert torch.equal(e_t[drawn], fb[drawn])


# -- harness init through the CLI --------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["fvt", "mean-cov"])
def test_harness_init_writes_the_model_with_honest_counts(run_cli, tmp_path, synthetic_world, method):
    from harness.initialize import load_model

    out = tmp_path / method
    run_cli("init", "--world", "synthetic", "--method", method, "--seed", "5", "--out", str(out), check=True)
    rep = json.loads((out / "init_report.json").read_text())
    prov = np.load(out / "provenance.npy")
    assert rep["method"] == method and rep["overlap_rule"] == METHODS.get(method).overlap_rule
    assert sum(rep["counts"].values()) == len(prov) == rep["target_vocab_size"]
    assert rep["counts"] == {p.name.lower(): int((prov == p).sum()) for p in Provenance}
    assert rep["counts"]["copied"] == rep["overlap"]["copied"] > 0
    # the saved rows are the method's rows, computed here in-process from the same inputs and seed
    ctx = synthetic_ctx(synthetic_world, tmp_path / "cache", seed=5)
    res = METHODS.get(method)().initialize(ctx)
    assert np.array_equal(res.provenance, prov)
    assert torch.equal(load_model(out).get_input_embeddings().weight.detach(), res.matrix)
    if method == "fvt":
        assert rep["counts"]["method"] > 0 and rep["counts"]["random"] > 0
    else:
        assert rep["counts"]["method"] == 0 and rep["counts"]["random"] > 0


@pytest.mark.parametrize("dim", [None, 4])
def test_fvt_through_initialize_model_with_a_wordpiece_source(tmp_path, harness_home, dim):
    """The whole init path from an uncased WordPiece source (the bible world's ``mono`` setting), full and
    factorized: provenance does not depend on the dimension; a method row is its source pieces' mean (through
    the factorization when ``dim`` is set)."""
    from harness.initialize import initialize_model, load_model
    from methods.factorize import factorize

    world = make_world(tmp_path / "world")
    out = tmp_path / "init"
    rep = initialize_model(world, "bert", "fvt", dim=dim, seed=2, params={}, out_dir=out,
                           mapping_cache_dir=tmp_path / "maps")
    s, t = wordpiece_tokenizer(), xlmr_target_tokenizer()
    v = t.get_vocab()
    prov = np.load(out / "provenance.npy")
    assert sum(rep["counts"].values()) == len(t) and rep["dim"] == dim
    assert rep["counts"] == {"copied": 23, "method": 4, "random": 10, "unk": 0}
    # "," inside a word is WordPiece's word ","; "!" too; "▁nyumba" and a word-internal "1" are [UNK] in WordPiece
    assert [Provenance(prov[v[x]]).name for x in (",", "!", "▁nyumba", "1", "▁12")] == \
        ["METHOD", "METHOD", "RANDOM", "RANDOM", "RANDOM"]
    e_s = tiny_bert(len(s), seed=1).get_input_embeddings().weight.detach()
    e_t = load_model(out).get_input_embeddings().weight.detach()
    want = rows_of(s, e_s, [","])[0]
    if dim is None:
        assert torch.equal(e_t[v[","]], want)
    else:
        f = factorize(e_s, dim)
        assert torch.allclose(e_t[v[","]], rows_of(s, f.coords, [","])[0] @ f.primitive, atol=1e-6)
