"""The glot500 world's language-code table: every source's codes -> iso3_Script, as the papers' lists name them."""

from __future__ import annotations

import re
import tomllib

import pytest

from harness.worlds.glot500 import langcodes as lc
from harness.worlds.glot500.builder import SPEC_PATH


@pytest.fixture(scope="module")
def spec_langs() -> dict:
    with open(SPEC_PATH, "rb") as f:
        return tomllib.load(f)["languages"]


def test_tables_cover_the_papers_lists_exactly(spec_langs):
    # seed 000 App. C.1: the NER, POS and SR-T languages are exactly what the source codes map to
    assert sorted(lc.WIKIANN.values()) == sorted(spec_langs["ner"])
    assert sorted(lc.UD_PREFIX.values()) == sorted(spec_langs["pos"])
    assert sorted(lc.TATOEBA.values()) == sorted(spec_langs["srt"])
    assert len(lc.WIKIANN) + len(lc.WIKIANN_EXTRA) == 176  # every unimelb-nlp/wikiann config
    assert len(lc.TATOEBA) + len(lc.TATOEBA_EXTRA) == 112  # every mteb/tatoeba-bitext-mining subset
    assert not set(lc.WIKIANN) & set(lc.WIKIANN_EXTRA)
    # one code per language: no two configs of the papers' lists collapse onto the same language
    for table in (lc.WIKIANN, lc.UD_PREFIX, lc.TATOEBA):
        assert len(set(table.values())) == len(table)
    for code in [*lc.WIKIANN.values(), *lc.UD_PREFIX.values(), *lc.TATOEBA.values(), *lc.WIKIANN_EXTRA.values()]:
        assert lc.is_code(code), code


@pytest.mark.parametrize("config,code", [
    ("en", "eng_Latn"), ("zh-yue", "yue_Hani"), ("zh-min-nan", "nan_Latn"), ("zh-classical", "lzh_Hani"),
    ("bat-smg", "sgs_Latn"), ("cbk-zam", "cbk_Latn"), ("bh", "bih_Deva"), ("sh", "hbs_Latn"), ("no", "nor_Latn"),
    ("sw", "swa_Latn"), ("gd", "gla_Latn"), ("ja", "jpn_Jpan"), ("als", "als_Latn"), ("ka", "kat_Geor"),
    ("simple", "eng_Latn"), ("fiu-vro", "vro_Latn"),
])
def test_wikiann_codes(config, code):
    assert lc.from_wikiann(config) == code


def test_wikiann_inverse_and_extra_configs():
    assert lc.to_wikiann("yue_Hani") == "zh-yue"
    assert lc.to_wikiann("eng_Latn") == "en"  # never the colliding "simple"
    assert lc.to_wikiann("bel_Cyrl") == "be"  # never "be-x-old"
    with pytest.raises(lc.LanguageCodeError, match="not in the papers' NER list"):
        lc.to_wikiann("swh_Latn")  # WikiANN "sw" is the macrolanguage swa_Latn
    with pytest.raises(lc.LanguageCodeError, match="outside|unknown WikiANN code 'simple'"):
        lc.from_wikiann("simple", extra=False)


@pytest.mark.parametrize("name,code", [
    ("en_ewt", "eng_Latn"), ("en", "eng_Latn"), ("UD_English-EWT", "eng_Latn"), ("English", "eng_Latn"),
    ("no_bokmaal", "nor_Latn"), ("no_nynorsklia", "nor_Latn"), ("zh_gsdsimp", "zho_Hani"),
    ("lzh_kyoto", "lzh_Hani"), ("UD_Classical_Chinese-Kyoto", "lzh_Hani"), ("grc_proiel", "grc_Grek"),
    ("Ancient_Greek", "grc_Grek"), ("sr_set", "srp_Latn"), ("gd_arcosg", "gla_Latn"), ("yue_hk", "yue_Hani"),
    ("ja_gsd-ud-test.conllu", "jpn_Jpan"), ("bm_crb", "bam_Latn"), ("UD_Kiche-IU", "quc_Latn"),
])
def test_ud_codes(name, code):
    assert lc.from_ud(name) == code


def test_ud_names_are_consistent():
    assert set(lc.UD_NAMES.values()) == set(lc.UD_PREFIX)
    assert lc.to_ud_prefix("nor_Latn") == "no"
    with pytest.raises(lc.LanguageCodeError, match="UD language name"):
        lc.from_ud("UD_Klingon-X")
    with pytest.raises(lc.LanguageCodeError, match="did you mean .*'tr'"):
        lc.from_ud("tur_imst")  # a 639-3 prefix where UD uses 639-1


@pytest.mark.parametrize("name,code", [
    ("ara", "ara_Arab"), ("ara-eng", "ara_Arab"), ("tatoeba.ara", "ara_Arab"), ("cmn", "cmn_Hani"),
    ("wuu", "wuu_Hani"), ("srp", "srp_Latn"), ("uzb", "uzb_Cyrl"), ("zsm", "zsm_Latn"), ("pes", "pes_Arab"),
    ("lvs", "lvs_Latn"), ("nob", "nob_Latn"), ("ber", "ber_Tfng"),
])
def test_tatoeba_codes(name, code):
    assert lc.from_tatoeba(name) == code


def test_glot500_configs_and_normalization():
    assert lc.from_glot500("jpn_Japn") == "jpn_Jpan"  # Glot500-c's non-standard script code
    assert lc.to_glot500_config("jpn_Jpan") == "jpn_Japn"
    assert lc.to_glot500_config("swh_Latn") == "swh_Latn"
    assert lc.normalize("swh-Latn") == "swh_Latn"  # MTEB spelling
    assert lc.normalize("SWH_latn") == "swh_Latn"
    for bad in ("swh", "sw_Latn", "swh_Lat", "swahili"):
        with pytest.raises(lc.LanguageCodeError, match="ISO 639-3 \\+ ISO 15924"):
            lc.normalize(bad)


def test_every_spec_language_is_a_valid_code(spec_langs):
    for key, codes in spec_langs.items():
        if isinstance(codes, list):
            assert all(re.fullmatch(r"[a-z]{3}_[A-Z][a-z]{3}", lc.normalize(c)) for c in codes), key
    # the CPT subsets are subsets of the full lists (App. C.2 vs C.1)
    for sub, full in (("cpt_srb", "srb"), ("cpt_srt", "srt"), ("cpt_ner", "ner"), ("cpt_pos", "pos")):
        assert set(spec_langs[sub]) <= set(spec_langs[full]), sub


def test_iso639_1_table():
    assert len(lc.ISO639_1_TO_3) == 184
    assert lc.iso3("ar") == "ara" and lc.iso3("fa") == "fas" and lc.iso3("no") == "nor"  # macrolanguages (lang.tab)
    assert lc.iso3("zh-yue") == "yue" and lc.iso3("bh") == "bih"
    assert lc.iso3("swh_Latn") == "swh" and lc.iso3("kab") == "kab"
    with pytest.raises(lc.LanguageCodeError):
        lc.iso3("x1")


@pytest.mark.parametrize("text,script", [
    ("Maria reads a new book in Tokyo.", "Latn"),
    ("Мария читает новую книгу.", "Cyrl"),
    ("მარია ახალ წიგნს კითხულობს", "Geor"),
    ("瑪麗亞喺東京睇新書。", "Hani"),
    ("マリアは東京で新しい本を読む。", "Jpan"),  # Han + kana
    ("마리아는 새 책을 읽는다", "Hang"),
    ("ماریا کتاب می‌خواند", "Arab"),
    ("मारिया किताब पढ़ती है", "Deva"),
    ("ማሪያ መጽሐፍ ታነባለች", "Ethi"),
])
def test_detect_script(text, script):
    assert lc.detect_script(text) == script


def test_detect_script_majority_and_errors():
    assert lc.detect_script("abc дефгхийк") == "Cyrl"  # majority of letters
    with pytest.raises(lc.LanguageCodeError):
        lc.detect_script("   ")
    with pytest.raises(lc.LanguageCodeError, match="no letters"):
        lc.detect_script("123 456 !!")


def test_resolve_falls_back_to_iso_and_script():
    assert lc.resolve("de") == "deu_Latn"  # table first
    assert lc.resolve("kk") == "kaz_Cyrl"
    assert lc.resolve("be", "Беларусь") == "bel_Cyrl"
    assert lc.resolve("ab", "Аҧсны") == "abk_Cyrl"  # not in a table: ISO 639-1 + detected script
    assert lc.resolve("ja") == "jpn_Jpan"
    with pytest.raises(lc.LanguageCodeError, match="without sample text"):
        lc.resolve("ab")
