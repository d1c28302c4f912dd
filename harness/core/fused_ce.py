"""The output projection and its cross-entropy fused and chunked over the predicted positions: a CPT lever
(``cpt_speed``'s ``fused_ce``, off by default; ``benchmarks/bench_cpt.py`` measures it).

The loss of a step needs, at each predicted position, the log-sum-exp of its logits over the whole vocabulary and
the logit of its target. The stock path (and the masked-positions head) makes the ``[positions, vocabulary]``
logits at once, upcasts them to fp32 for the loss and keeps them for the backward pass: for a causal LM of a
122,776-token vocabulary at 32 x 512 tokens a step, 8 GB of fp32 logits and as much again for their gradient.
:class:`ChunkedLinearCrossEntropy` computes the projection a chunk of positions at a time (``chunk_rows``: about
``CHUNK_ELEMENTS`` logits a chunk), keeps only each position's log-sum-exp, and makes the logits again chunk by chunk
in the backward pass, where the gradient of a chunk's logits (softmax minus the target's one-hot) is turned at once
into the gradients of the hidden states, the weight and the bias. The projection runs in the autocast dtype when
autocast is on (bf16 on a GPU, as the stock path's linear layer does), the log-softmax in fp32 as the stock loss
does; the weight's and bias's gradients are summed over chunks in fp32. It computes the same loss and gradients as
the stock path up to the order of summation (``tests/test_fused_ce.py``: equal to 1e-5 in fp32, for a masked LM's
head and a causal LM's tied output layer).

It applies to a model whose output layer is a ``nn.Linear`` (``get_output_embeddings()``) applied last: a masked LM
whose head ends with it (BERT, RoBERTa/XLM-R), a causal LM whose ``lm_head`` it is (Llama, Gemma 3, Qwen2, GPT-2).
Whether it does is checked on the model itself before it is used (:func:`use_fused_ce`: the fused loss of a tiny
batch against the model's own loss, so a head that does more after the projection, a soft-capping or a scaling of
the logits, is left as it was and said so).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers.modeling_outputs import ModelOutput

from harness.core.masked_head import IGNORE, mlm_head_module, stock_loss

CHUNK_ELEMENTS = 2**26  # logits a chunk: 256 MB of fp32


def chunk_rows(vocab: int) -> int:
    """The positions of one chunk for a vocabulary of ``vocab`` entries."""
    return max(1, CHUNK_ELEMENTS // max(int(vocab), 1))


def _compute_dtype(device_type: str) -> torch.dtype | None:
    """The autocast dtype in force here (None: autocast is off)."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """``sum_i CE(hidden_i @ weight.T + bias, target_i)`` without the whole logits matrix (see the module)."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, rows: int, dtype: torch.dtype | None) -> torch.Tensor:
        cast = dtype or hidden.dtype
        n = hidden.shape[0]
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            w = weight.to(cast)
            b = bias.to(cast) if bias is not None else None
            for s in range(0, n, rows):
                logits = F.linear(hidden[s:s + rows].to(cast), w, b).float()
                lse[s:s + rows] = torch.logsumexp(logits, dim=-1)
                picked = logits.gather(1, targets[s:s + rows, None]).squeeze(1)
                total += (lse[s:s + rows] - picked).sum()
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.rows, ctx.cast = rows, cast
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        rows, cast = ctx.rows, ctx.cast
        n = hidden.shape[0]
        g_hidden = torch.empty_like(hidden)
        g_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        g_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if bias is not None else None
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            w = weight.to(cast)
            b = bias.to(cast) if bias is not None else None
            for s in range(0, n, rows):
                h = hidden[s:s + rows].to(cast)
                logits = F.linear(h, w, b).float()
                d = torch.exp(logits - lse[s:s + rows, None])  # softmax
                d[torch.arange(d.shape[0], device=d.device), targets[s:s + rows]] -= 1.0
                d = d * grad.float()
                d_cast = d.to(cast)
                g_hidden[s:s + rows] = (d_cast @ w).to(hidden.dtype)
                g_weight += (d_cast.t() @ h).float()
                if g_bias is not None:
                    g_bias += d.sum(0)
        return (g_hidden, g_weight.to(weight.dtype), g_bias.to(bias.dtype) if bias is not None else None,
                None, None, None)


def fused_loss_sum(hidden: torch.Tensor, out: nn.Linear, targets: torch.Tensor) -> torch.Tensor:
    """The summed cross-entropy of ``out(hidden)`` against ``targets`` (``[n, d]``, ``[n]``), chunked."""
    dtype = _compute_dtype(hidden.device.type)
    return ChunkedLinearCrossEntropy.apply(hidden, out.weight, out.bias, targets, chunk_rows(out.out_features),
                                           dtype)


class _PassThrough(nn.Linear):
    """The output layer of a masked LM's head, returning its input while the fused loss takes the head's features
    (``_through`` set); otherwise the layer it was (its parameters and their names unchanged)."""

    _through = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self._through else super().forward(x)


def _head_features(head: nn.Module, out: nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """A masked LM's head applied to ``hidden`` up to its output layer (that layer passing its input through)."""
    out._through = True
    try:
        return head(hidden)
    finally:
        out._through = False


def _fused_forward(self: nn.Module, input_ids: torch.Tensor | None = None,
                   attention_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                   num_items_in_batch: Any = None, **kwargs: Any) -> Any:
    if labels is None or input_ids is None or kwargs.get("inputs_embeds") is not None:
        return self._fused_base.forward(self, input_ids=input_ids, attention_mask=attention_mask, labels=labels,
                                        **kwargs)
    out = self.get_output_embeddings()
    hidden = self.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    if self._fused_objective == "clm":  # position i predicts token i + 1
        hidden, labels = hidden[:, :-1], labels[:, 1:]
    selected = labels != IGNORE
    hidden = hidden[selected]
    if self._fused_objective == "mlm":
        hidden = _head_features(mlm_head_module(self), out, hidden)
    targets = labels[selected]
    loss = stock_loss(fused_loss_sum(hidden, out, targets), int(targets.numel()), num_items_in_batch)
    return ModelOutput(loss=loss)


_FUSED_CLASSES: dict[type, type] = {}


def _fused_class(cls: type) -> type:
    """``cls`` with its forward replaced by :func:`_fused_forward` (one subclass per class, made once); a call
    without labels runs the forward of the model's own class (``_fused_base``: the class below the masked-positions
    head's, where that was applied)."""
    if cls not in _FUSED_CLASSES:
        base = cls.__mro__[1] if getattr(cls, "_masked_only_head", False) else cls
        _FUSED_CLASSES[cls] = type(cls.__name__, (cls,), {
            "forward": _fused_forward, "__module__": cls.__module__, "_fused_ce": True, "_fused_base": base,
            "__qualname__": cls.__qualname__})
    return _FUSED_CLASSES[cls]


def _why_not(model: nn.Module, objective: str) -> str | None:
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(out) not in (nn.Linear, _PassThrough):
        return f"its output layer is {type(out).__name__}, not a linear layer"
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        return "it has no base model under its output layer"
    if objective == "mlm" and mlm_head_module(model) is None:
        return "its masked-LM head is not the one module beside its encoder"
    if objective == "clm" and mlm_head_module(model) is not out:
        return "its output layer is not the one module beside its decoder"
    return None


def use_fused_ce(model: nn.Module, objective: str) -> str | None:
    """Make ``model`` (this instance) compute its training loss through the fused, chunked cross-entropy; returns
    None when it does, else why not (the model is then as it was). ``objective``: ``mlm`` or ``clm``. Checked on
    the model: the fused loss of a tiny batch must equal its own loss."""
    if getattr(type(model), "_fused_ce", False):
        return None
    why = _why_not(model, objective)
    if why:
        return why
    stock_class = type(model)
    out = model.get_output_embeddings()
    vocab = out.out_features
    g = torch.Generator().manual_seed(0)
    device = out.weight.device
    ids = torch.randint(0, vocab, (2, 8), generator=g).to(device)
    labels = ids.clone()
    if objective == "mlm":
        labels[:, ::2] = IGNORE
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            reference = model(input_ids=ids, labels=labels).loss
            if type(out) is nn.Linear:
                out.__class__ = _PassThrough
            model.__class__ = _fused_class(stock_class)
            model._fused_objective = objective
            fused = model(input_ids=ids, labels=labels).loss
    except Exception as exc:  # noqa: BLE001 - a layout the fused loss cannot take: the model stays as it was
        why = f"the fused loss cannot run on it ({type(exc).__name__}: {exc})"
    else:
        why = None if torch.allclose(fused.float(), reference.float(), rtol=1e-4, atol=1e-5) else (
            f"its own loss differs from the fused one on a check batch ({float(reference)} against "
            f"{float(fused)}): the head does more than the projection")
    finally:
        model.train(was_training)
    if why:
        model.__class__ = stock_class
        out.__class__ = nn.Linear
    return why
