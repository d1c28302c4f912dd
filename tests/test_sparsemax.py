"""Sparsemax against its closed form, a bisection solver of the simplex projection, and edge cases."""

from __future__ import annotations

import pytest
import torch

from methods.sparsemax import sparsemax, sparsemax_topk


def projection_by_bisection(z: torch.Tensor, iters: int = 200) -> torch.Tensor:
    """argmin_{p in simplex} ||p - z||: p = max(z - tau, 0) with sum p = 1, tau found by bisection."""
    z = z.double()
    lo, hi = z.min() - 1, z.max()
    for _ in range(iters):
        tau = (lo + hi) / 2
        if torch.clamp(z - tau, min=0).sum() > 1:
            lo = tau
        else:
            hi = tau
    return torch.clamp(z - (lo + hi) / 2, min=0)


def test_closed_form_by_hand():
    # sorted 1, 0.5, -0.2: k=1: 2 > 1; k=2: 1 + 2*0.5 = 2 > 1.5; k=3: 1 - 0.6 = 0.4 < 1.3 -> k(z) = 2
    # tau = (1 + 0.5 - 1) / 2 = 0.25 -> p = (0.75, 0.25, 0)
    p = sparsemax(torch.tensor([0.5, 1.0, -0.2], dtype=torch.float64))
    assert torch.allclose(p, torch.tensor([0.25, 0.75, 0.0], dtype=torch.float64))
    # a large gap puts all mass on the best entry
    assert torch.equal(sparsemax(torch.tensor([3.0, 0.0, 1.0])), torch.tensor([1.0, 0.0, 0.0]))


def test_edge_cases_ties_one_candidate_all_equal():
    assert torch.equal(sparsemax(torch.tensor([[0.37]])), torch.tensor([[1.0]]))  # one candidate
    eq = sparsemax(torch.full((1, 7), 0.42, dtype=torch.float64))
    assert torch.allclose(eq, torch.full((1, 7), 1 / 7, dtype=torch.float64))  # all equal: uniform
    # ties: 0.5, 0.5, 0.1 -> k = 3 (1 + 3*0.1 = 1.3 > 1.1), tau = (1.1 - 1)/3
    p = sparsemax(torch.tensor([0.5, 0.1, 0.5], dtype=torch.float64))
    tau = 0.1 / 3
    assert torch.allclose(p, torch.tensor([0.5 - tau, 0.1 - tau, 0.5 - tau], dtype=torch.float64))
    assert p[0] == p[2]
    # tied leaders with a gap: only the two tied entries share the mass
    assert torch.allclose(sparsemax(torch.tensor([0.9, 0.9, -0.9])), torch.tensor([0.5, 0.5, 0.0]))


@pytest.mark.parametrize("scale", [0.01, 0.3, 1.0, 5.0])
def test_matches_bisection_and_is_a_distribution(scale):
    g = torch.Generator().manual_seed(3)
    z = torch.randn(20, 50, generator=g, dtype=torch.float64) * scale
    p = sparsemax(z)
    assert (p >= 0).all()
    assert torch.allclose(p.sum(dim=1), torch.ones(20, dtype=torch.float64))
    for r in range(z.shape[0]):
        assert torch.allclose(p[r], projection_by_bisection(z[r]), atol=1e-9)
    # shift invariance, and the dim argument
    assert torch.allclose(sparsemax(z + 2.5), p)
    assert torch.allclose(sparsemax(z.T, dim=0), p.T)


def test_topk_variant_is_exact_including_wide_supports():
    g = torch.Generator().manual_seed(5)
    z = torch.rand(64, 300, generator=g) * 0.02  # flat rows: supports far wider than k
    z[:32] = torch.randn(32, 300, generator=g)  # peaked rows: small supports
    z[5] = 0.25  # all equal
    for k in (1, 4, 16, 300, 1000):
        assert torch.allclose(sparsemax_topk(z, k=k), sparsemax(z), atol=1e-6), k
    assert sparsemax_topk(torch.zeros(2, 0)).shape == (2, 0)
    with pytest.raises(ValueError):
        sparsemax_topk(torch.zeros(3))


def test_topk_variant_looks_deeper_only_where_it_must():
    """Supports of about 10, 100 and 250 entries: the first pass (depth 64) settles the first rows, a second (to
    k) the next, a full sort the widest; every row is sparsemax's, and a row's result does not depend on the
    depth that settled it (bit for bit)."""
    from methods.sparsemax import FIRST_DEPTH

    g = torch.Generator().manual_seed(7)
    n = 600
    z = torch.empty(30, n)
    for i, width in enumerate([10] * 10 + [100] * 10 + [250] * 10):
        row = torch.rand(n, generator=g) * 0.5
        row[:width] = 1.0 + torch.rand(width, generator=g) / width  # about `width` entries above the threshold
        z[i] = row[torch.randperm(n, generator=g)]
    full = sparsemax(z)
    support = (full > 0).sum(1)
    assert support[:10].max() < FIRST_DEPTH < support[10:20].min() and support[10:20].max() < 128
    assert support[20:].min() > 128
    for k in (64, 128, 300):
        assert torch.allclose(sparsemax_topk(z, k=k), full, atol=1e-6), k
    assert torch.equal(sparsemax_topk(z[:10], k=300), sparsemax_topk(z[:10], k=FIRST_DEPTH))
