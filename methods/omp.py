"""OMP token transplantation (Goddard & Fernandes Neto 2025, arXiv 2506.06607; mergekit's ``tokensurgeon -a omp``, its
default; spec ``methods-2026.md`` §1), written from the spec: mergekit is LGPL-3.0 and serves only as the parity
oracle (``tests/parity/test_omp_clp.py``).

1. **Overlap** (``exact`` rule, :mod:`methods.helper_model`): a target token whose canonical string is a source token's
   copies that row; special tokens match by role (mergekit's ``normalize_token``). No byte or prefix matches (the
   CLI's default).
2. **Donor space** ``D`` (|V_t| x d_d), a table indexed by target ids (§1.6). ``donor="helper"`` (default, the paper's
   setting): the input table of the world's donor model where the world has one (a pretrained model that owns the
   target vocabulary, as mergekit's donor), else of the helper model that uses the target tokenizer (the one CLP
   uses, :mod:`methods.helper_model`; ``helper_model`` names one and comes first). ``donor="fasttext"``: FOCUS's token-level fastText vectors of the target tokens,
   from FOCUS's own cache (trained when missing, with FOCUS's settings for the run's profile); tokens without a vector
   (under minCount) are neither anchors nor approximated: they keep the shared Gaussian fallback.
3. **Anchors** ``S``: the copied tokens with a donor vector, ordered by target (donor) id. ``A_d = D[S]``,
   ``A_s = E_s[source id of S]``.
4. **Orthogonal matching pursuit**, each new token ``t`` with ``y = D[t]`` on its own (:func:`omp`): ``k`` times, pick
   the unpicked anchor with the largest ``|<r, A_d[i]>|`` (atoms not normalized, no centring), add it to an
   incremental Gram-Schmidt QR (norms clamped at 1e-8, re-orthogonalized with a Householder QR every 256 atoms),
   ``r = y - Q Q^T y``; then ``c = R^-1 Q^T y``, the unconstrained least-squares fit of ``y`` on the picked anchors.
5. ``E_t[t] = sum_j c_j A_s[i_j]``, the same coefficients on the anchors' source rows (float32, as mergekit).

``k`` is 64 (the CLI default and the paper's). It is lowered to ``min(k, |S|, d_d - 1)`` where the donor space is
smaller (§1.6: past ``d_d`` atoms the residual is zero and further atoms are arbitrary and ill-conditioned); the
value used is reported as ``k_used``.

Output embeddings (§1.5). mergekit rebuilds an untied base head with a second, independent OMP whose donor space is
the donor's head, or the donor's input table when the donor is tied. The harness computes the method again on the
source's output table (its rule for untied sources, ``ctx.table == "output"``); that run's donor space is the donor's
output table where the donor unties it, else its input table, which is mergekit's rule. Our trained helper is tied,
so with it both runs select the same anchors with the same coefficients; a tied source's head is its input table.

Deviations, all documented in ``docs/methods/omp.md``: the overlap compares canonical strings (mergekit leaves XLM-R's
``▁`` and WordPiece's ``##`` raw, so across tokenizer families its copy and anchor sets shrink); mergekit's zero rows
for colliding special tokens and for ids beyond the donor matrix do not exist here (every target token has a row);
the first atom's norm is clamped like the others (mergekit divides by the clamped norm but stores the raw one, which
only matters for an all-zero anchor).

The rows depend on no seed (the donor tables are the run seed's neither): they are computed once and kept in the
method's cache (``<home>/cache/methods/omp/rows/``), keyed by digests of the source table, the donor table, the
anchors, the new tokens and ``k`` (and, for a world's donor, the donor's identity); the other seeds' cells read them.

The init report says which model served as the donor (``donor_model``: the world's donor, the ``helper_model``
param or the trained helper, its path, identity, rows, dimension, tied) and how the target tokens were matched
(``matches``: exact canonical matches, special tokens by role, new tokens).

Parameters: ``k`` (64), ``donor`` ("helper" or "fasttext"), ``batch_size`` (512 new tokens per OMP batch; rows are
independent, the batching changes no row), the helper's (:data:`methods.helper_model.HELPER_PARAMS`), and
``save_weights`` (write every new token's anchors and coefficients to ``ctx.workdir/omp_weights.npz``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.core.cache import cached_arrays
from harness.core.hashing import hash_obj
from harness.core.registry import METHODS
from methods.base import InitContext, InitResult, Method, Provenance, Reference
from methods.helper_model import (
    DONOR_WORLD,
    HELPER_CPU,
    HELPER_PARAMS,
    donor_summary,
    focus_vectors,
    helper_tables,
    relative_residual,
    table_digest,
    table_for,
)
from methods.overlap import match_counts
from methods.params import Param
from methods.shared import FALLBACK_SALT, copy_rows, gaussian_start, overlap_stats

EPS = 1e-8  # Gram-Schmidt norms are clamped here
REORTHOGONALIZE = 256  # a Householder QR of the basis every this many atoms
ROWS_VERSION = 1  # bump when the rows' computation changes: cached rows are then computed again


def omp(targets: torch.Tensor, atoms: torch.Tensor, k: int, *, eps: float = EPS,
        reorthogonalize: int = REORTHOGONALIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """Orthogonal matching pursuit of every row of ``targets`` (B x d) over the rows of ``atoms`` (N x d):
    ``(picked, coeff)``, both B x k, ``picked`` in the order the atoms were picked, ``targets[b] ~= coeff[b] @
    atoms[picked[b]]`` (least squares on the picked atoms). float32 or float64 as given (half precision is
    computed in float32)."""
    n_rows, dim = targets.shape
    n_atoms = atoms.shape[0]
    if k > n_atoms:
        raise ValueError(f"OMP cannot pick {k} atoms out of {n_atoms}")
    dtype = targets.dtype if targets.dtype in (torch.float32, torch.float64) else torch.float32
    y = targets.to(dtype)
    a = atoms.to(dtype)
    basis = torch.zeros((n_rows, dim, k), dtype=dtype)  # Q: orthonormal columns
    tri = torch.zeros((n_rows, k, k), dtype=dtype)  # R: upper triangular, atoms = Q R
    picked = torch.zeros((n_rows, k), dtype=torch.long)
    taken = torch.zeros((n_rows, n_atoms), dtype=torch.bool)
    rows = torch.arange(n_rows)
    resid = y.clone()
    for j in range(k):
        score = (resid @ a.T).abs_()
        score.masked_fill_(taken, -float("inf"))
        best = score.max(dim=1).indices
        picked[:, j] = best
        taken[rows, best] = True
        atom = a[best]  # B x d
        if j:
            q = basis[:, :, :j]
            proj = torch.bmm(q.transpose(1, 2), atom.unsqueeze(2)).squeeze(2)  # B x j
            atom = atom - torch.bmm(q, proj.unsqueeze(2)).squeeze(2)
            tri[:, :j, j] = proj
        norm = atom.norm(dim=1).clamp_min(eps)
        tri[:, j, j] = norm
        basis[:, :, j] = atom / norm.unsqueeze(1)
        if j and j % reorthogonalize == 0:
            q_new, r_new = torch.linalg.qr(basis[:, :, :j + 1], mode="reduced")
            basis[:, :, :j + 1] = q_new
            tri[:, :j + 1, :j + 1] = torch.bmm(r_new, tri[:, :j + 1, :j + 1])
        q = basis[:, :, :j + 1]
        resid = y - torch.bmm(q, torch.bmm(q.transpose(1, 2), y.unsqueeze(2))).squeeze(2)
    qty = torch.bmm(basis.transpose(1, 2), y.unsqueeze(2))
    coeff = torch.linalg.solve_triangular(tri, qty, upper=True).squeeze(2)
    return picked, coeff


def transplant(donor_new: torch.Tensor, donor_anchors: torch.Tensor, source_anchors: torch.Tensor, k: int, *,
               batch_size: int = 512, progress: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """Steps 4-5 for every row of ``donor_new``: ``(rows, picked, coeff, mean relative residual in donor space)``;
    ``rows`` = the OMP coefficients applied to ``source_anchors`` (float32)."""
    n = donor_new.shape[0]
    d = source_anchors.shape[1]
    out = torch.empty((n, d), dtype=torch.float32)
    picked = torch.empty((n, k), dtype=torch.long)
    coeff = torch.empty((n, k), dtype=torch.float32)
    residuals = []
    src = source_anchors.float()
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        idx, c = omp(donor_new[start:stop], donor_anchors, k)
        c = c.float()
        out[start:stop] = torch.bmm(c.unsqueeze(1), src[idx]).squeeze(1)
        picked[start:stop], coeff[start:stop] = idx, c
        approx = torch.bmm(c.unsqueeze(1), donor_anchors.float()[idx]).squeeze(1)
        residuals.append(relative_residual(approx, donor_new[start:stop].float()) * (stop - start))
        if progress is not None:
            progress(stop - start)
    return out, picked, coeff, (float(sum(residuals) / n) if n else float("nan"))


@METHODS.register("omp")
class OMPInit(Method):
    """OMP token transplantation: each new token a sparse least-squares combination of k anchors in a donor space."""

    name: ClassVar[str] = "omp"
    description: ClassVar[str] = ("OMP token transplantation (mergekit tokensurgeon, k=64): shared tokens copied "
                                  "(exact, specials by role); each other token the least-squares fit of k anchors "
                                  "picked by orthogonal matching pursuit in a donor space (the helper model's input "
                                  "table, or FOCUS's fastText vectors), its coefficients applied to the anchors' "
                                  "source rows")
    requires: ClassVar[frozenset[str]] = frozenset({"cpt_text"})
    overlap_rule: ClassVar[str] = "exact"
    supports_factorized: ClassVar[bool] = True
    params: ClassVar[tuple[Param, ...]] = (
        Param("k", 64, "anchors per new token (sparsity)", "int", low=1),
        Param("donor", "helper", "donor space: the helper model's input table, or FOCUS's fastText vectors", "str",
              choices=("helper", "fasttext")),
        Param("batch_size", 512, "new tokens per OMP batch (changes no row)", "int", low=1),
        *HELPER_PARAMS,
        Param("save_weights", False, "write omp_weights.npz (anchors and coefficients)", "bool"),
    )
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"cpu": dict(HELPER_CPU)}
    init_hours: ClassVar[float] = 0.5
    reference: ClassVar[Reference] = Reference(
        "mergekit 0.1.5", "batch_omp row by row on the synthetic world's tables (the helper's and fastText's donor "
        "spaces): the same anchors in the same order, rows to 1e-5; copied rows equal (run by tests/parity/run.sh)",
        ("tests/parity/test_omp_clp.py::test_omp_parity_with_mergekit", "tests/test_omp.py"))

    def donor_space(self, ctx: InitContext, p: dict[str, Any], n_t: int
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any], dict[str, Any] | None]:
        """``(D, has a vector, what D is, which model served)``: the helper's / world donor's table for the source
        table the method is called on, or FOCUS's fastText vectors (no model)."""
        if p["donor"] == "helper":
            tables = helper_tables(ctx, p, who=self.name)
            donor = table_for(tables, ctx)
            space = "output" if donor is tables.output else "input"
            whose = "the world donor's" if tables.info.get("donor") == DONOR_WORLD else "helper"
            info: dict[str, Any] = {"space": f"{whose} {space} table", **tables.info}
            has, model = np.ones(n_t, dtype=bool), donor_summary(tables.info)
        else:  # (focus_vectors refuses a world without target-language text)
            donor, has, fasttext = focus_vectors(ctx)
            info, model = {"space": "FOCUS fastText vectors", **fasttext}, None
        info.update(dim=int(donor.shape[1]), digest=table_digest(donor))
        return donor, has, info, model

    def initialize(self, ctx: InitContext) -> InitResult:
        p = self.resolve_params(ctx)
        mapping = self.mapping(ctx, specials="role")
        n_t = mapping.target_size
        src = ctx.source_matrix.detach().float().cpu()
        matrix, provenance = gaussian_start(src, n_t, ctx.generator(FALLBACK_SALT))

        donor, has, donor_info, model = self.donor_space(ctx, p, n_t)

        copied = np.zeros(n_t, dtype=bool)
        copied[list(mapping.copy)] = True
        anchors = np.array([t for t in sorted(mapping.copy) if has[t]], dtype=np.int64)
        new = np.flatnonzero(~copied & has)
        k_used = min(int(p["k"]), len(anchors), int(donor.shape[1]) - 1)
        if k_used < 1:
            new = np.zeros(0, dtype=np.int64)
        d_all = torch.from_numpy(np.ascontiguousarray(donor, dtype=np.float32))
        source_ids = torch.tensor([mapping.copy[int(t)] for t in anchors], dtype=torch.long)
        def compute() -> dict[str, np.ndarray]:
            advance = self.bar(ctx, "OMP: new tokens", len(new))
            rows, picked, coeff, residual = transplant(
                d_all[torch.from_numpy(new)], d_all[torch.from_numpy(anchors)], src[source_ids], max(k_used, 1),
                batch_size=int(p["batch_size"]), progress=advance)
            return {"rows": rows.numpy(), "picked": picked.numpy(), "coeff": coeff.numpy(),
                    "residual": np.array(residual)}

        # the rows depend on no seed: computed once for every run seed (the bible world's 90k new tokens take
        # tens of minutes of a core), kept by their inputs in the method's cache
        inputs = {"v": ROWS_VERSION, "source": table_digest(src.numpy()), "donor": donor_info["digest"],
                  "anchors": table_digest(anchors), "sources": table_digest(source_ids.numpy()),
                  "new": table_digest(new), "k": int(k_used), "batch": int(p["batch_size"])}
        if model is not None and model.get("donor") == DONOR_WORLD:  # (the keys of the helper's rows stay as they were)
            inputs["donor_model"] = model["identity"]
        if ctx.cache_dir is None:
            z = compute()
        else:
            z = cached_arrays(Path(ctx.cache_dir) / "rows" / f"omp-{hash_obj(inputs)}.npz", compute,
                              waiting="OMP: another process computes these rows, waiting for it")
        rows, picked, coeff = (torch.from_numpy(z[k]) for k in ("rows", "picked", "coeff"))
        residual = float(z["residual"])
        if len(new):
            matrix[torch.from_numpy(new)] = rows.to(matrix.dtype)
            provenance[new] = Provenance.METHOD
        copy_rows(matrix, src, mapping, provenance)

        artifacts: dict[str, Path] = {}
        if p["save_weights"] and ctx.workdir is not None:
            path = Path(ctx.workdir) / "omp_weights.npz"
            np.savez_compressed(path, target_ids=new, anchor_target_ids=anchors, picked=picked.numpy(),
                                coeff=coeff.numpy())
            artifacts["weights"] = path
        stats = {
            "overlap": overlap_stats(mapping),
            "matches": match_counts(mapping, "role"),
            "donor": {"name": p["donor"], **donor_info},
            **({"donor_model": model} if model is not None else {}),
            "k": int(p["k"]), "k_used": int(k_used),
            "anchors": int(len(anchors)),
            "new": int((~copied).sum()),
            "new_approximated": int(len(new)),
            "new_without_donor_vector": int((~copied & ~has).sum()),
            "donor_relative_residual": None if not len(new) else round(residual, 6),
            "mean_abs_coeff_sum": None if not len(new) else round(float(coeff.abs().sum(1).mean()), 6),
            "fallback": "per-dimension normal, mean/std (ddof=0) of the source matrix, for new tokens without a "
                        "donor vector",
            "factorized": ctx.factorized,
        }
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats,
                          artifacts=artifacts)
