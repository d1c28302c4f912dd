"""HyperOFA's training data (:mod:`methods.hyperofa`, steps 2-4): the matched word sets of every token (cached), and
what a call reads from them (:class:`HyperData`: the training pairs, the sets of the tokens to predict)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.core.cache import cached_arrays
from harness.core.hashing import hash_obj
from methods.hypernetwork_data import WordSets
from methods.shared import tokenizer_fingerprint
from methods.subwords import subword_word_edges
from methods.wordvectors import WordVectors

WORDSETS_VERSION = 1


def word_sets(tokenizer: Any, wv: WordVectors, *, languages: set[str] | None = None,
              progress: Callable[[int], None] | None = None) -> WordSets:
    """The matched word set of every token of ``tokenizer``: OFA's tokenization-based matching
    (:func:`methods.ofa.subword_word_edges`), each (token, word) pair once."""
    s_ids, w_ids = subword_word_edges(tokenizer, wv.keys, languages=languages, progress=progress)
    if len(s_ids) and int(s_ids.max()) >= len(tokenizer):
        raise ValueError("the tokenizer produced ids beyond its own length")
    return WordSets.from_edges(s_ids, w_ids, len(tokenizer), len(wv))


def cached_word_sets(tokenizer: Any, wv: WordVectors, wv_ident: str, *, languages: set[str] | None,
                     cache_dir: Path | None, progress: Callable[[int], None] | None = None) -> WordSets:
    if cache_dir is None:
        return word_sets(tokenizer, wv, languages=languages, progress=progress)
    key = hash_obj({"v": WORDSETS_VERSION, "tok": tokenizer_fingerprint(tokenizer), "wv": wv_ident,
                    "langs": sorted(languages) if languages is not None else None})
    def compute() -> dict[str, np.ndarray]:
        ws = word_sets(tokenizer, wv, languages=languages, progress=progress)
        return {"indptr": ws.indptr, "words": ws.words}

    z = cached_arrays(Path(cache_dir) / f"wordsets-{key}.npz", compute,
                      waiting="HyperOFA word sets: built by another process")
    return WordSets(indptr=z["indptr"], words=z["words"])


@dataclass
class HyperData:
    """The word vectors (their identity, the source languages read) and matched word sets of a HyperOFA call; the
    source tokens with a matched word (the training pairs), the target tokens to predict (``wise``: not copied,
    with a matched word), and their sets cut to ``max_set``, as indices into ``vectors``."""

    wv: WordVectors
    wv_ident: str
    src_langs: set[str] | None
    ws_s: WordSets
    ws_t: WordSets
    copied: np.ndarray  # (n_t,) bool
    train_tokens: np.ndarray
    wise: np.ndarray
    vectors: torch.Tensor  # the word vectors the cut sets use, float32
    src_sets: list[np.ndarray]
    tgt_sets: list[np.ndarray]
