"""HyperOFA's training data and loss (see :mod:`methods.hypernetwork` for the whole recipe): the matched word sets
of every token (:class:`WordSets`), the cut of long sets, the train / validation / test split, the per-epoch
augmentation, the length-grouped batches, padding, and the loss in its three forms."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

LOSS_FORMS = ("code", "paper-000", "report-001")


# -- data ---------------------------------------------------------------------------------------------------
@dataclass
class WordSets:
    """Matched word sets per token in CSR form: the words of token ``i`` are ``words[indptr[i]:indptr[i+1]]``
    (indices into the word-vector file, ascending)."""

    indptr: np.ndarray  # (n_tokens + 1,) int64
    words: np.ndarray  # (nnz,) int64

    @property
    def n_tokens(self) -> int:
        return len(self.indptr) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.indptr)

    def get(self, i: int) -> np.ndarray:
        return self.words[self.indptr[i]:self.indptr[i + 1]]

    @classmethod
    def from_edges(cls, token_ids: np.ndarray, word_ids: np.ndarray, n_tokens: int, n_words: int) -> WordSets:
        """Deduplicate (token, word) edges (a word reached through several surface variants counts once, as the
        reference's ``list(set(...))``) and group them by token."""
        if len(token_ids) == 0:
            return cls(indptr=np.zeros(n_tokens + 1, dtype=np.int64), words=np.zeros(0, dtype=np.int64))
        code = np.unique(np.asarray(token_ids, np.int64) * np.int64(n_words) + np.asarray(word_ids, np.int64))
        tok, wrd = np.divmod(code, np.int64(n_words))
        indptr = np.zeros(n_tokens + 1, dtype=np.int64)
        np.add.at(indptr, tok + 1, 1)
        return cls(indptr=np.cumsum(indptr), words=wrd.astype(np.int64))


TRUNCATIONS = ("random", "first")


def truncate_set(words: np.ndarray, max_set: int, how: str, seed: int, token_id: int) -> np.ndarray:
    """At most ``max_set`` words of one set. ``random``: a random subset drawn from a generator seeded by
    (seed, token id), so a token's subset depends on nothing else; ``first``: the first ``max_set`` in word-file
    order. The kept words stay in ascending (file) order."""
    if len(words) <= max_set:
        return words
    if how == "first":
        return words[:max_set]
    if how != "random":
        raise ValueError(f"truncate must be one of {TRUNCATIONS}, not {how!r}")
    rng = np.random.default_rng([int(seed), 0x7E7, int(token_id)])
    return np.sort(words[rng.choice(len(words), size=max_set, replace=False)])


def split_pairs(n: int, ratios: Sequence[float], min_eval: int, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded train / validation / test split of ``n`` pairs (reference code: 97 / 2.5 / 0.5 %). Validation and
    test each get at least ``min(min_eval, n // 10)`` pairs, so that a small vocabulary still has a usable
    validation set."""
    if len(ratios) != 3 or min(ratios) < 0 or not math.isclose(sum(ratios), 1.0, abs_tol=1e-6):
        raise ValueError(f"split must be three non-negative ratios summing to 1, not {list(ratios)}")
    floor = min(int(min_eval), n // 10)
    n_val = max(int(round(ratios[1] * n)), floor)
    n_test = max(int(round(ratios[2] * n)), floor)
    if n - n_val - n_test < 2:
        raise ValueError(f"{n} pairs are too few to split into train/validation/test ({n_val} + {n_test} held out)")
    perm = rng.permutation(n)
    return np.sort(perm[n_val + n_test:]), np.sort(perm[:n_val]), np.sort(perm[n_val:n_val + n_test])


def augment_set(words: np.ndarray, rng: np.random.Generator, *, shuffle: bool, prob: float, min_fraction: float,
                min_set: int) -> np.ndarray:
    """One epoch's view of a training set: shuffled; with probability ``prob`` (when it has more than ``min_set``
    vectors) cut to a random fraction in [min_fraction, 1) of its vectors, never fewer than one."""
    out = words[rng.permutation(len(words))] if shuffle else words
    if prob > 0 and rng.random() < prob and len(out) > min_set:
        frac = rng.uniform(min_fraction, 1.0)
        keep = max(1, int(len(out) * frac))
        if not shuffle:  # a random subset even when the order is kept
            out = np.sort(rng.choice(out, size=keep, replace=False))
        else:
            out = out[:keep]
    return out


def bucket_batches(lengths: np.ndarray, batch_size: int, group_factor: int, rng: np.random.Generator,
                   drop_last: bool) -> list[np.ndarray]:
    """Length-grouped batches (seed 001 §4; reference sampler): a random permutation, cut into groups of
    ``group_factor * batch_size``, each sorted by length, cut into batches; the batch order is then shuffled. The
    last partial batch is dropped if ``drop_last`` and there is at least one full batch."""
    n = len(lengths)
    perm = rng.permutation(n)
    group = max(1, group_factor) * batch_size
    ordered = np.concatenate([perm[s:s + group][np.argsort(lengths[perm[s:s + group]], kind="stable")]
                              for s in range(0, n, group)]) if n else perm
    batches = [ordered[s:s + batch_size] for s in range(0, n, batch_size)]
    if drop_last and len(batches) > 1 and len(batches[-1]) < batch_size:
        batches.pop()
    return [batches[i] for i in rng.permutation(len(batches))]


def pad_batch(sets: Sequence[np.ndarray], pad_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices (B, L_max) padded with pad_index, lengths (B,))``."""
    lengths = np.fromiter((len(s) for s in sets), dtype=np.int64, count=len(sets))
    if (lengths < 1).any():
        raise ValueError("every word set needs at least one vector")
    idx = np.full((len(sets), int(lengths.max())), pad_index, dtype=np.int64)
    for row, s in enumerate(sets):
        idx[row, :len(s)] = s
    return torch.from_numpy(idx), torch.from_numpy(lengths)


# -- loss ---------------------------------------------------------------------------------------------------
def hyperofa_loss(pred: torch.Tensor, target: torch.Tensor, *, lam: float, temperature: float, form: str = "code"
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, contrastive, l1)`` in float32; see :mod:`methods.hypernetwork` for the three forms."""
    if form not in LOSS_FORMS:
        raise ValueError(f"loss_form must be one of {LOSS_FORMS}, not {form!r}")
    pred, target = pred.float(), target.float()
    p, t = F.normalize(pred, dim=1), F.normalize(target, dim=1)
    if form == "report-001":
        pos = (p * t).sum(dim=1) / temperature
        contrastive = -(pos - torch.logsumexp(pos, dim=0)).mean()
    else:
        logits = p @ t.T / temperature  # rows: predictions, columns: ground-truth targets (as the code)
        contrastive = F.cross_entropy(logits, torch.arange(len(pred), device=pred.device))
    l1 = (pred - target).abs().mean()
    if form != "paper-000":
        l1 = l1 / target.abs().mean().clamp_min(torch.finfo(torch.float32).tiny)
    return lam * contrastive + (1.0 - lam) * l1, contrastive, l1
