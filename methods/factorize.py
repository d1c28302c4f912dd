"""Factorized embeddings E_s ~= F_s P by truncated SVD (spec ``methods.md`` §1.2, OFA's ``perform_factorize``).

``U, S, Vh = svd(E_s)`` without mean-centering; ``P = diag(S[:d']) Vh[:d']`` (d' x D, the shared "primitive
embeddings"), ``F_s = U[:, :d']`` (|V_s| x d', orthonormal columns, the token coordinates). Only ``F_t`` is
initialized for a new vocabulary; ``P`` is reused unchanged. Not the alternative split ``F = U S, P = Vh``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Factorization:
    coords: torch.Tensor  # F_s (|V_s|, dim), float32
    primitive: torch.Tensor  # P (dim, D), float32
    singular_values: torch.Tensor  # all of them (min(|V_s|, D),), float64, descending
    dim: int

    @property
    def discarded_energy(self) -> float:
        """Sum of the squared discarded singular values = ||E_s - F_s P||_F^2 of the exact truncated SVD."""
        return float((self.singular_values[self.dim:] ** 2).sum())

    @property
    def kept_energy_share(self) -> float:
        total = float((self.singular_values ** 2).sum())
        return 1.0 if total == 0 else float((self.singular_values[: self.dim] ** 2).sum()) / total


def factorize(matrix: torch.Tensor, dim: int) -> Factorization:
    """Rank-``dim`` truncated SVD of ``matrix`` (computed in float64, returned as the matrix's dtype)."""
    n, d = matrix.shape
    if not 0 < dim <= min(n, d):
        raise ValueError(f"factorized dimension {dim} must be in 1..{min(n, d)} for a {n} x {d} matrix")
    m = matrix.detach().to("cpu", torch.float64)
    u, s, vh = torch.linalg.svd(m, full_matrices=False)
    del m
    primitive = (s[:dim, None] * vh[:dim]).to(matrix.dtype).contiguous()
    coords = u[:, :dim].to(matrix.dtype).contiguous()
    return Factorization(coords=coords, primitive=primitive, singular_values=s, dim=dim)
