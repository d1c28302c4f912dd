"""FVT, Fast Vocabulary Transfer (Gee et al., EMNLP 2022): a baseline that needs only the two tokenizers.

* Tokens the source shares are copied, under the ``ofa`` overlap rule (the one ``random`` and ``mean-cov`` use,
  so that the three baselines differ only in the rows they compute): special tokens by role, an exact match of
  canonical strings (FVT's own test, ``new_token in old_vocab``), then a case-insensitive one. The second step
  goes beyond FVT for a cased source (``"▁Cat"`` copies ``"▁cat"`` where FVT would tokenize ``"Cat"``); for an
  uncased source it copies what FVT's tokenization gives as one piece anyway (``"▁The"`` -> ``"the"``).
* Every other target token is written as text in its word position and tokenized by the source tokenizer
  (:func:`source_pieces`); its row is the mean of those source rows, as the source tokenizer gave them (an UNK
  piece among real ones is kept, as in the reference code).
* A token whose tokenization holds nothing but UNK pieces and bare word-boundary markers (a script the source
  never saw), or nothing at all, and a target special token without a source counterpart, take the shared
  per-dimension Gaussian fallback (provenance RANDOM).

Factorized embeddings: the mean is taken over the coordinate rows F_s; since E = F P is linear, that is the mean
of the full rows projected onto the primitives.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from harness.core.registry import METHODS
from methods.base import InitContext, InitResult, Method, Provenance, Reference
from methods.canonical import SPM_SPACE, detect_kind
from methods.overlap import SPECIAL_PREFIX
from methods.shared import FALLBACK_SALT, copy_rows, gaussian_start, overlap_stats


def source_pieces(tokenizer: Any, kind: str, canonical: str) -> list[int]:
    """Source ids of one token given by its canonical string (``methods/overlap.py``: a leading space = the token
    starts a word), tokenized by ``tokenizer`` (of ``kind``) in that position: ``" foo"`` as a word ``foo``,
    ``"foo"`` as the inside of a word (SentencePiece ``foo`` pieces without ``▁``, WordPiece ``##`` pieces)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    start = canonical.startswith(" ")
    text = canonical[1:] if start else canonical
    if backend is None or kind not in ("sentencepiece", "wordpiece"):  # byte-level BPE: the space is the boundary
        return tokenizer(canonical, add_special_tokens=False)["input_ids"]
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if kind == "sentencepiece":
        return [t.id for t in backend.model.tokenize((SPM_SPACE if start else "") + text.replace(" ", SPM_SPACE))]
    # WordPiece: words split at whitespace and punctuation; the first word continues a word unless it starts one
    pre = backend.pre_tokenizer
    words = pre.pre_tokenize_str(text) if pre is not None else [(text, (0, len(text)))]
    prefix = backend.model.continuing_subword_prefix
    ids: list[int] = []
    for i, (word, _) in enumerate(words):
        if i == 0 and not start and (len(word) > 1 or word.isalnum()):  # (punctuation always starts a word)
            pieces = backend.model.tokenize(prefix + word)  # greedy longest match from the "##" form on
            if len(pieces[0].value) <= len(prefix) or not pieces[0].value.startswith(prefix):
                ids.append(tokenizer.unk_token_id)  # no continuation piece fits: the word is UNK, as in WordPiece
                continue
        else:
            pieces = backend.model.tokenize(word)
        ids += [t.id for t in pieces]
    return ids


@METHODS.register("fvt")
class FVTInit(Method):
    """FVT: copy shared tokens; every other token the mean of the source rows of its source tokenization."""

    name: ClassVar[str] = "fvt"
    description: ClassVar[str] = ("FVT (Gee et al. 2022): shared tokens copied (OFA rule), every other token the "
                                  "mean of the source rows of its source tokenization; per-dimension Gaussian "
                                  "for tokens the source tokenizes to UNK only")
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = True
    reference: ClassVar[Reference] = Reference(
        None, "Gee et al.'s code not run against it; tested by hand: means of the source tokenization's rows "
              "(SentencePiece and WordPiece sources), recomputed through the source tokenizer on the synthetic "
              "world; Gaussian for UNK-only tokens",
        ("tests/test_baselines.py",))

    def initialize(self, ctx: InitContext) -> InitResult:
        self.resolve_params(ctx)
        mapping = self.mapping(ctx)
        src = ctx.source_matrix.detach().float().cpu()
        matrix, provenance = gaussian_start(src, mapping.target_size, ctx.generator(FALLBACK_SALT))
        kind = detect_kind(ctx.source_tokenizer)
        skip = {ctx.source_tokenizer.unk_token_id} | {i for i, c in enumerate(mapping.source_tokens) if c == " "}
        lengths = []
        for tid, canonical in enumerate(mapping.target_tokens):
            if tid in mapping.copy or canonical.startswith(SPECIAL_PREFIX):
                continue
            ids = source_pieces(ctx.source_tokenizer, kind, canonical)
            if set(ids) <= skip:  # nothing the source knows: the fallback row stays
                continue
            matrix[tid] = src[ids].mean(dim=0)
            provenance[tid] = Provenance.METHOD
            lengths.append(len(ids))
        copy_rows(matrix, src, mapping, provenance)
        stats = {"overlap": overlap_stats(mapping), "source_kind": kind,
                 "mean_source_pieces": round(float(np.mean(lengths)), 3) if lengths else 0.0,
                 "fallback": "per-dimension normal, mean/std (ddof=0) of the source matrix, for tokens the "
                             "source tokenizes to UNK pieces and word-boundary markers only",
                 "factorized": ctx.factorized}
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats)
