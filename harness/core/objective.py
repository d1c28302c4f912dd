"""The source objective: the one place that knows what differs between an encoder and a decoder.

A world's source model is either an encoder with a masked-LM head (objective ``"mlm"``: BERT, XLM-R) or a
decoder-only causal LM (objective ``"clm"``: GPT-2, Llama, Qwen2, Gemma 3, SmolLM2). Surgery, CPT and the tasks
ask this module; nothing else branches on a model's class. What it answers:

* :func:`objective_of` -- the objective a config declares (its ``architectures``, else its ``model_type``);
* :func:`auto_class` / :func:`load_pretrained` / :func:`from_config` -- ``AutoModelForMaskedLM`` or
  ``AutoModelForCausalLM``;
* :func:`tables` -- the input and output embedding tables, whether they are tied, the output bias where the head
  has one, and the rows beyond the tokenizer's length (Qwen 2.5 stores 151,936 rows for 151,665 tokens: those
  padding rows belong to no token, so they are neither copied nor counted);
* :func:`collator` -- the CPT objective: BERT masking for ``mlm``; next-token prediction on every position, no
  masking, for ``clm`` (:class:`CausalCollator`);
* :func:`pooled_layer` -- which hidden states sentence retrieval pools (:data:`POOLED_LAYER`);
* :func:`label_subtoken` -- which sub-token of a word carries its tag in the tagging tasks;
* :func:`bits_per_byte` -- nats of all tokens of a text over ``ln 2`` times its UTF-8 bytes, the scale on which
  models with different tokenizers (and objectives) compare.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError

if TYPE_CHECKING:  # (torch is imported where a model is handled: a plan's checks import this module without it)
    import torch
    from torch import nn

OBJECTIVES = ("mlm", "clm")
DESCRIPTION = {"mlm": "masked LM (encoder)", "clm": "causal LM (decoder-only)"}

# model types that are decoder-only causal LMs when a config names no architecture
_CAUSAL_TYPES = frozenset({"gpt2", "llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text", "mistral",
                           "phi", "phi3", "olmo", "olmo2", "gpt_neox", "opt", "bloom", "falcon", "smollm3"})
_MASKED_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "electra", "deberta", "deberta-v2",
                           "camembert", "modernbert"})

# Sentence retrieval on a decoder pools the middle layer: hidden-state index round(L / 2) of an L-layer decoder.
# Intermediate layers of decoder LMs give better sentence embeddings than the last one, best around the middle of
# the stack (Skean et al. 2025, "Layer by Layer: Uncovering Hidden Representations in Language Models", ICML;
# see docs/decoders.md). An encoder keeps the papers' layer 8 of 12, scaled (tasks.retrieval).
POOLED_LAYER = {"mlm": (8, 12), "clm": (1, 2)}

# the sub-token of a word that carries its tag: an encoder's first sub-token sees the whole word (attention both
# ways); a decoder's first sub-token has seen only the words before it, its last one has read the whole word
LABEL_SUBTOKEN = {"mlm": "first-nonmarker", "clm": "last"}
HELDOUT = {"mlm": "held-out MLM loss", "clm": "held-out causal-LM loss"}  # the CPT diagnostic of each objective


def heldout_name(objectives: Any) -> str:
    """The CPT diagnostic of cells whose sources have ``objectives``, in words: the masked-LM loss of an encoder,
    the causal-LM loss of a decoder, and both named where a plan or a board holds both kinds."""
    found = sorted(set(objectives)) or ["mlm"]
    if len(found) == 1:
        return HELDOUT.get(found[0], f"held-out {found[0]} loss")
    return "held-out loss (" + ", ".join(f"{o.upper()} of the {'decoder' if o == 'clm' else 'encoder'} sources"
                                         for o in found) + ")"


# -- which objective ---------------------------------------------------------------------------------------------
def objective_of(config: Any) -> str:
    """``"mlm"`` or ``"clm"`` for a transformers config (or its ``config.json`` as a dict)."""
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    for arch in get("architectures", None) or []:
        if arch.endswith("ForMaskedLM"):
            return "mlm"
        if arch.endswith(("ForCausalLM", "LMHeadModel")):
            return "clm"
    mtype = str(get("model_type", "") or "")
    if mtype in _CAUSAL_TYPES or get("is_decoder", False):
        return "clm"
    if mtype in _MASKED_TYPES:
        return "mlm"
    raise ConfigError(f"cannot tell whether a {mtype or 'model'} config is a masked or a causal LM; give its "
                      f"config.json an 'architectures' entry (e.g. LlamaForCausalLM or XLMRobertaForMaskedLM)")


def objective_of_dir(path: Path) -> str:
    """The objective of the model folder ``path`` (its ``config.json``; the model is not loaded)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: no readable config.json ({exc}); is it a model folder?") from exc
    return objective_of(config)


def check(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    return objective


def auto_class(objective: str) -> Any:
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    return AutoModelForCausalLM if check(objective) == "clm" else AutoModelForMaskedLM


def load_pretrained(path: Path, objective: str | None = None, **kwargs: Any) -> nn.Module:
    """The model in folder ``path`` with its LM head (masked or causal, from its config unless given)."""
    return auto_class(objective or objective_of_dir(path)).from_pretrained(path, **kwargs)


def from_config(config: Any) -> nn.Module:
    """A freshly built model of ``config`` with its LM head (for loading a state dict into)."""
    return auto_class(objective_of(config)).from_config(config)


def objective_of_model(model: nn.Module) -> str:
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise ConfigError(f"{type(model).__name__} has no config; cannot tell its objective")
    arch = type(model).__name__
    if arch.endswith("ForMaskedLM"):
        return "mlm"
    if arch.endswith(("ForCausalLM", "LMHeadModel")):
        return "clm"
    return objective_of(cfg)


# -- embedding tables ------------------------------------------------------------------------------------------
@dataclass
class Tables:
    """A model's embedding tables as a method and the surgery see them."""

    input: torch.Tensor  # (rows, D): the stored input table (Gemma's sqrt(D) scaling is applied in the forward)
    output: torch.Tensor | None  # (rows, D) untied output table; None when tied to the input table
    bias: torch.Tensor | None  # (rows,) output bias, None when the head has none
    tokens: int  # the tokenizer's length
    rows: int  # stored rows (>= tokens; the rest are padding rows of no token)

    @property
    def tied(self) -> bool:
        return self.output is None

    @property
    def padding_rows(self) -> int:
        return self.rows - self.tokens

    def token_rows(self, table: torch.Tensor) -> torch.Tensor:
        """The rows of ``table`` that belong to tokens (float32, a copy)."""
        return table[: self.tokens].float().clone()


def output_layer(model: nn.Module) -> nn.Module | None:
    """The vocabulary projection (an ``nn.Linear``-like module with ``weight``, maybe ``bias``), or None."""
    return model.get_output_embeddings()


def is_tied(model: nn.Module) -> bool:
    out = output_layer(model)
    return out is None or out.weight is model.get_input_embeddings().weight


def output_bias(model: nn.Module) -> torch.Tensor | None:
    out = output_layer(model)
    import torch

    bias = getattr(out, "bias", None) if out is not None else None
    return bias if isinstance(bias, torch.Tensor) else None


def tables(model: nn.Module, n_tokens: int) -> Tables:
    """The input/output tables of ``model`` for a tokenizer of ``n_tokens`` tokens (refused when the model has
    fewer rows than tokens)."""
    emb = model.get_input_embeddings().weight.detach()
    rows = int(emb.shape[0])
    if rows < n_tokens:
        raise ConfigError(f"the model's embedding table has {rows} rows, fewer than the tokenizer's {n_tokens} "
                          f"tokens: the tokenizer is not this model's")
    out = output_layer(model)
    untied = out is not None and out.weight is not model.get_input_embeddings().weight
    bias = output_bias(model)
    return Tables(input=emb, output=out.weight.detach() if untied else None,
                  bias=None if bias is None else bias.detach(), tokens=int(n_tokens), rows=rows)


# -- special tokens --------------------------------------------------------------------------------------------
ROLES = ("bos", "eos", "pad", "unk", "mask", "cls", "sep")


# -- the CPT objective -----------------------------------------------------------------------------------------
class CausalCollator:
    """Blocks of token ids -> a causal-LM batch: ``labels`` are the ids themselves (the model shifts them), every
    position a target (no masking, no padding: the corpus's blocks are all of one length). A class at module level:
    data-loader workers receive it by pickle."""

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        import torch

        ids = torch.stack([torch.as_tensor(e["input_ids"], dtype=torch.long) for e in examples])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def collator(objective: str, tokenizer: Any, mlm_probability: float) -> Any:
    """The CPT batch builder of ``objective``."""
    if check(objective) == "clm":
        return CausalCollator()
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(tokenizer, mlm_probability=float(mlm_probability))


# -- what the tasks pool and label -----------------------------------------------------------------------------
def pooled_layer(objective: str, n_layers: int) -> int:
    """The hidden-state index sentence retrieval pools for a model of ``n_layers`` layers (:data:`POOLED_LAYER`)."""
    if n_layers < 1:
        raise ConfigError(f"a model with {n_layers} layers has no hidden layer to pool")
    num, den = POOLED_LAYER[check(objective)]
    return min(n_layers, max(1, round(num / den * n_layers)))


def label_subtoken(objective: str) -> str:
    return LABEL_SUBTOKEN[check(objective)]


# -- bits per byte ---------------------------------------------------------------------------------------------
def bits_per_byte(nats: float, n_bytes: int) -> float:
    """Total cross-entropy ``nats`` of a text's tokens over ``ln 2`` times its ``n_bytes`` UTF-8 bytes."""
    if n_bytes <= 0:
        raise ValueError("bits per byte of an empty text")
    return float(nats) / (math.log(2) * int(n_bytes))


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8"))
