"""Overlap rules and canonical token strings (methods/overlap.py)."""

from __future__ import annotations

import pytest

from methods import overlap as ov
from methods.overlap import CanonicalVocab, build_mapping, canonical_vocab, is_symbol_token, mapping_cache
from tests._surgery_fixtures import (
    bytelevel_tokenizer,
    wordpiece_tokenizer,
    xlmr_source_tokenizer,
    xlmr_target_tokenizer,
)


@pytest.fixture(scope="module")
def toks():
    return {"src": xlmr_source_tokenizer(), "tgt": xlmr_target_tokenizer(), "wp": wordpiece_tokenizer(),
            "bpe": bytelevel_tokenizer()}


def pairs(mapping, src_tok, tgt_tok):
    """{target token: source token} as raw strings, for readable assertions."""
    return {tgt_tok.convert_ids_to_tokens(t): src_tok.convert_ids_to_tokens(s) for t, s in mapping.copy.items()}


def ids(tok, *tokens):
    return [tok.convert_tokens_to_ids(t) for t in tokens]


# -- canonical strings -----------------------------------------------------------------------------------------
def test_kind_detection_and_flags(toks):
    src, wp, bpe = canonical_vocab(toks["src"]), canonical_vocab(toks["wp"]), canonical_vocab(toks["bpe"])
    assert (src.kind, wp.kind, bpe.kind) == ("sentencepiece", "wordpiece", "bytelevel")
    assert wp.uncased and wp.strip_accents and not src.uncased and not bpe.uncased
    assert not canonical_vocab(wordpiece_tokenizer(lowercase=False)).uncased


def test_canonical_strings_per_kind(toks):
    src, wp, bpe = canonical_vocab(toks["src"]), canonical_vocab(toks["wp"]), canonical_vocab(toks["bpe"])
    by = lambda cv, tok, t: cv.canonical[tok.convert_tokens_to_ids(t)]  # noqa: E731
    assert by(src, toks["src"], "▁the") == " the" and by(src, toks["src"], "s") == "s"
    assert by(src, toks["src"], "▁") == " "
    assert by(wp, toks["wp"], "##s") == "s" and by(wp, toks["wp"], "the") == " the"
    assert by(wp, toks["wp"], ",") == " ,"
    assert by(bpe, toks["bpe"], "Ġthe") == " the" and by(bpe, toks["bpe"], "ĠHaus") == " Haus"
    assert by(bpe, toks["bpe"], "Ã©") == "é" and by(bpe, toks["bpe"], "Ã±") == "ñ"
    # a lone lead byte of a multi-byte character is not text: SentencePiece's byte-fallback spelling
    assert by(bpe, toks["bpe"], "Ã") == "<0xC3>"
    # every byte-level token has its own canonical string (decode() would merge all partial bytes into U+FFFD)
    non_special = [c for i, c in enumerate(bpe.canonical) if i not in bpe.specials]
    assert len(set(non_special)) == len(non_special)


def test_special_tokens_by_role(toks):
    src, tgt, wp = canonical_vocab(toks["src"]), canonical_vocab(toks["tgt"]), canonical_vocab(toks["wp"])
    # BERT [CLS]/[SEP]/[PAD]/[UNK]/[MASK] -> XLM-R <s>/</s>/<pad>/<unk>/<mask>
    got = ov.match_specials(wp, tgt)
    t = toks["tgt"]
    expect = dict(zip(ids(t, "<s>", "</s>", "<pad>", "<unk>", "<mask>"),
                      ids(toks["wp"], "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"), strict=True))
    assert got == expect
    # same layout: id for id, and <mask> moves from the source's last id to the target's last id
    got = ov.match_specials(src, tgt)
    assert got[len(toks["tgt"]) - 1] == len(toks["src"]) - 1
    assert all(got[i] == i for i in range(4))
    # specials carry a role string that can never equal a real token's canonical string
    assert tgt.canonical[0] == "\x00bos/cls"


# -- the rules -----------------------------------------------------------------------------------------------
def test_ofa_rule_exact_then_case_insensitive(toks):
    m = build_mapping(toks["src"], toks["tgt"], "ofa")
    p = pairs(m, toks["src"], toks["tgt"])
    # every source piece keeps its own row (extension), specials included
    for tok in toks["src"].convert_ids_to_tokens(list(range(len(toks["src"])))):
        assert p[tok] == tok
    # case-insensitive step: new case variants copy the source token; ties -> last canonical string in sorted
    # order: " apple" sorts after " APPLE", so "▁Apple" copies "▁apple"
    assert p["▁haus"] == "▁Haus" and p["▁Cat"] == "▁cat" and p["▁Apple"] == "▁apple"
    # genuinely new pieces are not copied; the OFA rule has no whitespace fuzziness ("▁!" vs "!")
    for new in ("▁nyumba", "▁paka", "?", "▁12", "ñ", "▁!", "…", "▁ya"):
        assert new not in p
    assert m.stats["case_insensitive"] == 3 and m.stats["special"] == 5
    assert m.stats["copied"] == len(m.copy) == len(toks["src"]) + 3
    assert m.stats["distinct_sources"] == len(toks["src"])  # three targets share a source row


def test_ofa_rule_tie_rules_on_constructed_vocabs():
    """Source ids with one canonical string: the highest id wins; the lowercase table keeps the last string."""

    def cv(canon):
        return CanonicalVocab(kind="sentencepiece", tokens=list(canon), canonical=list(canon), specials={},
                              special_attrs={})

    src = cv([" a", " b", " a", " B", " Ab", " AB"])
    tgt = cv([" a", " b", " ab", " aB", " x"])
    copy, stats = ov.ofa_rule(src, tgt)
    assert copy[0] == 2  # " a" at ids 0 and 2: the highest id
    assert copy[1] == 1  # exact " b" (id 1) beats the case variant " B"
    # lowercase table over sorted canonical strings [" AB", " Ab", " B", " a", " b"]: " ab" -> " Ab" (id 4)
    assert copy[2] == 4 and copy[3] == 4
    assert 4 not in copy
    assert stats == {"special": 0, "exact": 2, "case_insensitive": 2}


def test_ofa_rule_wordpiece_and_bytelevel_sources(toks):
    p = pairs(build_mapping(toks["wp"], toks["tgt"], "ofa"), toks["wp"], toks["tgt"])
    assert p["▁the"] == "the" and p["▁The"] == "the" and p["▁Haus"] == "haus" and p["s"] == "##s"
    assert p["<s>"] == "[CLS]" and p["<mask>"] == "[MASK]"
    assert "," not in p  # WordPiece punctuation is word-initial (" ,"); OFA does not match "," to it
    p = pairs(build_mapping(toks["bpe"], toks["tgt"], "ofa"), toks["bpe"], toks["tgt"])
    assert p["▁the"] == "Ġthe" and p["▁The"] == "Ġthe" and p["ñ"] == "Ã±" and p["?"] == "?"


def test_focus_rule_exact_case_and_bow_sensitive(toks):
    p = pairs(build_mapping(toks["src"], toks["tgt"], "focus"), toks["src"], toks["tgt"])
    assert p["▁Haus"] == "▁Haus" and p["▁the"] == "▁the"
    for case_variant in ("▁haus", "▁Cat", "▁Apple"):
        assert case_variant not in p
    # symbols match without the BOW marker: "▁!" -> "!"; specials are copied (the same strings here)
    assert p["▁!"] == "!" and p["<mask>"] == "<mask>" and p["<s>"] == "<s>"
    assert "?" not in p and "▁12" not in p  # not in the source in any form


def test_focus_rule_symbols_option_and_uncased_source(toks):
    # "…" is punctuation for Unicode but not in ASCII string.punctuation (FOCUS's own test)
    code = pairs(build_mapping(toks["wp"], toks["tgt"], "focus"), toks["wp"], toks["tgt"])
    uni = pairs(build_mapping(toks["wp"], toks["tgt"], "focus", symbols="unicode"), toks["wp"], toks["tgt"])
    assert "…" not in code and uni["…"] == "…"
    # symbols reach WordPiece's word-initial punctuation and numbers
    assert code[","] == "," and code["!"] == "!" and code["1"] == "1" and code["?"] == "?"
    # default (deepfocus): exact and case-sensitive, even against an uncased source
    assert "▁The" not in code and "▁Haus" not in code and code["▁the"] == "the"
    # overlap="casefold": an uncased source sees "The" as "the"
    fold = pairs(build_mapping(toks["wp"], toks["tgt"], "focus", overlap="casefold"), toks["wp"], toks["tgt"])
    assert fold["▁The"] == "the" and fold["▁Haus"] == "haus" and fold["▁the"] == "the"
    assert set(fold) > set(code)
    # a cased source: casefold changes nothing
    assert build_mapping(toks["src"], toks["tgt"], "focus", overlap="casefold").copy == \
        build_mapping(toks["src"], toks["tgt"], "focus").copy
    with pytest.raises(ValueError, match="overlap"):
        build_mapping(toks["wp"], toks["tgt"], "focus", overlap="fold")


def test_focus_rule_specials_by_string_or_role(toks):
    tgt = toks["tgt"]
    # default (deepfocus): specials are ordinary tokens with their text: BERT's [CLS] is not "<s>"
    m = build_mapping(toks["wp"], tgt, "focus")
    assert not set(m.copy) & set(tgt.all_special_ids)
    assert m.stats["special"] == 0 and m.stats["specials"] == "string" and m.stats["overlap"] == "exact"
    # ... while an XLM-R-style source's "<s>" is the same string
    same = build_mapping(toks["src"], tgt, "focus")
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "mask_token_id"):
        assert same.copy[getattr(tgt, name)] == getattr(toks["src"], name)
    # specials="role": [CLS] -> <s>, [SEP] -> </s>, ...
    role = pairs(build_mapping(toks["wp"], tgt, "focus", specials="role"), toks["wp"], tgt)
    assert role["<s>"] == "[CLS]" and role["</s>"] == "[SEP]" and role["<mask>"] == "[MASK]"
    assert role["<pad>"] == "[PAD]" and role["<unk>"] == "[UNK]"
    with pytest.raises(ValueError, match="specials"):
        build_mapping(toks["wp"], tgt, "focus", specials="name")


def test_focus_rule_special_strings_on_constructed_vocabs():
    """deepfocus's details: a WordPiece special is the word " [CLS]"; a target token whose lowercased text is one
    of the target's special tokens counts as a symbol (fuzzy match); ties go to the highest id."""

    def cv(tokens, canon, specials, roles=None):
        return CanonicalVocab(kind="sentencepiece", tokens=tokens, canonical=canon,
                              specials={i: (roles or {}).get(i, "added:" + tokens[i]) for i in specials},
                              special_attrs={}, special_strings={i: canon[i] for i in specials},
                              special_contents=frozenset(tokens[i] for i in specials))

    src = cv(["[CLS]", "x", "<s>", "[cls]"], [" [CLS]", "x", "<s>", " [cls]"], [0])
    tgt = cv(["<s>", "▁[CLS]", "[CLS]", "<S>"], ["<s>", " [CLS]", "[CLS]", "<S>"], [0])
    copy, _ = ov.focus_rule(src, tgt)
    assert copy[0] == 2  # "<s>" by string (the source's "<s>" is an ordinary token here)
    assert copy[1] == 0  # " [CLS]" is the source special's canonical string
    assert 2 not in copy  # "[CLS]" inside a word: no exact match, not a symbol for the target
    assert copy[3] == 2  # "<S>" lowercases to the target special "<s>": a symbol, fuzzy-matched
    copy, _ = ov.focus_rule(src, tgt, specials="role")
    assert 1 not in copy  # the source special takes no part in string matching


def test_wechsel_rule_copies_only_specials(toks):
    m = build_mapping(toks["src"], toks["tgt"], "wechsel")
    assert set(m.copy) == {0, 1, 2, 3, len(toks["tgt"]) - 1}
    assert m.copy[len(toks["tgt"]) - 1] == len(toks["src"]) - 1
    # by string (the reference code): the same for an XLM-R-style source, nothing for BERT's [CLS] ...
    assert build_mapping(toks["src"], toks["tgt"], "wechsel", specials="string").copy == m.copy
    assert build_mapping(toks["wp"], toks["tgt"], "wechsel", specials="string").copy == {}
    assert len(build_mapping(toks["wp"], toks["tgt"], "wechsel").copy) == 5


def test_ofa_rule_specials_option(toks):
    # default unchanged: by role; "string": BERT's [CLS] is not "<s>", an XLM-R-style "<s>" is
    wp = build_mapping(toks["wp"], toks["tgt"], "ofa")
    by_string = build_mapping(toks["wp"], toks["tgt"], "ofa", specials="string")
    specials = set(toks["tgt"].all_special_ids)
    assert specials <= set(wp.copy) and not specials & set(by_string.copy)
    assert {t: s for t, s in wp.copy.items() if t not in specials} == by_string.copy
    assert build_mapping(toks["src"], toks["tgt"], "ofa", specials="string").copy == \
        build_mapping(toks["src"], toks["tgt"], "ofa").copy


def test_tiktotok_rule(toks):
    m = build_mapping(toks["src"], toks["tgt"], "tiktotok")
    p = pairs(m, toks["src"], toks["tgt"])
    # shared non-alphabetic tokens are copied; alphabetic ones never (false friends)
    assert p[","] == "," and p["1"] == "1" and p["▁123"] == "▁123" and p["▁"] == "▁"
    assert "▁the" not in p and "s" not in p
    # "▁!" shares its BOW-free form with "!" (bow_insensitive default)
    assert p["▁!"] == "!"
    unk = {toks["tgt"].convert_ids_to_tokens(i) for i in m.stats["unk"]}
    assert unk == {"?", "▁12", "…"}
    assert not set(m.stats["unk"]) & set(m.copy)
    strict = build_mapping(toks["src"], toks["tgt"], "tiktotok", bow_insensitive=False)
    assert "▁!" in {toks["tgt"].convert_ids_to_tokens(i) for i in strict.stats["unk"]}


def test_is_symbol_token():
    for s in ("", " ", "123", "!?", ",", "٣"):
        assert is_symbol_token(s)
    for s in ("a1", "1,000", "…", "abc"):
        assert not is_symbol_token(s)
    assert is_symbol_token("1,000", symbols="unicode") and is_symbol_token("…", symbols="unicode")
    assert not is_symbol_token("a…", symbols="unicode")


def test_mapping_fields_are_consistent(toks):
    for rule in ov.RULES:
        m = build_mapping(toks["wp"], toks["tgt"], rule)
        assert m.rule == rule and m.source_size == len(toks["wp"]) and m.target_size == len(toks["tgt"])
        assert all(0 <= t < m.target_size and 0 <= s < m.source_size for t, s in m.copy.items())
        assert m.stats["copied"] == len(m.copy)
        assert len(m.target_tokens) == m.target_size and len(m.source_tokens) == m.source_size


def test_unknown_rule_is_refused(toks):
    with pytest.raises(ValueError, match="unknown overlap rule"):
        build_mapping(toks["src"], toks["tgt"], "nope")


# -- the cache -------------------------------------------------------------------------------------------------
def test_mapping_cache_computes_once_and_reads_disk(toks, tmp_path, monkeypatch):
    calls = []
    real = ov.RULES["ofa"]
    monkeypatch.setitem(ov.RULES, "ofa", lambda s, t, **o: (calls.append(1), real(s, t, **o))[1])
    get = mapping_cache(toks["src"], toks["tgt"], tmp_path)
    first = get("ofa")
    assert get("ofa") is first and len(calls) == 1
    files = list(tmp_path.glob("ofa-*.json"))
    assert len(files) == 1
    # a fresh cache over the same vocabularies reads the file and computes nothing
    again = mapping_cache(xlmr_source_tokenizer(), xlmr_target_tokenizer(), tmp_path)("ofa")
    assert len(calls) == 1 and again.copy == first.copy and again.target_tokens == first.target_tokens
    # another target vocabulary: another key, computed
    mapping_cache(toks["src"], toks["wp"], tmp_path)("ofa")
    assert len(calls) == 2 and len(list(tmp_path.glob("ofa-*.json"))) == 2
    # options are part of the key
    get("focus")
    get("focus", symbols="unicode")
    get("focus", overlap="casefold")
    get("focus", specials="role")
    assert len(list(tmp_path.glob("focus-*.json"))) == 4
