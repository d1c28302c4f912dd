"""OFA ("One For All", Liu et al.; spec ``methods.md`` §2.2, reference code ``cisnlp/ofa``).

1. ``ctx.source_matrix`` is E_s, or F_s when factorized (the harness factorizes before calling the method).
2. Subword vectors in word-vector space, for the source and the target tokenizer: every word ``w`` of the
   multilingual word vectors is tokenized in the reference code's surface variants -- ``w``, ``" " + w``, and one
   capitalized variant (``" " + W``, or ``W`` without the space when the key's word starts with ``$``) -- and
   every subword id of each variant's tokenization gets an edge to ``w`` (a set per variant, so a word counts
   once per variant that produces the subword: the average is weighted by the number of such variants).
   ``u_c`` is the mean of the word vectors over its edges; a subword with no edge gets ``u_c = 0``. Matching is
   tokenization-based, not substring-based.
3. Overlapping target tokens (``ofa`` overlap rule) copy their source row. Special tokens follow the reference
   code by default (``specials="string"``: a special token is an ordinary token with its text, so a BERT ``[CLS]``
   never copies into an XLM-R ``<s>``, and a target special token left uncopied goes through steps 4-5 like any
   other token); ``specials="role"`` is the harness's variant that copies them by role (``<s>`` from ``[CLS]``,
   see :mod:`methods.overlap`), and it appears in the row label.
4. Every other target token ``y`` with ``u_y != 0``: cosine similarity to ``u_x`` for **all** source subwords
   (zero vectors score 0, specials included, no threshold), the ``k`` best (k = 10), weights
   ``softmax(s / tau)`` over those k only (tau = 0.1), ``F_t[y] = sum_x w_x F_s[x]`` (a convex combination).
5. Target tokens with ``u_y = 0``: the per-dimension Gaussian of the source matrix (the same draw as ``random``:
   row ``y`` of :func:`methods.random_init.fallback_matrix` with ``ctx.generator(0)``).

The similarity search runs in blocks of target rows on ``ctx.device`` (a ``block_size`` x |V_s| score block at a
time, torch matmul + top-k), never materializing |V_t| x |V_s|.

Parameters (``ctx.params``): ``k`` (10), ``temperature`` (0.1), ``block_size`` (1024 target rows, the
reference code's batch), ``source_languages`` / ``target_languages`` (ISO 639-3 codes of the words used for each
side; ``None`` = all languages, the reference default), ``max_words`` (use only the first N words of the file;
``None`` = all), ``precision`` ("float32" | "float64" for the similarity search; the reference computes in
float64), ``save_neighbours`` (write the neighbour ids and weights of every method row to
``ctx.workdir/ofa_neighbours.npz``), ``specials`` ("string", the reference's; "role": the harness's variant).

Reference behaviour (checked against ``cisnlp/ofa`` on the bible world's assets by ``tests/test_ofa.py``,
fixtures made by ``scripts/reference/make_ofa_fixtures.sh``): the overlap (exact, then case-insensitive), the
subword vectors, the top-k search over all source subwords and the softmax weights are the reference's; the
factorization is the reference's convention (``F_s = U[:, :d']``, ``P = diag(S) Vh``), computed in float64 with
torch, so a column of ``F_s`` may have the opposite sign (``F_s P`` is the same). Departures: the Gaussian rows come
from the harness's generator (the reference's ``RandomState(114514)``); ties at the k-th neighbour go to
``torch.topk``'s order, not ``np.argpartition``'s; the similarity search runs in float32 unless
``precision="float64"`` (the reference: float64).

Ties in the top-k (equal similarities, e.g. many zero scores when few words match) are broken by
``torch.topk``'s deterministic order on a given device; the reference's ``argpartition`` may pick others.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.errors import ConfigError, MissingResourceError
from harness.hashing import hash_obj
from harness.registry import METHODS
from methods.base import InitContext, InitResult, Provenance
from methods.overlap import SPECIALS_MODES
from methods.random_init import FALLBACK_SALT, check_mapping, copy_rows, fallback_matrix
from methods.wordvectors import WordVectors, load_word_vectors, shared_vectors_dir, split_key, surface

log = logging.getLogger(__name__)
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


def _tokenizer_fingerprint(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def cached_subword_vectors(tokenizer: Any, wv: WordVectors, wv_ident: str, *, languages: set[str] | None,
                           cache_dir: Path | None, progress: Callable[[int], None] | None = None
                           ) -> tuple[np.ndarray, np.ndarray]:
    if cache_dir is None:
        return subword_vectors(tokenizer, wv, languages=languages, progress=progress)
    key = hash_obj({"v": SUBWORD_VERSION, "tok": _tokenizer_fingerprint(tokenizer), "wv": wv_ident,
                    "langs": sorted(languages) if languages is not None else None})
    path = Path(cache_dir) / f"subwords-{key}.npz"
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            return z["u"], z["counts"]
    u, counts = subword_vectors(tokenizer, wv, languages=languages, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.npz")
    np.savez(tmp, u=u, counts=counts)
    tmp.replace(path)
    return u, counts


def _normalize(x: torch.Tensor) -> torch.Tensor:
    norm = x.norm(dim=1, keepdim=True)
    return torch.where(norm > 0, x / norm.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


def knn_softmax_combine(u_target: torch.Tensor, u_source: torch.Tensor, source_matrix: torch.Tensor, *, k: int,
                        temperature: float, block_size: int, device: str = "cpu",
                        dtype: torch.dtype = torch.float32,
                        progress: Callable[[int], None] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each row of ``u_target``: top-``k`` source rows by cosine, softmax(sim / temperature) over them, the
    convex combination of their ``source_matrix`` rows. Blocked: ``block_size`` x |V_s| scores at a time.

    Returns ``(combined (n, d), neighbour ids (n, k), weights (n, k))`` on the CPU.
    """
    k = min(int(k), u_source.shape[0])
    us = _normalize(u_source.to(device, dtype))
    fs = source_matrix.to(device, dtype)
    n = u_target.shape[0]
    out = torch.empty((n, source_matrix.shape[1]), dtype=source_matrix.dtype)
    nb = torch.empty((n, k), dtype=torch.long)
    wts = torch.empty((n, k), dtype=torch.float32)
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        ut = _normalize(u_target[start:stop].to(device, dtype))
        sims = ut @ us.T  # (block, |V_s|)
        vals, idx = torch.topk(sims, k, dim=1, sorted=False)  # unsorted selection is cheaper; sort the k after
        del sims
        order = torch.argsort(vals, dim=1, descending=True, stable=True)
        vals, idx = vals.gather(1, order), idx.gather(1, order)
        w = torch.softmax(vals / temperature, dim=1)
        comb = torch.einsum("bk,bkd->bd", w, fs[idx])
        out[start:stop] = comb.to("cpu", source_matrix.dtype)
        nb[start:stop] = idx.cpu()
        wts[start:stop] = w.to("cpu", torch.float32)
        if progress is not None:
            progress(stop - start)
    return out, nb, wts


@METHODS.register("ofa")
class OFAInit:
    """OFA: copy overlap, convex combination of the top-10 source rows by word-vector similarity, Gaussian rest."""

    name: ClassVar[str] = "ofa"
    description: ClassVar[str] = ("OFA: subword vectors from multilingual word vectors, top-10 source neighbours "
                                  "by cosine, softmax(sim/0.1) combination of source (coordinate) rows; overlap "
                                  "copied (OFA rule); per-dimension Gaussian for tokens without a matched word")
    requires: ClassVar[frozenset[str]] = frozenset({"word_vectors"})
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = True
    defaults: ClassVar[dict[str, Any]] = {"k": 10, "temperature": 0.1, "block_size": 1024, "source_languages": None,
                                          "target_languages": None, "max_words": None, "precision": "float32",
                                          "save_neighbours": False, "specials": "string"}

    def _params(self, ctx: InitContext) -> dict[str, Any]:
        unknown = set(ctx.params) - set(self.defaults)
        if unknown:
            raise ConfigError(f"method 'ofa' has no parameter(s) {sorted(unknown)}; it takes {sorted(self.defaults)}")
        p = {**self.defaults, **ctx.params}
        if int(p["k"]) < 1 or float(p["temperature"]) <= 0 or int(p["block_size"]) < 1:
            raise ConfigError(f"ofa: k and block_size must be >= 1 and temperature > 0 (got k={p['k']}, "
                              f"temperature={p['temperature']}, block_size={p['block_size']})")
        if p["specials"] not in SPECIALS_MODES:
            raise ConfigError(f"ofa: specials must be one of {list(SPECIALS_MODES)}, not {p['specials']!r}")
        if p["precision"] not in ("float32", "float64"):
            raise ConfigError(f"ofa: precision must be 'float32' or 'float64', not {p['precision']!r}")
        return p

    def initialize(self, ctx: InitContext) -> InitResult:
        p = self._params(ctx)
        mapping = ctx.mapping_for(self.overlap_rule, specials=p["specials"])
        check_mapping(ctx, mapping)
        files = ctx.world.resource_files("word_vectors")
        if not files:
            raise MissingResourceError("method 'ofa' needs word vectors, and the world provides none")

        def bar(label: str, total: int) -> Callable[[int], None] | None:
            return ctx.progress(label, total) if ctx.progress is not None else None

        wv = load_word_vectors(files, cache_dir=shared_vectors_dir(ctx.cache_dir), max_words=p["max_words"])
        wv_ident = hash_obj([(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files] + [p["max_words"]])
        src_langs = set(p["source_languages"]) if p["source_languages"] is not None else None
        tgt_langs = set(p["target_languages"]) if p["target_languages"] is not None else None
        u_s, c_s = cached_subword_vectors(ctx.source_tokenizer, wv, wv_ident, languages=src_langs,
                                          cache_dir=ctx.cache_dir, progress=bar("OFA: source subwords", len(wv)))
        u_t, c_t = cached_subword_vectors(ctx.target_tokenizer, wv, wv_ident, languages=tgt_langs,
                                          cache_dir=ctx.cache_dir, progress=bar("OFA: target subwords", len(wv)))
        src = ctx.source_matrix.detach().float().cpu()
        if u_s.shape[0] != src.shape[0]:
            raise ValueError(f"source tokenizer has {u_s.shape[0]} tokens, the source matrix {src.shape[0]} rows")
        n_t = mapping.target_size

        matrix = fallback_matrix(src, n_t, ctx.generator(FALLBACK_SALT))
        provenance = np.full(n_t, Provenance.RANDOM, dtype=np.int8)
        copied = np.zeros(n_t, dtype=bool)
        copied[list(mapping.copy)] = True
        wise = np.flatnonzero(~copied & (c_t > 0))
        dtype = torch.float64 if p["precision"] == "float64" else torch.float32
        combined, nb, wts = knn_softmax_combine(
            torch.from_numpy(u_t[wise]), torch.from_numpy(u_s), src, k=int(p["k"]),
            temperature=float(p["temperature"]), block_size=int(p["block_size"]), device=ctx.device, dtype=dtype,
            progress=bar("OFA: neighbours", len(wise)))
        if len(wise):
            matrix[torch.from_numpy(wise)] = combined
            provenance[wise] = Provenance.METHOD
        copy_rows(matrix, src, mapping, provenance)

        artifacts: dict[str, Path] = {}
        if p["save_neighbours"] and ctx.workdir is not None:
            path = Path(ctx.workdir) / "ofa_neighbours.npz"
            np.savez_compressed(path, target_ids=wise, neighbours=nb.numpy(), weights=wts.numpy())
            artifacts["neighbours"] = path
        stats = {
            "overlap": {k: v for k, v in mapping.stats.items() if k != "unk"},
            "k": int(p["k"]), "temperature": float(p["temperature"]), "block_size": int(p["block_size"]),
            "precision": p["precision"], "words": len(wv), "word_dim": wv.dim,
            "source_subwords_matched": int((c_s > 0).sum()), "target_subwords_matched": int((c_t > 0).sum()),
            "source_coverage": float((c_s > 0).mean()), "target_coverage": float((c_t > 0).mean()),
            "wise": int(len(wise)), "no_word_match": int((~copied & (c_t == 0)).sum()),
            "mean_top1_weight": float(wts[:, 0].mean()) if len(wise) else None,
        }
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats,
                          artifacts=artifacts)
