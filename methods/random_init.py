"""Random baselines (spec ``methods.md`` §2.1).

``random``      R1, OFA/HyperOFA's "Random": copy the rows of overlapping tokens (``ofa`` overlap rule), draw every
                other row per dimension from N(mu_d, sigma_d^2) of the source matrix (E_s, or F_s when
                factorized, so the draw happens in coordinate space and P is reused).
``random-map``  R2, FOCUS's "Random Initialization" (Zoph et al. 2016): every non-copied target token gets the row
                of a randomly chosen source token. Overlapping tokens are still copied (``focus`` overlap rule;
                the seed leaves this unstated, so it is recorded as a decision).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from harness.core.errors import ConfigError
from harness.core.registry import METHODS
from methods.base import InitContext, InitResult, Method, Provenance, Reference
from methods.params import Param
from methods.shared import (
    FALLBACK_SALT,
    copy_rows,
    gaussian_start,
    overlap_stats,
)


@METHODS.register("random")
class RandomInit(Method):
    """R1: copy overlapping tokens (``ofa`` rule), per-dimension Gaussian of the source matrix for the rest."""

    name: ClassVar[str] = "random"
    description: ClassVar[str] = ("OFA/HyperOFA random baseline: overlapping tokens copied (OFA rule), the rest "
                                  "drawn per dimension from N(mean, std) of the source (coordinate) matrix")
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = True
    init_hours: ClassVar[float] = 0.02
    reference: ClassVar[Reference] = Reference(
        None, "defined by the spec (OFA/HyperOFA's Random); tested for its statistics: copied rows bit-identical, "
              "the rest per-dimension N(mean, std) of the source (coordinate) matrix, dimensions uncorrelated, "
              "one draw per seed", ("tests/test_random_method.py",))

    def initialize(self, ctx: InitContext) -> InitResult:
        self.resolve_params(ctx)
        mapping = self.mapping(ctx)
        src = ctx.source_matrix.detach().float().cpu()
        matrix, provenance = gaussian_start(src, mapping.target_size, ctx.generator(FALLBACK_SALT))
        copy_rows(matrix, src, mapping, provenance)
        stats = {"overlap": overlap_stats(mapping),
                 "fallback": "per-dimension normal, mean/std (ddof=0) of the source matrix",
                 "factorized": ctx.factorized}
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats)


@METHODS.register("random-map")
class RandomMapInit(Method):
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
    overlap_rule: ClassVar[str] = "focus"
    supports_factorized: ClassVar[bool] = False  # spec Appendix B item 3: factorization for OFA/HyperOFA/R1 only
    params: ClassVar[tuple[Param, ...]] = (
        Param("replacement", False, "draw each new token's source independently (else a random injection)", "bool"),
        Param("exclude_specials", True, "keep the source's special tokens out of the pool", "bool"),
    )
    init_hours: ClassVar[float] = 0.02
    reference: ClassVar[Reference] = Reference(
        None, "defined by the spec (FOCUS's random initialization, Zoph et al. 2016); tested: copied rows "
              "bit-identical (FOCUS rule), every other row a distinct non-special source row while the pool lasts",
        ("tests/test_random_method.py",))

    def initialize(self, ctx: InitContext) -> InitResult:
        p = self.resolve_params(ctx)
        mapping = self.mapping(ctx)
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
        stats = {"overlap": overlap_stats(mapping),
                 "replacement": bool(p["replacement"]), "exclude_specials": bool(p["exclude_specials"]),
                 "pool": int(len(pool)), "distinct_sources_mapped": int(len(np.unique(chosen)))}
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats)
