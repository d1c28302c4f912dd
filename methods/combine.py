"""A new token's row as a weighted average of source rows: similarity x weighting x fallback.

OFA, WECHSEL, FOCUS and Tik-to-Tok share one shape (as langsfer's ``WeightedAverageEmbeddingsInitialization``):
each target token has a vector in an auxiliary space, each candidate source row has one too; a **similarity**
scores the candidates of a block of target tokens, a **weighting** turns the scores into weights, the
**combination** is the weighted sum of the candidates' rows, and a token that gets no weights keeps its
**fallback** row. The methods differ only in the parts they compose:

===========  =======================================  ===========================  ===============================
method       similarity                               weighting                    fallback
===========  =======================================  ===========================  ===============================
OFA          :class:`Cosine` (float32, or float64)    :class:`TopKSoftmax`         Gaussian (:func:`gaussian_start`)
WECHSEL      :class:`ScreenedCosine` (exact float64)  :class:`TopKSoftmax`         Gaussian
FOCUS        :class:`Cosine` (float32), anchors only  :class:`SparsemaxTopK`       Gaussian
Tik-to-Tok   :class:`Cosine` (float64, sorted top-k)  :class:`RankWeights`         the source UNK row
===========  =======================================  ===========================  ===============================

:func:`weighted_average` runs a similarity and a weighting over blocks of target rows and returns a
:class:`Combination`; :func:`place` writes it over the fallback rows. Each part keeps the exact arithmetic of the
method it came from (operation order, dtypes, tie rules), so the rows are bit for bit those the authors' code is
checked against (``tests/test_ofa.py``, ``tests/parity``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from methods.base import Provenance
from methods.shared import gaussian_start, unit_rows
from methods.sparsemax import sparsemax_topk

__all__ = ["Cosine", "ScreenedCosine", "TopKSoftmax", "SparsemaxTopK", "RankWeights", "Combination",
           "weighted_average", "place", "gaussian_start", "rank_weights"]


# -- similarities ------------------------------------------------------------------------------------------------
class Cosine:
    """Cosine similarity of unit rows in ``dtype`` (zero vectors score 0), a ``block x |candidates|`` matrix at a
    time. ``top`` picks the ``k`` best of a block: ``ties="stable"`` (OFA) takes ``torch.topk``'s unsorted
    selection and sorts it by score, stable; ``ties="topk"`` (Tik-to-Tok) takes ``torch.topk``'s sorted order."""

    def __init__(self, dtype: torch.dtype = torch.float32, ties: str = "stable"):
        if ties not in ("stable", "topk"):
            raise ValueError(f"ties must be 'stable' or 'topk', not {ties!r}")
        self.dtype, self.ties = dtype, ties
        self._targets: torch.Tensor | None = None
        self._sources: torch.Tensor | None = None
        self.device = "cpu"

    def prepare(self, targets: torch.Tensor, sources: torch.Tensor, device: str) -> None:
        self.device = device
        self._targets = targets
        self._sources = unit_rows(sources.to(device, self.dtype))

    def scores(self, start: int, stop: int) -> torch.Tensor:
        assert self._targets is not None and self._sources is not None
        return unit_rows(self._targets[start:stop].to(self.device, self.dtype)) @ self._sources.T

    def top(self, start: int, stop: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, candidate ids)`` of the ``k`` best candidates of each row of the block, best first."""
        sims = self.scores(start, stop)
        if self.ties == "topk":
            return torch.topk(sims, k, dim=1)
        vals, idx = torch.topk(sims, k, dim=1, sorted=False)  # unsorted selection is cheaper; sort the k after
        del sims
        order = torch.argsort(vals, dim=1, descending=True, stable=True)
        return vals.gather(1, order), idx.gather(1, order)


def _screen(ut: torch.Tensor, us32: torch.Tensor, c: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``c`` source vectors of largest float32 inner product with each row of ``ut`` (unit vectors):
    ``(float32 products (n, c), source ids (n, c))``. On a CPU by faiss's exhaustive search when it is installed
    (about twice as fast as a matmul and ``torch.topk``; one call over all rows, with torch's thread count),
    otherwise by blocks of matmul and ``torch.topk``."""
    q = ut.to(torch.float32)
    if torch.device(device).type == "cpu":
        try:
            import faiss
        except ImportError:
            faiss = None
        if faiss is not None:
            index = faiss.IndexFlatIP(us32.shape[1])
            index.add(np.ascontiguousarray(us32.cpu().numpy()))
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(torch.get_num_threads())
            try:
                vals, ids = index.search(np.ascontiguousarray(q.cpu().numpy()), c)
            finally:
                faiss.omp_set_num_threads(threads)
            return torch.from_numpy(vals), torch.from_numpy(ids).to(torch.long)
    out_v, out_i = [], []
    for start in range(0, len(q), 1024):
        v, i = torch.topk(q[start:start + 1024] @ us32.T, c, dim=1, sorted=False)
        out_v.append(v)
        out_i.append(i)
    return torch.cat(out_v), torch.cat(out_i)


def _unit64(x: torch.Tensor) -> torch.Tensor:
    norm = x.norm(dim=1, keepdim=True)
    return torch.where(norm > 0, x / norm.clamp_min(1e-300), torch.zeros_like(x))


class ScreenedCosine:
    """The exact float64 top-``k`` by cosine (WECHSEL), ties broken towards the lower candidate id (tokens that
    decode to the same string, such as ``▁go`` and ``go``, have identical vectors), found fast.

    The search over all candidates runs in float32 (:func:`_screen`, once for all target rows) and keeps
    ``k + screen`` candidates per row; their cosines are then computed again in float64 from the float64 unit
    vectors, and the ``k`` best of those by (cosine, id) are the neighbours. A float32 inner product of two unit
    vectors of dimension d is within ``delta = (d + 2) 2^-23`` of the float64 cosine (twice the rounding bound), so
    a vector left out of the candidates (float32 product at most the smallest candidate's, ``m``) has a float64
    cosine of at most ``m + delta``: when the k-th float64 cosine is above that, the neighbours are exactly those
    of the all-float64 search; a row where it is not (nearly parallel vectors, large ties) is searched again in
    float64 over all candidates. The same neighbours as the all-float64 search (a test checks it on random, nearly
    parallel and tied vectors), several times faster."""

    dtype = torch.float64

    def __init__(self, screen: int = 16):
        self.screen = int(screen)
        self.device = "cpu"

    def prepare(self, targets: torch.Tensor, sources: torch.Tensor, device: str, k: int = 1) -> None:
        self.device = device
        self.n_sources, self.width = sources.shape[0], sources.shape[1]
        self.extra = min(k + max(self.screen, 16), self.n_sources)  # candidates, with room to order ties by id
        self.us = _unit64(sources.to(device, torch.float64))
        self.ut_all = _unit64(targets.to(device, torch.float64))
        self.vals32, self.cand = _screen(self.ut_all, self.us.to(torch.float32), self.extra, device)
        self.delta = (self.width + 2) * 2.0 ** -23

    def top(self, start: int, stop: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        ut, us, extra = self.ut_all[start:stop], self.us, self.extra
        idx, _ = torch.sort(self.cand[start:stop].to(self.device), dim=1)  # by id: the stable sort orders ties by id
        # the candidates' cosines in float64, each summed in the same order (equal vectors give equal cosines, so
        # that their tie goes to the lower id; a batched matmul may round them differently by position)
        vals = (ut[:, None, :] * us[idx]).sum(dim=-1)
        order = torch.argsort(-vals, dim=1, stable=True)
        vals, idx = vals.gather(1, order)[:, :k], idx.gather(1, order)[:, :k]
        if extra < self.n_sources:
            floor = self.vals32[start:stop].to(self.device, torch.float64).min(dim=1).values + self.delta
            unsure = torch.nonzero(vals[:, -1] <= floor).flatten()
            if len(unsure):  # the float64 search over every candidate for these rows
                full = ut[unsure] @ us.T
                v2, i2 = torch.topk(full, extra, dim=1)
                o2 = torch.argsort(i2, dim=1)
                v2, i2 = v2.gather(1, o2), i2.gather(1, o2)
                o2 = torch.argsort(-v2, dim=1, stable=True)
                vals[unsure], idx[unsure] = v2.gather(1, o2)[:, :k], i2.gather(1, o2)[:, :k]
        return vals, idx


# -- weightings --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TopKSoftmax:
    """``softmax(score / temperature)`` over the ``k`` best candidates (OFA, WECHSEL)."""

    k: int
    temperature: float

    def weights(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores / self.temperature, dim=1)


@dataclass(frozen=True)
class SparsemaxTopK:
    """Sparsemax over all candidates' scores (FOCUS), found from the ``k`` largest (:mod:`methods.sparsemax`)."""

    k: int = 256

    def dense(self, scores: torch.Tensor) -> torch.Tensor:
        return sparsemax_topk(scores, k=self.k)


def rank_weights(n: int, first: float = 0.3, second: float = 0.1, share: float = 0.6,
                 single: float = 1.0) -> list[float]:
    """Tik-to-Tok's weights for ``n`` ranked candidates: ``first`` / ``second`` extra to the two best, ``share``
    spread evenly over all; ``single`` for one candidate (the formula's 0.9 is undefined by the seed)."""
    if n < 1:
        return []
    if n == 1:
        return [float(single)]
    w = [share / n] * n
    w[0] += first
    w[1] += second
    return w


@dataclass(frozen=True)
class RankWeights:
    """Weights by rank, whatever the scores (Tik-to-Tok): :func:`rank_weights`."""

    first: float = 0.3
    second: float = 0.1
    share: float = 0.6
    single: float = 1.0

    def for_count(self, n: int) -> list[float]:
        return rank_weights(n, self.first, self.second, self.share, self.single)


# -- the combination ---------------------------------------------------------------------------------------------
@dataclass
class Combination:
    """The combined rows of the target tokens and what they were made of: ``neighbours`` / ``weights`` ``(n, k)``
    for a top-k weighting; ``supports`` / ``support_weights`` (one array per row, the candidates with a non-zero
    weight in candidate order) for a dense one."""

    rows: torch.Tensor
    neighbours: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    supports: list[np.ndarray] = field(default_factory=list)
    support_weights: list[np.ndarray] = field(default_factory=list)


def weighted_average(targets: torch.Tensor, sources: torch.Tensor, rows: torch.Tensor, *, similarity: Any,
                     weighting: Any, block_size: int = 1024, device: str = "cpu",
                     progress: Callable[[int], None] | None = None) -> Combination:
    """For each row of ``targets`` (vectors in the auxiliary space): the candidates' scores by ``similarity``
    against ``sources`` (one vector per row of ``rows``), their weights by ``weighting``, the weighted sum of
    ``rows``; ``block_size`` target rows at a time, on ``device``, in the similarity's dtype. ``rows`` of the result
    are in ``rows.dtype``, on the CPU."""
    n, d = targets.shape[0], rows.shape[1]
    out = torch.empty((n, d), dtype=rows.dtype)
    dense = hasattr(weighting, "dense")
    k = 0 if dense else min(int(weighting.k), sources.shape[0])
    if n == 0:
        return Combination(out, None if dense else torch.empty((0, k), dtype=torch.long),
                           None if dense else torch.empty((0, k), dtype=similarity.dtype))
    if isinstance(similarity, ScreenedCosine):
        similarity.prepare(targets, sources, device, k=k)
    else:
        similarity.prepare(targets, sources, device)
    fs = rows.to(device, similarity.dtype)
    result = Combination(out)
    if not dense:
        result.neighbours = torch.empty((n, k), dtype=torch.long)
        result.weights = torch.empty((n, k), dtype=similarity.dtype)
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        if dense:
            w = weighting.dense(similarity.scores(start, stop))
            out[start:stop] = (w @ fs).to("cpu", rows.dtype)
            w_cpu = w.cpu()
            r_idx, c_idx = torch.nonzero(w_cpu > 0, as_tuple=True)  # row-major: each row's support in order
            cuts = np.cumsum(torch.bincount(r_idx, minlength=stop - start).numpy())[:-1]
            result.supports.extend(np.split(c_idx.numpy(), cuts))
            result.support_weights.extend(np.split(w_cpu[r_idx, c_idx].numpy(), cuts))
        else:
            vals, idx = similarity.top(start, stop, k)
            w = weighting.weights(vals)
            out[start:stop] = torch.einsum("bk,bkd->bd", w, fs[idx]).to("cpu", rows.dtype)
            result.neighbours[start:stop] = idx.cpu()
            result.weights[start:stop] = w.cpu()
        if progress is not None:
            progress(stop - start)
    return result


def place(matrix: torch.Tensor, provenance: np.ndarray, ids: np.ndarray, rows: torch.Tensor) -> None:
    """Write the combined ``rows`` of target ``ids`` over their fallback rows and mark them METHOD."""
    if len(ids):
        matrix[torch.from_numpy(ids)] = rows
        provenance[ids] = Provenance.METHOD
