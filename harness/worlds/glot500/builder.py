"""The `glot500` world builder: the papers' real inputs -> the world layout (:mod:`harness.worlds.base`).

The spec (``spec.toml`` beside this module, optionally overridden by ``$HARNESS_GLOT500_SPEC``) names every input;
:meth:`Glot500World.check` reports which are present locally and how to provide the others, and
:meth:`Glot500World.build` reads them with :mod:`harness.worlds.glot500.loaders` and writes:

* ``sources/<name>/``: each source model (config + safetensors weights, tokenizer re-saved as ``tokenizer.json``);
* ``target_tokenizer/``: the Glot500-m tokenizer;
* ``resources/word_vectors.vec``: ColexNet+ converted to word2vec text;
* ``resources/cpt/<lang>.txt`` (and ``resources/text/<lang>.txt``, the same file): the first N Glot500-c train
  sentences of each CPT language (Table 7), held-out sentences excluded;
* ``tasks/mlm/<lang>.txt``: held-out Glot500-c sentences (the test split, else the tail of train);
* ``tasks/sr-b``, ``tasks/sr-t``: English queries in ``eng_Latn.jsonl``, each language's aligned sentences by id;
* ``tasks/ner``, ``tasks/pos``: test sets of every language, train/dev of English, IOB2 / UPOS string tags.

The spec's reader and records are in :mod:`harness.worlds.glot500.spec`, the build itself in
:mod:`harness.worlds.glot500.build`; this module holds the builder: its identity, the check of the inputs and the
description for planning.

The same code builds ``glot500-fixture`` from tiny files in the sources' schemas (``tests/fixtures/glot500``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.paths import harness_home
from harness.worlds.base import CheckRow
from harness.worlds.glot500 import langcodes as lc
from harness.worlds.glot500 import loaders as ld
from harness.worlds.glot500.build import _Build, _check_direction, _pick_pbc_file
from harness.worlds.glot500.spec import (
    _LIST_KEYS,
    BUILD_VERSION,
    SPEC_ENV,
    SPEC_PATH,
    TASKS,
    Needs,
    SourceSpec,
    _ref,
    _spec_hash,
    declared_shape,
    decoders,
    load_spec,
)

log = logging.getLogger(__name__)


# -- the builder ----------------------------------------------------------------------------------------------
class Glot500World:
    """Builds the `glot500` world layout from a spec (the real inputs, or the fixture files)."""

    def __init__(self, name: str = "glot500", spec_path: Path = SPEC_PATH, *, env_override: bool = True,
                 description: str | None = None):
        self.name = name
        self.spec_path = spec_path
        self.env_override = env_override
        self._description = description

    # The spec is read at each use, so an override file set after import is honoured.
    @property
    def spec(self) -> dict[str, Any]:
        override = os.environ.get(SPEC_ENV) if self.env_override else None
        return load_spec(self.spec_path, Path(override).expanduser() if override else None)

    @property
    def version(self) -> str:
        try:
            spec = self.spec
        except (ConfigError, MissingResourceError):
            return "1"
        return f"{spec['world'].get('version', '1')}.{BUILD_VERSION}-{_spec_hash(spec)[:8]}"

    @property
    def description(self) -> str:
        if self._description:
            return self._description
        try:
            return str(self.spec["world"].get("description", ""))
        except (ConfigError, MissingResourceError) as exc:
            return f"(spec unreadable: {exc})"

    # -- spec views -------------------------------------------------------------------------------------------
    def sources(self, spec: dict[str, Any]) -> list[SourceSpec]:
        out = []
        langs = spec["languages"]
        for name, s in spec.get("sources", {}).items():
            seen = s.get("seen", [])
            if isinstance(seen, str):
                seen = langs.get(seen, [])
            out.append(SourceSpec(name, _ref(s, "model"), list(s.get("files", [])), [lc.normalize(c) for c in seen],
                                  s.get("size", ""), s.get("licence", ""), s.get("description", "")))
        if not out:
            raise ConfigError(f"world spec {self.spec_path}: no sources.* section")
        return out

    def needs(self, spec: dict[str, Any]) -> Needs:
        langs = spec["languages"]
        mode = spec["world"].get("language_set", "all")
        if mode not in ("all", "cpt"):
            raise ConfigError(f"world.language_set must be 'all' or 'cpt', not {mode!r}")
        pivot = lc.normalize(spec["world"].get("pivot", "eng_Latn"))
        exclude = {k: [lc.normalize(c) for c in v] for k, v in spec["world"].get("exclude", {}).items()}
        unknown = set(exclude) - set(TASKS) - {"cpt"}
        if unknown:
            raise ConfigError(f"world.exclude: unknown task(s) {sorted(unknown)}; use {', '.join(TASKS)}, cpt")
        tasks: dict[str, list[str]] = {}
        for task, key in _LIST_KEYS.items():
            codes = langs.get(key if mode == "all" else f"cpt_{key}", [])
            codes = [lc.normalize(c) for c in codes]
            if task in ("ner", "pos") and pivot not in codes:
                codes = [pivot, *codes]
            tasks[task] = [c for c in dict.fromkeys(codes) if c not in exclude.get(task, [])]
        cpt = [lc.normalize(row[0]) for row in spec["cpt"].get("languages", [])]
        cpt = [c for c in cpt if c not in exclude.get("cpt", [])]
        tasks["mlm"] = [c for c in cpt if c not in exclude.get("mlm", [])]
        return Needs(tasks, cpt, exclude)

    # -- planning -------------------------------------------------------------------------------------------
    def describe(self) -> Any:
        """The world as the spec declares it (sources, languages per task, resources), for ``harness plan`` on a
        machine where the inputs are not present."""
        from harness.worlds.base import WorldSketch

        spec = self.spec
        needs = self.needs(spec)
        sources = self.sources(spec)
        pivot = lc.normalize(spec["world"].get("pivot", "eng_Latn"))
        codes = sorted({c for langs in needs.tasks.values() for c in langs} | set(needs.cpt) | {pivot})
        manifest = {"name": self.name, "pivot_language": pivot,
                    "default_source": spec["world"].get("default_source", sources[0].name),
                    "sources": {**{s.name: {"description": s.description, **declared_shape(spec, s.name)}
                                   for s in sources},
                                **{d.name: {**d.entry(), **declared_shape(spec, d.name)}
                                   for d in decoders(spec) if d.build}}}
        return WorldSketch(name=self.name, manifest=manifest, languages={c: {} for c in codes}, tasks=needs.tasks,
                           resources={"word_vectors", "target_text", "cpt_text", "dictionary"})

    # -- check ------------------------------------------------------------------------------------------------
    def check(self) -> list[CheckRow]:
        spec = self.spec
        needs = self.needs(spec)
        rows: list[CheckRow] = []
        for src in self.sources(spec):
            rows.append(self._model_row(f"source model {src.name}", src.ref, src.files, src.size))
        t = spec["target_tokenizer"]
        rows.append(self._model_row("target tokenizer (Glot500-m)", _ref(t, "model"), list(t.get("files", [])),
                                    t.get("size", "")))
        rows.append(self._wikiann_row(spec, needs))
        rows.append(self._ud_row(spec, needs))
        rows.append(self._tatoeba_row(spec, needs))
        rows.append(self._bible_row(spec, needs))
        rows.append(self._glot500c_row(spec, needs))
        rows.append(self._colexnet_row(spec))
        return [self._access_row(spec, sum(not r.present for r in rows), len(rows)), *rows]

    def _access_row(self, spec: dict[str, Any], n_missing: int, n_inputs: int) -> CheckRow:
        offline = os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "True", "YES", "yes")
        spec_note = str(self.spec_path) + (f" + {os.environ[SPEC_ENV]}" if self.env_override and
                                           os.environ.get(SPEC_ENV) else "")
        where = (f"Hub cache {ld.hub_cache_dir()}; " + ("offline (HF_HUB_OFFLINE=1): nothing is downloaded here"
                                                         if offline else "the harness never downloads these inputs"))
        if n_missing == n_inputs:
            where += "; none of the inputs is on this machine: it cannot build this world as it is"
        elif n_missing:
            where += f"; {n_missing} of {n_inputs} inputs missing"
        else:
            where += "; every input is present: the world builds offline"
        how = (f"spec: {spec_note}. On a machine with Hub access run the `hf download` commands below and copy the "
               f"Hub cache here (or set HF_HOME / HF_HUB_CACHE), or set `path` keys in ${SPEC_ENV}")
        return CheckRow("hub access / spec", True, where, "", how)

    def _model_row(self, label: str, ref: ld.HubRef, files: list[str], size: str) -> CheckRow:
        folder = ld.resolve_repo(ref)
        missing = files if folder is None else [f for f in files if not (folder / f).exists()]
        present = folder is not None and not missing
        where = str(ref.path) if ref.path is not None else ref.label
        if present and folder is not None:
            return CheckRow(label, True, f"{where} -> {folder}", ld.human_size(
                sum(ld.folder_size(folder / f) for f in files)), "present")
        what = f"missing {', '.join(missing)}" if folder is not None else "not in the local Hub cache"
        how = (f"put {', '.join(files)} in {ref.path}" if ref.path is not None
               else ld.hf_download_command(ref, files))
        return CheckRow(label, False, f"{where} ({what})", f"≈ {size}" if size else "", how)

    def _dataset_row(self, label: str, ref: ld.HubRef, missing: list[str], total: int, size_hint: str,
                     include: Callable[[list[str]], list[str]], folder: Path | None, extra: str = "",
                     max_includes: int | None = 12) -> CheckRow:
        """A row for a Hub dataset; the command downloads the missing configs only (or the whole repository when
        more than ``max_includes`` are missing and the repository is small)."""
        where = str(ref.path) if ref.path is not None else ref.label
        if folder is not None and not missing:
            return CheckRow(label, True, f"{where} -> {folder}", ld.human_size(ld.folder_size(folder)),
                            f"present ({total} language(s)){extra}")
        state = "not in the local Hub cache" if folder is None else \
            f"missing {len(missing)} of {total}: {_short(missing)}"
        if ref.path is not None:
            how = f"put the repository files ({', '.join(include(missing)[:3])} ...) under {ref.path}"
        else:
            pats = include(missing)
            whole = max_includes is not None and len(pats) > max_includes
            how = ld.hf_download_command(ref, include=[] if whole else pats)
        return CheckRow(label, False, f"{where} ({state})", f"≈ {size_hint}" if size_hint else "", how + extra)

    def _wikiann_row(self, spec: dict[str, Any], needs: Needs) -> CheckRow:
        inp = spec["inputs"]["wikiann"]
        ref = _ref(inp, "dataset")
        folder = ld.resolve_repo(ref)
        pivot = lc.normalize(spec["world"].get("pivot", "eng_Latn"))
        cfgs = {code: self._wikiann_config(spec, code) for code in needs.tasks["ner"]}
        missing = []
        for code, cfg in cfgs.items():
            splits = ("train", "dev", "test") if code == pivot else ("test",)
            if folder is None or not all(ld.has_split(folder, cfg, s) for s in splits):
                missing.append(cfg)
        return self._dataset_row("NER: WikiANN", ref, missing, len(cfgs), inp.get("size", ""),
                                 lambda ms: [f"{m}/*" for m in ms], folder)

    def _ud_row(self, spec: dict[str, Any], needs: Needs) -> CheckRow:
        inp = spec["inputs"]["ud"]
        prefixes = {code: self._ud_prefix(spec, code) for code in needs.tasks["pos"]}
        if inp.get("format", "hub") == "conllu":
            root = Path(inp["conllu_path"]) if inp.get("conllu_path") else None
            label = "POS: Universal Dependencies (CoNLL-U release)"
            if root is None or not root.exists():
                return CheckRow(label, False, f"{root or '(conllu_path not set)'}", "≈ 0.5 GB",
                                "download ud-treebanks-v2.11.tgz from https://lindat.mff.cuni.cz/repository/xmlui/"
                                f"handle/11234/1-4923 and set inputs.ud.conllu_path in ${SPEC_ENV}")
            have = ld.ud_conllu_prefixes(root) if root.is_dir() else {}
            missing = [p for p in prefixes.values() if p not in have] if root.is_dir() else []
            if missing:
                return CheckRow(label, False, f"{root} (missing {_short(missing)})", "",
                                "use a release that has these treebanks, or exclude the languages in "
                                "world.exclude.pos")
            return CheckRow(label, True, str(root), ld.human_size(ld.folder_size(root)),
                            f"present ({len(prefixes)} language(s))")
        ref = _ref(inp, "dataset")
        folder = ld.resolve_repo(ref)
        have = ld.ud_configs(folder) if folder is not None else {}
        missing = [p for p in prefixes.values() if p not in have]
        return self._dataset_row("POS: Universal Dependencies", ref, missing, len(prefixes), inp.get("size", ""),
                                 lambda ms: [f"{m}_*" for m in ms], folder)

    def _tatoeba_row(self, spec: dict[str, Any], needs: Needs) -> CheckRow:
        inp = spec["inputs"]["tatoeba"]
        ref = _ref(inp, "dataset")
        folder = ld.resolve_repo(ref)
        layout = inp.get("layout", "mteb")
        split = "test" if layout == "mteb" else "dev"
        cfgs = [self._tatoeba_config(spec, code, layout) for code in needs.tasks["sr-t"]]
        missing = [c for c in cfgs if folder is None or not ld.has_split(folder, c, split)]
        return self._dataset_row("SR-T: Tatoeba", ref, missing, len(cfgs), inp.get("size", ""),
                                 lambda ms: [f"{m}/*" for m in ms], folder)

    def _glot500c_row(self, spec: dict[str, Any], needs: Needs) -> CheckRow:
        inp = spec["inputs"]["glot500c"]
        ref = _ref(inp, "dataset")
        folder = ld.resolve_repo(ref)
        cfgs = [lc.to_glot500_config(c) for c in needs.cpt]
        missing = [c for c in cfgs if folder is None or not ld.has_split(folder, c, "train")]
        return self._dataset_row("CPT + MLM: Glot500-c", ref, missing, len(cfgs), inp.get("size", ""),
                                 lambda ms: [f"{m}/*" for m in ms], folder, max_includes=None)

    def _colexnet_row(self, spec: dict[str, Any]) -> CheckRow:
        inp = spec["inputs"]["colexnet"]
        path = self._colexnet_path(spec)
        label = "word vectors: ColexNet+"
        if path.is_file():
            npy = Path(f"{path}.vectors.npy")
            size = path.stat().st_size + (npy.stat().st_size if npy.is_file() else 0)
            return CheckRow(label, True, str(path), ld.human_size(size), "present")
        return CheckRow(label, False, f"{path} (missing; Zenodo {inp.get('url', '')})",
                        f"≈ {inp.get('size', '')}",
                        f"download {inp['file']} (and {inp['file']}.vectors.npy if the record lists it) from "
                        f"{inp.get('url', '')} into {path.parent}, or set inputs.colexnet.path in ${SPEC_ENV}")

    def _bible_row(self, spec: dict[str, Any], needs: Needs) -> CheckRow:
        inp = spec["inputs"]["bible"]
        folder = self._bible_path(spec)
        label = "SR-B: Bible" + ("" if inp.get("comparable", True) else " (stand-in, not comparable)")
        how = (f"{inp.get('source', 'the Parallel Bible Corpus')}; put its files in {folder} (or set inputs.bible.path "
               f"in ${SPEC_ENV}). Public stand-in: {inp.get('standin', '-')} (set comparable = false)")
        if not folder.is_dir():
            return CheckRow(label, False, f"{folder} (missing)", f"≈ {inp.get('size', '')}", how)
        missing = self._bible_missing(spec, needs, folder)
        if missing:
            return CheckRow(label, False, f"{folder} (missing {len(missing)}: {_short(missing)})", "", how)
        return CheckRow(label, True, str(folder), ld.human_size(ld.folder_size(folder)),
                        f"present ({len(needs.tasks['sr-b'])} language(s))")

    # -- per-input helpers ----------------------------------------------------------------------------------------
    def _wikiann_config(self, spec: dict[str, Any], code: str) -> str:
        over = {lc.normalize(v): k for k, v in spec["languages"].get("overrides", {}).get("wikiann", {}).items()}
        return over.get(code) or lc.to_wikiann(code)

    def _ud_prefix(self, spec: dict[str, Any], code: str) -> str:
        over = {lc.normalize(v): k for k, v in spec["languages"].get("overrides", {}).get("ud", {}).items()}
        return over.get(code) or lc.to_ud_prefix(code)

    def _tatoeba_config(self, spec: dict[str, Any], code: str, layout: str) -> str:
        over = {lc.normalize(v): k for k, v in spec["languages"].get("overrides", {}).get("tatoeba", {}).items()}
        code3 = over.get(code) or lc.to_tatoeba(code)
        return f"{code3}-eng" if layout == "mteb" else f"tatoeba.{code3}"

    def _colexnet_path(self, spec: dict[str, Any]) -> Path:
        inp = spec["inputs"]["colexnet"]
        if inp.get("path"):
            return Path(inp["path"])
        return harness_home() / "inputs" / "glot500" / "colexnet" / inp["file"]

    def _bible_path(self, spec: dict[str, Any]) -> Path:
        inp = spec["inputs"]["bible"]
        return Path(inp["path"]) if inp.get("path") else harness_home() / "inputs" / "glot500" / "pbc"

    def _bible_missing(self, spec: dict[str, Any], needs: Needs, folder: Path) -> list[str]:
        inp = spec["inputs"]["bible"]
        pivot = lc.normalize(spec["world"].get("pivot", "eng_Latn"))
        if inp.get("format", "pbc") == "glot500":
            return [c for c in needs.tasks["sr-b"]
                    if not (folder / f"bible.{c}-{pivot}.{c}").is_file()]
        files = ld.pbc_files(folder)
        fixed = {lc.normalize(k): v for k, v in inp.get("files", {}).items()}
        missing = [] if (inp.get("english_file") and (folder / inp["english_file"]).is_file()) or \
            pivot[:3] in files else [pivot]
        for c in needs.tasks["sr-b"]:
            if c in fixed:
                if not (folder / fixed[c]).is_file():
                    missing.append(c)
            elif c[:3] not in files:
                missing.append(c)
        return missing

    # -- build ------------------------------------------------------------------------------------------------
    def build(self, out: Path) -> None:
        spec = self.spec
        missing = [r for r in self.check() if not r.present]
        if missing:
            lines = "\n".join(f"  - {r.name}: {r.where}\n    how: {r.how}" for r in missing)
            raise MissingResourceError(f"world {self.name!r} cannot be built; {len(missing)} input(s) missing:\n"
                                       f"{lines}\n(`harness world check {self.name}` shows them all)")
        b = _Build(self, spec, out)
        b.run()


def _short(items: list[str], n: int = 8) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


# the spec's reader and records, and the build, are kept importable from here
__all__ = ["BUILD_VERSION", "SPEC_ENV", "SPEC_PATH", "TASKS", "Glot500World", "Needs", "SourceSpec", "_Build",
           "_check_direction", "_pick_pbc_file", "load_spec"]
