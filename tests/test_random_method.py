"""The ``random`` (R1) and ``random-map`` (R2) methods."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError
from harness.core.registry import METHODS
from harness.core.tokenization import make_xlmr_tokenizer, xlmr_vocab
from methods.base import InitContext, InitMethod, Provenance
from methods.overlap import mapping_cache
from methods.shared import fallback_matrix
from tests._surgery_fixtures import SOURCE_PIECES, xlmr_source_tokenizer, xlmr_target_tokenizer


def make_ctx(source_tok, target_tok, matrix, seed=7, params=None, factorized=False):
    return InitContext(source_matrix=matrix, source_tokenizer=source_tok, target_tokenizer=target_tok,
                       mapping_for=mapping_cache(source_tok, target_tok, None), world=None, seed=seed,
                       params=params or {}, factorized=factorized)


@pytest.fixture(scope="module")
def small():
    s, t = xlmr_source_tokenizer(), xlmr_target_tokenizer()
    g = torch.Generator().manual_seed(0)
    e = torch.randn(len(s), 12, generator=g)
    e[1] = 0.0  # the <pad> row of a real XLM-R model is zero
    return s, t, e


@pytest.fixture(scope="module")
def big():
    """A target with 3000 new pieces and a source matrix with known per-dimension mean and std."""
    s = xlmr_source_tokenizer()
    new = [(f"▁w{i}", -8.0) for i in range(3000)]
    t = make_xlmr_tokenizer(xlmr_vocab(SOURCE_PIECES + new))
    g = torch.Generator().manual_seed(1)
    mu = torch.linspace(-2, 2, 6)
    sd = torch.linspace(0.5, 3, 6)
    e = mu + sd * torch.randn(len(s), 6, generator=g)
    return s, t, e


def test_registered_with_contract_attributes():
    for name, rule, fact in (("random", "ofa", True), ("random-map", "focus", False)):
        cls = METHODS.get(name)
        assert isinstance(cls(), InitMethod)
        assert cls.name == name and cls.overlap_rule == rule and cls.supports_factorized is fact
        assert cls.requires == frozenset() and cls.description


@pytest.mark.parametrize("name", ["random", "random-map"])
def test_copied_rows_bit_identical_and_counts(small, name):
    s, t, e = small
    ctx = make_ctx(s, t, e)
    res = METHODS.get(name)().initialize(ctx)
    mapping = ctx.mapping_for(METHODS.get(name).overlap_rule)
    assert res.matrix.shape == (len(t), e.shape[1]) and res.matrix.dtype == torch.float32
    for tid, sid in mapping.copy.items():
        assert torch.equal(res.matrix[tid], e[sid])
        assert res.provenance[tid] == Provenance.COPIED
    assert res.copy == mapping.copy
    counts = res.counts()
    assert sum(counts.values()) == len(t)
    assert counts["copied"] == len(mapping.copy)
    # specials keep their source rows (<mask> moves from the source's last id to the target's last id)
    for tid, sid in ((0, 0), (1, 1), (2, 2), (3, 3), (len(t) - 1, len(s) - 1)):
        assert torch.equal(res.matrix[tid], e[sid])
    # no all-zero row except the copy of the zero <pad> row
    zero = (res.matrix == 0).all(dim=1)
    assert zero.nonzero().flatten().tolist() == [1]


def test_random_rest_is_the_fallback_draw(small):
    s, t, e = small
    ctx = make_ctx(s, t, e, seed=11)
    res = METHODS.get("random")().initialize(ctx)
    expected = fallback_matrix(e, len(t), ctx.generator(0))
    rand = np.flatnonzero(res.provenance == Provenance.RANDOM)
    assert len(rand) == len(t) - len(ctx.mapping_for("ofa").copy) > 0
    assert torch.equal(res.matrix[rand], expected[rand])
    assert res.counts()["method"] == 0 and res.counts()["unk"] == 0


@pytest.mark.parametrize("name", ["random", "random-map"])
def test_determinism_and_global_rng_isolation(small, name):
    s, t, e = small
    a = METHODS.get(name)().initialize(make_ctx(s, t, e, seed=5)).matrix
    torch.manual_seed(12345)
    np.random.seed(12345)
    torch.rand(100)
    np.random.rand(100)
    b = METHODS.get(name)().initialize(make_ctx(s, t, e, seed=5)).matrix
    assert torch.equal(a, b)
    c = METHODS.get(name)().initialize(make_ctx(s, t, e, seed=6)).matrix
    assert not torch.equal(a, c)


def test_random_rest_follows_source_statistics(big):
    s, t, e = big
    res = METHODS.get("random")().initialize(make_ctx(s, t, e, seed=3))
    rand = res.matrix[torch.from_numpy(res.provenance == Provenance.RANDOM)]
    assert rand.shape[0] == 3000
    mu, sd = e.double().mean(0), e.double().std(0, unbiased=False)
    # 3000 draws: standard error of the mean sd/55, of the std sd/77
    assert torch.allclose(rand.double().mean(0), mu, atol=float(4 * sd.max() / 55))
    # per dimension, each with its own scale (the source's stds span a factor of ~6)
    assert torch.allclose(rand.double().std(0), sd, rtol=0.06)
    assert float(sd.max() / sd.min()) > 3
    # dimensions are drawn independently: no correlation beyond sampling noise
    corr = torch.corrcoef(rand.double().T) - torch.eye(6, dtype=torch.float64)
    assert float(corr.abs().max()) < 0.1


def test_random_factorized_uses_coordinate_statistics(big):
    s, t, e = big
    u = torch.linalg.svd(e.double(), full_matrices=False)[0][:, :3].float()  # F_s: entries ~ 1/sqrt|V_s|
    res = METHODS.get("random")().initialize(make_ctx(s, t, u, seed=3, factorized=True))
    assert res.matrix.shape == (len(t), 3)
    rand = res.matrix[torch.from_numpy(res.provenance == Provenance.RANDOM)]
    assert torch.allclose(rand.std(0), u.std(0, unbiased=False), rtol=0.1)
    assert res.stats["factorized"] is True


def test_random_refuses_parameters(small):
    s, t, e = small
    with pytest.raises(ConfigError):
        METHODS.get("random")().initialize(make_ctx(s, t, e, params={"k": 3}))


def test_random_map_without_replacement(small):
    s, t, e = small
    res = METHODS.get("random-map")().initialize(make_ctx(s, t, e))
    new = np.flatnonzero(res.provenance == Provenance.METHOD)
    assert len(new) > 0 and res.counts()["random"] == 0
    specials = set(s.all_special_ids)
    used = []
    for tid in new:
        hits = [sid for sid in range(len(s)) if torch.equal(res.matrix[tid], e[sid])]
        assert len(hits) == 1 and hits[0] not in specials
        used.append(hits[0])
    assert len(set(used)) == len(used)  # an injection: no source row serves two new tokens
    assert res.stats["distinct_sources_mapped"] == len(used)


def test_random_map_more_new_tokens_than_pool(big):
    s, t, e = big
    res = METHODS.get("random-map")().initialize(make_ctx(s, t, e))
    pool = len(s) - len(s.all_special_ids)
    new = res.matrix[torch.from_numpy(res.provenance == Provenance.METHOD)]
    rows = {tuple(r.tolist()) for r in new}
    assert len(rows) == pool  # every pool row is used, each at most ceil(|A| / |pool|) times
    _, counts = torch.unique(new, dim=0, return_counts=True)
    assert int(counts.max()) <= -(-new.shape[0] // pool)


def test_random_map_with_replacement_and_specials(small):
    s, t, e = small
    res = METHODS.get("random-map")().initialize(
        make_ctx(s, t, e, params={"replacement": True, "exclude_specials": False}))
    assert res.stats["replacement"] is True and res.stats["pool"] == len(s)
    with pytest.raises(ConfigError, match="no parameter"):
        METHODS.get("random-map")().initialize(make_ctx(s, t, e, params={"replace": True}))
