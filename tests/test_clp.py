"""CLP-Transfer and CLP+ (``clp``, ``clp+``) on the synthetic world: rows recomputed by hand from the helper's table,
the copies, the counts, determinism, the zero-sum edge case; and the helper model (a cached product with its own
key, trained once, its masked loss the model's own, the source's kind). The rows against the references themselves
(gucci-j/llm-cva's CLPEmbeddingInitializer and CLPPlusEmbeddingInitializer): tests/parity/test_omp_clp.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError, HarnessError
from harness.core.registry import METHODS
from methods.base import InitMethod
from methods.clp import CLPInit, CLPPlusInit, clp_rows
from methods.helper_model import (
    HELPER_CPU,
    build_helper,
    helper_cache_root,
    helper_tables,
    mask_tokens,
    masked_loss,
    source_objective,
)
from methods.overlap import build_mapping
from methods.params import resolve
from tests.test_focus import synthetic_ctx
from tests.test_omp import TINY


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("clp-cache") / "methods" / "clp"


def ctx_for(world, cache, seed=1, **params):
    return synthetic_ctx(world, cache, params={**TINY, **params}, seed=seed)


def sparsemax_by_hand(z: np.ndarray) -> np.ndarray:
    """Sparsemax from its definition: the Euclidean projection of ``z`` on the simplex (sorted, threshold)."""
    s = np.sort(z)[::-1]
    cums = np.cumsum(s)
    k = max(j for j in range(1, len(s) + 1) if 1 + j * s[j - 1] > cums[j - 1])
    tau = (cums[k - 1] - 1) / k
    return np.maximum(z - tau, 0)


def test_registered_with_contract_attributes_and_the_cpu_profile():
    for name, cls in (("clp", CLPInit), ("clp+", CLPPlusInit)):
        assert METHODS.get(name) is cls and isinstance(cls(), InitMethod)
        assert cls.overlap_rule == "exact" and cls.requires == frozenset({"cpt_text"}) and cls.supports_factorized
        assert cls.profile_defaults("cpu") == HELPER_CPU
        assert cls.reference is not None and "llm-cva" in cls.reference.implementation


@pytest.fixture(scope="module")
def runs(synthetic_world, cache):
    ctx = ctx_for(synthetic_world, cache)
    return ctx, CLPInit().initialize(ctx), CLPPlusInit().initialize(ctx_for(synthetic_world, cache))


@pytest.mark.parametrize("plus", [False, True])
def test_rows_recomputed_by_hand_from_the_helper_table(runs, plus):
    ctx, clp, clp_plus = runs
    res = clp_plus if plus else clp
    mapping = build_mapping(ctx.source_tokenizer, ctx.target_tokenizer, "exact", specials="string")
    n_t = len(ctx.target_tokenizer)
    assert res.copy == mapping.copy and len(mapping.copy) > 0
    assert res.counts() == {"copied": len(mapping.copy), "method": n_t - len(mapping.copy), "random": 0, "unk": 0}
    for tid, sid in mapping.copy.items():
        assert torch.equal(res.matrix[tid], ctx.source_matrix[sid])
    p = resolve("clp", CLPInit.params, TINY)
    h = helper_tables(ctx, p, who="clp").input.astype(np.float64)
    overlap = sorted(mapping.copy)
    e = ctx.source_matrix.double().numpy()[[mapping.copy[t] for t in overlap]]
    new = [t for t in range(n_t) if t not in mapping.copy]
    for tid in new[:: max(1, len(new) // 15)]:
        cos = np.array([h[tid] @ h[o] / (np.linalg.norm(h[tid]) * np.linalg.norm(h[o])) for o in overlap])
        w = sparsemax_by_hand(cos) if plus else cos / cos.sum()
        np.testing.assert_allclose(res.matrix[tid].double().numpy(), w @ e, rtol=1e-5, atol=1e-6)
    norms = res.matrix[torch.tensor(new)].norm(dim=1)
    assert res.stats["off_scale_rows"] == int((norms > 10 * ctx.source_matrix.norm(dim=1).median()).sum())
    if plus:
        assert 1 <= res.stats["mean_support"] < len(overlap)  # sparse, unlike CLP's dense weights
    else:
        assert res.stats["zero_sum"] == 0


def test_deterministic_bit_for_bit_and_one_helper_for_both_methods_and_all_seeds(synthetic_world, cache, runs):
    ctx, clp, clp_plus = runs
    assert clp.stats["helper"]["key"] == clp_plus.stats["helper"]["key"]
    assert clp_plus.stats["helper"]["cached"] is True  # clp trained it, clp+ found it
    root = helper_cache_root(cache) / "products" / "helper-model"
    assert [p.name for p in root.iterdir() if p.is_dir()] == [clp.stats["helper"]["key"]]
    again = CLPInit().initialize(ctx_for(synthetic_world, cache))
    assert torch.equal(again.matrix, clp.matrix) and np.array_equal(again.provenance, clp.provenance)
    other = CLPPlusInit().initialize(ctx_for(synthetic_world, cache, seed=9))
    assert torch.equal(other.matrix, clp_plus.matrix)  # every row copied or computed: the seed moves nothing
    # a helper seeded by the run's seed is another product, with other rows
    own = CLPPlusInit().initialize(ctx_for(synthetic_world, cache, seed=9, helper_seed=None))
    assert own.stats["helper"]["key"] != clp_plus.stats["helper"]["key"]
    assert not torch.equal(own.matrix, clp_plus.matrix)


def test_zero_sum_cosines_keep_the_fallback_and_negative_sums_are_kept():
    h_over = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    e = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    h_new = np.array([[1.0, 0.0], [0.0, -1.0]])  # cosines (1, -1, 0): sum 0; (0, 0, -1): sum -1
    rows, ok, stats = clp_rows(h_new, h_over, e, plus=False)
    assert ok.tolist() == [False, True] and stats["zero_sum"] == 1 and stats["negative_sum"] == 1
    np.testing.assert_allclose(rows[1].numpy(), e[2])  # w = (-0, -0, -1) / -1: the third row, sign restored
    rows_p, ok_p, _ = clp_rows(h_new, h_over, e, plus=True)
    assert ok_p.all()
    np.testing.assert_allclose(rows_p[0].numpy(), e[0])  # sparsemax((1, -1, 0)) = (1, 0, 0)


def test_helper_model_parameters_refused_by_name(synthetic_world, cache):
    with pytest.raises(ConfigError, match="helper_objective"):
        CLPInit().initialize(ctx_for(synthetic_world, cache, helper_objective="seq2seq"))
    with pytest.raises(ConfigError, match="helper_model"):
        CLPInit().initialize(ctx_for(synthetic_world, cache, helper_model=str(cache)))


def test_no_overlap_is_an_error(synthetic_world, cache, monkeypatch):
    ctx = ctx_for(synthetic_world, cache)
    real = ctx.mapping_for

    def empty(rule, **options):
        m = real(rule, **options)
        return type(m)(m.rule, m.source_size, m.target_size, {}, m.source_tokens, m.target_tokens, m.stats)

    ctx.mapping_for = empty
    with pytest.raises(HarnessError, match="share no token"):
        CLPInit().initialize(ctx)


# -- the helper model ---------------------------------------------------------------------------------------------
def test_masked_loss_is_the_models_own_loss(synthetic_world):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(synthetic_world.target_tokenizer_dir)
    settings = {"objective": "mlm", "hidden": 32, "layers": 1, "heads": 2, "seq_len": 16}
    torch.manual_seed(0)
    model = build_helper(tok, settings).eval()
    ids = torch.randint(5, len(tok), (4, 16), generator=torch.Generator().manual_seed(1))
    inputs, labels = mask_tokens(ids, tok, torch.Generator().manual_seed(2))
    assert (labels != -100).any() and ((labels == -100) | (labels == ids)).all()
    with torch.no_grad():
        full = model(input_ids=inputs, labels=labels).loss
        ours = masked_loss(model, inputs, labels).loss
    torch.testing.assert_close(ours, full, rtol=1e-5, atol=1e-6)


def test_helper_kind_follows_the_source(synthetic_world):
    from transformers import AutoTokenizer

    kinds = {name: source_objective(synthetic_world, AutoTokenizer.from_pretrained(synthetic_world.source_dir(name)))
             for name in synthetic_world.sources}
    assert kinds["src"] == "mlm"
    for name, kind in kinds.items():
        declared = synthetic_world.manifest["sources"][name].get("objective")
        assert declared is None or kind == declared, (name, kind)
    clm = build_helper(AutoTokenizer.from_pretrained(synthetic_world.target_tokenizer_dir),
                       {"objective": "clm", "hidden": 32, "layers": 1, "heads": 2, "seq_len": 16})
    assert "CausalLM" in type(clm).__name__ and clm.get_output_embeddings().weight is clm.get_input_embeddings().weight


def test_on_a_decoder_source_the_helper_is_a_causal_lm(synthetic_world, cache):
    """A method sees tables: on the synthetic world's decoder source (where the world declares one) the helper is
    a decoder, and the rows are computed as on the encoder."""
    if "dec" not in synthetic_world.sources:
        pytest.skip("this synthetic world has no decoder source")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from methods.base import InitContext
    from methods.overlap import mapping_cache

    st = AutoTokenizer.from_pretrained(synthetic_world.source_dir("dec"))
    tt = AutoTokenizer.from_pretrained(synthetic_world.target_tokenizer_dir)
    e = AutoModelForCausalLM.from_pretrained(synthetic_world.source_dir("dec")).get_input_embeddings().weight
    ctx = InitContext(source_matrix=e.detach()[:len(st)].float().clone(), source_tokenizer=st, target_tokenizer=tt,
                      mapping_for=mapping_cache(st, tt, None), world=synthetic_world, seed=1, params=dict(TINY),
                      cache_dir=cache)
    res = CLPPlusInit().initialize(ctx)
    assert res.stats["helper"]["settings"]["objective"] == "clm"
    mapping = build_mapping(st, tt, "exact", specials="string")
    assert res.counts() == {"copied": len(mapping.copy), "method": len(tt) - len(mapping.copy), "random": 0,
                            "unk": 0}
    for tid, sid in mapping.copy.items():
        assert torch.equal(res.matrix[tid], ctx.source_matrix[sid])
