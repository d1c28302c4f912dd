"""Stage 4 of the bible build, the retrieval and MLM tasks: SR-B and MLM on held-out verses, SR-T from message
catalogs; each task's ``meta.json`` names the packages its data come from."""

from __future__ import annotations

from harness.worlds.bible import bibletext as bt
from harness.worlds.bible.build_inputs import GETTEXT_PACKAGES, SPACY_PINS, Inputs
from harness.worlds.bible.languages import BY_CODE, PIVOT
from harness.worlds.writer import write_jsonl, write_lines


class TaskSteps:
    """SR-B, MLM and SR-T of :class:`~harness.worlds.bible.builder.BibleBuild` (writes through ``writer``)."""

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
            write_lines(tasks / "mlm" / f"{lang}.txt", lines)
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
