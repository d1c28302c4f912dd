"""Canonical vocabularies: every token id of a tokenizer as one canonical string, the form in which the overlap
rules of :mod:`methods.overlap` compare two vocabularies.

Canonical strings
-----------------
Every token id of a tokenizer gets one canonical string: the token's surface text as it appears in running text,
with a leading space when the token starts a word (the reference code's convention):

* SentencePiece (``▁``): every ``▁`` becomes a space; byte-fallback tokens ``<0xNN>`` stay as they are.
* byte-level BPE (``Ġ``): the token's bytes are decoded as UTF-8 (``Ġ`` is the byte 0x20, a space); bytes that
  are not valid UTF-8 on their own (a piece of a multi-byte character) are written ``<0xNN>``, which is the form a
  SentencePiece byte-fallback token has. The reference code decodes with ``tokenizer.decode``, which turns every
  such piece into U+FFFD, so all of them would share one canonical string; ours keeps them apart.
* WordPiece (``##``): ``##x`` becomes ``x`` (inside a word); every other token ``x`` becomes ``" " + x``. Whether a
  WordPiece vocabulary is uncased (its normalizer lowercases, and strips accents) is recorded; the ``tiktotok``
  rule, and the ``focus`` rule with ``overlap="casefold"``, then fold the target strings the same way before the
  exact comparison, because an uncased source model only ever sees folded text. The ``focus`` rule's default
  (``overlap="exact"``) compares the strings as they are, as ``deepfocus`` does. The ``ofa`` rule follows the
  reference code and only adds its case-insensitive step.
* anything else: ``tokenizer.decode([id])``.

The kind is read from the tokenizer's backend (model, pre-tokenizer and decoder types); when that says nothing,
the reference code's heuristic (how many vocabulary entries start with ``▁`` / ``##`` / ``Ġ``) decides.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

SPM_SPACE = "▁"
BPE_SPACE = "Ġ"
WORDPIECE_PREFIX = "##"
SPECIAL_PREFIX = "\x00"

# role -> tokenizer attributes, preferred first
ROLE_ATTRS: dict[str, tuple[str, ...]] = {
    "bos/cls": ("cls_token", "bos_token"),
    "eos/sep": ("sep_token", "eos_token"),
    "pad": ("pad_token",),
    "unk": ("unk_token",),
    "mask": ("mask_token",),
}


# --------------------------------------------------------------------------------------------------------------
# canonical vocabularies
# --------------------------------------------------------------------------------------------------------------
@dataclass
class CanonicalVocab:
    """One tokenizer's vocabulary in canonical form (see the module docstring)."""

    kind: str  # "sentencepiece" | "bytelevel" | "wordpiece" | "other"
    tokens: list[str]  # raw token strings by id
    canonical: list[str]  # canonical strings by id
    specials: dict[int, str]  # special token id -> role ("bos/cls", ..., or "added:<content>")
    special_attrs: dict[str, int]  # e.g. {"cls_token": 0, "bos_token": 0, ...}
    uncased: bool = False  # the normalizer lowercases
    strip_accents: bool = False  # the normalizer strips accents
    special_strings: dict[int, str] = field(default_factory=dict)  # special id -> its canonical text ("string")
    special_contents: frozenset[str] = frozenset()  # the raw strings of the special tokens
    _tokens_hash: str | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.tokens)

    def identity(self) -> dict[str, Any]:
        """Everything the canonical strings and the rules depend on (the cache key)."""
        if self._tokens_hash is None:
            blob = json.dumps(self.tokens, ensure_ascii=False).encode("utf-8")
            self._tokens_hash = hashlib.sha256(blob).hexdigest()[:32]
        return {"kind": self.kind, "tokens": self._tokens_hash, "specials": self.specials,
                "special_attrs": self.special_attrs, "uncased": self.uncased, "strip_accents": self.strip_accents}

    def fold(self, text: str) -> str:
        """``text`` as this (uncased) tokenizer's normalizer would see it; identity for cased tokenizers."""
        if self.uncased:
            text = text.lower()
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return text


def _backend_json(tokenizer: Any) -> dict[str, Any]:
    """``{"model": {"type": ...}, "normalizer": ..., "pre_tokenizer": ..., "decoder": ...}`` of the tokenizers
    backend, each component serialized on its own (the whole tokenizer's JSON holds the vocabulary: slow)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return {}
    out: dict[str, Any] = {"model": {"type": type(backend.model).__name__}}
    for name in ("normalizer", "pre_tokenizer", "decoder"):
        comp = getattr(backend, name, None)
        try:
            out[name] = json.loads(comp.__getstate__()) if comp is not None else None
        except Exception:  # noqa: BLE001 - a component that cannot serialize: the heuristics decide
            out[name] = None
    return out


def _component_types(node: Any) -> list[str]:
    """All ``type`` values in a (possibly nested ``Sequence``) tokenizers component."""
    out: list[str] = []
    if isinstance(node, dict):
        if "type" in node:
            out.append(str(node["type"]))
        for v in node.values():
            if isinstance(v, (dict, list)):
                out.extend(_component_types(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(_component_types(v))
    return out


def detect_kind(tokenizer: Any, tokens: list[str] | None = None) -> str:
    """``sentencepiece``, ``bytelevel``, ``wordpiece`` or ``other``, from the backend, else from the vocabulary."""
    cfg = _backend_json(tokenizer)
    model_type = (cfg.get("model") or {}).get("type")
    parts = _component_types(cfg.get("pre_tokenizer")) + _component_types(cfg.get("decoder"))
    if model_type == "WordPiece" or "WordPiece" in _component_types(cfg.get("decoder")):
        return "wordpiece"
    if "ByteLevel" in parts:
        return "bytelevel"
    if "Metaspace" in parts:
        return "sentencepiece"
    if tokens is None:
        tokens = _id_tokens(tokenizer)
    n = max(len(tokens), 1)
    # the reference heuristic counts > 100 entries; a share works for tiny vocabularies too
    shares = {
        "sentencepiece": sum(t.startswith(SPM_SPACE) for t in tokens) / n,
        "wordpiece": sum(t.startswith(WORDPIECE_PREFIX) for t in tokens) / n,
        "bytelevel": sum(t.startswith(BPE_SPACE) for t in tokens) / n,
    }
    best = max(shares, key=lambda k: shares[k])
    return best if shares[best] >= 0.05 else "other"


def _normalizer_flags(tokenizer: Any) -> tuple[bool, bool]:
    norm = _backend_json(tokenizer).get("normalizer")
    lower = strip = False

    def walk(node: Any) -> None:
        nonlocal lower, strip
        if isinstance(node, dict):
            t = node.get("type")
            if t == "BertNormalizer":
                lc = bool(node.get("lowercase", False))
                lower = lower or lc
                sa = node.get("strip_accents")
                strip = strip or (lc if sa is None else bool(sa))
            elif t == "Lowercase":
                lower = True
            elif t == "StripAccents":
                strip = True
            for v in node.values():
                if isinstance(v, (dict, list)):
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(norm)
    return lower, strip


def _id_tokens(tokenizer: Any) -> list[str]:
    n = len(tokenizer)
    vocab = tokenizer.get_vocab()
    tokens: list[str | None] = [None] * n
    for tok, i in vocab.items():
        if not 0 <= i < n:
            raise ValueError(f"tokenizer id {i} ({tok!r}) is outside 0..{n - 1}: its ids are not contiguous")
        tokens[i] = tok
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing:
        raise ValueError(f"tokenizer has no token for ids {missing[:5]}...: its ids are not contiguous")
    return tokens  # type: ignore[return-value]


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode`` table (byte-level BPE writes every byte as a printable char)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def _hexbyte_errors(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    bad = exc.object[exc.start:exc.end]
    return "".join(f"<0x{b:02X}>" for b in bad), exc.end


codecs.register_error("harness_hexbyte", _hexbyte_errors)


def canonical_token(kind: str, token: str, tokenizer: Any = None, token_id: int | None = None) -> str:
    """The canonical string of one (non-special) token; see the module docstring."""
    if kind == "sentencepiece":
        return token.replace(SPM_SPACE, " ")
    if kind == "wordpiece":
        return token[len(WORDPIECE_PREFIX):] if token.startswith(WORDPIECE_PREFIX) else " " + token
    if kind == "bytelevel":
        table = _byte_decoder()
        if token and all(c in table for c in token):
            return bytes(table[c] for c in token).decode("utf-8", errors="harness_hexbyte")
        return token  # an added token holds plain text
    if tokenizer is not None and token_id is not None:
        return tokenizer.decode([token_id])
    return token


def special_tokens(tokenizer: Any) -> tuple[dict[int, str], dict[str, int]]:
    """``({id: role}, {attribute: id})`` for the tokenizer's special tokens (roles as in :data:`ROLE_ATTRS`)."""
    by_id: dict[int, str] = {}
    attrs: dict[str, int] = {}
    for role, names in ROLE_ATTRS.items():
        for name in names:
            tid = getattr(tokenizer, f"{name}_id", None)
            if isinstance(tid, int) and tid >= 0:
                attrs[name] = tid
                by_id.setdefault(tid, role)
    for tid in getattr(tokenizer, "all_special_ids", []) or []:
        if tid not in by_id:
            by_id[int(tid)] = "added:" + str(tokenizer.convert_ids_to_tokens(int(tid)))
    return by_id, attrs


def canonical_vocab(tokenizer: Any) -> CanonicalVocab:
    tokens = _id_tokens(tokenizer)
    kind = detect_kind(tokenizer, tokens)
    specials, attrs = special_tokens(tokenizer)
    lower, strip = _normalizer_flags(tokenizer)
    if kind == "sentencepiece":
        canon = [t.replace(SPM_SPACE, " ") for t in tokens]
    elif kind == "wordpiece":
        n = len(WORDPIECE_PREFIX)
        canon = [t[n:] if t.startswith(WORDPIECE_PREFIX) else " " + t for t in tokens]
    else:
        canon = [canonical_token(kind, t, tokenizer, i) for i, t in enumerate(tokens)]
    special_strings = {i: canon[i] for i in specials}
    for i, role in specials.items():
        canon[i] = SPECIAL_PREFIX + role
    return CanonicalVocab(kind=kind, tokens=tokens, canonical=canon, specials=specials, special_attrs=attrs,
                          uncased=lower, strip_accents=strip, special_strings=special_strings,
                          special_contents=frozenset(tokens[i] for i in specials))
