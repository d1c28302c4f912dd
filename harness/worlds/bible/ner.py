"""Silver NER for the Bible languages: English entities projected through the verse alignment.

1. A name lexicon per language, learned on the *training* verses only: every English word that occurs inside an
   entity is associated with the target words that occur in the same verses (Dice coefficient over verse sets).
   A target word is linked to its best English entity word when the two are strongly associated and the target
   word occurs mostly in that word's verses (names are translated consistently; inflected forms each get linked).
2. In a held-out verse, each English entity span (PER/LOC/ORG) is looked up in the aligned target verse; the
   linked target tokens form the projected span (short gaps inside one entity are bridged). A verse where some
   English entity finds no target token, or where two labels claim one token, is dropped (precision first).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import regex

from harness.worlds.bible.tagging import ENT_MAP, SilverSentence
from harness.worlds.bible.wordvectors import VerseIndex, words

TOKEN_RE = regex.compile(r"[\p{L}\p{M}\p{N}\u200c\u200d]+|[^\s\p{L}\p{M}\p{N}]")


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Tokens of a sentence (letter/digit runs and single punctuation marks) with character offsets."""
    return [(m.group(), m.start(), m.end()) for m in TOKEN_RE.finditer(text)]


def name_lexicon(eng: VerseIndex, tgt: VerseIndex, entity_words: Iterable[str], *, min_dice: float = 0.15,
                 min_precision: float = 0.6, chunk: int = 256) -> dict[str, set[str]]:
    """English entity word -> linked target words (see the module docstring).

    A target word is linked only to the English word it is most associated with over the *whole* English
    vocabulary, so that a frequent entity word ("Israel") does not capture common target words.
    """
    ews = sorted({w for w in entity_words if w in eng.row})
    if not ews:
        return {}
    e_idx = np.array([eng.row[w] for w in ews])
    inter = (eng.matrix[e_idx] @ tgt.matrix.T).tocoo()
    e_cnt = eng.counts[e_idx]
    best: dict[int, tuple[float, int]] = {}
    for i, j, c in zip(inter.row, inter.col, inter.data, strict=True):
        dice = 2 * c / (e_cnt[i] + tgt.counts[j])
        prec = c / tgt.counts[j]
        if dice < min_dice or prec < min_precision or (c < 2 and e_cnt[i] > 2):
            continue
        if j not in best or dice > best[j][0]:
            best[j] = (dice, i)
    cand = sorted(best)
    eng_t = eng.matrix.T.tocsc()
    lex: dict[str, set[str]] = {}
    for k in range(0, len(cand), chunk):
        rows = np.array(cand[k:k + chunk])
        co = (tgt.matrix[rows] @ eng_t).toarray()  # [chunk, n_english_words]
        dice_all = 2 * co / (tgt.counts[rows][:, None] + eng.counts[None, :])
        top = dice_all.max(axis=1)
        for r, j in enumerate(rows):
            d, i = best[int(j)]
            if d >= top[r] - 1e-9:
                lex.setdefault(ews[i], set()).add(tgt.vocab[int(j)])
    return lex


def entity_words(tagged: Iterable[SilverSentence]) -> set[str]:
    out: set[str] = set()
    for t in tagged:
        for s, e, label in t.ents:
            if label in ENT_MAP:
                for tok in t.tokens[s:e]:
                    out.update(words(tok))
    return out


def project(eng: SilverSentence, text: str, lexicon: dict[str, set[str]], *, max_gap: int = 1
            ) -> tuple[list[str], list[str]] | None:
    """Project ``eng``'s entities onto ``text``; (tokens, IOB2 tags) or None when projection is incomplete."""
    toks = tokenize(text)
    low = [t[0].lower() for t in toks]
    owner: dict[int, tuple[int, str]] = {}  # target token -> (entity index, label)
    for k, (s, e, label) in enumerate(eng.ents):
        lab = ENT_MAP.get(label)
        if lab is None:
            continue
        targets: set[str] = set()
        for tok in eng.tokens[s:e]:
            for w in words(tok):
                targets |= lexicon.get(w, set())
        hits = [i for i, w in enumerate(low) if w in targets]
        if not hits:
            return None
        for i in hits:
            if i in owner and owner[i][1] != lab:
                return None
            owner.setdefault(i, (k, lab))
    # bridge short gaps between tokens of the same entity ("mer de Galilée")
    idx = sorted(owner)
    for a, b in zip(idx, idx[1:], strict=False):
        if owner[a][0] == owner[b][0] and 1 < b - a <= max_gap + 1:
            if all(low[i].isalpha() and len(low[i]) <= 4 for i in range(a + 1, b)):
                for i in range(a + 1, b):
                    owner[i] = owner[a]
    tags = ["O"] * len(toks)
    prev: tuple[int, str] | None = None
    for i in range(len(toks)):
        cur = owner.get(i)
        if cur is None:
            prev = None
            continue
        tags[i] = ("I-" if prev == cur else "B-") + cur[1]
        prev = cur
    return [t[0] for t in toks], tags


def char_spans(tags: list[str], offsets: list[tuple[int, int]]) -> set[tuple[int, int, str]]:
    """Entity spans of an IOB2 sequence as character spans (for comparing differently tokenized taggings)."""
    spans: set[tuple[int, int, str]] = set()
    start = None
    label = ""
    for i, t in enumerate(tags + ["O"]):
        if start is not None and (t == "O" or t.startswith("B-") or t[2:] != label):
            spans.add((offsets[start][0], offsets[i - 1][1], label))
            start = None
        if t.startswith("B-") or (t.startswith("I-") and start is None):
            start, label = i, t[2:]
    return spans


def span_prf(gold: list[set], pred: list[set]) -> dict[str, float]:
    tp = sum(len(g & p) for g, p in zip(gold, pred, strict=True))
    ng = sum(len(g) for g in gold)
    npred = sum(len(p) for p in pred)
    prec = tp / npred if npred else 0.0
    rec = tp / ng if ng else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"precision": round(prec, 4), "recall": round(rec, 4), "f1": round(f1, 4), "gold_spans": ng,
            "predicted_spans": npred}


def common_words(lines: Iterable[str]) -> set[str]:
    """Lower-cased words that are written in lower case at least as often as capitalized (sentence-initial
    tokens not counted): a capitalized occurrence of one of them is not a name ("Behold", "Spirit")."""
    lower: dict[str, int] = {}
    upper: dict[str, int] = {}
    for line in lines:
        toks = [t for t, _s, _e in tokenize(line)]
        for i, t in enumerate(toks):
            if not t[:1].isalpha() or (i == 0 or toks[i - 1] in {".", "!", "?", "\u201c", '"', ":"}):
                continue
            key = t.lower()
            if t[:1].isupper():
                upper[key] = upper.get(key, 0) + 1
            else:
                lower[key] = lower.get(key, 0) + 1
    return {w for w, n in lower.items() if n >= upper.get(w, 0)}


def clean_entities(tagged: dict[str, SilverSentence], common: set[str]) -> tuple[dict[str, SilverSentence], dict[str, int]]:
    """Make a tagger's entities consistent over a corpus: drop entities made only of common words, and give
    every surface form its majority label (PER/LOC/ORG after :data:`ENT_MAP`)."""
    from collections import Counter

    votes: dict[str, Counter] = {}
    for t in tagged.values():
        for s, e, label in t.ents:
            lab = ENT_MAP.get(label)
            if lab is not None:
                votes.setdefault(" ".join(t.tokens[s:e]).lower(), Counter())[lab] += 1
    majority = {form: c.most_common(1)[0][0] for form, c in votes.items()}
    stats = {"dropped_common": 0, "relabelled": 0, "kept": 0}
    out: dict[str, SilverSentence] = {}
    for rid, t in tagged.items():
        ents = []
        for s, e, label in t.ents:
            lab = ENT_MAP.get(label)
            if lab is None:
                continue
            alpha = [w.lower() for w in t.tokens[s:e] if w[:1].isalpha()]
            if not alpha or all(w in common for w in alpha):
                stats["dropped_common"] += 1
                continue
            new = majority[" ".join(t.tokens[s:e]).lower()]
            stats["relabelled"] += int(new != lab)
            stats["kept"] += 1
            ents.append((s, e, new))
        out[rid] = SilverSentence(t.tokens, t.pos, ents, t.offsets)
    return out, stats
