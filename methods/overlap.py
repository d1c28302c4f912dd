"""Token overlap ("copy") rules: which target tokens copy the row of which source token.

The rules differ per method (spec ``methods.md`` §1.1), so each is a separate, named, tested function registered
in :data:`RULES`:

``ofa``       OFA, HyperOFA and the ``random`` baseline (``cisnlp/ofa`` ``get_overlapping_tokens``,
              ``fuzzy_search=True, fuzzy_whitespace=False``): exact match on canonical strings, then, for target
              tokens still unmatched, a case-insensitive match against the lowercased source vocabulary.
``focus``     FOCUS, paper setting (``exact_match_all=True, match_symbols=True``): exact match including case and
              the beginning-of-word marker; fuzzy (case- and BOW-insensitive) match only for tokens made entirely
              of numbers, punctuation or whitespace; special tokens count as symbols and match by string, as in
              ``deepfocus`` (options ``overlap="casefold"`` and ``specials="role"`` give the harness's variants).
``wechsel``   WECHSEL: special tokens only (by role; ``specials="string"``: the reference code's string match).
``tiktotok``  Tik-to-Tok: shared non-alphabetic tokens are copied; non-alphabetic tokens the source lacks are
              reported as to-be-UNK (``stats["unk"]``); alphabetic tokens are never copied.

Canonical strings: see :mod:`methods.canonical` (every token id's surface text, with a leading space when the
token starts a word).

Special tokens
--------------
Each rule takes ``specials="role"`` or ``specials="string"`` (the default is ``"role"`` except for ``focus``).

``role``: special tokens are matched by role, never by string: beginning/classification (``bos``/``cls``),
end/separator (``eos``/``sep``), ``pad``, ``unk`` and ``mask``. A target ``cls`` token copies the source ``cls``
token, or the source ``bos`` token when the source has no ``cls``; likewise ``sep``/``eos``. So a BERT ``[CLS]``
row initializes an XLM-R ``<s>`` row. Special tokens without a role (additional special tokens) match a source
special token with the same string. Special tokens never take part in the string matching (on either side), and
their canonical string is ``"\\x00" + role``. A target special token without a counterpart is left to the method.

``string``: what the reference code does. For ``ofa`` and ``focus`` a special token is an ordinary token with the
canonical string of its text (``<s>``; a WordPiece ``[CLS]`` is a word, `` [CLS]``), so it is copied only when
the other vocabulary has the same string (an XLM-R ``<s>`` from an XLM-R ``<s>``, never from a BERT ``[CLS]``);
``focus`` also counts a target token whose lowercased text is one of the target's special tokens as a symbol
(``deepfocus``'s ``is_numerical_symbol_etc``). For ``wechsel`` every special token of the source whose raw
string is in the target vocabulary is copied (``create_target_embeddings``'s last loop); no string matching
otherwise. A special token that is not copied is left to the method (FOCUS: fastText's end-of-line token
``</s>`` has a vector, so a target ``</s>`` becomes a FOCUS combination).

Ties
----
When several source ids share one canonical string, the highest id wins (the reference code builds
``{canonical: id for id in sorted(ids)}``; FOCUS's vocabulary view puts the last id first). For ``ofa``'s
case-insensitive step the lowercased table is built by iterating the canonical strings in sorted order, so the
last canonical string (in code-point order) with a given lowercase form wins. Several target tokens may copy the
same source token, so the copy count can exceed the source vocabulary size.

Differences from the reference code, all without effect on SentencePiece targets (our worlds' targets): the
reference keeps only the highest target id per canonical string (the others are left to the method); we match
every target id. The reference skips a case-insensitive match whose source id is 0 (a truthiness slip); source
id 0 is a special token in every tokenizer we use, which never takes part in string matching here.
"""

from __future__ import annotations

import json
import logging
import os
import string
import unicodedata
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.core.hashing import hash_obj
from methods.base import TokenMapping
from methods.canonical import (
    ROLE_ATTRS,
    SPECIAL_PREFIX,
    CanonicalVocab,
    canonical_vocab,
)

log = logging.getLogger(__name__)

OVERLAP_VERSION = 2  # bump when canonicalization or a rule changes: cached mappings are then recomputed


# --------------------------------------------------------------------------------------------------------------
# shared pieces of the rules
# --------------------------------------------------------------------------------------------------------------
def match_specials(source: CanonicalVocab, target: CanonicalVocab) -> dict[int, int]:
    """Target special id -> source special id, by role (see the module docstring)."""
    out: dict[int, int] = {}
    for names in ROLE_ATTRS.values():
        for name in names:
            tid = target.special_attrs.get(name)
            if tid is None or tid in out:
                continue
            sid = source.special_attrs.get(name)
            if sid is None:  # the other attribute of the same role
                sid = next((source.special_attrs[n] for n in names if n in source.special_attrs), None)
            if sid is not None:
                out[tid] = sid
    added_src = {r: i for i, r in sorted(source.specials.items()) if r.startswith("added:")}
    for tid, r in target.specials.items():
        if tid not in out and r in added_src:
            out[tid] = added_src[r]
    return out


SPECIALS_MODES = ("role", "string")


def _check_specials(specials: str) -> None:
    if specials not in SPECIALS_MODES:
        raise ValueError(f"specials must be one of {SPECIALS_MODES}, not {specials!r}")


def string_of(vocab: CanonicalVocab, i: int, specials: str = "role") -> str | None:
    """The string token ``i`` is matched by: its canonical string; for a special token ``None`` (``role``: it
    takes no part in string matching) or the canonical string of its text (``string``)."""
    if i in vocab.specials:
        return vocab.special_strings.get(i) if specials == "string" else None
    return vocab.canonical[i]


def exact_table(vocab: CanonicalVocab, specials: str = "role") -> dict[str, int]:
    """Canonical string -> source id over the tokens that take part in string matching (non-special tokens; with
    ``specials="string"`` special tokens too, by their text); the highest id wins a tie."""
    out: dict[str, int] = {}
    for i in range(len(vocab)):
        c = string_of(vocab, i, specials)
        if c is not None:
            out[c] = i
    return out


def specials_by_string(source: CanonicalVocab, target: CanonicalVocab) -> dict[int, int]:
    """WECHSEL's reference: every source special token whose raw string is a target token copies into it."""
    by_token = {t: i for i, t in enumerate(target.tokens)}
    out: dict[int, int] = {}
    for sid in sorted(source.specials):
        tid = by_token.get(source.tokens[sid])
        if tid is not None:
            out[tid] = sid
    return out


def bow_free(canonical: str) -> str:
    """The canonical string without its beginning-of-word marker (one leading space)."""
    return canonical[1:] if canonical.startswith(" ") else canonical


def is_symbol_token(text: str, *, symbols: str = "code") -> bool:
    """A token made entirely of numbers, punctuation or whitespace (``text`` without its BOW marker).

    ``symbols="code"`` is FOCUS's own test (``deepfocus.vocab_helper.is_numerical_symbol_etc``):
    ``str.isnumeric()``, or every character in ASCII ``string.punctuation``, or ``str.isspace()``; the empty
    string (a bare BOW marker) counts. ``symbols="unicode"`` reads the paper's words with Unicode categories:
    every character is a number (N*), punctuation (P*), symbol (S*) or whitespace.
    """
    if symbols == "code":
        return text.isnumeric() or all(c in string.punctuation for c in text) or text.isspace()
    if symbols == "unicode":
        return all(c.isspace() or unicodedata.category(c)[0] in "NPS" for c in text)
    raise ValueError(f"symbols must be 'code' or 'unicode', not {symbols!r}")


def is_alphabetic_token(text: str) -> bool:
    """Tik-to-Tok's "alphabetic": the token holds at least one letter (``str.isalpha``)."""
    return any(c.isalpha() for c in text)


# --------------------------------------------------------------------------------------------------------------
# the rules
# --------------------------------------------------------------------------------------------------------------
RuleFn = Callable[..., tuple[dict[int, int], dict[str, Any]]]
RULES: dict[str, RuleFn] = {}


def register_rule(name: str) -> Callable[[RuleFn], RuleFn]:
    def deco(fn: RuleFn) -> RuleFn:
        if name in RULES and RULES[name] is not fn:
            raise ValueError(f"overlap rule {name!r} is registered twice")
        RULES[name] = fn
        return fn

    return deco


@register_rule("ofa")
def ofa_rule(source: CanonicalVocab, target: CanonicalVocab, *,
             specials: str = "role") -> tuple[dict[int, int], dict[str, Any]]:
    """OFA/HyperOFA/random: specials by role (``specials="string"``: as ordinary tokens, by their text), exact
    canonical match, then case-insensitive match.

    The case-insensitive table is ``{canonical.lower(): id}`` built over the exact table sorted by canonical
    string, so the last canonical string in code-point order wins (``" apple"`` beats ``" Apple"``).
    """
    _check_specials(specials)
    copy = match_specials(source, target) if specials == "role" else {}
    n_special = len(copy)
    exact = exact_table(source, specials)
    lower = {k.lower(): v for k, v in sorted(exact.items())}
    n_exact = n_fuzzy = 0
    for tid in range(len(target)):
        c = string_of(target, tid, specials)
        if c is None:
            continue
        if c in exact:
            copy[tid] = exact[c]
            n_exact += 1
        elif c.lower() in lower:
            copy[tid] = lower[c.lower()]
            n_fuzzy += 1
    stats = {"special": n_special, "exact": n_exact, "case_insensitive": n_fuzzy}
    return copy, stats if specials == "role" else {**stats, "specials": specials}


OVERLAP_MODES = ("exact", "casefold")


@register_rule("focus")
def focus_rule(source: CanonicalVocab, target: CanonicalVocab, *, symbols: str = "code", overlap: str = "exact",
               specials: str = "string") -> tuple[dict[int, int], dict[str, Any]]:
    """FOCUS, paper setting: exact match incl. case and BOW marker, and a fuzzy match (BOW marker dropped,
    lowercased) for symbol tokens only (:func:`is_symbol_token`).

    Source choice for a fuzzy key (FOCUS's ``construct_vocab_view``): a source token whose canonical string
    already equals the key comes first (the highest such id), otherwise the lowest id with that key.

    ``overlap``: ``"exact"`` (default, ``deepfocus``) compares the target's canonical strings as they are;
    ``"casefold"`` first folds them like an uncased source's normalizer (lowercase, strip accents; see the module
    docstring), which copies e.g. ``▁The`` from an uncased source's ``the``. ``specials``: ``"string"`` (default,
    ``deepfocus``: special tokens are ordinary tokens with their text, and symbols) or ``"role"`` (copied by role,
    :func:`match_specials`).
    """
    _check_specials(specials)
    if overlap not in OVERLAP_MODES:
        raise ValueError(f"overlap must be one of {OVERLAP_MODES}, not {overlap!r}")
    copy = match_specials(source, target) if specials == "role" else {}
    n_special = len(copy)
    exact = exact_table(source, specials)
    fuzzy: dict[str, int] = {}
    for sid in range(len(source)):
        c = string_of(source, sid, specials)
        if c is None:
            continue
        key = bow_free(c).lower()
        if key == c:
            fuzzy[key] = sid
        elif key not in fuzzy:
            fuzzy[key] = sid
    fold = overlap == "casefold" and (source.uncased or source.strip_accents)
    special_text = target.special_contents if specials == "string" else frozenset()
    n_exact = n_symbol = 0
    for tid in range(len(target)):
        c = string_of(target, tid, specials)
        if c is None:
            continue
        if fold:
            c = source.fold(c)
        key = bow_free(c).lower()
        symbol = is_symbol_token(bow_free(c), symbols=symbols) or key in special_text
        if symbol and (c in exact or key in fuzzy):
            copy[tid] = exact[c] if c in exact else fuzzy[key]
            n_symbol += 1
        elif c in exact:
            copy[tid] = exact[c]
            n_exact += 1
    return copy, {"special": n_special, "exact": n_exact, "symbol": n_symbol, "symbols": symbols,
                  "overlap": overlap, "specials": specials, "folded_for_uncased_source": fold}


@register_rule("wechsel")
def wechsel_rule(source: CanonicalVocab, target: CanonicalVocab, *,
                 specials: str = "role") -> tuple[dict[int, int], dict[str, Any]]:
    """WECHSEL: only special tokens are copied, by role (default) or, as the reference code does, every source
    special token whose raw string is a target token (``specials="string"``); every other token goes through the
    method."""
    _check_specials(specials)
    copy = match_specials(source, target) if specials == "role" else specials_by_string(source, target)
    return copy, {"special": len(copy)} if specials == "role" else {"special": len(copy), "specials": specials}


@register_rule("tiktotok")
def tiktotok_rule(source: CanonicalVocab, target: CanonicalVocab, *, fold_uncased_source: bool = True,
                  bow_insensitive: bool = True) -> tuple[dict[int, int], dict[str, Any]]:
    """Tik-to-Tok: non-alphabetic target tokens that the source shares are copied; non-alphabetic ones it lacks
    are listed in ``stats["unk"]`` (they take the source UNK row). Alphabetic tokens, shared or not, are left to
    the method (no false friends such as "of").

    "Shared" is an exact canonical match; with ``bow_insensitive`` (default), a non-alphabetic token that the
    source has only with the other beginning-of-word status also counts (``","`` and ``"▁,"`` are the same
    comma; a WordPiece source writes every punctuation mark as a word of its own). The exact form wins when both
    exist. The seed only says "shared with the source tokenizer".

    Special tokens are copied by role; a target special token without a source counterpart is put on the UNK
    list (the seed leaves specials unstated; they are non-alphabetic, spec §1.4).
    """
    copy = match_specials(source, target)
    n_special = len(copy)
    unk = sorted(t for t in target.specials if t not in copy)
    exact = exact_table(source)
    fold = fold_uncased_source and (source.uncased or source.strip_accents)
    n_shared = 0
    for tid in range(len(target)):
        if tid in target.specials:
            continue
        c = target.canonical[tid]
        if fold:
            c = source.fold(c)
        if is_alphabetic_token(c):
            continue
        bare = bow_free(c)
        candidates = [c, bare, " " + bare] if bow_insensitive else [c]
        sid = next((exact[k] for k in candidates if k in exact), None)
        if sid is not None:
            copy[tid] = sid
            n_shared += 1
        else:
            unk.append(tid)
    return copy, {"special": n_special, "shared_non_alphabetic": n_shared, "unk": sorted(unk),
                  "bow_insensitive": bow_insensitive}


# --------------------------------------------------------------------------------------------------------------
# API
# --------------------------------------------------------------------------------------------------------------
def build_mapping_from_vocabs(source: CanonicalVocab, target: CanonicalVocab, rule: str,
                              **options: Any) -> TokenMapping:
    if rule not in RULES:
        raise ValueError(f"unknown overlap rule {rule!r}; known: {', '.join(sorted(RULES))}")
    copy, stats = RULES[rule](source, target, **options)
    stats = {**stats, "copied": len(copy), "distinct_sources": len(set(copy.values())),
             "source_kind": source.kind, "target_kind": target.kind, "source_uncased": source.uncased,
             "options": dict(options)}
    stats.setdefault("unk", [])
    return TokenMapping(rule=rule, source_size=len(source), target_size=len(target), copy=dict(sorted(copy.items())),
                        source_tokens=list(source.canonical), target_tokens=list(target.canonical), stats=stats)


def build_mapping(source_tokenizer: Any, target_tokenizer: Any, rule: str, **options: Any) -> TokenMapping:
    """The overlap of ``target_tokenizer`` with ``source_tokenizer`` under ``rule`` (a name in :data:`RULES`).

    ``copy`` maps target id -> source id; ``source_tokens``/``target_tokens`` hold the canonical strings by id;
    ``stats`` holds per-kind counts, ``copied`` and, for ``tiktotok``, ``unk`` (target ids to take the UNK row).
    """
    return build_mapping_from_vocabs(canonical_vocab(source_tokenizer), canonical_vocab(target_tokenizer), rule,
                                     **options)


def match_counts(mapping: TokenMapping, specials: str) -> dict[str, Any]:
    """How the target tokens of ``mapping`` (an exact-match rule's) were matched, read from the mapping itself (so
    a mapping cached before these counts existed gives them too): ``exact`` (ordinary tokens whose canonical string
    is a source token's), ``special`` (special tokens matched, by role or by their text as ``specials_by`` says),
    ``new`` (tokens that copy nothing: the method computes them), ``target`` (every target token)."""
    special_ids = {t for t, c in enumerate(mapping.target_tokens) if c.startswith(SPECIAL_PREFIX)}
    n_special = sum(1 for t in mapping.copy if t in special_ids)
    return {"exact": len(mapping.copy) - n_special, "special": n_special, "specials_by": specials,
            "new": mapping.target_size - len(mapping.copy), "target": mapping.target_size}


def _mapping_to_json(m: TokenMapping) -> dict[str, Any]:
    d = asdict(m)
    d["copy"] = [[int(t), int(s)] for t, s in m.copy.items()]
    return d


def _mapping_from_json(d: dict[str, Any]) -> TokenMapping:
    d = dict(d)
    d["copy"] = {int(t): int(s) for t, s in d["copy"]}
    return TokenMapping(**d)


@dataclass
class _Vocabs:
    source_tokenizer: Any
    target_tokenizer: Any
    _src: CanonicalVocab | None = None
    _tgt: CanonicalVocab | None = None
    memo: dict[str, TokenMapping] = field(default_factory=dict)

    @property
    def source(self) -> CanonicalVocab:
        if self._src is None:
            self._src = canonical_vocab(self.source_tokenizer)
        return self._src

    @property
    def target(self) -> CanonicalVocab:
        if self._tgt is None:
            self._tgt = canonical_vocab(self.target_tokenizer)
        return self._tgt


def vocab_pair_key(source: CanonicalVocab, target: CanonicalVocab) -> str:
    return hash_obj({"version": OVERLAP_VERSION, "source": source.identity(), "target": target.identity()})


def mapping_cache(source_tokenizer: Any, target_tokenizer: Any,
                  cache_dir: Path | None) -> Callable[..., TokenMapping]:
    """``rule -> TokenMapping``, computed once per (source, target, rule, options) and kept in memory and, when
    ``cache_dir`` is given, on disk as ``<cache_dir>/<rule>-<key>.json`` (``key`` = hash of both vocabularies,
    their special tokens and normalizer flags, the rule, its options and :data:`OVERLAP_VERSION`)."""
    v = _Vocabs(source_tokenizer, target_tokenizer)

    def get(rule: str, **options: Any) -> TokenMapping:
        if rule not in RULES:
            raise ValueError(f"unknown overlap rule {rule!r}; known: {', '.join(sorted(RULES))}")
        key = hash_obj({"pair": vocab_pair_key(v.source, v.target), "rule": rule, "options": options})
        if key in v.memo:
            return v.memo[key]
        path = Path(cache_dir) / f"{rule}-{key}.json" if cache_dir is not None else None
        mapping: TokenMapping | None = None
        if path is not None and path.is_file():
            try:
                mapping = _mapping_from_json(json.loads(path.read_text(encoding="utf-8")))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable cached token mapping %s (%s)", path, exc)
        if mapping is None:
            mapping = build_mapping_from_vocabs(v.source, v.target, rule, **options)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
                tmp.write_text(json.dumps(_mapping_to_json(mapping), ensure_ascii=False), encoding="utf-8")
                os.replace(tmp, path)
        mapping.stats.setdefault("cache_key", key)
        v.memo[key] = mapping
        return mapping

    get.source_vocab = lambda: v.source  # type: ignore[attr-defined]
    get.target_vocab = lambda: v.target  # type: ignore[attr-defined]
    return get
