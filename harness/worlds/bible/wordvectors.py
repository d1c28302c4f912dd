"""Multilingual word vectors from verse-aligned text, in the spirit of ColexNet+ (keys ``iso3:word``).

Every word of every language is a row of a sparse word x verse occurrence matrix over the training verses (the
verse ids are shared by all translations, so translations of one word occur in the same verses). The matrix is
re-weighted by positive pointwise mutual information (with context-distribution smoothing, Levy et al. 2015) and
factorized by a truncated SVD; a word's vector is its row of ``U * sqrt(S)``, L2-normalized. Translations end up
as near neighbours (``eng:bread`` ~ ``deu:brot`` ~ ``swh:mkate``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import regex

log = logging.getLogger(__name__)

# A word is a run of letters and combining marks (with ZWNJ/ZWJ, which belong to words in Indic and Persian
# scripts); punctuation (apostrophes included), digits and symbols separate words. Chinese and Japanese are
# written without spaces: there, each Han ideograph is a word and hiragana and katakana runs are words of their own.
_RUN_RE = regex.compile(r"[\p{L}\p{M}\u200c\u200d]+")
_CJK_RE = regex.compile(r"\p{Han}|\p{Hiragana}+|[\p{Katakana}\u30fc]+|[^\p{Han}\p{Hiragana}\p{Katakana}\u30fc]+")
_HAS_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")


def words(text: str) -> list[str]:
    """Lower-cased words of ``text`` (see the rules above)."""
    out: list[str] = []
    for w in _RUN_RE.findall(text.lower()):
        if _HAS_CJK.search(w):
            out.extend(_CJK_RE.findall(w))
        else:
            out.append(w)
    return out


@dataclass
class UnitVectors:
    keys: list[str]
    vectors: np.ndarray  # float32 [n, dim], rows L2-normalized

    def index(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.keys)}

    def save_word2vec(self, path: Path, chunk: int = 8192) -> None:
        """word2vec text format: a ``count dim`` header, then ``key v1 v2 ...`` lines (4 decimals).

        Formatting is vectorized (values are written as fixed-point numbers built digit by digit with numpy), which
        is some 50 times faster than Python's float formatting for the ~10^7 values of a world's vectors.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(f"{len(self.keys)} {self.vectors.shape[1]}\n".encode())
            for k in range(0, len(self.keys), chunk):
                rows = _format_rows(self.vectors[k:k + chunk])
                f.write(b"".join(key.encode("utf-8") + row + b"\n"
                                 for key, row in zip(self.keys[k:k + chunk], rows, strict=True)))


def _format_rows(v: np.ndarray) -> list[bytes]:
    """Each row as b" x1 x2 ..." with 4 decimals (e.g. b" -0.0712 1.0000 0.5")."""
    q = np.round(np.asarray(v, dtype=np.float64) * 10000).astype(np.int64)
    neg = q < 0
    a = np.abs(q)
    ip, fp = a // 10000, a % 10000
    n, d = q.shape
    idig = max(1, len(str(int(ip.max())))) if ip.size else 1
    width = 1 + 1 + idig + 1 + 4  # space, sign, integer digits, point, 4 decimals
    buf = np.zeros((n, d, width), dtype=np.uint8)
    buf[:, :, 0] = ord(" ")
    buf[:, :, 1] = np.where(neg, ord("-"), 0)
    for j in range(idig):
        buf[:, :, 2 + j] = ord("0") + (ip // 10 ** (idig - 1 - j)) % 10
    buf[:, :, 2 + idig] = ord(".")
    for j in range(4):
        buf[:, :, 3 + idig + j] = ord("0") + (fp // 10 ** (3 - j)) % 10
    # drop leading zeros of the integer part (keep the last digit) and the sign byte of positive values
    keep = np.ones_like(buf, dtype=bool)
    keep[:, :, 1] = neg
    lead = np.ones((n, d), dtype=bool)
    for j in range(idig - 1):
        lead &= buf[:, :, 2 + j] == ord("0")
        keep[:, :, 2 + j] = ~lead
    kept = buf.reshape(n, -1)[keep.reshape(n, -1)].tobytes()
    ends = np.cumsum(keep.reshape(n, -1).sum(axis=1)).tolist()
    starts = [0] + ends[:-1]
    return [kept[a:b] for a, b in zip(starts, ends, strict=True)]


def load_word2vec(path: Path) -> UnitVectors:
    with open(path, encoding="utf-8") as f:
        n, dim = (int(x) for x in f.readline().split())
        keys: list[str] = []
        vecs = np.zeros((n, dim), dtype=np.float32)
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split(" ")
            keys.append(parts[0])
            vecs[i] = np.asarray(parts[1:], dtype=np.float32)
    return UnitVectors(keys, vecs[: len(keys)])


@dataclass
class VerseIndex:
    """Binary word x verse occurrence matrix of one language's verses (``counts``: verses per word)."""

    vocab: list[str]
    row: dict[str, int]
    matrix: Any  # scipy.sparse.csr_matrix [n_words, n_verses], float32 0/1
    counts: np.ndarray

    @classmethod
    def build(cls, texts: dict[str, str], verse_col: dict[str, int]) -> VerseIndex:
        """Index the verses ``texts`` (``{verse_id: text}``); ``verse_col`` gives each verse id its column."""
        import scipy.sparse as sp

        row: dict[str, int] = {}
        rs: list[int] = []
        cs: list[int] = []
        for vid in sorted(texts, key=lambda v: verse_col.get(v, -1)):
            j = verse_col.get(vid)
            if j is None:
                continue
            ws = sorted(set(words(texts[vid])))
            rs.extend(row.setdefault(w, len(row)) for w in ws)
            cs.extend([j] * len(ws))
        m = sp.csr_matrix((np.ones(len(rs), dtype=np.float32), (rs, cs)), shape=(len(row), len(verse_col)))
        m.sum_duplicates()
        vocab = [""] * len(row)
        for w, i in row.items():
            vocab[i] = w
        return cls(vocab, row, m, np.asarray(m.sum(axis=1)).ravel())


def ppmi_svd_vectors(texts: dict[str, dict[str, str]], *, dim: int = 200, min_count: int = 3,
                     alpha: float = 0.75, seed: int = 0) -> UnitVectors:
    """Vectors for the words of ``texts`` (``{iso3: {verse_id: text}}``), keyed ``iso3:word``."""
    verse_ids = sorted({vid for per in texts.values() for vid in per})
    col = {vid: j for j, vid in enumerate(verse_ids)}
    return ppmi_svd_from_indexes({iso: VerseIndex.build(per, col) for iso, per in texts.items()},
                                 dim=dim, min_count=min_count, alpha=alpha, seed=seed)


def ppmi_svd_from_indexes(indexes: dict[str, VerseIndex], *, dim: int = 200, min_count: int = 5,
                          alpha: float = 0.75, seed: int = 0, oversample: int = 20, niter: int = 1) -> UnitVectors:
    """PPMI + truncated SVD over the stacked occurrence matrices (all indexes share their verse columns).

    Words in fewer than ``min_count`` verses of their language are left out. The SVD is a randomized range
    finder (Halko et al. 2011) with ``niter`` power iterations, started from a Gaussian matrix drawn from ``seed``.
    """
    import scipy.sparse as sp

    keys: list[str] = []
    blocks = []
    for iso in sorted(indexes):
        ix = indexes[iso]
        rows = sorted((i for i in range(len(ix.vocab)) if ix.counts[i] >= min_count), key=lambda i: ix.vocab[i])
        if rows:
            keys.extend(f"{iso}:{ix.vocab[i]}" for i in rows)
            blocks.append(ix.matrix[rows])
    if not keys:
        raise ValueError("ppmi_svd_from_indexes: no word reaches min_count")
    m = sp.vstack(blocks).tocsr().astype(np.float64)
    total = m.sum()
    pw = np.asarray(m.sum(axis=1)).ravel() / total
    pc = np.asarray(m.sum(axis=0)).ravel() ** alpha
    pc = pc / max(pc.sum(), 1e-30)
    coo = m.tocoo()
    with np.errstate(divide="ignore"):
        pmi = np.log((coo.data / total) / (pw[coo.row] * pc[coo.col]))
    keep = pmi > 0
    a = sp.csr_matrix((pmi[keep].astype(np.float32), (coo.row[keep], coo.col[keep])), shape=m.shape)
    k = max(1, min(dim, min(a.shape) - 1))
    u, s = _randomized_svd(a, k, oversample=oversample, niter=niter, seed=seed)
    # sign convention: the largest-magnitude entry of each component is positive (SVD signs are arbitrary)
    signs = np.sign(u[np.argmax(np.abs(u), axis=0), np.arange(u.shape[1])])
    signs[signs == 0] = 1
    vec = (u * signs) * np.sqrt(np.maximum(s, 0))
    norms = np.linalg.norm(vec, axis=1, keepdims=True)
    norms[norms == 0] = 1
    vec = (vec / norms).astype(np.float32)
    if vec.shape[1] < dim:  # tiny inputs: pad to the requested dimension
        vec = np.pad(vec, ((0, 0), (0, dim - vec.shape[1])))
    return UnitVectors(keys, vec)


def _randomized_svd(a, k: int, *, oversample: int, niter: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    import torch

    def csr(x):
        x = x.tocsr()
        return torch.sparse_csr_tensor(torch.from_numpy(x.indptr.astype(np.int64)),
                                       torch.from_numpy(x.indices.astype(np.int64)),
                                       torch.from_numpy(x.data.astype(np.float32)), size=x.shape)

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        A, At = csr(a), csr(a.T)
    q = min(k + oversample, min(a.shape))
    g = torch.Generator().manual_seed(seed)
    omega = torch.randn(a.shape[1], q, generator=g)
    y = A @ omega
    for _ in range(niter):
        y, _ = torch.linalg.qr(y)
        z, _ = torch.linalg.qr(At @ y)
        y = A @ z
    qm, _ = torch.linalg.qr(y)
    b = (At @ qm).T  # q x n_cols
    ub, s, _vt = torch.linalg.svd(b, full_matrices=False)
    u = qm @ ub[:, :k]
    return u.numpy().astype(np.float64), s[:k].numpy().astype(np.float64)


def nearest(wv: UnitVectors, key: str, k: int = 5, prefix: str | None = None) -> list[tuple[str, float]]:
    idx = wv.index()
    if key not in idx:
        return []
    sims = wv.vectors @ wv.vectors[idx[key]]
    order = np.argsort(-sims)
    out = []
    for i in order:
        if wv.keys[i] == key or (prefix and not wv.keys[i].startswith(prefix)):
            continue
        out.append((wv.keys[i], float(sims[i])))
        if len(out) == k:
            break
    return out


