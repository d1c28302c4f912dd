"""Subwords in word-vector space: the bipartite graph between a tokenizer's subwords and the words of
multilingual word vectors, and each subword's mean word vector (OFA step 2; HyperOFA's matching uses the same
graph). Matching is tokenization-based: every word is tokenized in the reference code's surface variants (``w``,
``" " + w`` and one capitalized variant) and each subword of a variant's tokenization gets an edge to the word.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.cache import cached_arrays
from harness.core.hashing import hash_obj
from methods.shared import tokenizer_fingerprint
from methods.wordvectors import WordVectors, split_key, surface

SUBWORD_VERSION = 1  # bump when the subword-vector construction changes (cached products are then rebuilt)


def word_variants(key: str) -> tuple[str, list[str]]:
    """``(language, [surface variants])`` of one word-vector key, as the reference code tokenizes it."""
    lang, word_ori = split_key(key)
    word = surface(word_ori)
    variants = [word, " " + word]
    if word_ori.startswith("$"):
        if len(word) > 1:  # word[0] is the space that "$" became
            variants.append(word[1].upper() + word[2:])
    elif word:
        variants.append(" " + word[0].upper() + word[1:])
    return lang, variants


def _variant_batches(keys: list[str], languages: set[str] | None, batch: int,
                     progress: Callable[[int], None] | None) -> Iterator[tuple[list[str], list[int]]]:
    """``(texts, owners)`` batches of the surface variants of ``keys`` (owner = the key's index); ``progress`` gets
    the number of keys done after each batch."""
    texts: list[str] = []
    owners: list[int] = []
    reported = 0
    for i, key in enumerate(keys):
        lang, variants = word_variants(key)
        if languages is not None and lang not in languages:
            continue
        texts.extend(variants)
        owners.extend([i] * len(variants))
        if len(texts) >= batch:
            yield texts, owners
            texts, owners = [], []
            if progress is not None:
                progress(i + 1 - reported)
                reported = i + 1
    if texts:
        yield texts, owners
    if progress is not None and len(keys) > reported:
        progress(len(keys) - reported)


def subword_word_edges(tokenizer: Any, keys: list[str], *, languages: set[str] | None = None,
                       batch: int = 20_000, progress: Callable[[int], None] | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The bipartite graph as two parallel arrays ``(subword_ids, word_indices)``, one entry per
    (variant, subword) pair: a word appears once per variant whose tokenization contains the subword.
    Tokenizers with a ``tokenizers`` backend take :func:`_backend_edges` (the same edges in the same order, a
    test checks it; several times faster on 100k+ words)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch_fast"):
        return _backend_edges(backend, keys, languages=languages, progress=progress)
    sub: list[np.ndarray] = []
    wrd: list[np.ndarray] = []
    for texts, owners in _variant_batches(keys, languages, batch, progress):
        enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
        for owner, ids in zip(owners, enc, strict=True):
            uniq = np.unique(np.asarray(ids, dtype=np.int64))
            sub.append(uniq)
            wrd.append(np.full(len(uniq), owner, dtype=np.int64))
    if not sub:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(sub), np.concatenate(wrd)


def _backend_edges(backend: Any, keys: list[str], *, languages: set[str] | None, batch: int = 50_000,
                   progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`subword_word_edges` through the backend's ``encode_batch_fast`` (no offsets) and without a per-variant
    loop: the (variant, subword) pairs of a batch are made unique with one ``np.unique`` over a combined key, which
    also sorts them by variant, then by subword id, as the per-variant loop does."""
    subs: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    for texts, own in _variant_batches(keys, languages, batch, progress):
        ids = [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
        lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lens.sum()))
        if len(flat):
            width = int(flat.max()) + 1
            pairs = np.unique(np.repeat(np.arange(len(ids), dtype=np.int64), lens) * width + flat)
            subs.append(pairs % width)
            owners.append(np.asarray(own, dtype=np.int64)[pairs // width])
    if not subs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(subs), np.concatenate(owners)


def subword_vectors(tokenizer: Any, wv: WordVectors, *, languages: set[str] | None = None,
                    progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(U, n_edges)``: U (len(tokenizer), dim) float32, the mean word vector over each subword's edges
    (computed in float64); ``n_edges`` per subword (0 means "no matched word", U row 0)."""
    import scipy.sparse as sp

    n = len(tokenizer)
    s_ids, w_ids = subword_word_edges(tokenizer, wv.keys, languages=languages, progress=progress)
    if len(s_ids) and int(s_ids.max()) >= n:
        raise ValueError("the tokenizer produced ids beyond its own length")
    graph = sp.csr_matrix((np.ones(len(s_ids), dtype=np.float64), (s_ids, w_ids)), shape=(n, len(wv.keys)))
    counts = np.asarray(graph.sum(axis=1)).ravel()
    sums = graph @ np.asarray(wv.vectors, dtype=np.float64)
    u = np.zeros((n, wv.dim), dtype=np.float64)
    has = counts > 0
    u[has] = sums[has] / counts[has, None]
    return u.astype(np.float32), counts.astype(np.int64)


def cached_subword_vectors(tokenizer: Any, wv: WordVectors, wv_ident: str, *, languages: set[str] | None,
                           cache_dir: Path | None, progress: Callable[[int], None] | None = None
                           ) -> tuple[np.ndarray, np.ndarray]:
    if cache_dir is None:
        return subword_vectors(tokenizer, wv, languages=languages, progress=progress)
    key = hash_obj({"v": SUBWORD_VERSION, "tok": tokenizer_fingerprint(tokenizer), "wv": wv_ident,
                    "langs": sorted(languages) if languages is not None else None})
    def compute() -> dict[str, np.ndarray]:
        u, counts = subword_vectors(tokenizer, wv, languages=languages, progress=progress)
        return {"u": u, "counts": counts}

    z = cached_arrays(Path(cache_dir) / f"subwords-{key}.npz", compute,
                      waiting="subword vectors: built by another process")
    return z["u"], z["counts"]
