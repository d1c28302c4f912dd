"""Gold tagging data from the registries: Turkish and Indonesian POS, Japanese NER.

* ``turkish-treebanks``: CoNLL-U with the 12-tag Google universal POS set and tokens split at inflectional groups
  (IGs): an IG token has the relation ``ig``, ``SpaceAfter=No`` and its head is the next token. IGs are merged into
  words (form = concatenation; the word's tag is that of its last IG, which carries the word's syntactic role)
  and the tags are mapped to UD v2 UPOS.
* ``aksara``: ``word/UPOS`` lines (UD v2 tags already).
* ``hironsancorpus``: MeCab feature lines with an IOB2 tag in the last column (IREX types); PSN->PER, LOC, ORG are
  kept and the other types (DAT, TIM, MON, PER (= percent), ART) become ``O``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

UPOS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
        "SCONJ", "SYM", "VERB", "X")

# Google universal tags (Petrov et al. 2012) -> UD v2 UPOS. CONJ is split by the language-specific tag (CC is a
# coordinating conjunction); NOUN becomes PROPN for proper nouns (XPOS NNP or the feature Proper=True).
GOOGLE_TO_UPOS = {
    "NOUN": "NOUN", "VERB": "VERB", "ADJ": "ADJ", "ADV": "ADV", "PRON": "PRON", "DET": "DET", "ADP": "ADP",
    "NUM": "NUM", "CONJ": "CCONJ", "PRT": "PART", ".": "PUNCT", "PUNCT": "PUNCT", "X": "X",
    "ONOM": "INTJ", "AFFIX": "X",
}


def google_to_upos(tag: str, xpos: str = "_", feats: str = "_") -> str:
    if tag == "NOUN" and (xpos == "NNP" or "Proper=True" in feats.split("|")):
        return "PROPN"
    if tag == "CONJ" and xpos not in ("CC", "_"):
        return "SCONJ"
    return GOOGLE_TO_UPOS.get(tag, "X")


@dataclass
class Sentence:
    tokens: list[str]
    tags: list[str]
    sid: str = ""


@dataclass
class ConlluToken:
    id: int
    form: str
    upos: str
    xpos: str
    feats: str
    head: str
    deprel: str
    misc: str

    @property
    def space_after(self) -> bool:
        return "SpaceAfter=No" not in self.misc.split("|")


def read_conllu(text: str) -> list[tuple[str, list[ConlluToken]]]:
    """Sentences of a CoNLL-U text as (sent_id, tokens); multiword ranges and empty nodes are skipped."""
    out: list[tuple[str, list[ConlluToken]]] = []
    toks: list[ConlluToken] = []
    sid = ""
    for line in text.splitlines() + [""]:
        if not line.strip():
            if toks:
                out.append((sid, toks))
            toks, sid = [], ""
            continue
        if line.startswith("#"):
            if line.startswith("# sent_id"):
                sid = line.split("=", 1)[1].strip()
            continue
        cols = line.split("\t")
        if len(cols) < 10 or not cols[0].isdigit():
            continue
        toks.append(ConlluToken(int(cols[0]), cols[1], cols[3], cols[4], cols[5], cols[6], cols[7], cols[9]))
    return out


def merge_inflectional_groups(toks: list[ConlluToken]) -> list[tuple[str, ConlluToken]]:
    """Words of a sentence split at inflectional groups: (word form, the word's last IG token)."""
    words: list[tuple[str, ConlluToken]] = []
    parts: list[str] = []
    for i, t in enumerate(toks):
        parts.append(t.form)
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        is_ig = (t.deprel == "ig" and not t.space_after and nxt is not None and t.head == str(nxt.id)
                 and t.upos != "PUNCT" and nxt.upos != "PUNCT")
        if is_ig:
            continue
        words.append(("".join(parts), t))
        parts = []
    return words


def read_turkish(paths: list[Path]) -> list[Sentence]:
    out: list[Sentence] = []
    for p in paths:
        for sid, toks in read_conllu(Path(p).read_text(encoding="utf-8")):
            words = merge_inflectional_groups(toks)
            out.append(Sentence([w for w, _ in words], [google_to_upos(t.upos, t.xpos, t.feats) for _, t in words],
                                sid))
    return out


def read_aksara(path: Path) -> list[Sentence]:
    out: list[Sentence] = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        items = line.split()
        if not items:
            continue
        toks, tags = [], []
        for it in items:
            word, sep, tag = it.rpartition("/")
            if not sep or not word or tag not in UPOS:
                toks = []
                break
            toks.append(word)
            tags.append(tag)
        if toks:
            out.append(Sentence(toks, tags, f"aksara-{n}"))
    return out


HIRONSAN_TYPES = {"PSN": "PER", "LOC": "LOC", "ORG": "ORG"}


def read_hironsan(path: Path) -> list[Sentence]:
    out: list[Sentence] = []
    toks: list[str] = []
    tags: list[str] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip():
            if toks:
                out.append(Sentence(toks, fix_iob(tags), f"hironsan-{len(out)}"))
            toks, tags = [], []
            continue
        cols = line.split("\t")
        tag = cols[-1].strip()
        prefix, _, typ = tag.partition("-")
        mapped = HIRONSAN_TYPES.get(typ)
        toks.append(cols[0])
        tags.append(f"{prefix}-{mapped}" if mapped and prefix in ("B", "I") else "O")
    return out


def fix_iob(tags: list[str]) -> list[str]:
    """Valid IOB2: an ``I-X`` that does not continue an ``X`` span becomes ``B-X``."""
    out: list[str] = []
    prev = "O"
    for t in tags:
        if t.startswith("I-") and prev[2:] != t[2:]:
            t = "B-" + t[2:]
        out.append(t)
        prev = t
    return out
