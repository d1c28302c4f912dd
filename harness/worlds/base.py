"""The world contract: everything a run is evaluated against, resolved to local files.

A world is a folder with a fixed layout (every builder writes it, every consumer reads it)::

    manifest.json               name, version, inputs (package, version, sha256, licence), pivot language,
                                sources, default source, and the world's own notes
    languages.json              {code: {script, seen: {source: bool}, resource_level, text_chars, ...}}
    sources/<name>/             HF folder: config + weights with an MLM head + tokenizer (AutoModelForMaskedLM)
    target_tokenizer/           HF tokenizer folder (AutoTokenizer)
    resources/text/<lang>.txt   monolingual training text, one sentence per line (held-out text excluded)
    resources/cpt/<lang>.txt    continued pre-training text, one sentence per line
    resources/word_vectors.vec  multilingual word vectors, word2vec text format, keys ``iso3:word`` (ColexNet+ keys)
    resources/dictionaries/<src>-<tgt>.tsv   ``src_word<TAB>tgt_word`` lines (MUSE/WECHSEL layout)
    tasks/mlm/<lang>.txt        held-out sentences for the MLM task
    tasks/sr-b/<lang>.jsonl     {"id", "text"}; the pivot language file holds the queries, aligned by id
    tasks/sr-t/<lang>.jsonl     same layout
    tasks/ner/<lang>/{train,dev,test}.jsonl   {"tokens": [...], "tags": [...]} (IOB2), only test for non-pivot
    tasks/pos/<lang>/{train,dev,test}.jsonl   {"tokens": [...], "tags": [...]} (UPOS)
    tasks/<task>/meta.json      {"languages": {code: {"label_source": "gold"|"silver", ...}}, "description": ...}

The builders write the metadata files through :mod:`harness.worlds.writer`; this module is their only reader.

Language codes are ISO 639-3 + ISO 15924 (``swh_Latn``). The world's identity is the hash of its manifest
(which lists the sha256 of every input and, for a world whose build computes models, of what it computed: the
bible world's ``built``), so a rebuilt world with the same inputs keeps its identity where its build computes the
same bytes, and takes another where the machine's arithmetic made other heads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.hashing import hash_obj

LANG_CODE_RE = r"^[a-z]{3}_[A-Z][a-z]{3}$"
CHECKSUMS = "checksums.json"  # a built world's record of its files (harness.worlds)


@dataclass
class CheckRow:
    """One input of a world, for ``harness world check``."""

    name: str
    present: bool
    where: str  # where it comes from (package, hub id, path)
    size: str = ""
    how: str = ""  # the exact command or path to provide it


@dataclass(frozen=True)
class Language:
    code: str
    script: str
    seen: dict[str, bool] = field(default_factory=dict)  # source name -> seen in its pretraining
    resource_level: str = "unknown"  # high / mid / low
    text_chars: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def builder_sketch(builder: Any, asks: tuple[str, ...] = ("declare", "describe")) -> Any:
    """What a world's builder says of the world without building it: the first of ``asks`` (``declare``: what
    the build writes that is known before it; ``describe``: that with each task's languages) the builder has,
    called; None where it has neither."""
    for ask in asks:
        sketch = getattr(builder, ask, None)
        if callable(sketch):
            return sketch()
    return None


def in_languages(rel: Path, kept: set[str] | frozenset[str] | None) -> bool:
    """Whether a world's file (its path relative to its resource or task folder) belongs to languages ``kept``: every
    language code in its folder names and stem (``eng_Latn-swh_Latn.tsv``: two) is kept; a file naming none (word
    vectors, a task's labels) belongs to every language. ``kept`` None: every file."""
    if kept is None:
        return True
    parts = [*rel.parent.parts, rel.stem]
    codes = {c for part in parts for c in part.split("-") if re.match(LANG_CODE_RE, c)}
    return codes <= kept


class ManifestView:
    """What a world's manifest says (pivot, sources) and its language checks; shared by a built :class:`World`
    and the description of a world that is not built here (:class:`WorldSketch`)."""

    name: str
    manifest: dict[str, Any]
    languages: dict[str, Any]

    @property
    def pivot(self) -> str:
        return self.manifest.get("pivot_language", "eng_Latn")

    @property
    def sources(self) -> list[str]:
        return list(self.manifest["sources"])

    @property
    def kept_languages(self) -> frozenset[str] | None:
        """The languages a derived world made with ``--langs`` keeps of its base world's (the pivot among them):
        its tasks, resources and language table hold those only; None: every language."""
        kept = self.manifest.get("languages_kept")
        return frozenset(kept) if isinstance(kept, list) else None

    def source_identity(self, source: str) -> str | None:
        """The hash of a source that carries its own identity (its manifest entry says ``own_identity``: a source
        added to a world after the world's identity was fixed, such as a decoder), which its cells' identity holds;
        None for a source that the world's hash covers."""
        info = self.manifest.get("sources", {}).get(source)
        return hash_obj(info) if isinstance(info, dict) and info.get("own_identity") else None

    def source_line(self, source: str) -> str:
        """One line of what ``harness world info`` says of a source: its architecture, objective, vocabulary,
        whether its tables are tied, and its licence (whether OSI-approved, where the world says)."""
        from harness.core.objective import DESCRIPTION

        info = self.manifest.get("sources", {}).get(source)
        info = info if isinstance(info, dict) else {}
        objective = self.source_objective(source)
        parts = [info.get("architecture") or ("causal LM" if objective == "clm" else "masked LM"),
                 f"objective {objective} ({DESCRIPTION[objective]})"]
        vocab = info.get("vocab_size")
        parts.append(f"vocabulary {vocab:,}" if isinstance(vocab, int) else "vocabulary known once built")
        parts.append("tied embeddings" if self.source_tied(source) else "untied output table")
        records = [*info.get("packages", []), *(r for r in self.manifest.get("inputs", []) if isinstance(r, dict)
                                                 and str(info.get("package", "")).split("==")[0] == r.get("package"))]
        licence = info.get("licence") or next((r["licence"] for r in records if r.get("licence")), None)
        if licence:
            osi = info.get("osi_approved")
            parts.append(f"licence {licence}" + ("" if osi is None or "OSI" in licence else
                                                  " (OSI-approved)" if osi else " (not OSI-approved)"))
        default = " (default)" if source == self.default_source else ""
        return f"source {source}{default}: " + ", ".join(parts)

    def source_tied(self, source: str) -> bool:
        """Whether the source ties its output table to its input table, as its manifest declares (``tied``),
        else as its config says (``tie_word_embeddings``, true unless given)."""
        info = self.manifest.get("sources", {}).get(source)
        if isinstance(info, dict) and isinstance(info.get("tied"), bool):
            return info["tied"]
        config = self.source_dir(source) / "config.json"
        if config.is_file():
            return bool(json.loads(config.read_text(encoding="utf-8")).get("tie_word_embeddings", True))
        return True

    def source_objective(self, source: str) -> str:
        """``mlm`` or ``clm`` as the manifest declares it (``objective``), else as the model's config says, else
        ``mlm`` (the worlds made before decoders declare none)."""
        info = self.manifest.get("sources", {}).get(source)
        declared = info.get("objective") if isinstance(info, dict) else None
        if declared:
            return str(declared)
        from harness.core.objective import objective_of_dir

        folder = self.source_dir(source)
        return objective_of_dir(folder) if (folder / "config.json").is_file() else "mlm"

    @property
    def default_source(self) -> str:
        return self.manifest.get("default_source", self.sources[0])

    def check_source(self, source: str) -> None:
        if source not in self.manifest["sources"]:
            declared = self._declared_sketch()
            if declared is not None and source in declared.sources:
                at = f" at {self.root}" if getattr(self, "root", None) else ""
                how = (f"`harness world build {self.name} --add-sources` adds {source!r} to it, keeping the world's "
                       f"identity and every cell" if declared.source_identity(source) is not None else
                       f"`harness world build {self.name} --force` builds it again with {source!r} (where the build "
                       f"changed since, the other sources' cells are then computed again; their runs are kept), or "
                       f"give this job a harness home of its own (HARNESS_HOME)")
                raise ConfigError(
                    f"world {self.name!r}{at} was built by an earlier version, before its source model "
                    f"{source!r}; it has: {', '.join(self.sources)}. {how}")
            raise ConfigError(
                f"world {self.name!r} has no source model {source!r}; it has: {', '.join(self.sources)} (give "
                f"--source with one of them, or all)"
            )

    def _declared_sketch(self) -> Any:
        """What this world's builder declares today (None where it declares nothing): a built world may hold fewer
        sources, when an earlier version built it."""
        try:  # the builder is set where the world is loaded (harness.worlds)
            return builder_sketch(getattr(self, "builder", None))
        except Exception:  # noqa: BLE001 -- only the message depends on it
            return None

    def hidden_size(self, source: str) -> int | None:
        """The hidden size of source model ``source`` as the world declares it (its manifest's ``hidden_size``);
        None where it declares none."""
        info = self.manifest.get("sources", {}).get(source)
        size = info.get("hidden_size") if isinstance(info, dict) else None
        return size if isinstance(size, int) and not isinstance(size, bool) else None

    def check_languages(self, langs: list[str]) -> None:
        unknown = [lang for lang in langs if lang not in self.languages]
        if unknown:
            import difflib

            hints = []
            for u in unknown:
                close = difflib.get_close_matches(u, list(self.languages), n=1)
                hints.append(f"{u!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(
                f"langs: unknown language {', '.join(hints)} for world {self.name!r}; "
                f"it has {', '.join(sorted(self.languages))}"
            )


@dataclass
class World(ManifestView):
    name: str
    root: Path
    manifest: dict[str, Any]
    languages: dict[str, Language]
    base: World | None = None  # a derived world's base world, whose tasks and resources it reads (derived.py)

    # -- identity ------------------------------------------------------------------------------------------
    @cached_property
    def hash(self) -> str:
        return hash_obj(world_identity(self.manifest))

    # -- files ---------------------------------------------------------------------------------------------
    def source_dir(self, source: str) -> Path:
        self.check_source(source)
        return self.root / "sources" / source

    def hidden_size(self, source: str) -> int | None:
        """The source model's hidden size, read from its ``config.json`` (the model is not loaded); what the
        manifest declares where the config names none."""
        try:
            config = json.loads((self.source_dir(source) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        for key in ("hidden_size", "d_model", "dim", "n_embd"):  # BERT/XLM-R, T5/BART, DistilBERT, GPT-2
            size = config.get(key) if isinstance(config, dict) else None
            if isinstance(size, int) and not isinstance(size, bool):
                return size
        return super().hidden_size(source)

    @property
    def target_tokenizer_dir(self) -> Path:
        return self.root / "target_tokenizer"

    @property
    def donor_dir(self) -> Path | None:
        """The model that owns the target vocabulary (a Hugging Face folder), where the world has one (a derived
        world made with ``--donor``; its manifest's ``donor`` entry: identity, path, vocab); else None."""
        d = self.root / "donor"
        return d if (d / "config.json").is_file() else None

    def resource_path(self, rel: str) -> Path:
        own = self.root / "resources" / rel
        return self.base.resource_path(rel) if self.base is not None and not own.exists() else own

    def has_resource(self, kind: str) -> bool:
        return bool(self.resource_files(kind))

    def resource_files(self, kind: str) -> list[Path]:
        """The world's files of resource ``kind``; a derived world's own (a user's text) beside its base world's,
        its own taking the place of a base file of the same name, of its kept languages only."""
        own = self._own_resource_files(kind)
        if self.base is None:
            return own
        names = {p.name for p in own}
        return sorted([*own, *(p for p in self.base.resource_files(kind) if p.name not in names
                               and in_languages(Path(p.name), self.kept_languages))], key=lambda p: p.name)

    def _own_resource_files(self, kind: str) -> list[Path]:
        r = self.root / "resources"
        if kind == "word_vectors":
            return [p for p in [r / "word_vectors.vec"] if p.is_file()]
        if kind == "target_text":
            return sorted((r / "text").glob("*.txt"))
        if kind == "cpt_text":
            return sorted((r / "cpt").glob("*.txt"))
        if kind == "dictionary":
            return sorted((r / "dictionaries").glob("*.tsv"))
        raise ValueError(f"unknown resource kind {kind!r}")

    def require(self, kind: str, who: str) -> None:
        if not self.has_resource(kind):
            raise MissingResourceError(
                f"{who} needs the resource {kind!r}, which world {self.name!r} does not provide "
                f"(looked under {self.root / 'resources'})"
            )

    def task_dir(self, task: str) -> Path:
        own = self.root / "tasks" / task
        if self.base is not None and not (own / "meta.json").is_file():
            return self.base.task_dir(task)  # a derived world reads its base world's task data in place
        return own

    def task_meta(self, task: str) -> dict[str, Any]:
        p = self.task_dir(task) / "meta.json"
        meta = json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {"languages": {}}
        kept = self.kept_languages
        if kept is not None and isinstance(meta.get("languages"), dict):
            meta["languages"] = {lang: v for lang, v in meta["languages"].items() if lang in kept}
        return meta

    def task_languages(self, task: str) -> list[str]:
        return sorted(self.task_meta(task).get("languages", {}))

    def tasks_available(self) -> list[str]:
        d = self.root / "tasks"
        own = {p.name for p in d.iterdir() if (p / "meta.json").is_file()} if d.is_dir() else set()
        return sorted(own | set(self.base.tasks_available() if self.base is not None else []))



def world_identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a world's hash covers: its manifest without the sources that carry their own identity
    (:meth:`ManifestView.source_identity`), so that adding such a source keeps every other cell's key."""
    sources = manifest.get("sources")
    if not isinstance(sources, dict) or not any(isinstance(v, dict) and v.get("own_identity")
                                                for v in sources.values()):
        return manifest
    return {**manifest, "sources": {k: v for k, v in sources.items()
                                    if not (isinstance(v, dict) and v.get("own_identity"))}}


def load_world_dir(name: str, root: Path) -> World:
    mpath = root / "manifest.json"
    if not mpath.is_file():
        raise MissingResourceError(f"world {name!r} at {root} has no manifest.json; rebuild it")
    manifest = json.loads(mpath.read_text(encoding="utf-8"))
    raw = json.loads((root / "languages.json").read_text(encoding="utf-8"))
    langs = {
        code: Language(
            code=code,
            script=info.get("script", code.split("_")[-1]),
            seen=info.get("seen", {}),
            resource_level=info.get("resource_level", "unknown"),
            text_chars=info.get("text_chars", 0),
            extra={k: v for k, v in info.items() if k not in {"script", "seen", "resource_level", "text_chars"}},
        )
        for code, info in raw.items()
    }
    derived = manifest.get("derived_from")
    base = load_base_world(name, root, derived) if isinstance(derived, dict) else None
    return World(name=name, root=root, manifest=manifest, languages=langs, base=base)


def load_base_world(name: str, root: Path, derived: dict[str, Any]) -> World:
    """The base world of the derived world ``name`` at ``root`` (its manifest's ``derived_from``: the base world's
    name, its folder beside ``root`` and its hash when the world was derived), refused in one line where that
    folder is gone or holds another world now."""
    base_root = root.parent / str(derived.get("folder", ""))
    if not str(derived.get("folder", "")) or not (base_root / "manifest.json").is_file():
        raise MissingResourceError(f"world {name!r} is derived from world {derived.get('world')!r}, whose folder "
                                   f"{base_root} is not built here: `harness world build {derived.get('world')}` "
                                   f"builds it (the derived world is usable again where it gets the same hash)")
    base = load_world_dir(str(derived.get("world")), base_root)
    if base.hash != derived.get("hash"):
        raise MissingResourceError(f"world {name!r} is derived from world {base.name!r} as it was (hash "
                                   f"{derived.get('hash')}); the world at {base_root} has hash {base.hash} now (built "
                                   f"again since): derive it again under a new name (`harness world derive`)")
    return base


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


@dataclass
class WorldSketch(ManifestView):
    """What planning needs of a world that is not built here (its builder's ``describe()``), or what a run's
    inputs are checked against before the world is built (its builder's ``declare()``: languages, sources and
    resources; ``tasks`` may then be empty, as a world whose task data are only known once built declares none)."""

    name: str
    manifest: dict[str, Any]
    languages: dict[str, Any]
    tasks: dict[str, list[str]]
    resources: set[str] = field(default_factory=set)
    hash: str = "not-built"

    def source_dir(self, source: str) -> Path:
        self.check_source(source)
        return Path("/nonexistent") / source

    def task_languages(self, task: str) -> list[str]:
        return sorted(self.tasks.get(task, []))

    def task_meta(self, task: str) -> dict[str, Any]:
        return {"languages": {lang: {} for lang in self.tasks.get(task, [])}}

    def has_resource(self, kind: str) -> bool:
        return kind in self.resources

    @property
    def donor_dir(self) -> Path | None:
        return None  # (a world not built here has no files)
