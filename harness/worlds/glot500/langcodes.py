"""One table of language codes for the `glot500` world: every source's own code -> our ``iso3_Script``.

The papers' evaluation data (cisnlp/Glot500 ``evaluation/``) names languages ISO 639-3 + ISO 15924 (``swh_Latn``).
Each source names them its own way:

* WikiANN (``unimelb-nlp/wikiann`` configs): Wikipedia codes, mostly ISO 639-1 (``de``), some 639-3 (``ace``) and
  Wikipedia-only ones (``bat-smg``, ``zh-yue``, ``simple``);
* Universal Dependencies: the treebank prefix (``en`` in ``en_ewt`` / ``en_ewt-ud-train.conllu``, the Hugging Face
  config name) or the language name of the treebank folder (``UD_English-EWT``);
* Tatoeba (LASER ``tatoeba.<xxx>-eng``, ``mteb/tatoeba-bitext-mining`` subsets ``xxx-eng``, ``google/xtreme``
  configs ``tatoeba.xxx``): three-letter codes;
* Glot500-c (``cis-lmu/Glot500`` configs): ``xxx_Scrp`` already, with one non-standard script code (``jpn_Japn``).

Glot500's converters (``evaluation/tagging/ner_convert.py``, ``pos_convert.py``, ``retrieval/retrieval_convert.py``)
mapped ISO 639-1 to 639-3 with SIL's ``lang.tab`` (Part1 -> Id, so macrolanguage codes: ``ar`` -> ``ara``,
``sw`` -> ``swa``, ``no`` -> ``nor``), special-cased a few Wikipedia codes (``bat-smg`` -> ``sgs``, ``bh`` -> ``bih``,
``cbk-zam`` -> ``cbk``, ``fiu-vro`` -> ``vro``, ``roa-rup`` -> ``rup``, ``zh-classical`` -> ``lzh``,
``zh-min-nan`` -> ``nan``, ``zh-yue`` -> ``yue``) and detected the script from the text (Japanese forced to Jpan).
The tables below are the result of that procedure for every language of the papers' lists (seed 000 App. C;
cross-checked with cisnlp/Glot500 ``ner_lang_list.txt``, ``pos_lang_list.txt``, ``tatoeba_lang_list.txt``), written
out so that no script detection is needed to reproduce the papers' codes. Quirks kept for comparability:
Wikipedia ``als`` is Alemannic but Glot500 names it ``als_Latn`` (the 639-3 code of Tosk Albanian); Tatoeba ``srp``
and ``uzb`` are ``srp_Latn`` / ``uzb_Cyrl`` (Glot500's detection on the data) although MTEB labels them Cyrl / Latn.
Codes outside the tables are resolved through ISO 639-1 -> 639-3 and :func:`detect_script` on sample text.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from functools import lru_cache

from harness.core.errors import ConfigError

CODE_RE = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")

# Glot500-c config names that are not valid ISO 15924 -> our code (and back for loading).
GLOT500_CONFIG_ALIASES: dict[str, str] = {"jpn_Japn": "jpn_Jpan"}
_GLOT500_CONFIG_OF = {v: k for k, v in GLOT500_CONFIG_ALIASES.items()}


class LanguageCodeError(ConfigError):
    """A code that the table cannot map; the message says how to provide the mapping."""


# ISO 639-1 -> ISO 639-3 as in SIL's table (Part1 -> Id): macrolanguages keep their macrolanguage code.
ISO639_1_TO_3: dict[str, str] = {
    "aa": "aar", "ab": "abk", "ae": "ave", "af": "afr", "ak": "aka", "am": "amh", "an": "arg", "ar": "ara",
    "as": "asm", "av": "ava", "ay": "aym", "az": "aze", "ba": "bak", "be": "bel", "bg": "bul", "bi": "bis",
    "bm": "bam", "bn": "ben", "bo": "bod", "br": "bre", "bs": "bos", "ca": "cat", "ce": "che", "ch": "cha",
    "co": "cos", "cr": "cre", "cs": "ces", "cu": "chu", "cv": "chv", "cy": "cym", "da": "dan", "de": "deu",
    "dv": "div", "dz": "dzo", "ee": "ewe", "el": "ell", "en": "eng", "eo": "epo", "es": "spa", "et": "est",
    "eu": "eus", "fa": "fas", "ff": "ful", "fi": "fin", "fj": "fij", "fo": "fao", "fr": "fra", "fy": "fry",
    "ga": "gle", "gd": "gla", "gl": "glg", "gn": "grn", "gu": "guj", "gv": "glv", "ha": "hau", "he": "heb",
    "hi": "hin", "ho": "hmo", "hr": "hrv", "ht": "hat", "hu": "hun", "hy": "hye", "hz": "her", "ia": "ina",
    "id": "ind", "ie": "ile", "ig": "ibo", "ii": "iii", "ik": "ipk", "io": "ido", "is": "isl", "it": "ita",
    "iu": "iku", "ja": "jpn", "jv": "jav", "ka": "kat", "kg": "kon", "ki": "kik", "kj": "kua", "kk": "kaz",
    "kl": "kal", "km": "khm", "kn": "kan", "ko": "kor", "kr": "kau", "ks": "kas", "ku": "kur", "kv": "kom",
    "kw": "cor", "ky": "kir", "la": "lat", "lb": "ltz", "lg": "lug", "li": "lim", "ln": "lin", "lo": "lao",
    "lt": "lit", "lu": "lub", "lv": "lav", "mg": "mlg", "mh": "mah", "mi": "mri", "mk": "mkd", "ml": "mal",
    "mn": "mon", "mr": "mar", "ms": "msa", "mt": "mlt", "my": "mya", "na": "nau", "nb": "nob", "nd": "nde",
    "ne": "nep", "ng": "ndo", "nl": "nld", "nn": "nno", "no": "nor", "nr": "nbl", "nv": "nav", "ny": "nya",
    "oc": "oci", "oj": "oji", "om": "orm", "or": "ori", "os": "oss", "pa": "pan", "pi": "pli", "pl": "pol",
    "ps": "pus", "pt": "por", "qu": "que", "rm": "roh", "rn": "run", "ro": "ron", "ru": "rus", "rw": "kin",
    "sa": "san", "sc": "srd", "sd": "snd", "se": "sme", "sg": "sag", "sh": "hbs", "si": "sin", "sk": "slk",
    "sl": "slv", "sm": "smo", "sn": "sna", "so": "som", "sq": "sqi", "sr": "srp", "ss": "ssw", "st": "sot",
    "su": "sun", "sv": "swe", "sw": "swa", "ta": "tam", "te": "tel", "tg": "tgk", "th": "tha", "ti": "tir",
    "tk": "tuk", "tl": "tgl", "tn": "tsn", "to": "ton", "tr": "tur", "ts": "tso", "tt": "tat", "tw": "twi",
    "ty": "tah", "ug": "uig", "uk": "ukr", "ur": "urd", "uz": "uzb", "ve": "ven", "vi": "vie", "vo": "vol",
    "wa": "wln", "wo": "wol", "xh": "xho", "yi": "yid", "yo": "yor", "za": "zha", "zh": "zho", "zu": "zul",
}

# Wikipedia-only codes Glot500 special-cased (ner_convert.py), plus the ones it left unmapped, named here.
WIKIPEDIA_SPECIAL: dict[str, str] = {
    "bat-smg": "sgs", "bh": "bih", "cbk-zam": "cbk", "fiu-vro": "vro", "roa-rup": "rup",
    "zh-classical": "lzh", "zh-min-nan": "nan", "zh-yue": "yue",
}

# WikiANN config -> code: the 164 NER languages of the papers (seed 000 App. C.1, cisnlp/Glot500 ner_lang_list.txt).
WIKIANN: dict[str, str] = {
    "sh": "hbs_Latn", "ml": "mal_Mlym", "az": "aze_Latn", "gu": "guj_Gujr", "bn": "ben_Beng", "kn": "kan_Knda",
    "te": "tel_Telu", "mt": "mlt_Latn", "fr": "fra_Latn", "es": "spa_Latn", "en": "eng_Latn", "ru": "rus_Cyrl",
    "de": "deu_Latn", "tr": "tur_Latn", "pa": "pan_Guru", "mr": "mar_Deva", "pt": "por_Latn", "nl": "nld_Latn",
    "ar": "ara_Arab", "zh": "zho_Hani", "it": "ita_Latn", "id": "ind_Latn", "el": "ell_Grek", "bg": "bul_Cyrl",
    "sv": "swe_Latn", "cs": "ces_Latn", "is": "isl_Latn", "pl": "pol_Latn", "ro": "ron_Latn", "da": "dan_Latn",
    "hu": "hun_Latn", "tg": "tgk_Cyrl", "fa": "fas_Arab", "ceb": "ceb_Latn", "he": "heb_Hebr", "hr": "hrv_Latn",
    "gl": "glg_Latn", "fi": "fin_Latn", "sl": "slv_Latn", "vi": "vie_Latn", "mk": "mkd_Cyrl", "sk": "slk_Latn",
    "no": "nor_Latn", "et": "est_Latn", "lb": "ltz_Latn", "eu": "eus_Latn", "lt": "lit_Latn", "kk": "kaz_Cyrl",
    "lv": "lav_Latn", "bs": "bos_Latn", "eo": "epo_Latn", "ca": "cat_Latn", "th": "tha_Thai", "uk": "ukr_Cyrl",
    "tl": "tgl_Latn", "si": "sin_Sinh", "ga": "gle_Latn", "hi": "hin_Deva", "ko": "kor_Hang", "ur": "urd_Arab",
    "sw": "swa_Latn", "sq": "sqi_Latn", "be": "bel_Cyrl", "af": "afr_Latn", "nn": "nno_Latn", "tt": "tat_Cyrl",
    "ast": "ast_Latn", "mn": "mon_Cyrl", "ms": "msa_Latn", "so": "som_Latn", "sr": "srp_Cyrl", "mg": "mlg_Latn",
    "arz": "arz_Arab", "ta": "tam_Taml", "uz": "uzb_Latn", "co": "cos_Latn", "als": "als_Latn", "am": "amh_Ethi",
    "su": "sun_Latn", "war": "war_Latn", "dv": "div_Thaa", "yo": "yor_Latn", "fo": "fao_Latn", "ba": "bak_Cyrl",
    "ilo": "ilo_Latn", "mi": "mri_Latn", "as": "asm_Beng", "ig": "ibo_Latn", "rw": "kin_Latn", "hy": "hye_Armn",
    "oc": "oci_Latn", "ln": "lin_Latn", "ky": "kir_Cyrl", "ne": "nep_Deva", "cy": "cym_Latn", "la": "lat_Latn",
    "ka": "kat_Geor", "fy": "fry_Latn", "my": "mya_Mymr", "nds": "nds_Latn", "pnb": "pnb_Arab", "ckb": "ckb_Arab",
    "cv": "chv_Cyrl", "qu": "que_Latn", "br": "bre_Latn", "ps": "pus_Arab", "ce": "che_Cyrl", "os": "oss_Cyrl",
    "zh-min-nan": "nan_Latn", "li": "lim_Latn", "tk": "tuk_Latn", "min": "min_Latn", "km": "khm_Khmr",
    "jv": "jav_Latn", "vec": "vec_Latn", "ja": "jpn_Jpan", "sd": "snd_Arab", "zh-yue": "yue_Hani",
    "sco": "sco_Latn", "or": "ori_Orya", "an": "arg_Latn", "ku": "kur_Latn", "bar": "bar_Latn", "rm": "roh_Latn",
    "ay": "aym_Latn", "sah": "sah_Cyrl", "lmo": "lmo_Latn", "io": "ido_Latn", "vo": "vol_Latn", "ug": "uig_Arab",
    "bo": "bod_Tibt", "pms": "pms_Latn", "wuu": "wuu_Hani", "yi": "yid_Hebr", "scn": "scn_Latn", "ia": "ina_Latn",
    "xmf": "xmf_Geor", "sa": "san_Deva", "gd": "gla_Latn", "mwl": "mwl_Latn", "diq": "diq_Latn",
    "cbk-zam": "cbk_Latn", "szl": "szl_Latn", "hsb": "hsb_Latn", "vls": "vls_Latn", "mhr": "mhr_Cyrl",
    "gn": "grn_Latn", "zh-classical": "lzh_Hani", "mzn": "mzn_Arab", "nap": "nap_Latn", "ace": "ace_Latn",
    "frr": "frr_Latn", "eml": "eml_Latn", "vep": "vep_Latn", "bat-smg": "sgs_Latn", "lij": "lij_Latn",
    "crh": "crh_Latn", "ksh": "ksh_Latn", "zea": "zea_Latn", "csb": "csb_Latn", "jbo": "jbo_Latn",
    "bh": "bih_Deva", "ext": "ext_Latn", "fur": "fur_Latn",
}
# The other 12 WikiANN configs (not in the papers' NER list). Several collide with a paper language (simple ->
# English, be-x-old -> Belarusian) or have no ISO 639-3 code (map-bms), so they are never merged automatically.
WIKIANN_EXTRA: dict[str, str] = {
    "ang": "ang_Latn", "arc": "arc_Syrc", "be-x-old": "bel_Cyrl", "cdo": "cdo_Latn", "fiu-vro": "vro_Latn",
    "gan": "gan_Hani", "hak": "hak_Latn", "map-bms": "jav_Latn", "nov": "nov_Latn", "pdc": "pdc_Latn",
    "simple": "eng_Latn", "wa": "wln_Latn",
}

# Universal Dependencies treebank prefix (``en`` in ``en_ewt``) -> code: the 91 POS languages of the papers
# (seed 000 App. C.1, cisnlp/Glot500 pos_lang_list.txt). All treebanks with a prefix are merged, as Glot500 did.
UD_PREFIX: dict[str, str] = {
    "ml": "mal_Mlym", "bn": "ben_Beng", "te": "tel_Telu", "mt": "mlt_Latn", "fr": "fra_Latn", "es": "spa_Latn",
    "en": "eng_Latn", "ru": "rus_Cyrl", "de": "deu_Latn", "tr": "tur_Latn", "mr": "mar_Deva", "pt": "por_Latn",
    "nl": "nld_Latn", "ar": "ara_Arab", "zh": "zho_Hani", "it": "ita_Latn", "id": "ind_Latn", "el": "ell_Grek",
    "bg": "bul_Cyrl", "sv": "swe_Latn", "cs": "ces_Latn", "is": "isl_Latn", "pl": "pol_Latn", "ro": "ron_Latn",
    "da": "dan_Latn", "hu": "hun_Latn", "sr": "srp_Latn", "fa": "fas_Arab", "ceb": "ceb_Latn", "he": "heb_Hebr",
    "hr": "hrv_Latn", "gl": "glg_Latn", "fi": "fin_Latn", "sl": "slv_Latn", "vi": "vie_Latn", "sk": "slk_Latn",
    "no": "nor_Latn", "et": "est_Latn", "eu": "eus_Latn", "lt": "lit_Latn", "kk": "kaz_Cyrl", "lv": "lav_Latn",
    "ca": "cat_Latn", "th": "tha_Thai", "uk": "ukr_Cyrl", "tl": "tgl_Latn", "si": "sin_Sinh", "ga": "gle_Latn",
    "hi": "hin_Deva", "ko": "kor_Hang", "ur": "urd_Arab", "sq": "sqi_Latn", "be": "bel_Cyrl", "af": "afr_Latn",
    "tt": "tat_Cyrl", "ta": "tam_Taml", "am": "amh_Ethi", "yo": "yor_Latn", "fo": "fao_Latn", "hy": "hye_Armn",
    "cy": "cym_Latn", "la": "lat_Latn", "nds": "nds_Latn", "br": "bre_Latn", "hyw": "hyw_Armn", "jv": "jav_Latn",
    "ja": "jpn_Jpan", "yue": "yue_Hani", "gsw": "gsw_Latn", "sah": "sah_Cyrl", "ug": "uig_Arab",
    "kmr": "kmr_Latn", "pcm": "pcm_Latn", "quc": "quc_Latn", "sa": "san_Deva", "gd": "gla_Latn", "wo": "wol_Latn",
    "sme": "sme_Latn", "hsb": "hsb_Latn", "grc": "grc_Grek", "hbo": "hbo_Hebr", "gn": "grn_Latn",
    "lzh": "lzh_Hani", "ajp": "ajp_Arab", "nap": "nap_Latn", "aln": "aln_Latn", "gv": "glv_Latn",
    "lij": "lij_Latn", "myv": "myv_Cyrl", "bm": "bam_Latn", "xav": "xav_Latn",
}
# UD language names as in the treebank folders (``UD_<Name>-<Treebank>``) -> prefix, for the languages above.
UD_NAMES: dict[str, str] = {
    "Malayalam": "ml", "Bengali": "bn", "Telugu": "te", "Maltese": "mt", "French": "fr", "Spanish": "es",
    "English": "en", "Russian": "ru", "German": "de", "Turkish": "tr", "Marathi": "mr", "Portuguese": "pt",
    "Dutch": "nl", "Arabic": "ar", "Chinese": "zh", "Italian": "it", "Indonesian": "id", "Greek": "el",
    "Bulgarian": "bg", "Swedish": "sv", "Czech": "cs", "Icelandic": "is", "Polish": "pl", "Romanian": "ro",
    "Danish": "da", "Hungarian": "hu", "Serbian": "sr", "Persian": "fa", "Cebuano": "ceb", "Hebrew": "he",
    "Croatian": "hr", "Galician": "gl", "Finnish": "fi", "Slovenian": "sl", "Vietnamese": "vi", "Slovak": "sk",
    "Norwegian": "no", "Estonian": "et", "Basque": "eu", "Lithuanian": "lt", "Kazakh": "kk", "Latvian": "lv",
    "Catalan": "ca", "Thai": "th", "Ukrainian": "uk", "Tagalog": "tl", "Sinhala": "si", "Irish": "ga",
    "Hindi": "hi", "Korean": "ko", "Urdu": "ur", "Albanian": "sq", "Belarusian": "be", "Afrikaans": "af",
    "Tatar": "tt", "Tamil": "ta", "Amharic": "am", "Yoruba": "yo", "Faroese": "fo", "Armenian": "hy",
    "Welsh": "cy", "Latin": "la", "Low_Saxon": "nds", "Breton": "br", "Western_Armenian": "hyw",
    "Javanese": "jv", "Japanese": "ja", "Cantonese": "yue", "Swiss_German": "gsw", "Yakut": "sah",
    "Uyghur": "ug", "Kurmanji": "kmr", "Naija": "pcm", "Kiche": "quc", "Sanskrit": "sa",
    "Scottish_Gaelic": "gd", "Wolof": "wo", "North_Sami": "sme", "Upper_Sorbian": "hsb", "Ancient_Greek": "grc",
    "Ancient_Hebrew": "hbo", "Guarani": "gn", "Classical_Chinese": "lzh", "South_Levantine_Arabic": "ajp",
    "Neapolitan": "nap", "Gheg": "aln", "Manx": "gv", "Ligurian": "lij", "Erzya": "myv", "Bambara": "bm",
    "Xavante": "xav",
}

# Tatoeba (LASER / mteb subsets ``xxx-eng`` / google/xtreme ``tatoeba.xxx``) -> code: the 98 SR-T languages of the
# papers (seed 000 App. C.1, cisnlp/Glot500 tatoeba_lang_list.txt).
TATOEBA: dict[str, str] = {
    "mal": "mal_Mlym", "aze": "aze_Latn", "ben": "ben_Beng", "tel": "tel_Telu", "fra": "fra_Latn",
    "spa": "spa_Latn", "nob": "nob_Latn", "rus": "rus_Cyrl", "deu": "deu_Latn", "tur": "tur_Latn",
    "mar": "mar_Deva", "por": "por_Latn", "nld": "nld_Latn", "ara": "ara_Arab", "ita": "ita_Latn",
    "ind": "ind_Latn", "ell": "ell_Grek", "bul": "bul_Cyrl", "swe": "swe_Latn", "ces": "ces_Latn",
    "isl": "isl_Latn", "pol": "pol_Latn", "ron": "ron_Latn", "dan": "dan_Latn", "hun": "hun_Latn",
    "srp": "srp_Latn", "ceb": "ceb_Latn", "heb": "heb_Hebr", "hrv": "hrv_Latn", "glg": "glg_Latn",
    "fin": "fin_Latn", "slv": "slv_Latn", "vie": "vie_Latn", "mkd": "mkd_Cyrl", "slk": "slk_Latn",
    "est": "est_Latn", "eus": "eus_Latn", "lit": "lit_Latn", "kaz": "kaz_Cyrl", "bos": "bos_Latn",
    "epo": "epo_Latn", "cat": "cat_Latn", "tha": "tha_Thai", "ukr": "ukr_Cyrl", "tgl": "tgl_Latn",
    "gle": "gle_Latn", "hin": "hin_Deva", "kor": "kor_Hang", "urd": "urd_Arab", "sqi": "sqi_Latn",
    "bel": "bel_Cyrl", "afr": "afr_Latn", "nno": "nno_Latn", "tat": "tat_Cyrl", "ast": "ast_Latn",
    "mon": "mon_Cyrl", "arz": "arz_Arab", "tam": "tam_Taml", "uzb": "uzb_Cyrl", "amh": "amh_Ethi",
    "war": "war_Latn", "fao": "fao_Latn", "hye": "hye_Armn", "oci": "oci_Latn", "xho": "xho_Latn",
    "cym": "cym_Latn", "lat": "lat_Latn", "kat": "kat_Geor", "fry": "fry_Latn", "nds": "nds_Latn",
    "zsm": "zsm_Latn", "bre": "bre_Latn", "tuk": "tuk_Latn", "khm": "khm_Khmr", "jpn": "jpn_Jpan",
    "yue": "yue_Hani", "gsw": "gsw_Latn", "lvs": "lvs_Latn", "kur": "kur_Latn", "ido": "ido_Latn",
    "uig": "uig_Arab", "pam": "pam_Latn", "pms": "pms_Latn", "wuu": "wuu_Hani", "yid": "yid_Hebr",
    "ina": "ina_Latn", "kab": "kab_Latn", "gla": "gla_Latn", "cbk": "cbk_Latn", "hsb": "hsb_Latn",
    "mhr": "mhr_Cyrl", "swh": "swh_Latn", "cmn": "cmn_Hani", "pes": "pes_Arab", "dtp": "dtp_Latn",
    "lfn": "lfn_Latn", "ile": "ile_Latn", "csb": "csb_Latn",
}
# The other 14 subsets of mteb/tatoeba-bitext-mining (scripts as in MTEB's TatoebaBitextMining metadata).
TATOEBA_EXTRA: dict[str, str] = {
    "ang": "ang_Latn", "arq": "arq_Arab", "awa": "awa_Deva", "ber": "ber_Tfng", "cha": "cha_Latn",
    "cor": "cor_Latn", "dsb": "dsb_Latn", "jav": "jav_Latn", "kzj": "kzj_Latn", "max": "max_Deva",
    "nov": "nov_Latn", "orv": "orv_Cyrl", "swg": "swg_Latn", "tzl": "tzl_Latn",
}

# Fixed scripts where detection is unreliable (Glot500 forces Jpan for Japanese).
_FORCED_SCRIPT = {"jpn": "Jpan", "lzh": "Hani"}


# -- normalization ----------------------------------------------------------------------------------------
def is_code(code: str) -> bool:
    return bool(CODE_RE.match(code))


def normalize(code: str) -> str:
    """Our canonical form of a language-script code: ``swh-Latn`` / ``swh_latn`` / ``jpn_Japn`` -> ``swh_Latn`` /
    ``jpn_Jpan``. Raises :class:`LanguageCodeError` for anything that is not ``xxx_Xxxx``."""
    raw = code.strip()
    parts = re.split(r"[_\-]", raw)
    if len(parts) == 2 and len(parts[0]) == 3 and len(parts[1]) == 4:
        cand = f"{parts[0].lower()}_{parts[1][0].upper()}{parts[1][1:].lower()}"
        cand = GLOT500_CONFIG_ALIASES.get(cand, cand)
        if is_code(cand):
            return cand
    raise LanguageCodeError(f"{code!r} is not a language-script code; use ISO 639-3 + ISO 15924, e.g. 'swh_Latn'")


def _unknown(kind: str, code: str, known: list[str], how: str) -> LanguageCodeError:
    close = difflib.get_close_matches(code, known, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return LanguageCodeError(f"unknown {kind} code {code!r}{hint}; {how}")


# -- per source ---------------------------------------------------------------------------------------------
def from_wikiann(config: str, *, extra: bool = True) -> str:
    """WikiANN config (``de``, ``zh-yue``, ``bat-smg``) -> code. ``extra=False`` refuses the 12 configs outside the
    papers' list."""
    if config in WIKIANN:
        return WIKIANN[config]
    if extra and config in WIKIANN_EXTRA:
        return WIKIANN_EXTRA[config]
    raise _unknown("WikiANN", config, sorted(WIKIANN) + sorted(WIKIANN_EXTRA),
                   "WikiANN configs are Wikipedia codes (see unimelb-nlp/wikiann); add the mapping to "
                   "languages.overrides.wikiann in the world spec")


def to_wikiann(code: str) -> str:
    code = normalize(code)
    for cfg, c in WIKIANN.items():
        if c == code:
            return cfg
    raise _unknown("WikiANN language", code, sorted(WIKIANN.values()),
                   "this language is not in the papers' NER list; map it in languages.overrides.wikiann")


def ud_prefix(name: str) -> str:
    """The UD language prefix from a treebank config (``en_ewt``), a file name (``en_ewt-ud-train.conllu``), a
    treebank folder (``UD_English-EWT``), a language name (``English``, ``Ancient_Greek``) or a prefix (``en``)."""
    s = name.strip()
    if s.startswith("UD_"):
        s = s[3:].split("-", 1)[0]
        if s in UD_NAMES:
            return UD_NAMES[s]
        raise _unknown("UD language name", s, sorted(UD_NAMES),
                       "add it to languages.overrides.ud_names in the world spec")
    if s in UD_NAMES:
        return UD_NAMES[s]
    base = s.split("-", 1)[0] if s.endswith(".conllu") else s
    return base.split("_", 1)[0]


def from_ud(name: str) -> str:
    """UD treebank / prefix / language name -> code (all treebanks of one prefix are one language)."""
    prefix = ud_prefix(name)
    if prefix in UD_PREFIX:
        return UD_PREFIX[prefix]
    raise _unknown("UD", prefix, sorted(UD_PREFIX),
                   "this UD language is not in the papers' POS list; map it in languages.overrides.ud "
                   "(prefix = \"xxx_Scrp\")")


def to_ud_prefix(code: str) -> str:
    code = normalize(code)
    for prefix, c in UD_PREFIX.items():
        if c == code:
            return prefix
    raise _unknown("UD language", code, sorted(UD_PREFIX.values()),
                   "this language is not in the papers' POS list; map it in languages.overrides.ud")


def from_tatoeba(name: str, *, extra: bool = True) -> str:
    """Tatoeba code (``ara``), mteb subset (``ara-eng``) or google/xtreme config (``tatoeba.ara``) -> code."""
    s = name.strip()
    if s.startswith("tatoeba."):
        s = s[len("tatoeba."):]
    if s.endswith("-eng"):
        s = s[:-4]
    if s in TATOEBA:
        return TATOEBA[s]
    if extra and s in TATOEBA_EXTRA:
        return TATOEBA_EXTRA[s]
    raise _unknown("Tatoeba", s, sorted(TATOEBA) + sorted(TATOEBA_EXTRA),
                   "Tatoeba codes are the LASER three-letter codes; map it in languages.overrides.tatoeba")


def to_tatoeba(code: str) -> str:
    code = normalize(code)
    for t, c in TATOEBA.items():
        if c == code:
            return t
    raise _unknown("Tatoeba language", code, sorted(TATOEBA.values()),
                   "this language is not in the papers' SR-T list; map it in languages.overrides.tatoeba")


def from_glot500(config: str) -> str:
    """Glot500-c config (``swh_Latn``, ``jpn_Japn``) -> code."""
    return normalize(config)


def to_glot500_config(code: str) -> str:
    code = normalize(code)
    return _GLOT500_CONFIG_OF.get(code, code)


def iso3(code: str) -> str:
    """The ISO 639-3 part of a code, or of an ISO 639-1 / Wikipedia code."""
    if is_code(code):
        return code[:3]
    if code in WIKIPEDIA_SPECIAL:
        return WIKIPEDIA_SPECIAL[code]
    if code in ISO639_1_TO_3:
        return ISO639_1_TO_3[code]
    if re.fullmatch(r"[a-z]{3}", code):
        return code
    raise _unknown("ISO 639", code, sorted(ISO639_1_TO_3), "use an ISO 639-1 or 639-3 code")


def resolve(code: str, sample_text: str | None = None) -> str:
    """Any code -> ``iso3_Script``: through the tables first, else ISO 639-1/3 plus the script of ``sample_text``
    (Glot500's procedure). Raises when the script cannot be known."""
    if is_code(code) or re.fullmatch(r"[a-z]{3}[-_][A-Za-z]{4}", code):
        return normalize(code)
    for table in (WIKIANN, UD_PREFIX, TATOEBA):
        if code in table:
            return table[code]
    i3 = iso3(code)
    if i3 in _FORCED_SCRIPT:
        return f"{i3}_{_FORCED_SCRIPT[i3]}"
    if not sample_text:
        raise LanguageCodeError(f"cannot tell the script of {code!r} without sample text; give the full code "
                                f"('{i3}_Xxxx') in the world spec")
    return f"{i3}_{detect_script(sample_text)}"


# -- script detection ----------------------------------------------------------------------------------------
# ISO 15924 codes checked, most frequent first (the `regex` module knows them as Script property values).
SCRIPTS: tuple[str, ...] = (
    "Latn", "Cyrl", "Arab", "Hani", "Deva", "Grek", "Hebr", "Hang", "Hira", "Kana", "Thai", "Geor", "Armn",
    "Beng", "Taml", "Telu", "Knda", "Mlym", "Gujr", "Guru", "Orya", "Sinh", "Mymr", "Khmr", "Laoo", "Tibt",
    "Ethi", "Thaa", "Syrc", "Tfng", "Mong", "Cher", "Cans", "Nkoo", "Vaii", "Adlm", "Olck", "Copt", "Goth",
    "Yiii", "Bopo", "Tale", "Talu", "Lana", "Bali", "Java", "Sund", "Bugi", "Tglg", "Samr", "Mand", "Saur",
)


@lru_cache(maxsize=1)
def _script_patterns():
    import regex

    return [(s, regex.compile(r"\p{Script=" + s + "}")) for s in SCRIPTS]


def detect_script(text: str) -> str:
    """The majority ISO 15924 script of the letters in ``text`` (Glot500's rule: the first
    ``100 + 10*log2(n)`` characters; Han with Hiragana/Katakana -> Jpan, Hangul with Han -> Hang). Raises when the
    text has no letters of a known script."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        raise LanguageCodeError("detect_script: empty text")
    limit = int(100 + 10 * math.log2(len(chars)))
    counts: Counter[str] = Counter()
    pats = _script_patterns()
    for c in chars[:limit]:
        for s, p in pats:
            if p.match(c):
                counts[s] += 1
                break
    if not counts:
        raise LanguageCodeError(f"detect_script: no letters of a known script in {text[:40]!r}")
    if counts["Hira"] + counts["Kana"] > 0 and counts["Hira"] + counts["Kana"] + counts["Hani"] >= \
            counts.most_common(1)[0][1]:
        return "Jpan"
    if counts["Hang"] > 0 and counts["Hang"] + counts["Hani"] >= counts.most_common(1)[0][1]:
        return "Hang"
    return counts.most_common(1)[0][0]


