"""``harness world derive ... --trim``: the target tokenizer trimmed to the pieces the world's text uses, and the
donor's embedding rows re-indexed to the trimmed vocabulary.

The world's text is every text line it holds (the base world's training and CPT text, its held-out text and task
data, each tagged sentence's words alone as well as joined, and the user's ``--text``). A piece is kept where

* the text's tokenization emits it;
* (byte-level or byte-fallback BPE) it is an intermediate of the merges that build an emitted piece: BPE merges
  inside an emitted piece's span only combine symbols of that span, in the order they would take on the piece's
  characters alone, so the symbols of that run are every symbol the text's tokenization ever holds;
* it is an added token marked special, a byte piece (``<0x00>`` .. ``<0xFF>``, byte fallback), a character of the
  byte-level alphabet (so any text still tokenizes), the unknown token, or (Unigram) the lowest-scored piece (the
  unknown token's penalty is reckoned from it).

Pieces keep their order (a piece's new id is its rank among the kept); a BPE merge is kept where both its parts and
its result are kept, in its order. The text's tokenization is then the same, piece for piece: at each step the
merge the full tokenizer applies is kept and every kept merge is one of the full tokenizer's, in the same order
(BPE); the best segmentation is still there and nothing better was added (Unigram); the longest match is kept
(WordPiece). The derivation checks it on a sample of the text and refuses in one line where it differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError

RULE = ("the pieces the world's text uses (its training, CPT and held-out text, its task data and the user's text), "
        "with every BPE merge intermediate of those pieces, every special token, every byte piece (<0x00>..<0xFF>, "
        "and the byte-level alphabet) and the unknown token; ids in the full tokenizer's order; BPE merges kept "
        "where both parts and the result are kept")
SLOW_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "sentencepiece.model", "vocab.txt",
              "vocab.json", "merges.txt", "added_tokens.json")
CHECK_LINES = 20_000  # lines of the world's text whose tokenization is compared, full against trimmed
BATCH = 5_000


# -- the world's text --------------------------------------------------------------------------------------------
def _task_files(world: Any, kept: frozenset[str] | None) -> list[Path]:
    from harness.worlds.base import in_languages

    files: list[Path] = []
    for task in world.tasks_available():
        d = world.task_dir(task)
        files += [p for p in sorted(d.rglob("*")) if p.suffix in (".txt", ".jsonl") and p.is_file()
                  and in_languages(p.relative_to(d), kept)]
    return files


def world_lines(world: Any, texts: Iterable[Path] = (), kept: frozenset[str] | None = None) -> list[str]:
    """Every distinct text line world ``world`` holds (resources ``target_text`` and ``cpt_text``, every task's
    ``.txt`` lines and ``.jsonl`` records' ``text``; a record's ``tokens`` joined by spaces and each alone), of
    languages ``kept`` only where given, and every line of ``texts``; sorted."""
    from harness.worlds.base import in_languages

    lines: set[str] = set()
    files = [*(p for kind in ("target_text", "cpt_text") for p in world.resource_files(kind)
               if in_languages(Path(p.name), kept)), *texts]
    for p in files:
        lines.update(p.read_text(encoding="utf-8").splitlines())
    for p in _task_files(world, kept):
        for line in p.read_text(encoding="utf-8").splitlines():
            if p.suffix == ".txt":
                lines.add(line)
                continue
            rec = json.loads(line) if line.strip() else {}
            if isinstance(rec.get("text"), str):
                lines.add(rec["text"])
            words = rec.get("tokens")
            if isinstance(words, list):
                lines.add(" ".join(words))
                lines.update(w for w in words if isinstance(w, str))
    lines.discard("")
    return sorted(lines)


def used_ids(tok: Any, lines: list[str], note: Callable[[str], None] | None = None) -> set[int]:
    """The ids the ``tokenizers.Tokenizer`` ``tok`` emits on ``lines`` (no special tokens added)."""
    used: set[int] = set()
    for k in range(0, len(lines), BATCH):
        for enc in tok.encode_batch(lines[k:k + BATCH], add_special_tokens=False):
            used.update(enc.ids)
        if note is not None and (k // BATCH) % 100 == 99:
            note(f"  {k + BATCH:,} of {len(lines):,} lines tokenized")
    return used


# -- which pieces stay ---------------------------------------------------------------------------------------------
def _merge_pairs(model: dict[str, Any]) -> list[tuple[str, str]]:
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else (m[0], m[1]) for m in model.get("merges", [])]


def bpe_intermediates(pieces: Iterable[str], merges: list[tuple[str, str]], vocab: dict[str, int]) -> set[str]:
    """Every symbol the BPE merges hold while building each of ``pieces`` from its characters (the lowest-ranked
    adjacent pair merged first, the leftmost among equals, as the tokenizers library does)."""
    rank = {pair: r for r, pair in enumerate(merges)}
    out: set[str] = set()
    for piece in pieces:
        symbols = list(piece)
        if any(s not in vocab for s in symbols):
            continue  # not built by merges from its characters (an added token, a byte piece)
        out.update(symbols)
        while len(symbols) > 1:
            pairs = enumerate(zip(symbols, symbols[1:], strict=False))
            best = min(((rank[pair], i) for i, pair in pairs if pair in rank), default=None)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
            out.add(symbols[i])
    return out


def _byte_level(spec: dict[str, Any]) -> bool:
    def has(node: Any) -> bool:
        if isinstance(node, dict):
            return node.get("type") == "ByteLevel" or any(has(v) for v in node.values())
        return isinstance(node, list) and any(has(v) for v in node)
    return has(spec.get("pre_tokenizer"))


def kept_pieces(spec: dict[str, Any], used: set[int]) -> tuple[list[int], dict[str, int]]:
    """The ids kept of the tokenizer ``spec`` (its ``tokenizer.json``) whose text used ``used``, in id order; the
    counts of each reason."""
    from tokenizers.pre_tokenizers import ByteLevel

    model = spec["model"]
    kind = model.get("type")
    if kind not in ("BPE", "Unigram", "WordPiece", "WordLevel"):
        raise ConfigError(f"--trim: a {kind} tokenizer is not trimmed (BPE, Unigram, WordPiece and WordLevel are)")
    if kind == "BPE" and (model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")):
        raise ConfigError("--trim: a BPE tokenizer with a subword prefix or a word suffix is not trimmed")
    if kind == "Unigram":
        vocab = {p[0]: i for i, p in enumerate(model["vocab"])}
    else:
        vocab = dict(model["vocab"])
    added = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    names = {i: p for p, i in {**vocab, **added}.items()}
    kept = set(used)
    counts = {"used": len(used)}
    if kind == "BPE":
        inter = {vocab[p] for p in bpe_intermediates((names[i] for i in used if i in names and names[i] in vocab),
                                                      _merge_pairs(model), vocab)}
        counts["intermediates"] = len(inter - kept)
        kept |= inter
    special = {t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
    counts["special"] = len(special - kept)
    kept |= special
    alphabet = {f"<0x{b:02X}>" for b in range(256)}
    if kind == "BPE" and _byte_level(spec):
        alphabet |= set(ByteLevel.alphabet())
    byte_ids = {vocab[p] for p in alphabet if p in vocab}
    counts["bytes"] = len(byte_ids - kept)
    kept |= byte_ids
    extra = set()
    unk = model.get("unk_token") if kind != "Unigram" else None
    if unk in vocab:
        extra.add(vocab[unk])
    if kind == "Unigram":
        if model.get("unk_id") is not None:
            extra.add(int(model["unk_id"]))
        scores = [p[1] for p in model["vocab"]]
        extra.add(min(range(len(scores)), key=scores.__getitem__))
    counts["other"] = len(extra - kept)
    kept |= extra
    return sorted(kept), counts


# -- the trimmed tokenizer ---------------------------------------------------------------------------------------
def _remap_ids(node: Any, new_id: dict[int, int]) -> Any:
    """A post-processor's token ids renumbered (TemplateProcessing's ``ids``, Roberta/Bert's ``[token, id]``)."""
    if isinstance(node, dict):
        out = {k: _remap_ids(v, new_id) for k, v in node.items()}
        if isinstance(out.get("ids"), list):
            out["ids"] = [new_id[i] for i in node["ids"]]
        for key in ("sep", "cls"):
            if isinstance(node.get(key), list) and len(node[key]) == 2 and isinstance(node[key][1], int):
                out[key] = [node[key][0], new_id[node[key][1]]]
        return out
    if isinstance(node, list):
        return [_remap_ids(v, new_id) for v in node]
    return node


def trimmed_spec(spec: dict[str, Any], kept: list[int]) -> dict[str, Any]:
    """The ``tokenizer.json`` ``spec`` holding only the pieces ``kept`` (ids in the full tokenizer), renumbered
    in their order; BPE merges whose parts and result are kept, in their order."""
    new_id = {old: new for new, old in enumerate(kept)}
    model = dict(spec["model"])
    if model["type"] == "Unigram":
        model["vocab"] = [model["vocab"][i] for i in kept if i < len(model["vocab"])]
        if model.get("unk_id") is not None:
            model["unk_id"] = new_id[int(model["unk_id"])]
    else:
        model["vocab"] = {p: new_id[i] for p, i in sorted(model["vocab"].items(), key=lambda kv: kv[1])
                          if i in new_id}
    if model["type"] == "BPE":
        vocab = model["vocab"]
        pairs = _merge_pairs(spec["model"])
        model["merges"] = [[a, b] for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
    out = {**spec, "model": model}
    out["added_tokens"] = [{**t, "id": new_id[t["id"]]} for t in spec.get("added_tokens", []) if t["id"] in new_id]
    if spec.get("post_processor") is not None:
        out["post_processor"] = _remap_ids(spec["post_processor"], new_id)
    return out


def _tokenizer_config(folder: Path, new_id: dict[int, int]) -> None:
    """``tokenizer_config.json``'s ``added_tokens_decoder`` (keyed by id) renumbered, the tokens dropped gone."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        config["added_tokens_decoder"] = {str(new_id[int(k)]): v for k, v in decoder.items() if int(k) in new_id}
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def trim_tokenizer(folder: Path, lines: list[str], note: Callable[[str], None] = print) -> tuple[list[int], dict]:
    """The tokenizer folder ``folder`` trimmed in place to the pieces ``lines`` use (see the module); the kept ids
    (in the full tokenizer) and the manifest's record of it. Refused in one line where the trimmed tokenizer
    tokenizes a sampled line otherwise than the full one."""
    from tokenizers import Tokenizer

    from harness.worlds.derived_inputs import load_tokenizer

    if not (folder / "tokenizer.json").is_file():  # a slow tokenizer only: its fast conversion
        load_tokenizer(folder, "--target-tokenizer").save_pretrained(folder)
    if not (folder / "tokenizer.json").is_file():
        raise ConfigError("--trim: the target tokenizer has no fast form (tokenizer.json); it is not trimmed")
    full_tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    total = full_tok.get_vocab_size(with_added_tokens=True)
    note(f"--trim: tokenizing {len(lines):,} distinct lines of the world's text")
    kept, counts = kept_pieces(spec, used_ids(full_tok, lines, note))
    new = trimmed_spec(spec, kept)
    trimmed_tok = Tokenizer.from_str(json.dumps(new, ensure_ascii=False))
    checked = check_identity(full_tok, trimmed_tok, lines)
    (folder / "tokenizer.json").write_text(json.dumps(new, ensure_ascii=False), encoding="utf-8")
    _tokenizer_config(folder, {old: i for i, old in enumerate(kept)})
    for name in SLOW_FILES:  # the full vocabulary's other forms
        (folder / name).unlink(missing_ok=True)
    if len(load_tokenizer(folder, "--trim: the trimmed tokenizer")) != len(kept):
        raise ConfigError(f"--trim: the trimmed tokenizer does not load with {len(kept):,} tokens")
    note(f"--trim: {len(kept):,} of {total:,} pieces kept; tokenization identical on {checked:,} lines")
    record = {"rule": RULE, "model": spec["model"]["type"], "kept": len(kept), "total": total,
              "reasons": counts, "text_lines": len(lines), "checked_lines": checked,
              "identity": "the world's identity covers the trimming: the manifest holds the trimmed tokenizer's "
                          "files' sha256, the kept ids' sha256 and the donor's trimmed files"}
    return kept, record


def check_identity(full_tok: Any, trimmed_tok: Any, lines: list[str], n: int = CHECK_LINES) -> int:
    """``lines`` (every line, or ``n`` spread over them) tokenized to the same pieces (strings) by both
    ``tokenizers.Tokenizer``s; how many were compared. Refused in one line naming the first that differs."""
    step = max(1, len(lines) // n)
    sample = lines[::step]
    for k in range(0, len(sample), BATCH):
        batch = sample[k:k + BATCH]
        full = full_tok.encode_batch(batch, add_special_tokens=False)
        trimmed = trimmed_tok.encode_batch(batch, add_special_tokens=False)
        for line, a, b in zip(batch, full, trimmed, strict=True):
            if a.tokens != b.tokens:
                raise ConfigError(f"--trim: the trimmed tokenizer tokenizes {line[:60]!r} otherwise ({b.tokens[:8]} "
                                  f"for {a.tokens[:8]}); not trimmed")
    return len(sample)


# -- the donor -----------------------------------------------------------------------------------------------------
def _renumber_config(config: Any, new_id: dict[int, int]) -> None:
    """A config's ``*_token_id`` attributes (an id or a list of ids; its nested configs too) renumbered in place;
    an id dropped by the trimming becomes None (is dropped from a list)."""
    for key, value in list(vars(config).items()):
        if key.endswith("_token_id") and isinstance(value, int) and not isinstance(value, bool):
            setattr(config, key, new_id.get(value))
        elif key.endswith("_token_id") and isinstance(value, list):
            setattr(config, key, [new_id[v] for v in value if isinstance(v, int) and v in new_id])
        elif hasattr(value, "to_dict") and hasattr(value, "__dict__"):
            _renumber_config(value, new_id)


def _slice_vocab_tensors(model: Any, kept: list[int], rows: int) -> None:
    """Every parameter of ``model`` with a row per vocabulary entry (the input table, an untied output table, an
    output bias) re-indexed to ``kept``; the output table tied again where it was."""
    import torch

    index = torch.tensor(kept, dtype=torch.long)
    modules = dict(model.named_modules())
    seen: dict[int, torch.nn.Parameter] = {}
    for name, param in list(model.named_parameters(remove_duplicate=False)):
        if param.dim() == 0 or param.shape[0] != rows:
            continue
        owner, _, attr = name.rpartition(".")
        new = seen.get(id(param))
        if new is None:
            new = seen[id(param)] = torch.nn.Parameter(param.data[index].clone(), requires_grad=param.requires_grad)
        setattr(modules[owner], attr, new)
    for module in (model.get_input_embeddings(), model.get_output_embeddings()):
        if module is None:
            continue
        if hasattr(module, "num_embeddings"):
            module.num_embeddings = len(kept)
            pad = getattr(module, "padding_idx", None)
            module.padding_idx = kept.index(pad) if pad is not None and pad in kept else None
        if hasattr(module, "out_features"):
            module.out_features = len(kept)


def trim_donor(full: Path, out: Path, tokenizer_dir: Path, kept: list[int], objective: str) -> None:
    """The donor model at ``full`` written at ``out`` with its vocabulary rows re-indexed to ``kept`` (row ``i``
    of the trimmed donor is row ``kept[i]`` of the full one), ``vocab_size`` and the token ids of its configs
    renumbered, and the trimmed tokenizer at ``tokenizer_dir`` as its tokenizer; the other weights as they are."""
    import shutil

    from harness.core.objective import auto_class

    model = auto_class(objective).from_pretrained(full, dtype="auto")
    rows = int(model.get_input_embeddings().weight.shape[0])
    _slice_vocab_tensors(model, kept, rows)
    new_id = {old: new for new, old in enumerate(kept)}
    for cfg in (model.config, getattr(model.config, "text_config", None)):
        if cfg is not None and getattr(cfg, "vocab_size", None) == rows:
            cfg.vocab_size = len(kept)
    _renumber_config(model.config, new_id)
    if getattr(model, "generation_config", None) is not None:
        _renumber_config(model.generation_config, new_id)
    model.tie_weights()
    model.save_pretrained(out, safe_serialization=True)
    for f in sorted(tokenizer_dir.iterdir()):
        if f.is_file():
            shutil.copyfile(f, out / f.name)
    for f in sorted(full.iterdir()):  # the files save_pretrained does not write (a chat template)
        if f.is_file() and not (out / f.name).exists() and f.name not in SLOW_FILES and not f.name.endswith(
                (".safetensors", ".bin", ".index.json")):
            shutil.copyfile(f, out / f.name)
