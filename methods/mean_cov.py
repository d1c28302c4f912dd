"""``mean-cov``: new rows drawn from the multivariate Gaussian of the source embeddings (Hewitt 2021).

This is what transformers' ``resize_token_embeddings`` does by default (``mean_resizing=True``): the added rows
are sampled from N(mu, Sigma) of the old rows instead of an isotropic Gaussian. As a method here:

* overlapping tokens are copied under the ``ofa`` rule, the same copies as ``random``, so that the two baselines
  differ only in the draw: ``random`` is per dimension (diagonal covariance), ``mean-cov`` keeps the
  correlations between dimensions;
* every other row is ``mu + sqrt(cov_scale) * L z`` with mu and Sigma (population, ddof=0, as transformers
  computes it) of the source matrix (E_s, or F_s when factorized), ``L`` its Cholesky factor (an eigenvalue
  factor with negative eigenvalues clipped to 0 when Sigma is singular), and ``z`` the same standard-normal draw
  as the shared fallback (``ctx.generator(FALLBACK_SALT)``, float32, in blocks of ``FALLBACK_CHUNK_ROWS`` rows,
  row i for target token i): with one seed, ``random`` and ``mean-cov`` transform the same ``z``;
* the drawn rows carry no information about their token, so their provenance is RANDOM, as ``random``'s are;
* ``cov_scale`` (default 1.0) scales Sigma. transformers samples from N(mu, 1e-9 Sigma), which puts every new row
  at the mean for practical purposes; Hewitt's post uses 1e-5. ``cov_scale=1`` is the plain N(mu, Sigma).

The surgery path never uses the resize's own draw: it calls ``resize_token_embeddings(..., mean_resizing=False)``
and overwrites every row (``tests/test_baselines.py`` checks it).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from harness.core.registry import METHODS
from methods.base import InitContext, InitResult, Method, Provenance, Reference
from methods.params import Param
from methods.shared import FALLBACK_CHUNK_ROWS, FALLBACK_SALT, copy_rows, overlap_stats


def gaussian_factor(source: torch.Tensor, chunk_rows: int = 65536) -> tuple[torch.Tensor, torch.Tensor, str]:
    """``(mu, L, how)``: mean and a factor ``L`` with ``L L^T = Sigma`` of the rows of ``source``, in float64,
    accumulated over row blocks (two passes: the mean, then the centered products; no full float64 copy)."""
    n, d = source.shape
    mu = torch.zeros(d, dtype=torch.float64)
    for start in range(0, n, chunk_rows):
        mu += source[start:start + chunk_rows].detach().to("cpu", torch.float64).sum(0)
    mu /= n
    cov = torch.zeros((d, d), dtype=torch.float64)
    for start in range(0, n, chunk_rows):
        centered = source[start:start + chunk_rows].detach().to("cpu", torch.float64) - mu
        cov += centered.T @ centered
    cov /= n
    chol, info = torch.linalg.cholesky_ex(cov)
    if int(info) == 0:
        return mu, chol, "cholesky"
    vals, vecs = torch.linalg.eigh(cov)
    return mu, vecs * vals.clamp(min=0).sqrt(), "eigh (singular covariance)"


def mean_cov_matrix(source: torch.Tensor, n_rows: int, generator: torch.Generator, cov_scale: float = 1.0,
                    chunk_rows: int = FALLBACK_CHUNK_ROWS) -> tuple[torch.Tensor, str]:
    """``n_rows`` rows drawn from N(mu, cov_scale * Sigma) of the rows of ``source``, and how Sigma was factored."""
    mu, factor, how = gaussian_factor(source)
    factor_t = (factor * float(np.sqrt(cov_scale))).T.contiguous()
    out = torch.empty((n_rows, source.shape[1]), dtype=torch.float32)
    for start in range(0, n_rows, chunk_rows):
        k = min(chunk_rows, n_rows - start)
        z = torch.randn((k, source.shape[1]), generator=generator, dtype=torch.float32)
        out[start:start + k] = (mu + z.to(torch.float64) @ factor_t).to(torch.float32)
    return out, how


@METHODS.register("mean-cov")
class MeanCovInit(Method):
    """Copy overlapping tokens (``ofa`` rule); the rest from N(mean, covariance) of the source (coordinate) rows."""

    name: ClassVar[str] = "mean-cov"
    description: ClassVar[str] = ("Hewitt / transformers' resize init: overlapping tokens copied (OFA rule), the "
                                  "rest drawn from the multivariate N(mean, covariance) of the source "
                                  "(coordinate) matrix")
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = True
    params: ClassVar[tuple[Param, ...]] = (
        Param("cov_scale", 1.0, "factor on the covariance of the draw", "float",
              check=lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0,
              expect="a positive number"),
    )
    reference: ClassVar[Reference] = Reference(
        None, "transformers' mean resizing not run against it; tested for its statistics: copied rows equal, the "
              "drawn rows' mean and covariance those of the source (correlations kept), singular covariance, "
              "cov_scale", ("tests/test_baselines.py",))

    def initialize(self, ctx: InitContext) -> InitResult:
        scale = self.resolve_params(ctx)["cov_scale"]
        mapping = self.mapping(ctx)
        n_t = mapping.target_size
        src = ctx.source_matrix.detach().float().cpu()
        matrix, how = mean_cov_matrix(src, n_t, ctx.generator(FALLBACK_SALT), float(scale))
        provenance = np.full(n_t, Provenance.RANDOM, dtype=np.int8)  # a draw, as random's rows: nothing per token
        copy_rows(matrix, src, mapping, provenance)
        stats = {"overlap": overlap_stats(mapping), "cov_scale": float(scale),
                 "factor": how, "factorized": ctx.factorized}
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats)
