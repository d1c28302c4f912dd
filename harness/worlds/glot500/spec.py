"""The `glot500` world's spec (``spec.toml`` beside this module, keys overridden by ``$HARNESS_GLOT500_SPEC``):
reading and merging it, and the records it names (sources, languages per task, Hub references)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, MissingResourceError
from harness.worlds.glot500 import loaders as ld

SPEC_PATH = Path(__file__).with_name("spec.toml")
BUILD_VERSION = 1  # bump when the build writes a different layout from the same inputs
SPEC_ENV = "HARNESS_GLOT500_SPEC"
TASKS = ("sr-b", "sr-t", "ner", "pos", "mlm")
_LIST_KEYS = {"sr-b": "srb", "sr-t": "srt", "ner": "ner", "pos": "pos"}
_PATH_KEYS = ("path", "conllu_path")


# -- spec -----------------------------------------------------------------------------------------------------
def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _absolutize(d: Any, base: Path) -> Any:
    """Resolve relative ``path`` / ``conllu_path`` values against the folder of the file that names them."""
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            if k in _PATH_KEYS and isinstance(v, str) and v:
                p = Path(v).expanduser()
                out[k] = str(p if p.is_absolute() else (base / p).resolve())
            else:
                out[k] = _absolutize(v, base)
        return out
    return d


def load_spec(path: Path, override: Path | None = None) -> dict[str, Any]:
    def read(p: Path) -> dict[str, Any]:
        try:
            with open(p, "rb") as f:
                return _absolutize(tomllib.load(f), p.parent)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"world spec {p}: {exc}") from exc

    if not path.is_file():
        raise MissingResourceError(f"world spec {path} does not exist")
    spec = read(path)
    if override is not None:
        if not override.is_file():
            raise ConfigError(f"${SPEC_ENV} points at {override}, which does not exist")
        spec = _merge(spec, read(override))
    for key in ("world", "languages", "inputs", "cpt"):
        if key not in spec:
            raise ConfigError(f"world spec {path}: section [{key}] missing")
    return spec


@dataclass
class SourceSpec:
    name: str
    ref: ld.HubRef
    files: list[str]
    seen: list[str]
    size: str = ""
    licence: str = ""
    description: str = ""


@dataclass
class Needs:
    """What a build needs: languages per task (after exclusions) and CPT languages."""

    tasks: dict[str, list[str]]
    cpt: list[str]
    excluded: dict[str, list[str]] = field(default_factory=dict)



def _ref(section: dict[str, Any], default_type: str) -> ld.HubRef:
    if "hub_id" not in section:
        raise ConfigError(f"world spec: a Hub input needs hub_id (section {section})")
    path = Path(section["path"]) if section.get("path") else None
    return ld.HubRef(section["hub_id"], str(section.get("revision", "main")),
                     section.get("repo_type", default_type), path)


UNHASHED = ("decoders", "shapes")  # sections that do not enter the world's identity


def _spec_hash(spec: dict[str, Any]) -> str:
    """The hash of the spec without its decoders (each built decoder carries its own identity) and the models'
    declared shapes (a plan's CPU estimate reads them; no built file depends on them)."""
    from harness.core.hashing import hash_obj

    return hash_obj({k: v for k, v in spec.items() if k not in UNHASHED}, length=16)


SHAPE_KEYS = ("hidden_size", "num_layers", "intermediate_size")


def declared_shape(spec: dict[str, Any], source: str) -> dict[str, int]:
    """The shape ``[shapes.<source>]`` declares for a source model (``hidden_size``, ``num_layers``,
    ``intermediate_size``), with the target tokenizer's ``vocab_size`` as ``target_vocab``: what ``harness plan``
    scales a cell's CPU cost by before the world is built (:mod:`harness.throughput`); empty where it declares
    nothing. A value that is not a positive integer is refused."""
    declared = dict((spec.get("shapes") or {}).get(source) or {})
    unknown = sorted(set(declared) - set(SHAPE_KEYS))
    if unknown:
        raise ConfigError(f"world spec: shapes.{source} has unknown key(s) {', '.join(unknown)}; "
                          f"it takes {', '.join(SHAPE_KEYS)}")
    shape = {k: declared[k] for k in SHAPE_KEYS if k in declared}
    vocab = (spec.get("target_tokenizer") or {}).get("vocab_size")
    if shape and vocab is not None:
        shape["target_vocab"] = vocab
    for key, value in shape.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"world spec: shapes.{source}.{key} must be a positive integer, not {value!r}")
    return shape


@dataclass
class DecoderSpec:
    """A hub decoder the world declares: where it is, how it loads, whether this world builds it."""

    name: str
    ref: ld.HubRef
    files: list[str]
    seen: list[str]
    licence: str
    loader: str
    architecture: str
    tied: bool
    build: bool
    description: str = ""
    size: str = ""
    multilingual: bool | None = None

    def entry(self) -> dict[str, Any]:
        """Its manifest entry (a source with its own identity). ``multilingual`` is there where the spec says it:
        a decoder whose pre-training languages the spec does not list (``seen = []``) is the "multi" case of
        HyperOFA only by that word."""
        return {"description": self.description, "objective": "clm", "hub_id": self.ref.hub_id,
                "revision": self.ref.revision, "loader": self.loader, "architecture": self.architecture,
                "tied": self.tied, "licence": self.licence, "languages": self.seen,
                **({} if self.multilingual is None else {"multilingual": self.multilingual}), "own_identity": True}


LOADERS = ("AutoModelForCausalLM",)


def decoders(spec: dict[str, Any]) -> list[DecoderSpec]:
    """The spec's ``[decoders.*]`` sections."""
    out = []
    for name, d in spec.get("decoders", {}).items():
        if d.get("loader", "AutoModelForCausalLM") not in LOADERS:
            raise ConfigError(f"world spec: decoders.{name}.loader must be one of {', '.join(LOADERS)}")
        if "multilingual" in d and not isinstance(d["multilingual"], bool):
            raise ConfigError(f"world spec: decoders.{name}.multilingual must be true or false")
        out.append(DecoderSpec(name, _ref(d, "model"), list(d.get("files", [])), list(d.get("seen", [])),
                               d.get("licence", ""), d.get("loader", "AutoModelForCausalLM"),
                               d.get("architecture", ""), bool(d.get("tied", True)), bool(d.get("build", False)),
                               d.get("description", ""), d.get("size", ""), d.get("multilingual")))
    return out
