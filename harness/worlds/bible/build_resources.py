"""Stage 3 of the bible build: the resources (monolingual and CPT text, PPMI-SVD word vectors, dictionaries),
all without held-out verses."""

from __future__ import annotations

from collections import Counter

from harness.worlds.bible import bibletext as bt
from harness.worlds.bible.build_inputs import Inputs
from harness.worlds.bible.fetch import FREEDICT
from harness.worlds.bible.languages import BY_CODE, PIVOT, iso3
from harness.worlds.bible.split import canonical_order
from harness.worlds.writer import write_lines


class ResourceSteps:
    """The resources stage of :class:`~harness.worlds.bible.builder.BibleBuild` (after the split; sets
    ``text_chars``, ``verse_index``, ``wv_stats``, ``word_vectors``, ``dict_stats``, ``dict_words``)."""

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
            write_lines(res / "text" / f"{lang}.txt", lines)
            self.text_chars[lang] = sum(len(x) for x in lines)
            cpt = self.train_primary[lang]
            write_lines(res / "cpt" / f"{lang}.txt", [cpt[vid] for vid in canonical_order(cpt)])

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
            write_lines(out / f"{PIVOT}-{lang}.tsv", [f"{a}\t{b}" for a, b in merged])
            self.dict_stats[lang] = {"pairs": len(merged),
                                     "sources": {src: len(v) for src, v in sorted(pairs[lang].items())}}
            for a, b in merged:
                self.dict_words.update((a, b))
