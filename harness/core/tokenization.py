"""Building SentencePiece-Unigram tokenizers in the XLM-R layout, and extending them Glot500-style.

XLM-R layout: ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, then the pieces, ``<mask>`` last.
A target tokenizer "in the Glot500 manner" keeps every source piece at its source id and appends the pieces
learned on the new languages' text that the source lacks, with their own log-probability scores.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterable
from pathlib import Path

XLMR_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
MASK = "<mask>"
Vocab = list[tuple[str, float]]


def train_unigram(lines: Iterable[str], vocab_size: int, *, character_coverage: float = 0.9995,
                  max_sentence_length: int = 4192, hard_vocab_limit: bool = False) -> Vocab:
    """Train a SentencePiece Unigram model on ``lines`` and return its pieces (without specials) and scores.

    Deterministic for the same lines and settings (single thread, no sampling of the input).
    """
    import sentencepiece as spm

    data = [ln.strip() for ln in lines if ln.strip()]
    if not data:
        raise ValueError("train_unigram: no text")
    with tempfile.TemporaryDirectory() as td:
        inp = Path(td) / "input.txt"
        inp.write_text("\n".join(data) + "\n", encoding="utf-8")
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            input=str(inp), model_writer=model, vocab_size=vocab_size, model_type="unigram",
            character_coverage=character_coverage, num_threads=1, hard_vocab_limit=hard_vocab_limit,
            max_sentence_length=max_sentence_length, minloglevel=2, shuffle_input_sentence=False,
        )
        sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    out: Vocab = []
    for i in range(sp.get_piece_size()):
        if sp.is_control(i) or sp.is_unknown(i):
            continue
        out.append((sp.id_to_piece(i), float(sp.get_score(i))))
    return out


def xlmr_vocab(pieces: Vocab) -> Vocab:
    """Full XLM-R-layout vocabulary: specials, pieces (duplicates and specials removed), ``<mask>`` last."""
    seen = set(XLMR_SPECIALS) | {MASK}
    body = []
    for p, s in pieces:
        if p not in seen:
            seen.add(p)
            body.append((p, float(s)))
    return [(t, 0.0) for t in XLMR_SPECIALS] + body + [(MASK, 0.0)]


def extend_pieces(base: Vocab, new: Vocab) -> Vocab:
    """Glot500-style extension: every base piece keeps its position; new pieces the base lacks are appended."""
    have = {p for p, _ in base}
    return list(base) + [(p, s) for p, s in new if p not in have]


def make_xlmr_tokenizer(vocab: Vocab, model_max_length: int = 512, normalizer=None):
    """A transformers XLM-R tokenizer over ``vocab`` (from :func:`xlmr_vocab`).

    Built from the piece list, never from a ``.model`` path: transformers 5 silently ignores ``vocab_file``.
    ``normalizer`` (a ``tokenizers`` normalizer, e.g. XLM-R's own precompiled one) replaces the default NFKC.
    """
    from tokenizers import normalizers
    from transformers import XLMRobertaTokenizer

    if [p for p, _ in vocab[:4]] != list(XLMR_SPECIALS) or vocab[-1][0] != MASK:
        raise ValueError("vocab is not in the XLM-R layout; build it with xlmr_vocab()")
    tok = XLMRobertaTokenizer(vocab=vocab, model_max_length=model_max_length)
    tok.backend_tokenizer.normalizer = normalizer if normalizer is not None else normalizers.NFKC()
    if tok.unk_token_id != 3 or tok.mask_token_id != len(vocab) - 1:
        raise RuntimeError("XLM-R tokenizer built with unexpected special ids")
    return tok


def save_xlmr_tokenizer(vocab: Vocab, out_dir: Path, model_max_length: int = 512, normalizer=None):
    tok = make_xlmr_tokenizer(vocab, model_max_length=model_max_length, normalizer=normalizer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out_dir)
    return tok
