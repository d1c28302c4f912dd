"""The token tagger of the tagging tasks (:mod:`tasks.tagging`): features, model, fine-tuning and prediction.

- :class:`Featurizer` turns words into sub-token ids and puts each word's label on one sub-token (the protocol
  setting ``label_subtoken``: ``"first-nonmarker"`` skips bare word-boundary markers, ``"first"`` is the reference
  script's rule), splitting long sentences into segments at word boundaries;
- :class:`TokenTagger` is a copy of the evaluated model's encoder + dropout + a linear head (:func:`build_tagger`);
- :func:`fine_tune` trains it on the training language, selecting the best dev F1; :func:`predict` tags sentences.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.core.errors import ConfigError
from harness.core.precision import autocast, training_attention
from tasks.data import (
    TaggedSentence,
    base_encoder,
    batches_per_epoch,
    length_batches,
    pad_batch,
    shuffled_length_batches,
    special_affixes,
)

log = logging.getLogger(__name__)

WEIGHTS = "tagger.safetensors"
IGNORE = -100
LABEL_SUBTOKENS = ("first-nonmarker", "first", "last")
# bare word-boundary markers: SentencePiece's ``▁`` and byte-level BPE's ``Ġ`` standing alone as a token
BOUNDARY_MARKERS = frozenset({"\u2581", "\u0120"})


# -- features ---------------------------------------------------------------------------------------------------
@dataclass
class Segment:
    sentence: int  # index of the sentence it belongs to
    input_ids: list[int]
    labels: list[int]  # label id on the labelled sub-token of each word (``label_subtoken``), IGNORE elsewhere
    n_words: int  # words whose sub-tokens are in this segment


def marker_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the tokenizer's bare word-boundary markers (tokens whose string is exactly ``▁`` or ``Ġ``)."""
    out = set()
    for m in BOUNDARY_MARKERS:
        try:
            ids = tokenizer.convert_tokens_to_ids([m])
        except (KeyError, ValueError, TypeError):
            continue
        i = ids[0] if ids else None
        if isinstance(i, int) and i != tokenizer.unk_token_id and tokenizer.convert_ids_to_tokens([i])[0] == m:
            out.add(i)
    return frozenset(out)


@dataclass
class Featurizer:
    """Words → sub-token ids (each word tokenized on its own, as the reference does), cached per word, and the
    offset of the sub-token that carries each word's label (``label_subtoken``, see the module docstring)."""

    tokenizer: Any
    max_length: int
    label_subtoken: str = "first-nonmarker"
    prefix: list[int] = field(init=False)
    suffix: list[int] = field(init=False)
    _pieces: dict[str, list[int]] = field(init=False, default_factory=dict)
    _offset: dict[str, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.label_subtoken not in LABEL_SUBTOKENS:
            raise ConfigError(f"label_subtoken must be one of {', '.join(LABEL_SUBTOKENS)}, "
                              f"not {self.label_subtoken!r}")
        self.prefix, self.suffix = special_affixes(self.tokenizer)
        self.room = self.max_length - len(self.prefix) - len(self.suffix)
        if self.room < 1:
            raise ConfigError(f"max_length {self.max_length} leaves no room next to the special tokens")
        unk = self.tokenizer.unk_token_id
        self.unk = [unk if unk is not None else 0]
        self.markers = marker_ids(self.tokenizer) if self.label_subtoken == "first-nonmarker" else frozenset()

    def pieces(self, words: Sequence[str]) -> list[list[int]]:
        todo = list(dict.fromkeys(w for w in words if w not in self._pieces))
        if todo:
            for w, ids in zip(todo, self.tokenizer(todo, add_special_tokens=False)["input_ids"], strict=True):
                p = list(ids)[:self.room] or list(self.unk)  # a word never vanishes
                self._pieces[w] = p
                self._offset[w] = (len(p) - 1 if self.label_subtoken == "last"
                                   else next((k for k, i in enumerate(p) if i not in self.markers), 0))
        return [self._pieces[w] for w in words]

    def label_offset(self, word: str) -> int:
        """Index, among the word's sub-tokens, of the one that carries its label."""
        if word not in self._offset:
            self.pieces([word])
        return self._offset[word]

    def segments(self, sentences: Sequence[TaggedSentence], label_ids: dict[str, int] | None) -> list[Segment]:
        """Segments of at most ``max_length`` ids, split at word boundaries. Labels unknown to ``label_ids`` (or
        all labels when it is None, for prediction) are IGNORE."""
        self.pieces([w for s in sentences for w in s.tokens])
        out: list[Segment] = []
        for si, sent in enumerate(sentences):
            ids: list[int] = []
            labels: list[int] = []
            n = 0
            for word, tag in zip(sent.tokens, sent.tags, strict=True):
                p = self._pieces[word]
                if ids and len(ids) + len(p) > self.room:
                    out.append(self._segment(si, ids, labels, n))
                    ids, labels, n = [], [], 0
                lab = IGNORE if label_ids is None else label_ids.get(tag, IGNORE)
                k = self._offset[word]
                ids.extend(p)
                labels.extend([IGNORE] * k + [lab] + [IGNORE] * (len(p) - k - 1))
                n += 1
            out.append(self._segment(si, ids, labels, n))
        return out

    def _segment(self, si: int, ids: list[int], labels: list[int], n: int) -> Segment:
        return Segment(si, self.prefix + ids + self.suffix,
                       [IGNORE] * len(self.prefix) + labels + [IGNORE] * len(self.suffix), n)

    def label_positions(self, seg: Segment, sentence: TaggedSentence, start_word: int) -> list[int]:
        """Positions in ``seg`` of the labelled sub-token of each of its words (words ``start_word`` ... of
        ``sentence``): where training put the word's label, so where its prediction is read."""
        pos, out = len(self.prefix), []
        for w in sentence.tokens[start_word:start_word + seg.n_words]:
            out.append(pos + self._offset[w])
            pos += len(self._pieces[w])
        return out


# -- the tagger -------------------------------------------------------------------------------------------------
class TokenTagger(nn.Module):
    """The evaluated model's encoder (a copy) + dropout + a linear head over the last hidden state."""

    def __init__(self, encoder: nn.Module, num_labels: int, dropout: float, generator: torch.Generator):
        super().__init__()
        self.encoder = encoder
        cfg = getattr(encoder, "config", None)
        hidden = getattr(cfg, "hidden_size", None)
        if not isinstance(hidden, int):
            raise ConfigError("the evaluated model's encoder has no config.hidden_size; cannot build a tagger")
        std = float(getattr(cfg, "initializer_range", 0.02))
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.utils.skip_init(nn.Linear, hidden, num_labels)  # no draw from the global RNG
        with torch.no_grad():
            w = torch.randn(self.classifier.weight.shape, generator=generator) * std
            self.classifier.weight.copy_(w)
            self.classifier.bias.zero_()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        h = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return self.classifier(self.dropout(h))


def default_dropout(encoder: nn.Module) -> float:
    cfg = getattr(encoder, "config", None)
    for key in ("classifier_dropout", "hidden_dropout_prob", "dropout"):
        v = getattr(cfg, key, None)
        if isinstance(v, (int, float)):
            return float(v)
    return 0.1


def build_tagger(model: nn.Module, num_labels: int, dropout: float | None, seed: int,
                 device: torch.device, encoder_dropout: float | None = None) -> TokenTagger:
    """``dropout``: before the classifier (None: the config's); ``encoder_dropout``: every dropout inside the
    encoder, attention probabilities included (None: as configured)."""
    encoder = copy.deepcopy(base_encoder(model))
    encoder.requires_grad_(True)
    training_attention(encoder, device)
    if encoder_dropout is not None:
        for mod in encoder.modules():
            if isinstance(mod, nn.Dropout):
                mod.p = float(encoder_dropout)
    g = torch.Generator().manual_seed(seed)
    p = default_dropout(encoder) if dropout is None else float(dropout)
    return TokenTagger(encoder, num_labels, p, g).to(device)


# -- training and prediction ------------------------------------------------------------------------------------
@dataclass
class FineTuneResult:
    curve: list[dict[str, Any]]
    best: dict[str, Any]
    steps: int
    seconds: float


def _rng_devices(device: torch.device) -> tuple[list[int], str]:
    if device.type == "cuda":
        return [device.index if device.index is not None else torch.cuda.current_device()], "cuda"
    return [], "cuda"


def predict(tagger: TokenTagger, feat: Featurizer, sentences: Sequence[TaggedSentence], labels: list[str],
            *, batch_size: int, pad_id: int, device: torch.device, precision: str = "fp32",
            advance: Callable[[int], None] | None = None) -> list[list[str]]:
    """Predicted tags per word of every sentence (segments reassembled)."""
    segs = feat.segments(sentences, None)
    starts: list[int] = []
    done: dict[int, int] = {}
    for s in segs:
        starts.append(done.get(s.sentence, 0))
        done[s.sentence] = starts[-1] + s.n_words
    preds: list[list[str]] = [[""] * len(s.tokens) for s in sentences]
    was_training = tagger.training
    tagger.eval()
    try:
        with torch.inference_mode(), autocast(device, precision):
            for batch in length_batches([len(s.input_ids) for s in segs], batch_size):
                b = pad_batch([segs[i].input_ids for i in batch], pad_id)
                logits = tagger(b["input_ids"].to(device), b["attention_mask"].to(device))
                best = logits.argmax(-1).cpu()
                for r, i in enumerate(batch):
                    seg = segs[i]
                    sent = sentences[seg.sentence]
                    for w, pos in enumerate(feat.label_positions(seg, sent, starts[i])):
                        preds[seg.sentence][starts[i] + w] = labels[int(best[r, pos])]
                if advance is not None:
                    advance(len(batch))
    finally:
        tagger.train(was_training)
    return preds


def fine_tune(tagger: TokenTagger, feat: Featurizer, train: Sequence[TaggedSentence],
              dev: Sequence[TaggedSentence], labels: list[str], score: Callable[..., dict[str, float]],
              hp: dict[str, Any], *, seed: int, pad_id: int, device: torch.device, precision: str = "fp32",
              advance: Callable[[int], None] | None = None) -> FineTuneResult:
    """Fine-tune in place, evaluating on ``dev`` every ``hp["eval_every"]`` steps and at epoch ends; the tagger
    ends with the weights of the best dev F1 (the first one reached, on ties)."""
    label_ids = {t: i for i, t in enumerate(labels)}
    segs = feat.segments(train, label_ids)
    bs, epochs = int(hp["batch_size"]), int(hp["epochs"])
    steps_per_epoch = batches_per_epoch(len(segs), bs, bool(hp.get("group_by_length")))
    opt, sched = _optimizer(tagger, hp, steps_per_epoch * epochs)
    eval_every = hp["eval_every"]
    g = torch.Generator().manual_seed(seed + 1)
    selection = _DevSelection(tagger, feat, dev, labels, score, sched, hp, pad_id=pad_id, device=device,
                              precision=precision)
    step = 0
    t0 = time.perf_counter()
    devices, device_type = _rng_devices(device)
    tagger.train()
    with torch.random.fork_rng(devices=devices, device_type=device_type):
        torch.manual_seed(seed)  # dropout draws, inside the fork: the global RNG is left as it was
        for epoch in range(epochs):
            batches = _epoch_batches(segs, bs, g, bool(hp.get("group_by_length")))
            for bi, idx in enumerate(batches):
                loss = _train_step(tagger, segs, idx, opt, sched, hp, pad_id=pad_id, device=device,
                                   precision=precision)
                step += 1
                selection.add_loss(loss)
                if advance is not None:
                    advance(1)
                if eval_every and step % int(eval_every) == 0:
                    selection.evaluate(step, epoch + (bi + 1) / len(batches))
            if not selection.curve or selection.curve[-1]["step"] != step:
                selection.evaluate(step, epoch + 1.0)
    if selection.best_state is not None:
        tagger.load_state_dict(selection.best_state)
    tagger.eval()
    return FineTuneResult(curve=selection.curve, best=selection.best, steps=step,
                          seconds=round(time.perf_counter() - t0, 3))


def _optimizer(tagger: TokenTagger, hp: dict[str, Any], total: int) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (no weight decay on biases and norms) and its schedule over ``total`` steps: linear warmup, then
    linear decay or constant."""
    no_decay = [p for n, p in tagger.named_parameters() if n.endswith("bias") or "norm" in n.lower()]
    ids_nd = {id(p) for p in no_decay}
    decay = [p for p in tagger.parameters() if id(p) not in ids_nd]
    groups = [{"params": decay, "weight_decay": float(hp["weight_decay"])},
              {"params": no_decay, "weight_decay": 0.0}]
    try:  # the fused kernel is ~5x faster than the per-tensor loop on CPU (a dense embedding matrix dominates)
        opt = torch.optim.AdamW(groups, lr=float(hp["lr"]), eps=float(hp["adam_eps"]), fused=True)
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=float(hp["lr"]), eps=float(hp["adam_eps"]))
    warm = int(hp["warmup_steps"])

    def lr_factor(step: int) -> float:
        if step < warm:
            return (step + 1) / max(1, warm)
        if hp["schedule"] == "constant":
            return 1.0
        return max(0.0, (total - step) / max(1, total - warm))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)


def _epoch_batches(segs: list[Segment], bs: int, g: torch.Generator, group_by_length: bool) -> list[list[int]]:
    """One epoch's batches of segment indices, drawn with ``g``: of similar lengths, or in a random order."""
    if group_by_length:
        return shuffled_length_batches([len(s.input_ids) for s in segs], bs, g)
    order = torch.randperm(len(segs), generator=g).tolist()
    return [order[b0:b0 + bs] for b0 in range(0, len(order), bs)]


def _train_step(tagger: TokenTagger, segs: list[Segment], idx: list[int], opt: torch.optim.Optimizer, sched: Any,
                hp: dict[str, Any], *, pad_id: int, device: torch.device, precision: str) -> torch.Tensor:
    """One optimizer step on the segments ``idx``; its loss."""
    b = pad_batch([segs[i].input_ids for i in idx], pad_id, labels=[segs[i].labels for i in idx])
    with autocast(device, precision):
        logits = tagger(b["input_ids"].to(device), b["attention_mask"].to(device))
    loss = nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                       b["labels"].to(device).reshape(-1), ignore_index=IGNORE)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if hp["grad_clip"]:
        nn.utils.clip_grad_norm_(tagger.parameters(), float(hp["grad_clip"]))
    opt.step()
    sched.step()
    return loss


class _DevSelection:
    """The dev evaluations of a fine-tuning: the curve, the best dev F1 (the first one reached, on ties) with the
    tagger's weights then, and the training loss since the last evaluation."""

    def __init__(self, tagger: TokenTagger, feat: Featurizer, dev: Sequence[TaggedSentence], labels: list[str],
                 score: Callable[..., dict[str, float]], sched: Any, hp: dict[str, Any], *, pad_id: int,
                 device: torch.device, precision: str):
        self.tagger, self.feat, self.dev, self.labels, self.score, self.sched = tagger, feat, dev, labels, score, sched
        self.hp, self.pad_id, self.device, self.precision = hp, pad_id, device, precision
        self.curve: list[dict[str, Any]] = []
        self.best: dict[str, Any] = {"f1": -1.0, "step": 0}
        self.best_state: dict[str, torch.Tensor] | None = None
        self.loss_sum, self.loss_n = 0.0, 0

    def add_loss(self, loss: torch.Tensor) -> None:
        self.loss_sum += float(loss.detach())
        self.loss_n += 1

    def evaluate(self, step: int, epoch: float) -> None:
        """Score the tagger on the dev set at ``step``: a point of the curve; its weights kept when best so far."""
        pred = predict(self.tagger, self.feat, self.dev, self.labels, batch_size=int(self.hp["eval_batch_size"]),
                       pad_id=self.pad_id, device=self.device, precision=self.precision)
        s = self.score(pred, [d.tags for d in self.dev])
        point = {"step": step, "epoch": round(epoch, 4), **{f"dev_{k}": v for k, v in s.items()},
                 "train_loss": self.loss_sum / self.loss_n if self.loss_n else None,
                 "lr": self.sched.get_last_lr()[0]}
        self.curve.append(point)
        self.loss_sum, self.loss_n = 0.0, 0
        log.info("dev at step %d: %s", step, s)
        if s["f1"] > self.best["f1"]:
            self.best.update(f1=s["f1"], step=step, epoch=point["epoch"], **{f"dev_{k}": v for k, v in s.items()})
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in self.tagger.state_dict().items()}


def _save_tagger(tagger: TokenTagger, out: Path) -> None:
    from safetensors.torch import save_model

    save_model(tagger, str(out / WEIGHTS))


def _load_tagger(tagger: TokenTagger, path: Path) -> None:
    from safetensors.torch import load_model

    load_model(tagger, str(path / WEIGHTS), device=str(next(tagger.parameters()).device))
