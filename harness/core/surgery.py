"""Model surgery: the one shared path from "a matrix of new embeddings" to a saved, loadable target model.

Every method goes through :func:`assemble_model` (spec ``methods.md`` §1.5, §1.6):

* the transformer body (every parameter except the token embeddings and the vocabulary projection) is kept
  unchanged; the LM head's dense + LayerNorm transform too;
* full dimension: ``resize_token_embeddings(|V_t|, mean_resizing=False)``, then every row of the input embedding
  matrix is overwritten by the method's matrix (so nothing of the resize's own init survives). Extension (target
  ids keep the source ids, Glot500 style) and replacement (a new vocabulary) take the same path; which one it was
  is recorded;
* the output (LM-head) matrix is tied to the input embeddings when the source ties them. When the source has an
  untied output matrix (a decoder such as Qwen 2.5 or Llama 3 8B, an untied BERT), the output table is initialized
  too, by the setting ``untied_output`` (logged in the init report):
  ``"recompute"`` (the default): the same method computed on the source's *output* table (``output_matrix``, which
  :func:`harness.initialize.initialize_model` computes by running the method a second time on that table);
  ``"method"``: the input side's rows; ``"zero"``: zero rows. In every policy the copied tokens take their source
  *output* rows;
* rows of the source tables beyond its tokenizer's length (padding rows, :mod:`harness.core.objective`) belong to
  no token: they are neither copied nor counted, and the target model has exactly one row per target token;
* the output bias is remapped by token string: a copied token keeps its source bias, every other token gets 0
  (``bias="remap"``, the spec's recommendation; ``bias="zero"`` zeroes all, ``bias="index"`` keeps the bias of
  the same id as ``resize_token_embeddings`` would, new ids 0 -- only meaningful for an extension);
* the config gets the target's ``vocab_size`` and special-token ids; the target tokenizer is saved beside the
  model.

Factorized embeddings (``primitive`` given): the input embedding becomes :class:`FactorizedEmbedding`
(``F_t[id] @ P``) and the vocabulary projection :class:`FactorizedDecoder` (``h -> h P^T -> F_t^T + bias``), both
holding the *same* ``F_t`` and ``P`` parameters (OFA's tied head: ``h -> dense -> GELU -> LN -> P^T -> F_t^T``).
The model stays the stock ``BertForMaskedLM`` / ``XLMRobertaForMaskedLM`` class with two modules swapped, so it
trains with a plain torch loop and the HF ``Trainer`` (checkpoints included). It is saved as ``model.safetensors``
+ ``config.json`` (``tie_word_embeddings=false``: the tie is structural; ``harness_factorization`` describes the
factorization) + ``factorization.json`` (the same description), and :func:`load_model` rebuilds it with no
``trust_remote_code``. A factorized head is always tied to (F_t, P), as in OFA, whatever the source did.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from harness.core.errors import HarnessError

log = logging.getLogger(__name__)

FACTORIZATION_FILE = "factorization.json"
FACTORIZATION_FORMAT = "harness-factorized-embeddings"
BIAS_POLICIES = ("remap", "zero", "index")
UNTIED_POLICIES = ("recompute", "method", "zero")
DEFAULT_UNTIED = "recompute"


# --------------------------------------------------------------------------------------------------------------
# factorized modules
# --------------------------------------------------------------------------------------------------------------
class FactorizedEmbedding(nn.Module):
    """Token embeddings ``E = F P``: ``coords`` (|V| x d', an ``nn.Embedding``) times ``primitive`` (d' x D)."""

    def __init__(self, num_embeddings: int, dim: int, hidden: int, padding_idx: int | None = None):
        super().__init__()
        self.coords = nn.Embedding(num_embeddings, dim, padding_idx=padding_idx)
        self.primitive = nn.Parameter(torch.empty(dim, hidden))
        nn.init.normal_(self.primitive, std=0.02)

    @property
    def num_embeddings(self) -> int:
        return self.coords.num_embeddings

    @property
    def embedding_dim(self) -> int:
        return self.primitive.shape[1]

    @property
    def padding_idx(self) -> int | None:
        return self.coords.padding_idx

    @property
    def weight(self) -> torch.Tensor:
        """The full |V| x D matrix ``F P`` (computed; for code that inspects input embeddings)."""
        return self.coords.weight @ self.primitive

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.coords(input_ids) @ self.primitive


class FactorizedDecoder(nn.Module):
    """Vocabulary projection tied to a :class:`FactorizedEmbedding`: ``logits = (h P^T) F^T + bias``.

    ``weight`` is the embedding's ``F`` parameter and ``primitive`` its ``P`` (the same ``nn.Parameter`` objects,
    the way HF ties a decoder to its input embeddings), so both sides train together.
    """

    # declares the shared parameters to ``save_pretrained`` (it keeps the input side's names and drops these)
    _tied_weights_keys = {"weight": "coords.weight", "primitive": "primitive", "bias": "bias"}

    def __init__(self, embedding: FactorizedEmbedding, bias: nn.Parameter | None):
        super().__init__()
        self.weight = embedding.coords.weight
        self.primitive = embedding.primitive
        self.bias = bias

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @property
    def in_features(self) -> int:
        return self.primitive.shape[1]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(hidden, self.primitive), self.weight, self.bias)


def _head_of(model: nn.Module) -> nn.Module | None:
    """The module that holds the vocabulary projection as ``.decoder`` (BERT ``cls.predictions``, XLM-R ``lm_head``)."""
    out = model.get_output_embeddings()
    for _, mod in model.named_modules():
        if getattr(mod, "decoder", None) is out and mod is not model:
            return mod
    return None


def _install_factorized(model: nn.Module, num_embeddings: int, dim: int, padding_idx: int | None) -> FactorizedEmbedding:
    """Swap the input embeddings and the vocabulary projection of ``model`` for factorized, tied modules."""
    current = model.get_input_embeddings()
    if getattr(current, "embed_scale", None) is not None:  # Gemma: the forward scales the stored rows by sqrt(D)
        raise HarnessError(f"{type(model).__name__} scales its input embeddings inside the model; factorized "
                           f"embeddings are not supported for it (use dim full)")
    hidden = current.embedding_dim
    emb = FactorizedEmbedding(num_embeddings, dim, hidden, padding_idx=padding_idx)
    bias = nn.Parameter(torch.zeros(num_embeddings))
    dec = FactorizedDecoder(emb, bias)
    model.set_input_embeddings(emb)
    head = _head_of(model)
    model.set_output_embeddings(dec)
    if head is not None and hasattr(head, "bias"):
        head.bias = dec.bias  # the head's own bias attribute is the decoder's (one parameter, as in HF's tie)
    text_cfg = model.config.get_text_config()
    text_cfg.vocab_size = num_embeddings
    model.config.tie_word_embeddings = False  # the tie is structural; HF's own tying must not touch the modules
    model.config.harness_factorization = factorization_info(model, emb)  # travels with every save_pretrained
    model.vocab_size = num_embeddings
    return emb


def factorization_info(model: nn.Module, emb: FactorizedEmbedding) -> dict[str, Any]:
    return {
        "format": FACTORIZATION_FORMAT, "version": 1, "dim": int(emb.coords.embedding_dim),
        "hidden_size": int(emb.embedding_dim), "vocab_size": int(emb.num_embeddings),
        "padding_idx": emb.padding_idx, "architecture": type(model).__name__,
        "input": "E[id] = coords[id] @ primitive", "output": "logits = (h @ primitive^T) @ coords^T + bias",
        "tied": True,
    }


def is_factorized(model: nn.Module) -> bool:
    return isinstance(model.get_input_embeddings(), FactorizedEmbedding)


# --------------------------------------------------------------------------------------------------------------
# assembly
# --------------------------------------------------------------------------------------------------------------
def _set_special_ids(config: Any, tokenizer: Any) -> dict[str, int | None]:
    cfg = config.get_text_config()
    pairs = {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id,
        "eos_token_id": tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
    }
    for extra in ("sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id"):
        if getattr(cfg, extra, None) is not None:
            pairs[extra] = getattr(tokenizer, extra, None)
    out = {}
    for k, v in pairs.items():
        if v is not None:
            setattr(cfg, k, int(v))
            out[k] = int(v)
    if getattr(cfg, "tokenizer_class", None):
        cfg.tokenizer_class = type(tokenizer).__name__
    return out


def _check_position_padding(model: nn.Module, target_tokenizer: Any) -> None:
    """RoBERTa-family models start position ids at ``padding_idx + 1``: a changed pad id would shift them all."""
    emb_mod = getattr(model.base_model, "embeddings", None)
    pos_pad = getattr(emb_mod, "padding_idx", None)
    if pos_pad is not None and target_tokenizer.pad_token_id is not None and target_tokenizer.pad_token_id != pos_pad:
        raise HarnessError(
            f"the source model computes position ids from its pad id {pos_pad}, but the target tokenizer's pad id is "
            f"{target_tokenizer.pad_token_id}: every position would shift. Build the target tokenizer with the "
            f"source's special-token layout (harness.core.tokenization.xlmr_vocab keeps <pad> at id 1)")


def assemble_model(
    model: nn.Module,
    source_tokenizer: Any,
    target_tokenizer: Any,
    matrix: torch.Tensor,
    copy: dict[int, int],
    *,
    primitive: torch.Tensor | None = None,
    bias: str = "remap",
    untied_output: str = DEFAULT_UNTIED,
    output_matrix: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Turn ``model`` (the source masked or causal LM, modified in place) into the target model; return what was
    done.

    ``matrix`` is the method's result: E_t (|V_t| x D), or F_t (|V_t| x d') when ``primitive`` (P, d' x D) is
    given. ``copy`` maps target id -> source id for the copied tokens (bias and untied-output remap).
    ``output_matrix``: the method's result on the source's untied output table (``untied_output="recompute"``).
    """
    _check_arguments(model, target_tokenizer, matrix, primitive, bias, untied_output)
    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    tied = out is not None and out.weight is emb.weight
    if out is not None and not tied and primitive is None and untied_output == "recompute":
        _check_output_matrix(output_matrix, matrix)
    old_bias = out.bias.detach().clone() if out is not None and getattr(out, "bias", None) is not None else None
    old_out = out.weight.detach().clone() if (out is not None and not tied) else None
    tids, sids = _copied_ids(copy, emb.num_embeddings)
    n_s, n_t = len(source_tokenizer), len(target_tokenizer)
    new_bias = None if old_bias is None else _new_bias(old_bias, bias, tids, sids, n_s, n_t)
    report = _assembly_report(source_tokenizer, target_tokenizer, emb, tied, bias, old_bias, len(tids))
    pad = target_tokenizer.pad_token_id
    if primitive is None:
        emb = _install_rows(model, matrix, pad)
        out, head = model.get_output_embeddings(), _head_of(model)
        if out is not None and tied and out.weight is not emb.weight:  # resize re-ties; make sure of it
            out.weight = emb.weight
        if out is not None and not tied:
            report["untied_output"] = _fill_untied_output(out, matrix, untied_output, output_matrix, old_out,
                                                          tids, sids)
        if out is not None and new_bias is not None:
            _set_output_bias(out, head, new_bias, tied)
        report["factorized"] = False
    else:
        _install_factor_rows(model, matrix, primitive, pad, new_bias)
        report["factorized"] = True
        report["dim"] = int(primitive.shape[0])
        report["tied_to_factors"] = True
    report["special_ids"] = _set_special_ids(model.config, target_tokenizer)
    model.config.get_text_config().vocab_size = n_t
    return report


def _check_arguments(model: nn.Module, target_tokenizer: Any, matrix: torch.Tensor, primitive: torch.Tensor | None,
                     bias: str, untied_output: str) -> None:
    """The policies are known ones, the new matrix (and P) fit the target vocabulary and the model's hidden size,
    and the target's pad id leaves the model's position ids where they were."""
    if bias not in BIAS_POLICIES:
        raise HarnessError(f"bias policy must be one of {BIAS_POLICIES}, not {bias!r}")
    if untied_output not in UNTIED_POLICIES:
        raise HarnessError(f"untied_output must be one of {UNTIED_POLICIES}, not {untied_output!r}")
    n_t = len(target_tokenizer)
    if matrix.shape[0] != n_t:
        raise ValueError(f"the new matrix has {matrix.shape[0]} rows, the target tokenizer {n_t} tokens")
    hidden = model.get_input_embeddings().embedding_dim
    want = primitive.shape[0] if primitive is not None else hidden
    if matrix.shape[1] != want:
        raise ValueError(f"the new matrix has {matrix.shape[1]} columns, expected {want}")
    if primitive is not None and primitive.shape[1] != hidden:
        raise ValueError(f"P has {primitive.shape[1]} columns, the model's hidden size is {hidden}")
    _check_position_padding(model, target_tokenizer)


def _check_output_matrix(output_matrix: torch.Tensor | None, matrix: torch.Tensor) -> None:
    """Under ``untied_output="recompute"``, the method's result on the output table is given, shaped as ``matrix``."""
    if output_matrix is None:
        raise HarnessError("the source's output table is untied and untied_output is 'recompute', but no "
                           "output matrix was given (the method's result on the output table)")
    if tuple(output_matrix.shape) != tuple(matrix.shape):
        raise ValueError(f"the output matrix is {tuple(output_matrix.shape)}, the input matrix "
                         f"{tuple(matrix.shape)}")


def _copied_ids(copy: dict[int, int], source_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The copied tokens' target ids and their source ids (each below ``source_rows``)."""
    tids = torch.tensor(list(copy.keys()), dtype=torch.long)
    sids = torch.tensor(list(copy.values()), dtype=torch.long)
    if len(sids) and int(sids.max()) >= source_rows:
        raise ValueError("the token mapping names a source id beyond the source embedding matrix")
    return tids, sids


def _new_bias(old_bias: torch.Tensor, bias: str, tids: torch.Tensor, sids: torch.Tensor, n_s: int,
              n_t: int) -> torch.Tensor:
    """The target's output bias by the ``bias`` policy: by token string, by id, or zero."""
    new_bias = torch.zeros(n_t, dtype=old_bias.dtype)
    if bias == "remap" and len(tids):
        new_bias[tids] = old_bias[sids]
    elif bias == "index":
        k = min(n_t, n_s, old_bias.shape[0])
        new_bias[:k] = old_bias[:k]
    return new_bias


def _assembly_report(source_tokenizer: Any, target_tokenizer: Any, emb: nn.Module, tied: bool, bias: str,
                     old_bias: torch.Tensor | None, n_copied: int) -> dict[str, Any]:
    """The report's first entries: extension or replacement (an extension keeps every ordinary source token's id;
    special tokens such as XLM-R's final <mask> may move), the tables' sizes, the tie and the bias policy."""
    n_s, n_t = len(source_tokenizer), len(target_tokenizer)
    src_tokens = source_tokenizer.convert_ids_to_tokens(list(range(n_s)))
    tgt_prefix = target_tokenizer.convert_ids_to_tokens(list(range(min(n_s, n_t))))
    src_special = set(getattr(source_tokenizer, "all_special_ids", []) or [])
    kept = sum(1 for i, t in enumerate(tgt_prefix) if i not in src_special and t == src_tokens[i])
    ordinary = n_s - len(src_special)
    mode = "extension" if n_t >= n_s and kept == ordinary else "replacement"
    return {
        "mode": mode, "source_ids_kept": int(kept), "source_vocab_size": n_s, "target_vocab_size": n_t,
        "source_embedding_rows": int(emb.num_embeddings), "hidden_size": int(emb.embedding_dim),
        "source_padding_rows": int(emb.num_embeddings) - n_s,
        "source_tied": bool(tied), "bias_policy": bias if old_bias is not None else "none (the head has no bias)",
        "bias_copied": n_copied if (old_bias is not None and bias == "remap") else 0,
    }


def _install_rows(model: nn.Module, matrix: torch.Tensor, pad: int | None) -> nn.Module:
    """Full dimension: the tables resized to the target vocabulary (``mean_resizing=False``) and every input row
    overwritten by ``matrix``; the new input embeddings."""
    model.resize_token_embeddings(len(matrix), mean_resizing=False)
    emb = model.get_input_embeddings()
    with torch.no_grad():
        emb.weight.copy_(matrix.to(emb.weight.dtype))
    emb.padding_idx = pad
    return emb


def _fill_untied_output(out: nn.Module, matrix: torch.Tensor, untied_output: str, output_matrix: torch.Tensor | None,
                        old_out: torch.Tensor, tids: torch.Tensor, sids: torch.Tensor) -> dict[str, Any]:
    """The untied output table by the ``untied_output`` policy (the method's result on the output table, the input
    side's rows, or zero), the copied tokens taking their source output rows; its report entry."""
    new_out = {"recompute": output_matrix, "method": matrix}.get(untied_output)
    new_out = torch.zeros_like(matrix) if new_out is None else new_out.clone()
    if len(tids):
        new_out[tids] = old_out[sids].to(new_out.dtype)
    with torch.no_grad():
        out.weight.copy_(new_out.to(out.weight.dtype))
    return {"policy": untied_output, "copied_rows": int(len(tids))}


def _set_output_bias(out: nn.Module, head: nn.Module | None, new_bias: torch.Tensor, tied: bool) -> None:
    """The new output bias, in the vocabulary projection and in the LM head's own ``bias`` attribute."""
    with torch.no_grad():
        out.bias.copy_(new_bias.to(out.bias.dtype))
    if head is not None and hasattr(head, "bias"):
        # tied: one parameter under both names (HF's tie); untied: HF keeps two parameters and
        # saves both, so give the head its own copy of the same values
        head.bias = out.bias if tied else nn.Parameter(out.bias.detach().clone())


def _install_factor_rows(model: nn.Module, matrix: torch.Tensor, primitive: torch.Tensor, pad: int | None,
                         new_bias: torch.Tensor | None) -> None:
    """Factorized: the factorized, tied modules installed, holding ``matrix`` (F_t), ``primitive`` (P) and the new
    output bias."""
    fe = _install_factorized(model, len(matrix), int(primitive.shape[0]), pad)
    with torch.no_grad():
        fe.coords.weight.copy_(matrix.to(fe.coords.weight.dtype))
        fe.primitive.copy_(primitive.to(fe.primitive.dtype))
        if new_bias is not None:
            model.get_output_embeddings().bias.copy_(new_bias)


# --------------------------------------------------------------------------------------------------------------
# save / load
# --------------------------------------------------------------------------------------------------------------
def save_model(model: nn.Module, out_dir: Path, tokenizer: Any = None) -> None:
    """Save any model this module built (factorized or not) so that :func:`load_model` reads it back.

    Both kinds go through ``save_pretrained`` (so HF ``Trainer`` checkpoints of a factorized model are loadable
    too: its config carries ``harness_factorization``); a factorized model also gets ``factorization.json``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    finfo = out_dir / FACTORIZATION_FILE
    if is_factorized(model):
        finfo.write_text(json.dumps(factorization_info(model, model.get_input_embeddings()), indent=1))
    elif finfo.exists():
        finfo.unlink()
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)


def _factorization_of(path: Path, config: Any) -> dict[str, Any] | None:
    finfo = path / FACTORIZATION_FILE
    info = json.loads(finfo.read_text()) if finfo.is_file() else getattr(config, "harness_factorization", None)
    if info is None:
        return None
    if not isinstance(info, dict) or info.get("format") != FACTORIZATION_FORMAT:
        raise HarnessError(f"{path}: the factorization description is not in the {FACTORIZATION_FORMAT} format; "
                           f"the folder was not written by this harness")
    return info


def load_model(path: Path, device: str = "cpu") -> nn.Module:
    """Load a model folder written by :func:`save_model` or ``save_pretrained`` (factorized or not), in eval
    mode, on ``device``, with its masked or causal LM head (:mod:`harness.core.objective`). A plain
    ``from_pretrained`` cannot read a factorized folder."""
    from transformers import AutoConfig

    from harness.core import objective

    path = Path(path)
    config = AutoConfig.from_pretrained(path)
    info = _factorization_of(path, config)
    if info is None:
        model = objective.load_pretrained(path)
        return model.to(device).eval()
    from safetensors.torch import load_file

    model = objective.from_config(config)
    _install_factorized(model, int(info["vocab_size"]), int(info["dim"]), info.get("padding_idx"))
    files = sorted(path.glob("model*.safetensors"))
    if not files:
        raise HarnessError(f"{path} holds no model*.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # only one name of each shared tensor is stored; the other names are aliases of loaded parameters
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded = {id(params[k]) for k in state if k in params}
    really_missing = [k for k in missing if k not in params or id(params[k]) not in loaded]
    if really_missing or unexpected:
        raise HarnessError(f"factorized model at {path} does not match its description: missing "
                           f"{really_missing[:5]}, unexpected {list(unexpected)[:5]}")
    return model.to(device).eval()
