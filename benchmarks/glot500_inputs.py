"""The synthetic inputs of ``bench_glot500_init.py``, at Glot500 scale (or a stated fraction of it): a stand-in
source and target tokenizer of Glot500-m's sizes, multilingual word vectors of ColexNet+'s size with log-normal word
sets, and source rows with planted structure. The large Gaussian arrays are drawn in row chunks, each from its own
stream, on as many threads as asked: the same values on any number of threads."""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_hypernetwork import set_lengths  # noqa: E402

from methods.base import TokenMapping  # noqa: E402
from methods.hypernetwork_data import WordSets
from methods.wordvectors import WordVectors  # noqa: E402

GLOT500 = {"target": 401_145, "source": 250_002, "words": 3_600_000}
WISE_AT_SCALE_1 = 84_000  # non-copied target tokens with a matched word (OFA, XLM-R -> Glot500-m)
SOURCE_MATCHED = 0.425  # source tokens (and copied target tokens) with a matched word
WORD_DIM = 200  # ColexNet+
ROW_STD = 0.05
N_LANGUAGES = 1_335  # the languages of ColexNet+


# -- synthetic inputs ------------------------------------------------------------------------------------
class _Encoding:
    """One text's encoding; ``ids`` builds the list when asked, as a ``tokenizers`` ``Encoding`` does."""

    __slots__ = ("flat", "lo", "hi")

    def __init__(self, flat: list[int], lo: int, hi: int):
        self.flat, self.lo, self.hi = flat, lo, hi

    @property
    def ids(self) -> list[int]:
        return self.flat[self.lo:self.hi]


class StandInBackend:
    """What :func:`methods.subwords.subword_word_edges` uses of a ``tokenizers`` backend: ``encode_batch_fast``
    returns each text's precomputed token ids. The texts are the words' surface variants in word order (three per
    word), so a cursor finds them; the first text of each batch is checked against the word it should be."""

    def __init__(self, indptr: np.ndarray, flat: np.ndarray, keys: list[str], name: str):
        self.indptr, self.flat, self.keys, self.name = indptr, flat, keys, name
        self.cursor = 0
        self.seconds = 0.0

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = False) -> list[_Encoding]:
        t0 = time.perf_counter()
        lo, n, total = self.cursor, len(texts), len(self.indptr) - 1
        if lo % 3 or lo + n > total or texts[0] != self.keys[lo // 3][4:]:
            raise RuntimeError(f"stand-in tokenizer {self.name}: texts out of step with the words at {lo}")
        cuts = self.indptr[lo:lo + n + 1]
        ids = self.flat[cuts[0]:cuts[-1]].tolist()
        offs = (cuts - cuts[0]).tolist()
        out = list(map(_Encoding, [ids] * n, offs[:-1], offs[1:]))
        self.cursor = (lo + n) % total
        self.seconds += time.perf_counter() - t0
        return out

    def take(self) -> float:
        """Seconds spent in :meth:`encode_batch_fast` since the last call."""
        spent, self.seconds = self.seconds, 0.0
        return spent

    def to_str(self) -> str:
        return json.dumps({"stand-in": self.name, "tokens": int(self.flat.max(initial=0)) + 1})


class StandInTokenizer:
    def __init__(self, n_tokens: int, backend: StandInBackend):
        self.n_tokens, self.backend_tokenizer = n_tokens, backend
        self.name_or_path = f"stand-in:{backend.name}"

    def __len__(self) -> int:
        return self.n_tokens


@dataclass
class Synthetic:
    scale: float
    wv: WordVectors
    source_matrix: torch.Tensor
    source_sets: WordSets
    source_means: np.ndarray  # unit mean word vector of each matched source token (for planted targets)
    source_tok: StandInTokenizer
    target_tok: StandInTokenizer
    mapping: TokenMapping
    info: dict[str, Any]


GENERATION_THREADS = [os.cpu_count() or 1]  # the threads that draw the large Gaussian arrays (main sets --threads)
_CHUNKS = 64  # the arrays are drawn in this many row chunks, each from its own stream: the same values on any
# number of threads


def normal(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """A float32 standard-normal array of ``shape``, drawn on :data:`GENERATION_THREADS` threads (numpy's
    generators release the GIL while they fill an array), seeded from ``rng``: the values do not depend on the
    number of threads."""
    from concurrent.futures import ThreadPoolExecutor

    seed = int(rng.integers(2**63))
    out = np.empty(shape, dtype=np.float32)
    bounds = np.linspace(0, shape[0], _CHUNKS + 1).astype(int)

    def fill(k: int) -> None:
        lo, hi = bounds[k], bounds[k + 1]
        if hi > lo:
            np.random.default_rng([seed, k]).standard_normal((hi - lo, shape[1]), dtype=np.float32, out=out[lo:hi])

    with ThreadPoolExecutor(max(1, GENERATION_THREADS[0])) as pool:
        list(pool.map(fill, range(_CHUNKS)))
    return out


def make_keys(n: int, rng: np.random.Generator) -> list[str]:
    """``iso3:word`` keys: a language of ``N_LANGUAGES`` three-letter codes, a word of 2-12 lowercase letters."""
    codes = rng.integers(97, 123, size=(N_LANGUAGES, 3), dtype=np.uint8).tobytes().decode("ascii")
    langs = rng.integers(0, N_LANGUAGES, size=n).tolist()
    lens = rng.integers(2, 13, size=n).tolist()
    buf = rng.integers(97, 123, size=n * 12, dtype=np.uint8).tobytes().decode("ascii")
    pairs = enumerate(zip(langs, lens, strict=True))
    return [f"{codes[3 * g:3 * g + 3]}:{buf[12 * i:12 * i + k]}" for i, (g, k) in pairs]


def matching(matched: np.ndarray, n_words: int, median: float, sigma: float, rng: np.random.Generator
             ) -> tuple[WordSets, np.ndarray, np.ndarray]:
    """The token -> words matching of one vocabulary (``matched``: a bool per token): ``(WordSets, texts' indptr,
    texts' token ids)``, the texts being the three surface variants of every word in word order."""
    n_tokens = len(matched)
    toks = np.flatnonzero(matched)
    counts = set_lengths(len(toks), median, sigma, n_words, rng)
    ws = WordSets.from_edges(np.repeat(toks, counts), rng.integers(0, n_words, size=int(counts.sum())), n_tokens,
                             n_words)
    tok_e = np.repeat(np.arange(n_tokens, dtype=np.int32), ws.lengths)
    masks = rng.integers(1, 8, size=len(tok_e), dtype=np.int8)  # a non-empty subset of the three variants
    text, ids = [], []
    for v in range(3):
        sel = ((masks >> v) & 1).astype(bool)
        text.append(ws.words[sel] * 3 + v)
        ids.append(tok_e[sel])
    text_a = np.concatenate(text)
    order = np.argsort(text_a, kind="stable")
    flat = np.concatenate(ids)[order]
    indptr = np.zeros(3 * n_words + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.bincount(text_a, minlength=3 * n_words))
    return ws, indptr, flat


def planted_rows(means: np.ndarray, out_dim: int, rng: np.random.Generator, noise: float = 0.5,
                 chunk: int = 32_768) -> np.ndarray:
    """``tanh(3 m A1) A2`` of unit mean word vectors ``m`` (random A1, A2), standardized, plus Gaussian noise,
    at std ``ROW_STD``."""
    a1 = rng.standard_normal((means.shape[1], 2 * out_dim), dtype=np.float32) / math.sqrt(means.shape[1])
    a2 = rng.standard_normal((2 * out_dim, out_dim), dtype=np.float32) / math.sqrt(2 * out_dim)
    out = np.empty((len(means), out_dim), dtype=np.float32)
    for s in range(0, len(means), chunk):
        out[s:s + chunk] = np.tanh(3 * means[s:s + chunk] @ a1) @ a2
    out /= max(float(out.std()), 1e-12)
    out += noise * normal(rng, out.shape)
    return out * (ROW_STD / math.sqrt(1 + noise ** 2))


def _pick(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[rng.choice(n, size=min(k, n), replace=False)] = True
    return mask


def generate(scale: float, dim: int, *, seed: int, median: float, sigma: float, copy_fraction: float) -> Synthetic:
    import scipy.sparse as sp

    rng = np.random.default_rng([seed, 0x61075])
    n_t, n_s, n_w = (max(int(round(GLOT500[k] * scale)), 16) for k in ("target", "source", "words"))
    keys = make_keys(n_w, rng)
    vectors = normal(rng, (n_w, WORD_DIM))
    wv = WordVectors(keys=keys, vectors=vectors)

    n_copy = min(int(round(copy_fraction * n_t)), n_s)
    copied = _pick(n_t, n_copy, rng)
    copy_t = np.flatnonzero(copied)
    copy_s = np.sort(rng.choice(n_s, size=n_copy, replace=False))
    mapping = TokenMapping(rule="ofa", source_size=n_s, target_size=n_t,
                           copy=dict(zip(copy_t.tolist(), rng.permutation(copy_s).tolist(), strict=True)),
                           stats={"copied": n_copy, "synthetic": True})
    n_wise = min(int(round(WISE_AT_SCALE_1 * scale)), n_t - n_copy)
    t_matched = np.zeros(n_t, dtype=bool)
    t_matched[np.flatnonzero(~copied)[_pick(n_t - n_copy, n_wise, rng)]] = True
    t_matched[copy_t[_pick(n_copy, int(round(SOURCE_MATCHED * n_copy)), rng)]] = True
    s_matched = _pick(n_s, int(round(SOURCE_MATCHED * n_s)), rng)

    ws_s, ip_s, flat_s = matching(s_matched, n_w, median, sigma, rng)
    ws_t, ip_t, flat_t = matching(t_matched, n_w, median, sigma, rng)

    lengths = ws_s.lengths.astype(np.float32)
    weights = np.repeat(1.0 / np.maximum(lengths, 1), ws_s.lengths).astype(np.float32)
    means = sp.csr_matrix((weights, ws_s.words, ws_s.indptr), shape=(n_s, n_w)) @ vectors
    means = np.asarray(means[s_matched], dtype=np.float32)
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    src = normal(rng, (n_s, dim)) * ROW_STD
    src[s_matched] = planted_rows(means, dim, rng)

    m = ws_s.lengths[s_matched]
    info = {"target_tokens": n_t, "source_tokens": n_s, "words": n_w, "word_dim": WORD_DIM, "dim": dim,
            "copied": n_copy, "wise": int(n_wise), "source_matched": int(s_matched.sum()),
            "target_matched": int(t_matched.sum()), "median_words": median, "sigma_words": sigma,
            "source_pairs": int(len(ws_s.words)), "target_pairs": int(len(ws_t.words)),
            "variant_ids": int(len(flat_s) + len(flat_t)),
            "words_per_matched_source_token": {"mean": round(float(m.mean()), 1),
                                               **{f"p{q}": round(float(np.percentile(m, q)), 1) for q in (50, 90, 99)},
                                               "max": int(m.max())}}
    return Synthetic(scale=scale, wv=wv, source_matrix=torch.from_numpy(src), source_sets=ws_s,
                     source_means=means, source_tok=StandInTokenizer(n_s, StandInBackend(ip_s, flat_s, keys, "source")),
                     target_tok=StandInTokenizer(n_t, StandInBackend(ip_t, flat_t, keys, "target")),
                     mapping=mapping, info=info)
