"""The user's inputs of a derived world (:mod:`harness.worlds.derived`): a model (the source, or the donor), a target
tokenizer and a language's text, each found, checked and stored in the derived world's staging folder.

A model is a Hugging Face model folder (``config.json`` and weights), a GGUF file (dequantized to fp32 by
transformers' GGUF loader, which needs the ``gguf`` package) or a hub id found in the local Hugging Face cache
(fetched when the hub is not offline). A folder's files are hard-linked into the world where the file system allows
(else copied); a GGUF is converted into a new folder. A target tokenizer is a tokenizer folder, a model folder whose
tokenizer it is, a ``tokenizer.json`` file or a SentencePiece ``.model`` file, stored as a tokenizer folder.

Every refusal is a :class:`~harness.core.errors.ConfigError`: one line, naming the input and what to do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError
from harness.core.hashing import sha256_file

WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")
MODEL_FILES = ("config.json", "generation_config.json", "chat_template.jinja", "chat_template.json", *WEIGHTS)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model", "sentencepiece.model")
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

# a bare tokenizer.json names no roles: each role is the first of these tokens the tokenizer holds
ROLE_TOKENS = {"bos_token": ("<s>", "<bos>", "<|begin_of_text|>", "<|startoftext|>", "[CLS]"),
               "eos_token": ("</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>", "[SEP]"),
               "unk_token": ("<unk>", "[UNK]", "<|unk|>"), "pad_token": ("<pad>", "[PAD]", "<|pad|>"),
               "mask_token": ("<mask>", "[MASK]"), "cls_token": ("[CLS]", "<s>"), "sep_token": ("[SEP]", "</s>")}


@dataclass(frozen=True)
class ModelInput:
    """A model the user named: ``kind`` ``folder`` (``path`` the folder), ``gguf`` (``path`` the file) or ``hub``
    (``path`` the cached snapshot's folder, ``given`` the hub id)."""

    kind: str
    path: Path
    given: str

    def record(self) -> dict[str, Any]:
        where = {"hub_id": self.given} if self.kind == "hub" else {"path": str(Path(self.given).expanduser().resolve())}
        return {"kind": self.kind, **where}


def _matches(folder: Path, patterns: tuple[str, ...]) -> list[Path]:
    found: dict[str, Path] = {}
    for pattern in patterns:
        for p in sorted(folder.glob(pattern)):
            if p.is_file():
                found.setdefault(p.name, p)
    return [found[n] for n in sorted(found)]


def has_weights(folder: Path) -> bool:
    return any(p.suffix in (".safetensors", ".bin") for p in _matches(folder, WEIGHTS))


def has_tokenizer(folder: Path) -> bool:
    return bool(_matches(folder, TOKENIZER_FILES))


def is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def resolve_model(given: str, role: str) -> ModelInput:
    """What ``given`` (the ``--source`` or ``--donor`` argument) names; one-line refusal where it is no model."""
    path = Path(given).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"--{role} {given}: not a model (a Hugging Face model folder holds config.json and its "
                              f"weights; a GGUF file or a hub id are taken too)")
        if not has_weights(path):
            raise ConfigError(f"--{role} {given}: the folder has config.json but no weights (*.safetensors or "
                              f"pytorch_model*.bin); not a model")
        return ModelInput("folder", path, given)
    if path.is_file():
        if path.suffix.lower() == ".gguf" or is_gguf(path):
            if not is_gguf(path):
                raise ConfigError(f"--{role} {given}: not a GGUF file (it does not begin with the GGUF magic bytes)")
            return ModelInput("gguf", path, given)
        raise ConfigError(f"--{role} {given}: not a model (give a Hugging Face model folder, a .gguf file or a hub "
                          f"id)")
    if HUB_ID_RE.match(given) and not given.startswith((".", "/", "~")):
        return ModelInput("hub", hub_snapshot(given, role), given)
    raise ConfigError(f"--{role} {given}: no such file or folder, and not a hub id (owner/name)")


def hub_snapshot(repo_id: str, role: str) -> Path:
    """The folder of hub model ``repo_id`` in the local Hugging Face cache; fetched when the hub is not offline
    (``HF_HUB_OFFLINE``, which ``harness`` sets unless given), else refused in one line naming the fetch."""
    from huggingface_hub import snapshot_download

    patterns = [*MODEL_FILES, *TOKENIZER_FILES]
    try:
        path = Path(snapshot_download(repo_id, local_files_only=True, allow_patterns=patterns))
    except Exception:  # noqa: BLE001 -- not cached (or an incomplete cache entry)
        path = None
    if path is not None and (path / "config.json").is_file() and has_weights(path):
        return path
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "false", "no", ""):
        raise ConfigError(f"--{role} {repo_id}: not in the local Hugging Face cache and the hub is offline; fetch it "
                          f"with `hf download {repo_id}` (huggingface-cli download {repo_id}), or run with "
                          f"HF_HUB_OFFLINE=0")
    try:
        path = Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as exc:  # noqa: BLE001 -- a missing repository, no network: one line
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"--{role} {repo_id}: could not be fetched from the hub ({why})") from exc
    if not ((path / "config.json").is_file() and has_weights(path)):
        raise ConfigError(f"--{role} {repo_id}: the hub repository holds no config.json and weights; not a model")
    return path


# -- storing files ---------------------------------------------------------------------------------------------
def link_or_copy(src: Path, dst: Path) -> str:
    """``dst`` as a hard link to ``src`` (the resolved file, through a cache's symlinks) where the file system
    allows, else a copy; which it was."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    real = Path(os.path.realpath(src))
    try:
        os.link(real, dst)
        return "linked"
    except OSError:
        shutil.copyfile(real, dst)
        return "copied"


def store_files(files: list[Path], out: Path, *, copy: bool = False) -> dict[str, str]:
    """``files`` into folder ``out`` (hard links unless ``copy``): ``{name: "linked" | "copied"}``."""
    out.mkdir(parents=True, exist_ok=True)
    how = {}
    for f in files:
        if copy:
            shutil.copyfile(os.path.realpath(f), out / f.name)
            how[f.name] = "copied"
        else:
            how[f.name] = link_or_copy(f, out / f.name)
    return how


def digests(folder: Path) -> dict[str, str]:
    """``{file name: sha256}`` of every file under ``folder`` (relative paths)."""
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


# -- models ----------------------------------------------------------------------------------------------------
def _require_gguf(given: str, role: str) -> None:
    try:
        import gguf  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"--{role} {given}: reading a GGUF file needs the gguf package: `pip install gguf`") \
            from exc


def _gguf_config(inp: ModelInput, role: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(inp.path.parent, gguf_file=inp.path.name)
    except Exception as exc:  # noqa: BLE001 -- an architecture transformers cannot load, a damaged file
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"--{role} {inp.given}: transformers cannot load this GGUF ({why})") from exc


def stage_model(inp: ModelInput, out: Path, role: str, *, copy: bool = False) -> dict[str, Any]:
    """The model ``inp`` stored as a Hugging Face folder at ``out``; what it is (:func:`model_facts`), how each
    file was stored and the input's record."""
    if inp.kind == "gguf":
        _require_gguf(inp.given, role)
        config = _gguf_config(inp, role)
        objective = _objective(config, inp, role)
        _convert_gguf(inp, out, objective, role)
        stored: dict[str, str] = {n: "converted" for n in sorted(p.name for p in out.iterdir())}
        record = {**inp.record(), "sha256": sha256_file(inp.path),
                  "conversion": "transformers GGUF loader (gguf package), fp32; safetensors"}
    else:
        files = _matches(inp.path, (*MODEL_FILES, *TOKENIZER_FILES))
        stored = store_files(files, out, copy=copy)
        objective = _objective(json.loads((out / "config.json").read_text(encoding="utf-8")), inp, role)
        record = inp.record()
    facts = model_facts(out, objective, inp, role)
    return {**facts, "stored": stored, "input": record, "sha256": digests(out)}


def _objective(config: Any, inp: ModelInput, role: str) -> str:
    from harness.core.objective import objective_of

    try:
        return objective_of(config)
    except ConfigError as exc:
        raise ConfigError(f"--{role} {inp.given}: {exc}") from exc


def _convert_gguf(inp: ModelInput, out: Path, objective: str, role: str) -> None:
    """Dequantize the GGUF with transformers' loader and save it (and its tokenizer) as a plain folder."""
    import torch
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from harness.core.objective import auto_class

    hf_logging.disable_progress_bar()  # the loader's per-tensor bar; the command says what it does
    try:
        model = auto_class(objective).from_pretrained(inp.path.parent, gguf_file=inp.path.name, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 -- an architecture transformers cannot load: one line
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"--{role} {inp.given}: transformers cannot load this GGUF ({why})") from exc
    model.hf_quantizer = None  # save_pretrained refuses a model marked quantized; the weights are fp32 now
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    try:
        AutoTokenizer.from_pretrained(inp.path.parent, gguf_file=inp.path.name).save_pretrained(out)
    except Exception:  # noqa: BLE001 -- a GGUF without a tokenizer: the model alone (a source is then refused)
        pass


def model_facts(folder: Path, objective: str, inp: ModelInput, role: str) -> dict[str, Any]:
    """What the model at ``folder`` is, read by loading it: architecture, objective, vocabulary (its tokenizer's
    length, where it ships one), embedding rows, hidden size, layers, whether its output table is tied."""
    import torch

    from harness.core.objective import auto_class, is_tied

    try:
        model = auto_class(objective).from_pretrained(folder, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 -- weights that do not load: not a model
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"--{role} {inp.given}: the model does not load ({why})") from exc
    emb = model.get_input_embeddings().weight
    vocab = None
    if has_tokenizer(folder):
        vocab = len(load_tokenizer(folder, f"--{role} {inp.given}"))
    cfg = model.config
    layers, ffn = (getattr(cfg, key, None) or getattr(getattr(cfg, "text_config", None), key, None)
                   for key in ("num_hidden_layers", "intermediate_size"))
    return {"objective": objective, "architecture": type(model).__name__, "vocab_size": vocab,
            "embedding_rows": int(emb.shape[0]), "hidden_size": int(emb.shape[1]),
            "num_layers": int(layers) if isinstance(layers, int) else None,
            **({"intermediate_size": int(ffn)} if isinstance(ffn, int) else {}), "tied": bool(is_tied(model)),
            "parameters": int(sum(p.numel() for p in model.parameters()))}


def load_tokenizer(folder: Path, what: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception as exc:  # noqa: BLE001 -- one line
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{what}: its tokenizer does not load ({why})") from exc


# -- the target tokenizer --------------------------------------------------------------------------------------
def stage_tokenizer(given: str, out: Path) -> dict[str, Any]:
    """The tokenizer ``given`` (a tokenizer folder, a model folder, a ``tokenizer.json``, a SentencePiece
    ``.model``, or a hub id in the local cache) stored as a tokenizer folder at ``out``; its manifest entry."""
    path = Path(given).expanduser()
    what = f"--target-tokenizer {given}"
    if path.is_dir():
        files = _matches(path, TOKENIZER_FILES)
        if not files:
            raise ConfigError(f"{what}: the folder holds no tokenizer (tokenizer.json, tokenizer_config.json, "
                              f"vocab/merges files or a SentencePiece model)")
        kind = "model folder" if (path / "config.json").is_file() else "tokenizer folder"
        store_files(files, out, copy=True)
        record: dict[str, Any] = {"path": str(path.resolve())}
    elif path.is_file():
        kind, record = _tokenizer_file(path, out, what), {"path": str(path.resolve()), "sha256": sha256_file(path)}
    elif HUB_ID_RE.match(given):
        snapshot = hub_snapshot(given, "target-tokenizer")
        store_files(_matches(snapshot, TOKENIZER_FILES), out, copy=True)
        kind, record = "hub model", {"hub_id": given}
    else:
        raise ConfigError(f"{what}: no such file or folder, and not a hub id (owner/name)")
    tok = load_tokenizer(out, what)
    return {"kind": kind, "input": record, "size": len(tok), "class": type(tok).__name__,
            "sha256": digests(out)}


def _tokenizer_file(path: Path, out: Path, what: str) -> str:
    """A single tokenizer file into the folder ``out``: its kind, from its content (a ``tokenizer.json``, or a
    SentencePiece model); any other file is refused."""
    head = path.read_bytes()[:1]
    if path.suffix.lower() == ".json" or head == b"{":
        _tokenizer_json(path, out, what)
        return "tokenizer.json"
    if path.suffix.lower() == ".model":
        _sentencepiece(path, out, what)
        return "SentencePiece model"
    raise ConfigError(f"{what}: a tokenizer file of an unknown kind (give a tokenizer.json, a SentencePiece .model "
                      f"file, a tokenizer folder or a model folder)")


def _roles(tok: Any) -> dict[str, str]:
    """Each role's token (:data:`ROLE_TOKENS`) that the tokenizer ``tok`` (a ``tokenizers.Tokenizer``) holds."""
    vocab = tok.get_vocab(with_added_tokens=True)
    roles = {}
    for role, names in ROLE_TOKENS.items():
        found = next((n for n in names if n in vocab), None)
        if found is not None:
            roles[role] = found
    return roles


def _tokenizer_json(path: Path, out: Path, what: str) -> None:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 -- not a tokenizers file: one line
        raise ConfigError(f"{what}: not a tokenizer.json the tokenizers library reads (a tokenizer file of an "
                          f"unknown kind)") from exc
    out.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, **_roles(tok)).save_pretrained(out)


def _sentencepiece(path: Path, out: Path, what: str) -> None:
    """A SentencePiece model converted to a fast tokenizer that follows its own settings (normalizer, dummy
    prefix, byte fallback), with its control pieces as the special tokens."""
    try:
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

        proto = import_protobuf().ModelProto()
        proto.ParseFromString(path.read_bytes())
    except ImportError as exc:
        raise ConfigError(f"{what}: reading a SentencePiece model needs protobuf: `pip install protobuf`") from exc
    except Exception as exc:  # noqa: BLE001 -- not a SentencePiece model: one line
        raise ConfigError(f"{what}: not a SentencePiece model (a tokenizer file of an unknown kind)") from exc
    pieces = list(proto.pieces)
    if not pieces or proto.trainer_spec.model_type not in (1, 2):  # UNIGRAM, BPE
        raise ConfigError(f"{what}: a SentencePiece model of a kind that is not converted (only Unigram and BPE)")
    vocab: Any = ([(p.piece, p.score) for p in pieces] if proto.trainer_spec.model_type == 1
                  else {p.piece: i for i, p in enumerate(pieces)})
    tok = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab, legacy=False)
    spec = proto.trainer_spec
    roles = {role: pieces[i].piece for role, i in (("unk_token", spec.unk_id), ("bos_token", spec.bos_id),
                                                    ("eos_token", spec.eos_id), ("pad_token", spec.pad_id))
             if 0 <= i < len(pieces)}
    out.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, **roles).save_pretrained(out)


def check_donor_vocab(donor_dir: Path, target_dir: Path, given: str) -> dict[str, Any]:
    """The donor at ``donor_dir`` against the target tokenizer at ``target_dir``: its input table holds at least
    a row per target token, and its tokenizer, where it ships one, maps every token to the target's id. Refused
    in one line otherwise."""
    target = load_tokenizer(target_dir, "--target-tokenizer")
    target_vocab = target.get_vocab()
    facts = {"vocab": len(target)}
    if has_tokenizer(donor_dir):
        donor_vocab = load_tokenizer(donor_dir, f"--donor {given}").get_vocab()
        if donor_vocab != target_vocab:
            differ = sorted(set(donor_vocab.items()) ^ set(target_vocab.items()), key=lambda kv: kv[1])
            example = f"; e.g. {differ[0][0]!r} -> {differ[0][1]}" if differ else ""
            raise ConfigError(f"--donor {given}: its vocabulary ({len(donor_vocab):,} tokens) is not the target "
                              f"tokenizer's ({len(target_vocab):,} tokens){example}; a donor owns the target "
                              f"vocabulary")
        facts["tokenizer"] = "same vocabulary as the target tokenizer"
    else:
        facts["tokenizer"] = "none shipped (rows taken as the target's ids)"
    return facts


# -- text -------------------------------------------------------------------------------------------------------
HELDOUT_EVERY = 10  # every 10th line of a user's text is held out (the held-out loss text); the rest is CPT text
MIN_LINES = 10


def split_text(path: Path, lang: str) -> tuple[list[str], list[str]]:
    """``(training lines, held-out lines)`` of the user's text for ``lang``: one sentence a line, empty lines
    dropped; every :data:`HELDOUT_EVERY`-th line held out."""
    try:
        lines = [s.strip() for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--text {lang}={path}: not a readable UTF-8 text file ({type(exc).__name__})") from exc
    if len(lines) < MIN_LINES:
        raise ConfigError(f"--text {lang}={path}: {len(lines)} non-empty lines; at least {MIN_LINES} are needed (one "
                          f"sentence a line; every {HELDOUT_EVERY}th is held out for the held-out loss)")
    held = [s for i, s in enumerate(lines) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    train = [s for i, s in enumerate(lines) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
    return train, held
