"""Metric helpers shared by the tasks: exact top-k retrieval and seqeval scoring through ``evaluate``.

All scores are fractions in [0, 1] (the papers print them ×100).

Retrieval: :func:`search_topk` returns the ``k`` nearest candidates of every query by inner product (cosine on
unit vectors), with a blocked torch matmul + ``topk`` (the faster exact search on CPU, see the stack notes) or faiss
``IndexFlatIP``; :func:`topk_accuracy` turns the neighbours into ``acc@k``.

Tagging: :func:`seqeval_scores` runs the seqeval metric module kept in this package
(``tasks/metrics/seqeval_metric``) through ``evaluate.load`` on its local path, which works offline;
:func:`tagging_scores` gives the same overall numbers bit for bit from one pass of seqeval's chunker (what the
tasks use).
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

SEQEVAL_METRIC_DIR = Path(__file__).resolve().parent / "seqeval_metric"
SEARCH_BACKENDS = ("torch", "faiss", "auto")


# -- retrieval ----------------------------------------------------------------------------------------------
def l2_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Rows scaled to unit length (zero rows stay zero), in float32."""
    x = x.float()
    return x / x.norm(dim=1, keepdim=True).clamp_min(eps)


def search_topk(queries: torch.Tensor, candidates: torch.Tensor, k: int, *, backend: str = "auto",
                block: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` candidates with the largest inner product for every query: ``(scores, indices)``, best first.

    ``k`` is capped at the number of candidates. The torch backend scores ``block`` queries at a time so the
    full score matrix is never held; ``auto`` picks torch (faster than faiss-cpu here and exact on every device).
    """
    if backend not in SEARCH_BACKENDS:
        raise ValueError(f"unknown search backend {backend!r}; choose from {', '.join(SEARCH_BACKENDS)}")
    if queries.ndim != 2 or candidates.ndim != 2 or queries.shape[1] != candidates.shape[1]:
        raise ValueError(f"queries {tuple(queries.shape)} and candidates {tuple(candidates.shape)} do not match")
    k = min(k, candidates.shape[0])
    if k <= 0 or queries.shape[0] == 0:
        empty = torch.empty((queries.shape[0], max(k, 0)))
        return empty, empty.long()
    if backend == "faiss":
        return _faiss_topk(queries, candidates, k)
    cand = candidates.float()
    scores_out, idx_out = [], []
    for start in range(0, queries.shape[0], block):
        s = queries[start:start + block].float().to(cand.device) @ cand.T
        v, i = torch.topk(s, k, dim=1)
        scores_out.append(v.cpu())
        idx_out.append(i.cpu())
    return torch.cat(scores_out), torch.cat(idx_out)


def _faiss_topk(queries: torch.Tensor, candidates: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        import faiss
    except ImportError as exc:  # faiss-cpu is a dependency, but a GPU install may have removed it
        from harness.core.errors import MissingResourceError

        raise MissingResourceError(
            "search backend 'faiss' needs the faiss module: `pip install faiss-cpu` (or faiss-gpu), "
            "or use the torch backend"
        ) from exc
    c = candidates.detach().float().cpu().contiguous().numpy()
    q = queries.detach().float().cpu().contiguous().numpy()
    index = faiss.IndexFlatIP(c.shape[1])
    index.add(c)
    scores, idx = index.search(q, k)
    return torch.from_numpy(scores), torch.from_numpy(idx).long()


def topk_accuracy(neighbours: torch.Tensor, gold: torch.Tensor, ks: tuple[int, ...] = (1, 10)) -> dict[str, float]:
    """``acc@k`` for every k: the fraction of queries whose gold candidate is among their first k neighbours.

    ``neighbours`` is (n_queries, >= max k or all candidates), best first; ``gold`` the gold candidate per query.
    """
    if neighbours.shape[0] != gold.shape[0]:
        raise ValueError(f"{neighbours.shape[0]} queries but {gold.shape[0]} gold indices")
    if neighbours.shape[0] == 0:
        raise ValueError("topk_accuracy: no queries")
    return {m: float(h.float().mean()) for m, h in topk_hits(neighbours, gold, ks).items()}


def topk_hits(neighbours: torch.Tensor, gold: torch.Tensor, ks: tuple[int, ...] = (1, 10)) -> dict[str, torch.Tensor]:
    """Per query, whether its gold candidate is among its first k neighbours (``acc@k`` = the mean)."""
    hits = neighbours == gold.reshape(-1, 1).to(neighbours.device)
    return {f"acc@{k}": hits[:, :k].any(dim=1).cpu() for k in ks}


# -- tagging ------------------------------------------------------------------------------------------------
_LOAD_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _load_seqeval_cached() -> Any:
    import evaluate

    return evaluate.load(str(SEQEVAL_METRIC_DIR), keep_in_memory=True)


def load_seqeval() -> Any:
    """The seqeval ``evaluate`` module from this repository (loads offline; ``import evaluate`` costs seconds)."""
    with _LOAD_LOCK:
        return _load_seqeval_cached()


def seqeval_scores(predictions: list[list[str]], references: list[list[str]]) -> dict[str, Any]:
    """seqeval in the reference (non-strict) mode: ``overall_{precision,recall,f1,accuracy}`` + ``per_type``."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predicted sentences but {len(references)} gold sentences")
    if not references:
        raise ValueError("seqeval_scores: no sentences")
    return load_seqeval().compute(predictions=predictions, references=references)


def ner_scores(predictions: list[list[str]], references: list[list[str]]) -> dict[str, float]:
    """NER metrics: entity-level seqeval ``f1`` (headline), ``precision``, ``recall`` (:func:`tagging_scores`)."""
    return {m: v for m, v in tagging_scores(predictions, references)[0].items() if m != "acc"}


def pos_scores(predictions: list[list[str]], references: list[list[str]]) -> dict[str, float]:
    """POS metrics: ``f1`` = seqeval F1 on the bare UPOS tags (the papers' number, adjacent equal tags merge into
    one chunk) and ``acc`` = token accuracy (a different metric, under its own name)."""
    r = tagging_scores(predictions, references)[0]
    return {"f1": r["f1"], "acc": r["acc"]}


def _divide(num: float, den: float) -> float:
    return num / den if den else 0.0  # seqeval's zero_division="warn" gives 0.0


def tagging_scores(predictions: list[list[str]],
                   references: list[list[str]]) -> tuple[dict[str, float], dict[str, dict[str, list]]]:
    """seqeval's corpus-level numbers in its default (non-strict) mode, and the per-sentence statistics of
    :func:`tagging_item_stats`, from one pass of seqeval's own chunker over the sentences.

    The same numbers as :func:`seqeval_scores` bit for bit (``tests/test_metrics.py`` checks it on random
    tag sequences, valid and not, NER and bare POS tags): seqeval chunks the sentences joined by ``O``, so its
    chunks are the sentences' chunks; it counts true positives, predicted and gold chunks, then takes
    precision = TP / predicted, recall = TP / gold, f1 = 2 · precision · recall / (precision + recall), 0 for an
    empty denominator, and accuracy = equal tags / tags -- the same float operations here. What is saved is the
    ``evaluate`` module's dataset round trip and seqeval's four passes (a tenth of the time)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predicted sentences but {len(references)} gold sentences")
    if not references:
        raise ValueError("tagging_scores: no sentences")
    items = tagging_item_stats(predictions, references)
    tp = int(sum(items["precision"]["num"]))
    n_pred = int(sum(items["precision"]["den"]))
    n_true = int(sum(items["recall"]["den"]))
    precision, recall = _divide(tp, n_pred), _divide(tp, n_true)
    denom = precision + recall
    f1 = 2.0 * precision * recall / denom if denom != 0.0 else 0.0
    acc = _divide(int(sum(items["acc"]["num"])), int(sum(items["acc"]["den"])))
    return {"f1": f1, "precision": precision, "recall": recall, "acc": acc}, items


def token_accuracy(predictions: list[list[str]], references: list[list[str]]) -> float:
    """Plain token accuracy (no evaluate import), for quick checks and tests."""
    n = ok = 0
    for p, r in zip(predictions, references, strict=True):
        if len(p) != len(r):
            raise ValueError("token_accuracy: sentences of different lengths")
        n += len(r)
        ok += sum(a == b for a, b in zip(p, r, strict=True))
    if n == 0:
        raise ValueError("token_accuracy: no tokens")
    return ok / n


def tagging_item_stats(predictions: list[list[str]], references: list[list[str]]) -> dict[str, dict[str, list]]:
    """Per-sentence sufficient statistics (``tasks.base.ItemStats`` fields) of the tagging metrics, so that a
    bootstrap over sentences recomputes seqeval's corpus-level numbers exactly: f1 = 2TP / (2TP + FP + FN),
    precision = TP / (TP + FP), recall = TP / (TP + FN) on seqeval's (non-strict) chunks, acc = correct / tokens."""
    import warnings

    from seqeval.metrics.sequence_labeling import get_entities

    out: dict[str, dict[str, list]] = {m: {"num": [], "den": []} for m in ("f1", "precision", "recall", "acc")}
    for p, r in zip(predictions, references, strict=True):
        if len(p) != len(r):
            raise ValueError(f"sentence {len(out['acc']['num'])}: {len(p)} predicted tags but {len(r)} gold tags")
        with warnings.catch_warnings():  # bare tags (POS) are chunked as seqeval chunks them, without its warning
            warnings.filterwarnings("ignore", message=".*seems not to be NE tag.*")
            pe, re_ = set(get_entities(list(p))), set(get_entities(list(r)))
        tp = len(pe & re_)
        fp, fn = len(pe) - tp, len(re_) - tp
        for m, num, den in (("f1", 2 * tp, 2 * tp + fp + fn), ("precision", tp, tp + fp),
                            ("recall", tp, tp + fn), ("acc", sum(a == b for a, b in zip(p, r, strict=True)),
                                                      len(r))):
            out[m]["num"].append(float(num))
            out[m]["den"].append(float(den))
    return out
