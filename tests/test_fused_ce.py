"""The fused, chunked cross-entropy (a CPT lever, off by default) gives the stock path's loss and gradients, for a
masked LM's head and a causal LM's output layer; a model whose loss it would change is left as it was."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.nn import functional as F

from harness.core import fused_ce
from harness.core.fused_ce import ChunkedLinearCrossEntropy, use_fused_ce
from harness.core.masked_head import use_masked_only_head
from tests._decoder_fixtures import tiny_decoder
from tests._surgery_fixtures import tiny_bert, tiny_xlmr


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 8, 37, 100])
def test_the_chunked_loss_and_gradients_are_the_whole_matrixs(bias, rows):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(37, 16, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(53, 16, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(53, generator=g, dtype=torch.float64, requires_grad=True) if bias else None
    targets = torch.randint(0, 53, (37,), generator=g)
    whole = F.cross_entropy(F.linear(hidden, weight, b).float(), targets, reduction="sum")
    expected = torch.autograd.grad(whole, [hidden, weight, *([b] if bias else [])])
    fused = ChunkedLinearCrossEntropy.apply(hidden, weight, b, targets, rows, None)
    got = torch.autograd.grad(fused, [hidden, weight, *([b] if bias else [])])
    torch.testing.assert_close(fused, whole, rtol=1e-6, atol=1e-6)
    for e, x in zip(expected, got, strict=True):
        assert x.dtype == e.dtype and x.shape == e.shape
        torch.testing.assert_close(x, e, rtol=1e-5, atol=1e-6)
    # a gradient from outside scales them (the loss divided by a token count)
    scaled = torch.autograd.grad(ChunkedLinearCrossEntropy.apply(hidden, weight, b, targets, rows, None) / 7,
                                 [weight])[0]
    torch.testing.assert_close(scaled, expected[1] / 7, rtol=1e-5, atol=1e-6)


def test_under_autocast_the_projection_runs_in_its_dtype_and_the_loss_in_fp32():
    """As the stock path under bf16 autocast: the linear layer in bf16, the log-softmax of its logits in fp32."""
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(20, 16, generator=g, requires_grad=True)
    out = torch.nn.Linear(16, 300)
    targets = torch.randint(0, 300, (20,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        stock = F.cross_entropy(out(hidden).float(), targets, reduction="sum")
        fused = fused_ce.fused_loss_sum(hidden, out, targets)
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, stock, rtol=2e-3, atol=1e-3)
    full = F.cross_entropy(F.linear(hidden, out.weight, out.bias), targets, reduction="sum")
    assert not torch.equal(fused, full)  # the bf16 projection, not the fp32 one
    g_stock = torch.autograd.grad(stock, [hidden, out.weight])
    g_fused = torch.autograd.grad(fused, [hidden, out.weight])
    for s, f in zip(g_stock, g_fused, strict=True):
        assert f.dtype == torch.float32
        torch.testing.assert_close(f, s, rtol=3e-2, atol=3e-3)


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _same_training_step(stock, fused, batch, **kw) -> None:
    a = stock(**batch, **kw).loss
    b = fused(**batch, **kw).loss
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    a.backward()
    b.backward()
    ga, gb = _grads(stock), _grads(fused)
    assert ga.keys() == gb.keys() and len(ga) > 5
    for n in ga:
        torch.testing.assert_close(gb[n], ga[n], rtol=1e-4, atol=1e-6, msg=n)


@pytest.mark.parametrize("make", [lambda v: tiny_bert(v, tie=True), lambda v: tiny_bert(v, tie=False),
                                  lambda v: tiny_xlmr(v)], ids=["bert tied", "bert untied", "xlmr"])
@pytest.mark.parametrize("masked_head", [False, True])
def test_a_masked_lm_trains_the_same_through_the_fused_loss(make, masked_head):
    vocab = 50
    stock = make(vocab).train()
    torch.manual_seed(0)
    fused = copy.deepcopy(stock)
    if masked_head:
        assert use_masked_only_head(fused)
    assert use_fused_ce(fused, "mlm") is None and fused.training
    keys = list(stock.state_dict())
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, vocab, (3, 12), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, ::3] = ids[:, ::3]
    batch = {"input_ids": ids, "labels": labels}
    for m in (stock, fused):  # no dropout, so that the two forwards are the same computation
        m.eval()
    _same_training_step(stock, fused, batch)
    # the Trainer's accumulated-batch normalisation: the sum over the predicted tokens / the count it gives
    with torch.no_grad():
        mean = stock(**batch).loss
        torch.testing.assert_close(fused(**batch, num_items_in_batch=torch.tensor(9)).loss, mean * 12 / 9,
                                   rtol=1e-5, atol=1e-6)
    assert list(fused.state_dict()) == keys  # the saved model's names are the stock model's
    # without labels the model is the model it was
    plain = fused(input_ids=ids)
    assert plain.logits.shape == (3, 12, vocab)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "gpt2"])
@pytest.mark.parametrize("tie", [True, False])
def test_a_causal_lm_trains_the_same_through_the_fused_loss(arch, tie):
    stock = tiny_decoder(arch, 60, tie=tie)
    fused = copy.deepcopy(stock)
    assert use_fused_ce(fused, "clm") is None
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(2, 60, (3, 10), generator=g)
    labels = ids.clone()
    labels[2, 7:] = -100  # padding of a shorter sequence
    _same_training_step(stock, fused, {"input_ids": ids, "labels": labels})
    if tie:  # the one shared table received both its gradients
        assert fused.get_input_embeddings().weight is fused.get_output_embeddings().weight
    assert fused(input_ids=ids).logits.shape == (3, 10, 60)


def test_a_model_whose_loss_it_would_change_is_left_as_it_was():
    """Gemma 2-style soft-capping of the logits happens after the output layer: the fused loss would leave it out,
    so the check batch finds a difference and the model keeps its own loss."""
    model = tiny_decoder("gemma3", 60, tie=True)
    model.config.final_logit_softcapping = 3.0
    cls = type(model)
    why = use_fused_ce(model, "clm")
    assert why is not None and "differs from the fused one" in why
    assert type(model) is cls and type(model.get_output_embeddings()) is torch.nn.Linear
    ids = torch.randint(2, 60, (2, 6), generator=torch.Generator().manual_seed(0))
    logits = model(input_ids=ids).logits
    assert float(logits.detach().abs().max()) <= 3.0  # its own forward, soft-capping included


@pytest.mark.parametrize("source", ["src", "dec"])
def test_cpt_through_the_fused_loss_trains_as_without(synthetic_world, tmp_path, source):
    """run_cpt (the HF Trainer, the collator, gradient accumulation over two micro-batches) on the synthetic world's
    encoder and decoder, three steps with and without the lever: the same losses, the same trained weights."""
    from transformers import AutoTokenizer

    from harness.cpt import cpt_speed, read_train_log, run_cpt
    from harness.initialize import load_model, save_model

    assert cpt_speed({}, "cpu")["fused_ce"] is False and cpt_speed({}, "cuda")["fused_ce"] is False
    src = synthetic_world.source_dir(source)
    langs = sorted(p.stem for p in synthetic_world.resource_files("cpt_text"))
    results = []
    for fused in (False, True):
        product = tmp_path / f"cpt-{int(fused)}"
        settings = {"steps": 3, "lr": 1e-3, "effective_batch": 8, "per_device_batch": 4, "block_size": 32,
                    "mlm_probability": 0.15, "warmup_steps": 0, "weight_decay": 0.0, "precision": "fp32",
                    "max_sentences_per_language": 60, "save_every": 0, "dataloader_workers": 0, "logging_steps": 1,
                    "auto_batch": False, "masked_head": True, "attention_mask": False, "fused_ce": fused}
        ckpts = run_cpt(model_dir=src, tokenizer=AutoTokenizer.from_pretrained(src), world=synthetic_world,
                        languages=langs, settings=settings, seed=1, device="cpu", product_dir=product,
                        eval_steps=[], load_fn=lambda p: load_model(p, device="cpu"), save_fn=save_model)
        trained = load_model(ckpts[3], device="cpu")
        assert type(trained).__name__ == type(load_model(src, device="cpu")).__name__
        results.append(([r["loss"] for r in read_train_log(product)], dict(trained.named_parameters())))
    (plain_loss, plain), (fused_loss, fused) = results
    assert len(plain_loss) == 3
    assert fused_loss == pytest.approx(plain_loss, rel=1e-5)
    assert plain.keys() == fused.keys()
    for n in plain:
        if n.endswith("attention.self.key.bias"):
            # its gradient is zero but for rounding (a key bias shifts every score of a query alike, and the
            # softmax ignores that), which AdamW scales to a step of the learning rate: rounding, either way
            continue
        torch.testing.assert_close(fused[n], plain[n], rtol=1e-4, atol=1e-5, msg=n)
