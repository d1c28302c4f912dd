"""SR-T stand-in: English->X pairs of short human-translated messages from software catalogs on PyPI.

Tatoeba is not in the registries. Well-translated software catalogs are: Django's own and its contrib apps,
Sphinx, Wagtail and django-allauth ship gettext ``locale/<ll>/LC_MESSAGES/*.po``; Kolibri (an offline learning
platform translated for African and South Asian schools: Swahili, Chichewa, Bengali, ...) ships JSON message
catalogs ``locale/<ll>/LC_MESSAGES/<bundle>-messages.json`` keyed by message id, the English text in the ``en``
catalog of the same bundle. A message becomes a pair when it has 2-30 English words, a translation that is not
fuzzy, not a copy of the English, and no format placeholder (printf, brace, ICU MessageFormat), markup or escape
on either side (:func:`harness.worlds.bible.gettext_po.usable_pair`). Pairs are deduplicated by their English
side (the first catalog in a fixed order wins) and by their translation (a translation shared by two English
messages is dropped from the later one). The queries are English; ids are a hash of the English text, so one
English sentence has the same id in every language.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.worlds.bible.gettext_po import PoEntry, read_json_messages, read_po, usable_pair


def sentence_id(english: str) -> str:
    return "t" + hashlib.sha1(english.encode("utf-8")).hexdigest()[:12]


@dataclass
class SrtLanguage:
    pairs: list[tuple[str, str, str]] = field(default_factory=list)  # (id, english, translation)
    per_source: dict[str, int] = field(default_factory=dict)
    available: int = 0  # usable pairs before the cap


def catalog_index(root: Path) -> dict[str, list[Path]]:
    """Message catalogs below an extracted package by locale folder (``.po``, and ``.json`` where the same bundle
    has an English catalog), each list in a fixed order. One walk of the tree serves every language."""
    out: dict[str, list[Path]] = {}
    for p in sorted([*root.rglob("*.po"), *root.rglob("*.json")]):
        if p.parent.name != "LC_MESSAGES":
            continue
        if p.suffix == ".po" or (p.suffix == ".json" and english_catalog(p).is_file()):
            out.setdefault(p.parent.parent.name, []).append(p)
    return out


def catalogs(root: Path, locale: str) -> list[Path]:
    """Message catalogs of ``locale`` below an extracted package, in a fixed order."""
    return catalog_index(root).get(locale, [])


def english_catalog(path: Path) -> Path:
    """The English catalog of the bundle ``path`` belongs to (``locale/en/LC_MESSAGES/<same name>``)."""
    return path.parent.parent.parent / "en" / "LC_MESSAGES" / path.name


def catalog_entries(path: Path) -> list[PoEntry]:
    return read_json_messages(path, english_catalog(path)) if path.suffix == ".json" else read_po(path)


def collect_pairs(sources: Sequence[tuple[str, Path]], locales: Mapping[str, Sequence[str]], *,
                  max_pairs: int = 1000, seed: int = 0) -> dict[str, SrtLanguage]:
    """Pairs per language; ``sources`` are (package name, extracted root) in priority order, ``locales`` maps a
    language code to its gettext locale folders (in priority order)."""
    out: dict[str, SrtLanguage] = {}
    indexed = [(name, catalog_index(root)) for name, root in sources]  # one walk per package
    for lang, locs in locales.items():
        res = SrtLanguage()
        by_en: dict[str, tuple[str, str]] = {}
        seen_tr: set[str] = set()
        for name, index in indexed:
            for loc in locs:
                for cat in index.get(loc, []):
                    for e in catalog_entries(cat):
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
