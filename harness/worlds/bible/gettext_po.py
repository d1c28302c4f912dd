"""Gettext catalogs (``.po``) as parallel English->X sentence pairs: the SR-T stand-in's raw material.

:func:`parse_po` reads a catalog (msgctxt, msgid, msgid_plural, msgstr / msgstr[n], flags, obsolete entries);
:func:`usable_pair` keeps a message only when it is a short human translation without format placeholders or
markup, so that retrieval compares sentences, not template syntax.
"""

from __future__ import annotations

import ast
import functools
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class PoEntry:
    msgid: str
    msgstr: str
    msgctxt: str | None = None
    plural: bool = False
    flags: set[str] = field(default_factory=set)

    @property
    def fuzzy(self) -> bool:
        return "fuzzy" in self.flags


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) < 2 or s[0] != '"' or s[-1] != '"':
        raise ValueError(f"not a quoted PO string: {s[:40]!r}")
    body = s[1:-1]
    if "\\" not in body:
        return body
    # PO strings use C escapes; Python's literal parser handles the same set for a plain string.
    try:
        return ast.literal_eval('"' + body.replace("\n", "") + '"')
    except (ValueError, SyntaxError):
        return body.replace('\\"', '"').replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")


def parse_po(text: str) -> list[PoEntry]:
    """Parse the text of a ``.po`` file. Obsolete (``#~``) entries and the header are dropped."""
    entries: list[PoEntry] = []
    cur: dict[str, str] = {}
    flags: set[str] = set()
    key: str | None = None

    def flush() -> None:
        nonlocal cur, flags, key
        if "msgid" in cur and cur["msgid"] != "":
            plural = "msgid_plural" in cur
            msgstr = cur.get("msgstr[0]", "") if plural else cur.get("msgstr", "")
            entries.append(PoEntry(cur["msgid"], msgstr, cur.get("msgctxt"), plural, flags))
        cur, flags, key = {}, set(), None

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            flush()
            continue
        if line.startswith("#,"):
            if "msgid" in cur and "msgstr" in "".join(cur):
                flush()
            flags |= {f.strip() for f in line[2:].split(",") if f.strip()}
            continue
        if line.startswith("#"):
            continue
        if line.startswith('"'):
            if key is not None:
                try:
                    cur[key] += _unquote(line)
                except ValueError:
                    pass
            continue
        m = re.match(r"^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+(.*)$", line)
        if not m:
            continue
        kw, rest = m.group(1), m.group(2)
        if kw in ("msgctxt", "msgid") and any(k.startswith("msgstr") for k in cur):
            flush()
        try:
            cur[kw] = _unquote(rest)
        except ValueError:
            cur[kw] = ""
        key = kw
    flush()
    return entries


def read_json_messages(path: Path, english: Path) -> list[PoEntry]:
    """A JSON message catalog (``{"Component.message": "text"}``, as Kolibri ships one per locale and bundle) as
    entries: the English text comes from the same bundle's English catalog, matched by message key."""
    import json

    src = json.loads(Path(english).read_text(encoding="utf-8"))
    tr = json.loads(Path(path).read_text(encoding="utf-8"))
    return [PoEntry(src[k], v) for k, v in sorted(tr.items())
            if isinstance(v, str) and isinstance(src.get(k), str) and src[k]]


def read_po(path: Path) -> list[PoEntry]:
    data = Path(path).read_bytes()
    m = re.search(rb"charset=([A-Za-z0-9_\-]+)", data[:2000])
    enc = m.group(1).decode("ascii") if m else "utf-8"
    try:
        text = data.decode(enc)
    except (LookupError, UnicodeDecodeError):
        text = data.decode("utf-8", errors="replace")
    return parse_po(text)


# printf-style (%s, %d, %(name)s, %1$s), brace-style ({name}, {0}, {}, {class name}, ICU MessageFormat's
# {count, plural, one {...} other {...}}), shell/JS templates ($var, ${x}, {{x}}),
# HTML/XML tags and entities, backquotes and escapes: messages holding any of these are not plain sentences.
PLACEHOLDER_RE = re.compile(
    r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[a-zA-Z%]"
    r"|%\d+\$?[a-zA-Z]?"
    r"|\{[^{}]*\}"
    r"|\{\{|\}\}"
    r"|\$\{?[A-Za-z_]"
    r"|<[^>]*>"
    r"|&[a-zA-Z#0-9]+;"
    r"|`"
    r"|\\"
    r"|\[\[|\]\]"
)


def has_placeholder(s: str) -> bool:
    return bool(PLACEHOLDER_RE.search(s))


_NO_SPACE_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "THAI")


@functools.cache
def _no_space_char(ch: str) -> bool:
    """Whether ``ch`` belongs to a script written without spaces (looked up once per distinct character)."""
    return unicodedata.name(ch, "").startswith(_NO_SPACE_SCRIPTS)


def text_units(s: str) -> int:
    """Words of a sentence; for scripts written without spaces, two characters count as one word."""
    words = s.split()
    cjk = sum(1 for ch in s if _no_space_char(ch))
    return max(len(words), cjk // 2)


def normalize_message(s: str) -> str:
    return " ".join(s.replace("\u00a0", " ").split())


def usable_pair(e: PoEntry, *, min_words: int = 2, max_words: int = 30) -> tuple[str, str] | None:
    """The (English, translation) pair of a message, or None when it is unfit for sentence retrieval."""
    if e.plural or e.fuzzy or not e.msgstr.strip() or not e.msgid.strip():
        return None
    if has_placeholder(e.msgid) or has_placeholder(e.msgstr):
        return None
    if "\n" in e.msgid.strip() or "\n" in e.msgstr.strip():
        return None
    en, tr = normalize_message(e.msgid), normalize_message(e.msgstr)
    if en == tr or not any(ch.isalpha() for ch in tr):
        return None
    if not (min_words <= len(en.split()) <= max_words):
        return None
    if text_units(tr) < 1 or text_units(tr) > 3 * max_words:
        return None
    return en, tr
