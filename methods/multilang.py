"""The many-target-languages protocol shared by WECHSEL and Tik-to-Tok (and the per-language report of FOCUS).

WECHSEL and Tik-to-Tok are defined for one source and one target language: one alignment (WECHSEL) or one
translation dictionary and one bilingual fastText model (Tik-to-Tok) per run. A target vocabulary that extends a
model to many languages (Glot500-style) holds tokens of all of them, so the harness fixes this protocol:

1. **Assignment.** Each target language's text (``resources/text/<lang>.txt``) is tokenized with the *target*
   tokenizer and every token id is counted. A token belongs to the language in whose text it is most frequent,
   *relative to that text's length* (``rule="relative"``, the default: count / number of tokens of that text, so
   a large pivot corpus does not claim every shared token), or by raw count (``rule="absolute"``). A tie goes to
   the first language in code order. A token whose best count is below ``min_count`` (default 1: it never
   occurs in any text) belongs to no language; special tokens never occur in tokenized text, so they belong to
   none either (they are copied by role anyway).
2. **Per-language initialization.** The tokens of language ``L`` are initialized with ``L``'s resources: WECHSEL
   with ``L``'s fastText vectors aligned to the source vectors on the ``pivot-L`` dictionary; Tik-to-Tok with the
   ``pivot-L`` dictionary and the fastText model trained on its symmetric bigram corpus. Tokens assigned to the
   source language itself (the world's pivot) use the identity (WECHSEL: the source vectors, no alignment;
   Tik-to-Tok: see :mod:`methods.tiktotok`).
3. **Fallback.** Tokens of no language, and tokens of a language whose resources are missing, take the method's
   own fallback: the per-dimension Gaussian for WECHSEL (as for tokens without a vector), the UNK row for
   Tik-to-Tok (which never draws random rows).
4. **Report.** ``stats["per_language"] = {lang: {"tokens", "copied", "method", "random", "unk"}}`` over all
   target ids (the key ``"none"`` holds the tokens of no language), and ``stats["missing"] = {lang: [resource,
   ...]}`` for every language of the world that lacks something the method needs.

Token counts are cached (``<cache_dir>/langcounts-<key>.npy``, keyed by the tokenizer fingerprint, the text files'
sha256 and ``max_lines``); the methods share one such folder (:func:`shared_counts_dir`), so FOCUS, WECHSEL and
Tik-to-Tok count a world's text once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import ConfigError
from harness.core.hashing import hash_obj
from methods.base import Provenance
from methods.fasttext_util import read_text_lines, sha256_of, tokenizer_fingerprint

log = logging.getLogger(__name__)
COUNTS_VERSION = 1
NONE = "none"


# --------------------------------------------------------------------------------------------------------------
# world resources by language
# --------------------------------------------------------------------------------------------------------------
def text_files(world: Any) -> dict[str, Path]:
    """``{lang: path}`` of the world's monolingual text."""
    return {p.stem: p for p in world.resource_files("target_text")}


def dictionary_files(world: Any) -> dict[tuple[str, str], Path]:
    """``{(src, tgt): path}`` of the world's bilingual dictionaries (``<src>-<tgt>.tsv``)."""
    out: dict[tuple[str, str], Path] = {}
    for p in world.resource_files("dictionary"):
        parts = p.stem.split("-")
        if len(parts) == 2 and all(parts):
            out[(parts[0], parts[1])] = p
    return out


def read_dictionary(path: Path, *, reverse: bool = False) -> list[tuple[str, str]]:
    """``(source_word, target_word)`` pairs of a dictionary file: one pair per line, tab-separated (or, as the
    WECHSEL reader does, separated by whitespace when a line has no tab); malformed lines are skipped.
    ``reverse`` swaps the columns (a ``<tgt>-<src>.tsv`` file read for the src->tgt direction)."""
    pairs: list[tuple[str, str]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            parts = line.split("\t") if "\t" in line else line.split()
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                continue
            a, b = parts[0].strip(), parts[1].strip()
            pairs.append((b, a) if reverse else (a, b))
    return pairs


def dictionary_for(world: Any, source_lang: str, target_lang: str) -> tuple[Path, bool] | None:
    """The dictionary file for ``source_lang -> target_lang`` and whether it must be read reversed."""
    files = dictionary_files(world)
    if (source_lang, target_lang) in files:
        return files[(source_lang, target_lang)], False
    if (target_lang, source_lang) in files:
        return files[(target_lang, source_lang)], True
    return None


def world_languages(world: Any) -> list[str]:
    """Every language the world knows of: its language table and the languages it has text for."""
    langs = set(getattr(world, "languages", {}) or {})
    langs |= set(text_files(world))
    return sorted(langs)


# --------------------------------------------------------------------------------------------------------------
# token counts and assignment
# --------------------------------------------------------------------------------------------------------------
def count_tokens(tokenizer: Any, lines: Iterable[str], batch: int = 2000) -> np.ndarray:
    """How often each target id occurs in ``lines`` tokenized with ``tokenizer`` (no special tokens added)."""
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    buf: list[str] = []

    def flush() -> None:
        if buf:
            enc = tokenizer(buf, add_special_tokens=False)["input_ids"]
            flat = np.fromiter((i for ids in enc for i in ids), dtype=np.int64)
            if len(flat):
                counts[:] += np.bincount(flat, minlength=len(counts))[:len(counts)]
            buf.clear()

    for line in lines:
        buf.append(line)
        if len(buf) >= batch:
            flush()
    flush()
    return counts


def shared_counts_dir(method_cache_dir: Path | None) -> Path | None:
    """The token-count cache every method uses: ``token-counts/`` beside the methods' own cache folders."""
    return None if method_cache_dir is None else Path(method_cache_dir).parent / "token-counts"


def language_token_counts(tokenizer: Any, texts: dict[str, Path], *, cache_dir: Path | None = None,
                          max_lines: int | None = None,
                          progress: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """``{lang: counts over target ids}`` for every text file (cached, see the module docstring)."""
    out: dict[str, np.ndarray] = {}
    fp = tokenizer_fingerprint(tokenizer)
    for lang, path in sorted(texts.items()):
        key = hash_obj({"v": COUNTS_VERSION, "tok": fp, "text": sha256_of(path), "max_lines": max_lines})
        cpath = Path(cache_dir) / f"langcounts-{key}.npy" if cache_dir is not None else None
        if cpath is not None and cpath.is_file():
            out[lang] = np.load(cpath, allow_pickle=False)
        else:
            out[lang] = count_tokens(tokenizer, read_text_lines(path, max_lines))
            if cpath is not None:
                cpath.parent.mkdir(parents=True, exist_ok=True)
                tmp = cpath.with_name(f".{cpath.stem}.{uuid.uuid4().hex[:8]}.npy")
                np.save(tmp, out[lang], allow_pickle=False)
                tmp.replace(cpath)
        if progress is not None:
            progress(1)
    return out


@dataclass
class Assignment:
    """Which language each target id belongs to (``None``: no language)."""

    languages: list[str]  # the languages counted, in code order
    lang_of: list[str | None]  # per target id
    rule: str
    min_count: int

    def ids_of(self, lang: str) -> np.ndarray:
        return np.array([i for i, la in enumerate(self.lang_of) if la == lang], dtype=np.int64)

    def sizes(self) -> dict[str, int]:
        out = {la: 0 for la in self.languages}
        out[NONE] = 0
        for la in self.lang_of:
            out[la if la is not None else NONE] += 1
        return out


def assign_languages(counts: dict[str, np.ndarray], n_tokens: int, *, rule: str = "relative",
                     min_count: int = 1) -> Assignment:
    """Assign every target id to the language whose text uses it most (see the module docstring)."""
    if rule not in ("relative", "absolute"):
        raise ConfigError(f"language assignment rule must be 'relative' or 'absolute', not {rule!r}")
    if int(min_count) < 1:
        raise ConfigError(f"language assignment min_count must be >= 1, not {min_count}")
    langs = sorted(counts)
    if not langs:
        return Assignment([], [None] * n_tokens, rule, int(min_count))
    c = np.stack([counts[la][:n_tokens] for la in langs]).astype(np.float64)  # (L, V)
    if rule == "relative":
        totals = c.sum(axis=1, keepdims=True)
        score = np.divide(c, totals, out=np.zeros_like(c), where=totals > 0)
    else:
        score = c
    best = np.argmax(score, axis=0)  # first maximum: ties go to the first language in code order
    best_count = c[best, np.arange(c.shape[1])]
    lang_of = [langs[b] if best_count[i] >= min_count else None for i, b in enumerate(best)]
    return Assignment(langs, lang_of, rule, int(min_count))


def per_language_counts(lang_of: list[str | None], provenance: np.ndarray,
                        languages: Iterable[str] = ()) -> dict[str, dict[str, int]]:
    """``{lang: {"tokens", "copied", "method", "random", "unk"}}`` over all target ids; key ``"none"`` for the
    ids of no language. The ``tokens`` add up to |V_t|."""
    names = {p.value: p.name.lower() for p in Provenance}
    out: dict[str, dict[str, int]] = {}
    for la in [*languages, NONE]:
        out.setdefault(la, {"tokens": 0, **{n: 0 for n in names.values()}})
    for la, prov in zip(lang_of, provenance.tolist(), strict=True):
        row = out.setdefault(la if la is not None else NONE, {"tokens": 0, **{n: 0 for n in names.values()}})
        row["tokens"] += 1
        row[names[int(prov)]] += 1
    return out
