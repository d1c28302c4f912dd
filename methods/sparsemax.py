"""Sparsemax (Martins & Astudillo 2016), the weighting FOCUS applies to raw cosine similarities.

``sparsemax(z) = argmin_{p in simplex} ||p - z||^2``. Closed form: sort ``z`` descending into ``z_(1) >= z_(2) >=
...``; the support size is ``k(z) = max{k : 1 + k z_(k) > sum_{j<=k} z_(j)}``; the threshold is
``tau(z) = (sum_{j<=k(z)} z_(j) - 1) / k(z)``; ``p_i = max(z_i - tau(z), 0)``.

The support condition holds for ``k = 1 .. k(z)`` and fails for every larger ``k`` (the left side minus the right
side, ``1 + k z_(k) - sum_{j<=k} z_(j)``, never increases with ``k``), so the threshold is found from the ``K``
largest entries alone whenever the condition fails somewhere within them. :func:`sparsemax_topk` uses that: it
sorts only the top ``K`` of each row (``torch.topk``) and falls back to a full sort for the rows whose support is
larger than ``K - 1``. Both functions give the same result (up to float rounding), which the tests check.

Ties: entries equal to one another get the same weight; ``k(z)`` counts tied entries one by one, and the result
does not depend on how the sort orders ties.
"""

from __future__ import annotations

import torch


def _threshold_from_sorted(z_sorted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tau, support_size)`` per row of ``z_sorted`` (rows sorted descending, possibly truncated to K)."""
    k = torch.arange(1, z_sorted.shape[-1] + 1, device=z_sorted.device, dtype=z_sorted.dtype)
    cumsum = z_sorted.cumsum(dim=-1)
    support = (1 + k * z_sorted) > cumsum
    k_z = support.sum(dim=-1, keepdim=True)  # >= 1: the condition always holds for k = 1
    tau = (cumsum.gather(-1, k_z - 1) - 1) / k_z.to(z_sorted.dtype)
    return tau, k_z


def sparsemax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sparsemax of ``z`` along ``dim`` (full sort; the reference for :func:`sparsemax_topk`)."""
    z = z.transpose(dim, -1)
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)
    tau, _ = _threshold_from_sorted(z_sorted)
    return torch.clamp(z - tau, min=0).transpose(dim, -1)


FIRST_DEPTH = 64  # the first pass sorts this many entries per row (FOCUS's supports on real data: 30 on average)


def sparsemax_topk(z: torch.Tensor, k: int = 256) -> torch.Tensor:
    """Sparsemax over the last dimension of a 2-d ``z``, sorting only the ``k`` largest entries of each row.

    Exact: the rows are first sorted to a depth of ``min(k, FIRST_DEPTH)``; a row whose support might be deeper is
    sorted again to ``k``, and one whose support might exceed ``k - 1`` entries is recomputed with a full sort.
    Every pass computes the threshold from the same leading entries in the same order, so the result does not
    depend on the depth that settled a row.
    """
    if z.ndim != 2:
        raise ValueError(f"sparsemax_topk expects a 2-d tensor, got shape {tuple(z.shape)}")
    n = z.shape[-1]
    if n == 0:
        return z.clone()
    if k >= n:
        return sparsemax(z)
    out = torch.empty_like(z)
    rows = torch.arange(z.shape[0], device=z.device)
    for depth in sorted({min(int(k), FIRST_DEPTH), int(k)}):
        sub = z[rows]
        top, _ = torch.topk(sub, depth, dim=-1, largest=True, sorted=True)
        tau, k_z = _threshold_from_sorted(top)
        out[rows] = torch.clamp(sub - tau, min=0)
        rows = rows[k_z.squeeze(-1) >= depth]  # the condition never failed within this depth: look deeper
        if len(rows) == 0:
            return out
    out[rows] = sparsemax(z[rows])
    return out
