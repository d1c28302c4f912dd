"""The MLM head at the masked positions only gives the stock forward's logits, loss and gradients."""

from __future__ import annotations

import copy

import pytest
import torch

from harness.core.masked_head import masked_logits, mlm_head_module, use_masked_only_head
from harness.core.surgery import _install_factorized
from tests._surgery_fixtures import tiny_bert, tiny_xlmr


def _batch(vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 12), generator=g)
    att = torch.ones_like(ids)
    att[2, 9:] = 0
    labels = torch.full_like(ids, -100)
    labels[0, [1, 4]] = ids[0, [1, 4]]
    labels[1, 7] = ids[1, 7]
    labels[2, [0, 3, 8]] = ids[2, [0, 3, 8]]
    return {"input_ids": ids, "attention_mask": att, "labels": labels}


def _factorized_bert(vocab: int):
    model = tiny_bert(vocab, tie=True, seed=3)
    _install_factorized(model, vocab, 4, padding_idx=0)
    torch.manual_seed(4)
    with torch.no_grad():
        for p in model.get_input_embeddings().parameters():
            p.normal_()
    return model.eval()


MODELS = {"bert tied": lambda v: tiny_bert(v, tie=True), "bert untied": lambda v: tiny_bert(v, tie=False),
          "xlmr": lambda v: tiny_xlmr(v), "factorized bert": _factorized_bert}


@pytest.mark.parametrize("name", list(MODELS))
def test_same_logits_loss_and_gradients(name):
    vocab = 50
    stock = MODELS[name](vocab)
    assert mlm_head_module(stock) is not None
    fast = copy.deepcopy(stock)
    assert use_masked_only_head(fast)
    batch = _batch(vocab)
    sel = batch["labels"] != -100

    full = stock(**batch)
    out = fast(**batch)
    assert out.logits.shape == (int(sel.sum()), vocab)
    torch.testing.assert_close(out.logits, full.logits[sel], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.loss, full.loss, rtol=1e-5, atol=1e-6)

    full.loss.backward()
    out.loss.backward()
    grads = dict(fast.named_parameters())
    checked = 0
    for n, p in stock.named_parameters():
        if p.grad is None:
            continue
        torch.testing.assert_close(grads[n].grad, p.grad, rtol=1e-4, atol=1e-6)
        checked += 1
    assert checked > 5

    # the Trainer's accumulated-batch normalisation: the sum over the selected tokens / the given count
    fast.zero_grad()
    n_items = torch.tensor(10)
    out = fast(**batch, num_items_in_batch=n_items)
    torch.testing.assert_close(out.loss, full.loss * sel.sum() / 10, rtol=1e-5, atol=1e-6)

    # without labels the instance behaves as the class does
    plain = fast(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert plain.logits.shape == (3, 12, vocab)


def test_masked_logits_function_and_fallback():
    vocab = 40
    model = tiny_xlmr(vocab)
    batch = _batch(vocab, seed=1)
    logits, targets = masked_logits(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
    sel = batch["labels"] != -100
    ref = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[sel]
    torch.testing.assert_close(logits, ref, rtol=1e-5, atol=1e-5)
    assert targets.tolist() == batch["labels"][sel].tolist()

    class Odd(torch.nn.Module):  # no base_model: the full forward is used
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kw):
            return self.inner(**kw)

    odd = Odd(model)
    assert mlm_head_module(odd) is None and not use_masked_only_head(odd)
    logits2, _ = masked_logits(odd, batch["input_ids"], batch["attention_mask"], batch["labels"])
    torch.testing.assert_close(logits2, ref)


def test_the_masked_head_makes_no_reference_cycle_and_replicates_per_device():
    """A CPT retried after running out of memory frees the failed model as soon as it is dropped (no reference
    cycle for the garbage collector to find later), and a replica (what nn.DataParallel makes for each GPU) runs
    its own forward, not the original's."""
    import gc
    import weakref

    model = tiny_xlmr(40)
    assert use_masked_only_head(model)
    assert "forward" not in vars(model)
    replica = model._replicate_for_data_parallel()
    assert replica.forward.__self__ is replica
    del replica
    ref = weakref.ref(model)
    gc.disable()
    try:
        del model
        assert ref() is None
    finally:
        gc.enable()
