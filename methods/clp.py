"""CLP-Transfer (Ostendorff & Rehm 2023, arXiv 2301.09626; ``malteos/clp-transfer``) and CLP+ (Yamaguchi et al. 2024,
arXiv 2402.10712; ``gucci-j/llm-cva``), spec ``methods-2026.md`` §2.

Both need a helper model that already uses the target tokenizer (:mod:`methods.helper_model`: the world's donor
model where it has one, as the papers' pretrained helper; else trained once per world on its CPT text; or given as
``helper_model``, which comes first); its input table ``H`` is the similarity space. The init report says which
served (``donor_model``) and how the target tokens were matched (``matches``).

1. **Overlap** ``O`` (``exact`` rule with ``specials="string"``: the reference's ``get_vocab()`` intersection, special
   tokens by their text; canonical strings instead of raw ones, see :mod:`methods.helper_model`). Overlapping target
   tokens copy their source row. No overlap at all is an error, as in the reference.
2. For every other target token ``m``: cosines ``s_{m,o} = cos(H[m], H[o])`` to **every** overlapping token ``o``
   (rows of zero norm have cosine 0, as sklearn's ``cosine_similarity``), in float64.
3. **CLP**: ``w = s / sum(s)``, raw cosines, negative ones kept; ``E_t[m] = sum_o w_o E_s[o]``. A token whose
   cosines sum to exactly 0 (the reference divides by zero) keeps the Gaussian fallback (reported as
   ``zero_sum``).
   **CLP+**: ``p = sparsemax(s)`` (float64; :func:`methods.sparsemax.sparsemax_topk`, exact, sorting the top 256
   of a row and the whole row only where the support could be deeper), ``E_t[m] = sum_{p_o > 0} p_o E_s[o]``.
4. The rows are computed in float64 and cast to float32.

Random rows. The references start from ``np.random.normal(mean, std)`` of the source (seed 42) and overwrite every
row; with a helper row for every target token none of those draws survives (CLP+'s padding rows beyond the vocabulary
aside, which a harness model does not have). Here the start is the harness's shared Gaussian fallback
(:func:`methods.shared.gaussian_start`); it survives only for CLP's zero-sum tokens.

Output embeddings (§2.3). llm-cva's untied CLP+ builds the head from the source head rows with sparsemax weights over
cosines in the helper's output table, or the input table's when the helper is tied (the trained helper is). So
computing the method again on the source's output table (the harness's rule for untied sources, ``ctx.table ==
"output"``), with ``H`` the helper's output table where it unties one, is CLP+'s untied rule, and, as the spec
recommends, CLP's too (both references leave an untied CLP head misaligned by id).

Parameters: the helper's (:data:`methods.helper_model.HELPER_PARAMS`), ``block_size`` (new tokens per similarity
block, 1024; changes no row), ``save_weights`` (CLP+ only: every new token's support and weights to
``ctx.workdir/clp_weights.npz``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.core.errors import HarnessError
from harness.core.registry import METHODS
from methods.base import InitContext, InitResult, Method, Provenance, Reference
from methods.helper_model import (
    HELPER_CPU,
    HELPER_PARAMS,
    donor_summary,
    helper_tables,
    table_digest,
    table_for,
)
from methods.overlap import match_counts
from methods.params import Param
from methods.shared import FALLBACK_SALT, copy_rows, gaussian_start, overlap_stats
from methods.sparsemax import sparsemax, sparsemax_topk


def _unit(x: torch.Tensor) -> torch.Tensor:
    norm = x.norm(dim=1, keepdim=True)
    return torch.where(norm > 0, x / torch.where(norm > 0, norm, torch.ones_like(norm)), torch.zeros_like(x))


def clp_rows(helper_new: np.ndarray, helper_overlap: np.ndarray, source_overlap: np.ndarray, *, plus: bool,
             block_size: int = 1024, progress: Any = None) -> tuple[torch.Tensor, np.ndarray, dict[str, Any]]:
    """Steps 2-4 for every row of ``helper_new`` against the overlap (``helper_overlap``, ``source_overlap``, one
    row per overlapping token, in the same order): ``(rows float64, ok, stats)``; ``ok`` is False for a CLP row
    whose cosines sum to zero (no row computed)."""
    hn = _unit(torch.from_numpy(np.asarray(helper_new, dtype=np.float64)))
    ho = _unit(torch.from_numpy(np.asarray(helper_overlap, dtype=np.float64)))
    es = torch.from_numpy(np.asarray(source_overlap, dtype=np.float64))
    n = hn.shape[0]
    out = torch.zeros((n, es.shape[1]), dtype=torch.float64)
    ok = np.ones(n, dtype=bool)
    supports: list[int] = []
    negative_sums = 0
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        s = hn[start:stop] @ ho.T
        if plus:
            w = sparsemax_topk(s, 256)  # exact: rows whose support could be deeper are sorted in full
            supports.extend((w > 0).sum(1).tolist())
            w = torch.where(w > 0, w, torch.zeros_like(w))
        else:
            total = s.sum(1, keepdim=True)
            zero = (total == 0).squeeze(1)
            negative_sums += int((total < 0).sum())
            ok[start:stop] = ~zero.numpy()
            w = s / torch.where(zero.unsqueeze(1), torch.ones_like(total), total)
        out[start:stop] = w @ es
        if progress is not None:
            progress(stop - start)
    stats: dict[str, Any] = {}
    if plus:
        stats.update(mean_support=float(np.mean(supports)) if supports else None,
                     max_support=int(max(supports)) if supports else None)
    else:
        stats.update(zero_sum=int((~ok).sum()), negative_sum=negative_sums)
    return out, ok, stats


class _CLPBase(Method):
    overlap_rule: ClassVar[str] = "exact"
    supports_factorized: ClassVar[bool] = True
    requires: ClassVar[frozenset[str]] = frozenset({"cpt_text"})
    plus: ClassVar[bool] = False
    init_hours: ClassVar[float] = 0.5

    def initialize(self, ctx: InitContext) -> InitResult:
        p = self.resolve_params(ctx)
        mapping = self.mapping(ctx, specials="string")
        if not mapping.copy:
            raise HarnessError(f"method {self.name!r}: the source and target vocabularies share no token, so there "
                               f"is nothing to combine (CLP needs an overlap)")
        n_t = mapping.target_size
        src = ctx.source_matrix.detach().float().cpu()
        matrix, provenance = gaussian_start(src, n_t, ctx.generator(FALLBACK_SALT))
        tables = helper_tables(ctx, p, who=self.name)
        h = table_for(tables, ctx)
        overlap_t = np.array(sorted(mapping.copy), dtype=np.int64)
        overlap_s = np.array([mapping.copy[int(t)] for t in overlap_t], dtype=np.int64)
        copied = np.zeros(n_t, dtype=bool)
        copied[overlap_t] = True
        new = np.flatnonzero(~copied)
        rows, ok, stats = clp_rows(h[new], h[overlap_t], src.double().numpy()[overlap_s], plus=self.plus,
                                   block_size=int(p["block_size"]),
                                   progress=self.bar(ctx, f"{self.name}: new tokens", len(new)))
        done = new[ok]
        if len(done):
            matrix[torch.from_numpy(done)] = rows[torch.from_numpy(np.flatnonzero(ok))].to(matrix.dtype)
            provenance[done] = Provenance.METHOD
        copy_rows(matrix, src, mapping, provenance)
        artifacts: dict[str, Path] = {}
        if self.plus and p.get("save_weights") and ctx.workdir is not None:
            hn = _unit(torch.from_numpy(h[new].astype(np.float64)))
            ho = _unit(torch.from_numpy(h[overlap_t].astype(np.float64)))
            w = sparsemax(hn @ ho.T, dim=1) if len(new) else torch.zeros((0, len(overlap_t)), dtype=torch.float64)
            r_idx, c_idx = torch.nonzero(w > 0, as_tuple=True)
            path = Path(ctx.workdir) / "clp_weights.npz"
            np.savez_compressed(path, target_ids=new, overlap_target_ids=overlap_t, rows=r_idx.numpy(),
                                support=c_idx.numpy(), weights=w[r_idx, c_idx].numpy())
            artifacts["weights"] = path
        # CLP's weights s / sum(s) explode for a token whose cosines nearly cancel (spec §2.5): say how many rows
        # came out of the source table's scale
        norms = matrix[torch.from_numpy(done)].norm(dim=1) if len(done) else torch.zeros(0)
        typical = float(src.norm(dim=1).median())
        stats.update(off_scale_rows=int((norms > 10 * typical).sum()),
                     largest_row_norm=round(float(norms.max()), 4) if len(norms) else None,
                     source_median_row_norm=round(typical, 4))
        info = {**tables.info, "dim": int(h.shape[1]), "digest": table_digest(h)}
        out_stats = {"overlap": overlap_stats(mapping), "matches": match_counts(mapping, "string"),
                     "donor_model": donor_summary(tables.info), "helper": info, "anchors": int(len(overlap_t)),
                     "new": int(len(new)), "weights": "sparsemax" if self.plus else "cosine / sum of cosines",
                     **stats,
                     "fallback": "per-dimension normal, mean/std (ddof=0) of the source matrix"
                                 + ("" if self.plus else ", for tokens whose cosines sum to 0"),
                     "factorized": ctx.factorized}
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=out_stats,
                          artifacts=artifacts)


@METHODS.register("clp")
class CLPInit(_CLPBase):
    """CLP-Transfer: new tokens the cosine-weighted mean of every overlapping token's source row, cosines in a
    helper model that uses the target tokenizer."""

    name: ClassVar[str] = "clp"
    description: ClassVar[str] = ("CLP-Transfer (Ostendorff & Rehm 2023): shared tokens copied (exact, specials by "
                                  "text); each other token the mean of all shared tokens' source rows weighted by "
                                  "their normalized cosines in a helper model's input table (a small model on the "
                                  "world's CPT text with the target tokenizer)")
    requires: ClassVar[frozenset[str]] = frozenset({"cpt_text"})
    overlap_rule: ClassVar[str] = "exact"
    supports_factorized: ClassVar[bool] = True
    plus: ClassVar[bool] = False
    params: ClassVar[tuple[Param, ...]] = (
        *HELPER_PARAMS,
        Param("block_size", 1024, "new tokens per similarity block (changes no row)", "int", low=1),
    )
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"cpu": dict(HELPER_CPU)}
    reference: ClassVar[Reference] = Reference(
        "gucci-j/llm-cva@4faf142", "CLPEmbeddingInitializer on the synthetic world's tables and tokenizers (fixture "
        "tests/parity/fixtures/clp_synthetic.npz): the same overlap, copied rows equal, every other row to rtol "
        "1e-6 (run by tests/parity/run.sh)",
        ("tests/parity/test_omp_clp.py::test_clp_parity_with_llm_cva", "tests/test_clp.py"))


@METHODS.register("clp+")
class CLPPlusInit(_CLPBase):
    """CLP+: as CLP, with sparsemax weights over the cosines (FOCUS's weighting in the helper's space)."""

    name: ClassVar[str] = "clp+"
    description: ClassVar[str] = ("CLP+ (Yamaguchi et al. 2024): shared tokens copied (exact, specials by text); "
                                  "each other token a sparsemax-weighted mean of the shared tokens' source rows by "
                                  "cosine in a helper model's input table (a small model on the world's CPT text "
                                  "with the target tokenizer)")
    requires: ClassVar[frozenset[str]] = frozenset({"cpt_text"})
    overlap_rule: ClassVar[str] = "exact"
    supports_factorized: ClassVar[bool] = True
    plus: ClassVar[bool] = True
    params: ClassVar[tuple[Param, ...]] = (
        *HELPER_PARAMS,
        Param("block_size", 1024, "new tokens per similarity block (changes no row)", "int", low=1),
        Param("save_weights", False, "write clp_weights.npz (supports and weights)", "bool"),
    )
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"cpu": dict(HELPER_CPU)}
    reference: ClassVar[Reference] = Reference(
        "gucci-j/llm-cva@4faf142", "CLPPlusEmbeddingInitializer on the synthetic world's tables and tokenizers "
        "(fixture tests/parity/fixtures/clp_synthetic.npz): the same overlap, copied rows equal, every other row to "
        "rtol 1e-6 (run by tests/parity/run.sh)",
        ("tests/parity/test_omp_clp.py::test_clp_plus_parity_with_llm_cva", "tests/test_clp.py"))
