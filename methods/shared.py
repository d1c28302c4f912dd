"""Row-level pieces the methods share: the per-dimension Gaussian fallback, copying the overlap, unit rows, a
tokenizer's fingerprint, the overlap stats a method reports.

The fallback draw is part of several methods' definitions (``random``, ``ofa``, ``hyperofa``, ``focus``,
``wechsel`` give the same row to the same token with the same seed); changing it changes their rows.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from methods.base import Provenance, TokenMapping

FALLBACK_CHUNK_ROWS = 8192  # rows drawn per call; part of the draw's definition (changing it changes the rows)
FALLBACK_SALT = 0  # ctx.generator(salt) for the Gaussian fallback; shared by every method that uses it


def fallback_stats(source: torch.Tensor, chunk_rows: int = 65536) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and population std (ddof=0) of ``source``, accumulated in float64 over row blocks
    (no full float64 copy; several times faster than ``Tensor.std(dim=0)`` on a tall matrix)."""
    n = source.shape[0]
    total = torch.zeros(source.shape[1], dtype=torch.float64)
    for start in range(0, n, chunk_rows):
        total += source[start:start + chunk_rows].detach().to("cpu", torch.float64).sum(0)
    mu = total / n
    sq = torch.zeros_like(mu)
    for start in range(0, n, chunk_rows):
        sq += ((source[start:start + chunk_rows].detach().to("cpu", torch.float64) - mu) ** 2).sum(0)
    return mu, (sq / n).sqrt()


def fallback_matrix(source: torch.Tensor, n_rows: int, generator: torch.Generator,
                    chunk_rows: int = FALLBACK_CHUNK_ROWS) -> torch.Tensor:
    """``n_rows`` rows drawn per dimension from N(mu_d, sigma_d^2) of ``source`` (population std, ddof=0).

    The per-dimension Gaussian of spec §1.3 (the one fallback every method uses); the statistics are computed in
    float64, the
    standard normal draws in float32 (several times faster than float64 draws), in blocks of ``chunk_rows`` rows
    so that a 401k x 768 draw never holds a float64 copy. Every method draws a full ``|V_t|``-row matrix and uses
    row ``i`` for target token ``i`` (as the reference code's ``RandomState(...).normal(mean, std, (|V_t|, d))``),
    so a token's fallback row depends only on the seed and its id, never on which other tokens were copied or
    matched; ``random`` and ``ofa`` with the same seed give the same fallback row to the same token.
    """
    mu64, sigma64 = fallback_stats(source)
    mu, sigma = mu64.to(torch.float32), sigma64.to(torch.float32)
    out = torch.empty((n_rows, source.shape[1]), dtype=torch.float32)
    for start in range(0, n_rows, chunk_rows):
        k = min(chunk_rows, n_rows - start)
        z = torch.randn((k, source.shape[1]), generator=generator, dtype=torch.float32)
        out[start:start + k] = torch.addcmul(mu, z, sigma)
    return out.to(source.dtype)


def copy_rows(matrix: torch.Tensor, source: torch.Tensor, mapping: TokenMapping,
              provenance: np.ndarray) -> None:
    """Copy the source row of every overlapping token into ``matrix`` (in place) and mark it COPIED."""
    if not mapping.copy:
        return
    tids = torch.tensor(list(mapping.copy.keys()), dtype=torch.long)
    sids = torch.tensor(list(mapping.copy.values()), dtype=torch.long)
    matrix[tids] = source.detach().cpu()[sids].to(matrix.dtype)
    provenance[tids.numpy()] = Provenance.COPIED


def overlap_stats(mapping: TokenMapping) -> dict[str, Any]:
    """The mapping's stats as a method reports them (without the UNK detail)."""
    return {k: v for k, v in mapping.stats.items() if k != "unk"}


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row scaled to unit length; zero rows stay zero."""
    norm = x.norm(dim=1, keepdim=True)
    return torch.where(norm > 0, x / norm.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of a tokenizer's full definition (its backend JSON, else its vocabulary): part of the cache
    keys of products computed from it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def gaussian_start(source: torch.Tensor, n_rows: int, generator: torch.Generator
                   ) -> tuple[torch.Tensor, np.ndarray]:
    """The matrix every fallback-based method starts from: all rows the Gaussian fallback
    (:func:`fallback_matrix`), all provenance RANDOM; the method then overwrites what it computes or copies."""
    return fallback_matrix(source, n_rows, generator), np.full(n_rows, Provenance.RANDOM, dtype=np.int8)
