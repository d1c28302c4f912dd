"""The MLM head applied at the masked positions only.

A stock ``*ForMaskedLM`` model projects every position onto the whole vocabulary and then ignores all but the
~15 % selected for the loss. With a 100k+ target vocabulary that projection is most of the cost of an MLM step or
a held-out loss evaluation on CPU (for a 6-layer 384-d encoder and 121k pieces, about 6x the encoder itself). The
loss only needs the selected rows, so the encoder runs on the whole sequence and the head on the gathered hidden
states of the selected positions: the same logits at those positions, the same loss, the same gradients (tested
against the stock forward in ``tests/test_masked_head.py``).

It relies only on the layout every HF masked-LM class shares: ``model.base_model`` returns ``last_hidden_state``
and the one other child module is the head, which maps ``[..., hidden]`` to ``[..., vocab]`` (BERT ``cls``,
RoBERTa/XLM-R ``lm_head``, our factorized decoder included). Models that do not fit fall back to the full forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

IGNORE = -100


def mlm_head_module(model: nn.Module) -> nn.Module | None:
    """The module applied to the encoder's last hidden states, or None when the layout is not the standard one."""
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        return None
    others = [m for _, m in model.named_children() if m is not base]
    return others[0] if len(others) == 1 else None


def masked_logits(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                  labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, targets)`` at the positions where ``labels != -100``: shapes ``[n, vocab]`` and ``[n]``."""
    selected = labels != IGNORE
    head = mlm_head_module(model)
    if head is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits[selected], labels[selected]
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return head(hidden[selected]), labels[selected]


def _masked_only_forward(self: nn.Module, input_ids: torch.Tensor | None = None,
                         attention_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                         num_items_in_batch: Any = None, **kwargs: Any) -> Any:
    if labels is None or input_ids is None or kwargs.get("inputs_embeds") is not None:
        return _stock_forward(self, input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)
    from transformers.modeling_outputs import MaskedLMOutput

    logits, targets = masked_logits(self, input_ids, attention_mask, labels)
    loss = stock_loss(F.cross_entropy(logits.float(), targets, reduction="sum"), int(targets.numel()),
                      num_items_in_batch)
    return MaskedLMOutput(loss=loss, logits=logits)


def stock_loss(total: torch.Tensor, count: int, num_items_in_batch: Any) -> torch.Tensor:
    """The stock loss from the summed cross-entropy of ``count`` predicted tokens: their mean, or the sum over the
    accumulated batch's token count when the Trainer passes it (gradient accumulation)."""
    if num_items_in_batch is not None:
        return total / (num_items_in_batch.to(total.device) if torch.is_tensor(num_items_in_batch)
                        else float(num_items_in_batch))
    return total / max(count, 1)


_MASKED_CLASSES: dict[type, type] = {}


def _masked_class(cls: type) -> type:
    """``cls`` with its forward replaced by :func:`_masked_only_forward` (one subclass per class, made once)."""
    if cls not in _MASKED_CLASSES:
        _MASKED_CLASSES[cls] = type(cls.__name__, (cls,), {
            "forward": _masked_only_forward, "__module__": cls.__module__, "_masked_only_head": True,
            "__qualname__": cls.__qualname__})
    return _MASKED_CLASSES[cls]


def _stock_forward(self: nn.Module, **kwargs: Any) -> Any:
    return super(type(self), self).forward(**kwargs)


def use_masked_only_head(model: nn.Module) -> bool:
    """Make this model instance (not its class) apply the head at the masked positions only when called with
    ``labels``; ``outputs.logits`` is then ``[n_selected, vocab]``. Returns False (model unchanged) for a layout
    :func:`mlm_head_module` does not recognise.

    The instance's class becomes a subclass whose ``forward`` is the masked one. Not a bound method stored on the
    instance: that would make the model a reference cycle (freed only by the garbage collector, so a CPT retried
    after running out of memory would hold two models), and a replica made by ``nn.DataParallel`` would run the
    original's bound method, on the original's device."""
    if mlm_head_module(model) is None:
        return False
    if not getattr(type(model), "_masked_only_head", False):
        model.__class__ = _masked_class(type(model))
    return True
