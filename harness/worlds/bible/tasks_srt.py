"""SR-T stand-in: English->X pairs of short human-translated messages from gettext catalogs on PyPI.

Tatoeba is not in the registries. Well-translated software catalogs are: Django's own and its contrib apps,
Sphinx, Wagtail and django-allauth ship ``locale/<ll>/LC_MESSAGES/*.po``. A message becomes a pair when it has
2-30 English words, a translation that is not fuzzy, not a copy of the English, and no format placeholder,
markup or escape on either side (:func:`harness.worlds.bible.gettext_po.usable_pair`). Pairs are deduplicated by
their English side (the first catalog in a fixed order wins) and by their translation (a translation shared by
two English messages is dropped from the later one). The queries are English; ids are a hash of the English
text, so one English sentence has the same id in every language.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.worlds.bible.gettext_po import read_po, usable_pair


def sentence_id(english: str) -> str:
    return "t" + hashlib.sha1(english.encode("utf-8")).hexdigest()[:12]


@dataclass
class SrtLanguage:
    pairs: list[tuple[str, str, str]] = field(default_factory=list)  # (id, english, translation)
    per_source: dict[str, int] = field(default_factory=dict)
    available: int = 0  # usable pairs before the cap


def catalogs(root: Path, locale: str) -> list[Path]:
    """``.po`` files of ``locale`` below an extracted package, in a fixed order."""
    return sorted(p for p in root.rglob("*.po") if p.parent.name == "LC_MESSAGES" and p.parent.parent.name == locale)


def collect_pairs(sources: Sequence[tuple[str, Path]], locales: Mapping[str, Sequence[str]], *,
                  max_pairs: int = 1000, seed: int = 0) -> dict[str, SrtLanguage]:
    """Pairs per language; ``sources`` are (package name, extracted root) in priority order, ``locales`` maps a
    language code to its gettext locale folders (in priority order)."""
    out: dict[str, SrtLanguage] = {}
    for lang, locs in locales.items():
        res = SrtLanguage()
        by_en: dict[str, tuple[str, str]] = {}
        seen_tr: set[str] = set()
        for name, root in sources:
            for loc in locs:
                for po in catalogs(root, loc):
                    for e in read_po(po):
                        pair = usable_pair(e)
                        if pair is None:
                            continue
                        en, tr = pair
                        if en in by_en or tr in seen_tr:
                            continue
                        by_en[en] = (tr, name)
                        seen_tr.add(tr)
                        res.per_source[name] = res.per_source.get(name, 0) + 1
        res.available = len(by_en)
        items = sorted(by_en.items())
        if len(items) > max_pairs:
            rng = random.Random(f"{seed}:{lang}")
            items = sorted(rng.sample(items, max_pairs))
        res.pairs = [(sentence_id(en), en, tr) for en, (tr, _src) in items]
        if res.pairs:
            out[lang] = res
    return out
