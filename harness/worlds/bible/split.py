"""The held-out split, chosen before anything else is built.

Whole chapters are held out (not single verses), so that no training text holds a held-out verse's neighbours.
The evaluation verses of SR-B, MLM and the silver tagging test sets are drawn from the held-out chapters; nothing
that trains or shapes a model (tokenizer, word vectors, monolingual/CPT text, the MLM heads, taggers' training
sets) may contain a held-out verse. :func:`choose_heldout` is a pure function of the verse inventory and the seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from harness.worlds.bible.bibletext import BOOKS, chapter_of, parse_verse_id


def canonical_order(vids: Iterable[str]) -> list[str]:
    return sorted(vids, key=parse_verse_id)


@dataclass(frozen=True)
class HeldOutSplit:
    seed: int
    chapters: tuple[str, ...]  # held-out chapters, ``BOOK.chapter``
    srb: tuple[str, ...]  # SR-B verses (present in every language)
    mlm: tuple[str, ...]  # MLM evaluation verses
    tagging: tuple[str, ...]  # verses for the silver NER/POS test sets

    def is_heldout(self, vid: str) -> bool:
        return chapter_of(vid) in self._chapter_set

    @property
    def _chapter_set(self) -> frozenset[str]:
        cached = self.__dict__.get("_cs")
        if cached is None:
            cached = frozenset(self.chapters)
            object.__setattr__(self, "_cs", cached)
        return cached

    def training(self, verses: Mapping[str, str]) -> dict[str, str]:
        """The verses of one text that may be used for training (held-out chapters removed)."""
        return {vid: t for vid, t in verses.items() if not self.is_heldout(vid)}

    def record(self) -> dict:
        d = asdict(self)
        return {"seed": d["seed"], "unit": "chapter", "chapters": list(d["chapters"]),
                "n_chapters": len(d["chapters"]), "srb_verses": len(d["srb"]), "mlm_verses": len(d["mlm"]),
                "tagging_verses": len(d["tagging"])}


def choose_heldout(reference: Mapping[str, str], available: Mapping[str, Iterable[str]], *, seed: int,
                   heldout_verses: int = 2400, n_srb: int = 500, n_mlm: int = 500) -> HeldOutSplit:
    """Pick held-out chapters (about ``heldout_verses`` verses) and the evaluation verses inside them.

    ``reference`` is the complete verse inventory (e.g. the KJV's ids); ``available`` maps each language to the
    verse ids its text has. SR-B verses must exist in every language; MLM and tagging verses are the other
    held-out verses (a language lacking some of them simply has fewer).
    """
    rng = random.Random(seed)
    by_chapter: dict[str, list[str]] = {}
    for vid in reference:
        by_chapter.setdefault(chapter_of(vid), []).append(vid)
    chapters = sorted(by_chapter, key=lambda c: (BOOKS.index(c.split(".")[0]), int(c.split(".")[1])))
    rng.shuffle(chapters)
    chosen: list[str] = []
    total = 0
    for ch in chapters:
        if total >= heldout_verses:
            break
        chosen.append(ch)
        total += len(by_chapter[ch])
    chosen_set = set(chosen)
    held = canonical_order(v for ch in chosen for v in by_chapter[ch])
    sets = [set(v) for v in available.values()]
    everywhere = [v for v in held if all(v in s for s in sets)]
    srb = sorted(rng.sample(everywhere, min(n_srb, len(everywhere))), key=parse_verse_id)
    srb_set = set(srb)
    rest = [v for v in held if v not in srb_set]
    mlm = sorted(rng.sample(rest, min(n_mlm, len(rest))), key=parse_verse_id)
    mlm_set = set(mlm)
    tagging = [v for v in rest if v not in mlm_set]
    chosen_sorted = sorted(chosen_set, key=lambda c: (BOOKS.index(c.split(".")[0]), int(c.split(".")[1])))
    return HeldOutSplit(seed=seed, chapters=tuple(chosen_sorted), srb=tuple(srb), mlm=tuple(mlm),
                        tagging=tuple(tagging))
