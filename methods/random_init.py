"""Random baselines (spec ``methods.md`` §2.1).

``random``      R1, OFA/HyperOFA's "Random": copy the rows of overlapping tokens (``ofa`` overlap rule), draw every
                other row per dimension from N(mu_d, sigma_d^2) of the source matrix (E_s, or F_s when
                factorized, so the draw happens in coordinate space and P is reused).
``random-map``  R2, FOCUS's "Random Initialization" (Zoph et al. 2016): every non-copied target token gets the row
                of a randomly chosen source token. Overlapping tokens are still copied (``focus`` overlap rule;
                the seed leaves this unstated, so it is recorded as a decision).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from harness.errors import ConfigError
from harness.registry import METHODS
from methods.base import InitContext, InitResult, Provenance, TokenMapping

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


def check_mapping(ctx: InitContext, mapping: TokenMapping) -> None:
    n_src = ctx.source_matrix.shape[0]
    if mapping.source_size != n_src:
        raise ValueError(f"token mapping is for a source vocabulary of {mapping.source_size} tokens, but the "
                         f"source matrix has {n_src} rows")
    if mapping.target_size != len(ctx.target_tokenizer):
        raise ValueError(f"token mapping is for {mapping.target_size} target tokens, the target tokenizer has "
                         f"{len(ctx.target_tokenizer)}")


@METHODS.register("random")
class RandomInit:
    """R1: copy overlapping tokens (``ofa`` rule), per-dimension Gaussian of the source matrix for the rest."""

    name: ClassVar[str] = "random"
    description: ClassVar[str] = ("OFA/HyperOFA random baseline: overlapping tokens copied (OFA rule), the rest "
                                  "drawn per dimension from N(mean, std) of the source (coordinate) matrix")
    requires: ClassVar[frozenset[str]] = frozenset()
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = True

    def initialize(self, ctx: InitContext) -> InitResult:
        if ctx.params:
            raise ConfigError(f"method 'random' takes no parameters, got {sorted(ctx.params)}")
        mapping = ctx.mapping_for(self.overlap_rule)
        check_mapping(ctx, mapping)
        n_t = mapping.target_size
        src = ctx.source_matrix.detach().float().cpu()
        matrix = fallback_matrix(src, n_t, ctx.generator(FALLBACK_SALT))
        provenance = np.full(n_t, Provenance.RANDOM, dtype=np.int8)
        copy_rows(matrix, src, mapping, provenance)
        stats = {"overlap": {k: v for k, v in mapping.stats.items() if k != "unk"},
                 "fallback": "per-dimension normal, mean/std (ddof=0) of the source matrix",
                 "factorized": ctx.factorized}
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats)


@METHODS.register("random-map")
class RandomMapInit:
    """R2: FOCUS's random mapping of source rows to the non-copied target tokens.

    Parameters (``ctx.params``):

    ``replacement`` (bool, default ``False``): ``False`` draws the source tokens without replacement, a random
        injection as in Zoph et al. (each source row serves at most one new token); when there are more new
        tokens than source tokens in the pool, the pool is drawn again as a fresh permutation for the next
        ``|pool|`` tokens (each row then serves at most ``ceil(|A| / |pool|)`` tokens). ``True`` draws each new
        token's source independently and uniformly. The seed leaves this unstated.
    ``exclude_specials`` (bool, default ``True``): keep the source's special tokens (``<pad>``, ``<mask>`` ...)
        out of the pool.

    The mapped rows are the method's own result (provenance METHOD); their LM-head bias is not copied, because
    they are not the same token (only the overlap in ``InitResult.copy`` keeps its bias).
    """

    name: ClassVar[str] = "random-map"
    description: ClassVar[str] = ("FOCUS random baseline: overlapping tokens copied (FOCUS rule), every other token "
                                  "takes the embedding of a randomly chosen source token")
    requires: ClassVar[frozenset[str]] = frozenset()
    overlap_rule: ClassVar[str] = "focus"
    supports_factorized: ClassVar[bool] = False  # spec Appendix B item 3: factorization for OFA/HyperOFA/R1 only
    defaults: ClassVar[dict[str, Any]] = {"replacement": False, "exclude_specials": True}

    def initialize(self, ctx: InitContext) -> InitResult:
        unknown = set(ctx.params) - set(self.defaults)
        if unknown:
            raise ConfigError(f"method 'random-map' has no parameter(s) {sorted(unknown)}; "
                              f"it takes {sorted(self.defaults)}")
        p = {**self.defaults, **ctx.params}
        mapping = ctx.mapping_for(self.overlap_rule)
        check_mapping(ctx, mapping)
        n_t = mapping.target_size
        src = ctx.source_matrix.detach().float().cpu()
        pool = np.arange(src.shape[0])
        if p["exclude_specials"]:
            specials = {int(i) for i in getattr(ctx.source_tokenizer, "all_special_ids", []) or []}
            pool = np.array([i for i in pool if int(i) not in specials], dtype=np.int64)
        if len(pool) == 0:
            raise ConfigError("random-map: the source has no non-special tokens to map from")
        new = np.array([t for t in range(n_t) if t not in mapping.copy], dtype=np.int64)
        gen = ctx.generator(1)
        if p["replacement"]:
            pick = torch.randint(len(pool), (len(new),), generator=gen).numpy()
        else:
            reps = -(-len(new) // len(pool)) if len(new) else 0
            pick = np.concatenate([torch.randperm(len(pool), generator=gen).numpy() for _ in range(reps)]
                                  or [np.zeros(0, dtype=np.int64)])[: len(new)]
        chosen = pool[pick]
        matrix = torch.zeros((n_t, src.shape[1]), dtype=src.dtype)
        provenance = np.full(n_t, Provenance.METHOD, dtype=np.int8)
        if len(new):
            matrix[torch.from_numpy(new)] = src[torch.from_numpy(chosen)]
        copy_rows(matrix, src, mapping, provenance)
        stats = {"overlap": {k: v for k, v in mapping.stats.items() if k != "unk"},
                 "replacement": bool(p["replacement"]), "exclude_specials": bool(p["exclude_specials"]),
                 "pool": int(len(pool)), "distinct_sources_mapped": int(len(np.unique(chosen)))}
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats)
