"""The languages of the `bible` world and their metadata.

Codes are ISO 639-3 + ISO 15924. Where ISO 639-3 distinguishes a macrolanguage from its main member the member is
used, as Glot500 and the papers' tables do: ``arb_Arab`` (Standard Arabic; the Smith-Van Dyke text is written in
it), ``cmn_Hani`` (Mandarin in Han script, the simplified Chinese New Version), ``pes_Arab`` (Iranian Persian),
``swh_Latn`` (Kiswahili). Japanese is ``jpn_Jpan`` (mixed Han + kana script).

``seen_multi``: whether XLM-R's pre-training data (CC-100, the 100 languages of multilingual-e5-small's base
model) holds the language; the English MiniLM source has seen English only. ``resource_level`` is a coarse class
of the language's size in CC-100 (high: tens of GiB or more; mid: about 1-20 GiB; low: under 1 GiB or absent).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LangInfo:
    code: str
    name: str
    iso1: str  # ISO 639-1, used by CLDR and gettext locales
    cldr: str | None  # CLDR locale of the annotations and display names
    gettext: tuple[str, ...]  # message-catalog locale folders (gettext, Kolibri), in order of preference
    seen_multi: bool
    resource_level: str


LANGS: tuple[LangInfo, ...] = (
    LangInfo("eng_Latn", "English", "en", "en", (), True, "high"),
    LangInfo("spa_Latn", "Spanish", "es", "es", ("es", "es_ES"), True, "high"),
    LangInfo("fra_Latn", "French", "fr", "fr", ("fr", "fr_FR"), True, "high"),
    LangInfo("ita_Latn", "Italian", "it", "it", ("it",), True, "high"),
    LangInfo("por_Latn", "Portuguese", "pt", "pt", ("pt", "pt_BR"), True, "high"),
    LangInfo("deu_Latn", "German", "de", "de", ("de",), True, "high"),
    LangInfo("arb_Arab", "Arabic", "ar", "ar", ("ar",), True, "high"),
    LangInfo("cmn_Hani", "Chinese (Mandarin, simplified)", "zh", "zh", ("zh_Hans", "zh_CN"), True, "high"),
    LangInfo("jpn_Jpan", "Japanese", "ja", "ja", ("ja",), True, "high"),
    LangInfo("rus_Cyrl", "Russian", "ru", "ru", ("ru",), True, "high"),
    LangInfo("pol_Latn", "Polish", "pl", "pl", ("pl",), True, "high"),
    LangInfo("ron_Latn", "Romanian", "ro", "ro", ("ro",), True, "high"),
    LangInfo("hin_Deva", "Hindi", "hi", "hi", ("hi", "hi_IN"), True, "high"),
    LangInfo("ben_Beng", "Bengali", "bn", "bn", ("bn", "bn_BD"), True, "mid"),
    LangInfo("tur_Latn", "Turkish", "tr", "tr", ("tr",), True, "high"),
    LangInfo("swh_Latn", "Swahili", "sw", "sw", ("sw", "sw_TZ"), True, "mid"),
    LangInfo("kor_Hang", "Korean", "ko", "ko", ("ko",), True, "high"),
    LangInfo("pes_Arab", "Persian", "fa", "fa", ("fa",), True, "high"),
    LangInfo("ind_Latn", "Indonesian", "id", "id", ("id",), True, "high"),
    LangInfo("vie_Latn", "Vietnamese", "vi", "vi", ("vi",), True, "high"),
    LangInfo("ukr_Cyrl", "Ukrainian", "uk", "uk", ("uk",), True, "high"),
    LangInfo("tgl_Latn", "Tagalog", "tl", "fil", ("tl", "fil"), True, "mid"),
    LangInfo("nya_Latn", "Chichewa", "ny", None, ("ny",), False, "low"),
    LangInfo("hun_Latn", "Hungarian", "hu", "hu", ("hu",), True, "high"),
)
BY_CODE = {lang.code: lang for lang in LANGS}
PIVOT = "eng_Latn"


def iso3(code: str) -> str:
    return code.split("_")[0]


def script(code: str) -> str:
    return code.split("_")[1]
