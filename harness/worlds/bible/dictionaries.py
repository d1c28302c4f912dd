"""Bilingual English<->X word dictionaries from sources independent of the Bible text.

* FreeDict (Debian ``dict-freedict-*``): dictd files, an ``.index`` (headword, base64 offset, base64 length) and a
  gzip-compressed ``.dict.dz``. Two entry layouts occur: the classic one (``headword /ipa/ <pos>``, a blank line,
  then translation lines, maybe numbered ``1. a, b``) and WikDict's (header, then per sense a translation line
  followed by an English gloss line).
* CLDR (Debian ``unicode-cldr-core``): emoji annotations (the ``tts`` name of each emoji in every locale, so names
  align through the code point) and display names of territories, languages, months and weekdays.

Only single-word pairs are kept (WECHSEL/MUSE-style word dictionaries); both sides are lower-cased.
"""

from __future__ import annotations

import gzip
import re
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VAL = {c: i for i, c in enumerate(_B64)}


def dictd_number(s: str) -> int:
    n = 0
    for ch in s:
        n = n * 64 + _B64_VAL[ch]
    return n


_HEADER_RE = re.compile(r"^(?P<head>.*?)\s*(?:/[^/]*/\s*)*(?:<[^>]*>\s*)*$")
_NUM_RE = re.compile(r"^\s*\d+\.\s*")
_TRAIL_NUM_RE = re.compile(r"\s+\d+\.\s*$")
_PAREN_RE = re.compile(r"\([^)]*\)|\[[^\]]*\]|\{[^}]*\}")


def _split_translations(line: str) -> list[str]:
    line = _TRAIL_NUM_RE.sub("", _NUM_RE.sub("", line))
    line = _PAREN_RE.sub("", line)
    return [t.strip(" .\"'") for t in re.split(r"[,;]", line) if t.strip(" .\"'")]


def parse_dictd_entry(body: str) -> list[str]:
    """The translations in one dictd entry body (the header line included)."""
    lines = body.split("\n")
    rest = lines[1:]
    out: list[str] = []
    if rest and rest[0].strip() == "":  # classic FreeDict: blank line, then translations
        for ln in rest[1:]:
            s = ln.strip()
            if not s or s.lower().startswith(("note:", "see:", "syn:", "ant:", "see also", "example")):
                continue
            if s.startswith('"') or s.startswith("«"):
                continue
            out.extend(_split_translations(s))
    else:  # WikDict: sense lines ("1. x, y" or a first unnumbered line), each followed by an English gloss
        for i, ln in enumerate(rest):
            s = ln.strip()
            if not s:
                continue
            if i == 0 or _NUM_RE.match(s):
                out.extend(_split_translations(s))
    seen: set[str] = set()
    return [t for t in out if not (t in seen or seen.add(t))]


def read_dictd(index: Path, data: Path) -> list[tuple[str, str]]:
    """(headword, translation) pairs of a dictd dictionary."""
    raw = gzip.open(data).read() if str(data).endswith(".dz") else Path(data).read_bytes()
    pairs: list[tuple[str, str]] = []
    for line in Path(index).read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        head, off, ln = parts
        try:
            body = raw[dictd_number(off):dictd_number(off) + dictd_number(ln)].decode("utf-8", errors="replace")
        except KeyError:
            continue
        for t in parse_dictd_entry(body):
            pairs.append((head.strip(), t))
    return pairs


def single_word(w: str) -> bool:
    """A single word: letters and combining marks (ZWNJ/ZWJ, inner hyphens and apostrophes allowed)."""
    w = w.strip()
    if not w or not w[0].isalpha() or not (w[-1].isalpha() or unicodedata.category(w[-1]).startswith("M")):
        return False
    for ch in w:
        if ch.isalpha() or ch in "\u200c\u200d-'\u2019" or unicodedata.category(ch).startswith("M"):
            continue
        return False
    return True


def word_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Lower-cased single-word pairs, duplicates removed, order kept."""
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for a, b in pairs:
        a, b = a.strip().lower(), b.strip().lower()
        if single_word(a) and single_word(b) and (a, b) not in seen:
            seen.add((a, b))
            out.append((a, b))
    return out


# -- CLDR ---------------------------------------------------------------------------------------------------
def read_cldr_annotations(path: Path) -> dict[str, str]:
    """Emoji code point -> the locale's ``tts`` name."""
    out: dict[str, str] = {}
    for el in ET.parse(path).getroot().iter("annotation"):
        if el.get("type") == "tts" and el.text:
            out[el.get("cp", "")] = el.text.strip()
    return out


def read_cldr_names(path: Path) -> dict[str, str]:
    """Display names keyed by kind and code: ``territory:KE``, ``language:sw``, ``month:3``, ``day:sun``."""
    out: dict[str, str] = {}
    root = ET.parse(path).getroot()
    for kind in ("territory", "language"):
        for el in root.iter(kind):
            if el.get("alt") is None and el.text and el.get("type"):
                out.setdefault(f"{kind}:{el.get('type')}", el.text.strip())
    for cal in root.iter("calendar"):
        if cal.get("type") != "gregorian":
            continue
        for ctx_tag, item_tag, key in (("monthContext", "month", "month"), ("dayContext", "day", "day")):
            for ctx in cal.iter(ctx_tag):
                if ctx.get("type") != "format":
                    continue
                for width in ctx:
                    if width.get("type") != "wide":
                        continue
                    for el in width.iter(item_tag):
                        if el.get("alt") is None and el.text:
                            out.setdefault(f"{key}:{el.get('type')}", el.text.strip())
    return out


def align_by_key(en: dict[str, str], other: dict[str, str]) -> list[tuple[str, str]]:
    return [(en[k], other[k]) for k in sorted(en) if k in other]
