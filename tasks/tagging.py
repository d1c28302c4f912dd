"""Token tagging, NER (WikiANN-style, IOB2 PER/LOC/ORG) and POS (UD UPOS), with zero-shot cross-lingual transfer.

Protocol (spec/methods.md §3.3-3.4, §6 item 19; the Glot500/OFA ``run_tag.py`` settings):

1. a token-classification model is built on the evaluated model's encoder (a copy of ``model.base_model`` +
   dropout + a linear head, so it works for factorized-embedding models too); the evaluated model is not touched;
2. each word's label sits on one sub-token, the others get -100, and the word's prediction at test time is read
   from that same sub-token. Which one is the protocol setting ``label_subtoken``:

   - ``"first-nonmarker"`` (default): the first sub-token that is not a bare word-boundary marker, a token whose
     string is exactly ``▁`` (SentencePiece) or ``Ġ`` (byte-level BPE); WordPiece has no such token. For a
     language written without spaces a SentencePiece Unigram tokenizer often splits a word into a bare ``▁`` and
     its characters (``['▁', '南', 'ア', ...]``): the same ``▁`` for every word, so a label on it carries nothing
     of the word (Japanese NER was 0.0 for every method that way). A word made only of markers keeps its label
     on the first one;
   - ``"first"``: the first sub-token of each word, the reference script's rule (Glot500/OFA ``run_tag.py``),
     which on such tokenizers puts every label on ``▁``.

   A sentence longer than the maximum length is split into segments at word boundaries, so every word gets a
   prediction;
3. it is fine-tuned on the training language's train set (the pivot, English, by default; param
   ``train_language``), evaluated on its dev set every ``eval_every`` steps and at every epoch end, and the best
   dev F1 is kept;
4. the selected tagger is evaluated zero-shot on the test set of every requested language (training language
   included, as HyperOFA's averages include English).

Metrics (fractions in [0, 1]): NER ``f1`` (entity-level seqeval, headline), ``precision``, ``recall``. POS ``f1``
is the papers' number, seqeval F1 on the bare UPOS tags (adjacent equal tags merge into one chunk, spec §3.4), and
``acc`` is token accuracy, a different metric under its own name.

Profiles: :data:`PROFILES` ``"paper"`` (the reference hyperparameters) and ``"cpu"`` (a small budget that runs in a
minute or two on a laptop CPU for a MiniLM-sized model); ``settings.profile`` picks one, ``settings.params``
overrides single keys. The fine-tuning seed is ``params["seed"]``, else ``settings.seed`` (1 by default, as in
the papers). The tagger's fine-tuning record (dev curve, selected step) and its per-language test scores are cached
under ``settings.cache_dir``, keyed by ``settings.model_key``, the task, the resolved profile, the seed and the data,
so a repeated evaluation of the same model recomputes nothing. The fine-tuned weights (a whole encoder copy, 232 MB
for the bible world's models) are kept only when fine-tuning took at least :data:`KEEP_WEIGHTS_SECONDS`: a later
evaluation on a language without a cached score fine-tunes the tagger again (same seed, same data, same steps, so
the same tagger) where that is cheaper than storing it.

One deliberate difference from the reference script: the learning-rate scheduler steps after the optimizer (the
reference calls it before, which shifts the linear decay by one step).
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from harness.cache import ProductCache
from harness.errors import ConfigError
from harness.hashing import sha256_file
from harness.precision import autocast, training_attention
from harness.registry import TASKS
from tasks.base import ItemStats, TaskResult, TaskSettings
from tasks.data import (
    TaggedSentence,
    base_encoder,
    batches_per_epoch,
    check_task_languages,
    label_sources,
    length_batches,
    max_input_length,
    pad_batch,
    progress,
    read_tagging_split,
    shuffled_length_batches,
    special_affixes,
    tagging_split_path,
)
from tasks.metrics import ner_scores, pos_scores, tagging_item_stats

log = logging.getLogger(__name__)

TAGGER_VERSION = 1  # bump when training or the saved layout changes, so that cached taggers are not reused
# a tagger whose fine-tuning took less than this is not stored: fine-tuning it again when a later evaluation needs
# it is cheaper than keeping its weights (the cpu profile's taggers train in well under a minute)
KEEP_WEIGHTS_SECONDS = 600.0
WEIGHTS = "tagger.safetensors"
IGNORE = -100

# Fine-tuning profiles. ``eval_every`` may be a per-task dict; None means "only at epoch ends".
# ``max_*_sentences`` cap the training-language train / dev sets (first sentences of the files); the test sets
# are capped by ``settings.max_sentences``. ``seed`` is not a profile key: it comes from the run (see above).
PROFILES: dict[str, dict[str, Any]] = {
    "paper": {
        "epochs": 10,
        "lr": 2e-5,
        "batch_size": 32,
        "max_length": 256,
        "adam_eps": 1e-8,
        "weight_decay": 0.0,
        "warmup_steps": 0,
        "schedule": "linear",
        "grad_clip": 1.0,
        "eval_every": {"ner": 1000, "pos": 500},
        "max_train_sentences": None,
        "max_dev_sentences": None,
        "max_test_sentences": None,  # per test language (the run's eval_max_sentences caps it too)
        "group_by_length": False,  # training batches of similar length (tasks.data.shuffled_length_batches)
        "eval_batch_size": 64,
        "dropout": None,  # None: the encoder config's classifier_dropout / hidden_dropout_prob
        "encoder_dropout": None,  # None: the encoder's own dropout settings
        "label_subtoken": "first-nonmarker",  # which sub-token of a word carries its label (LABEL_SUBTOKENS)
    },
    # cpu: 2 epochs of 16 length-grouped batches (512 sentences), a higher lr for the short schedule, 80 test
    # sentences per language. A bible-world NER evaluation of the 6-layer 384-d source (23 test languages) takes
    # ~35 s on 2 cores with bf16 (benchmarks/bench_tasks.py).
    "cpu": {
        "epochs": 2,
        "lr": 1e-4,
        "batch_size": 32,
        "max_length": 128,
        "adam_eps": 1e-8,
        "weight_decay": 0.0,
        "warmup_steps": 0,
        "schedule": "linear",
        "grad_clip": 1.0,
        "eval_every": None,
        "max_train_sentences": 512,
        "max_dev_sentences": 200,
        "max_test_sentences": 80,
        "group_by_length": True,
        "eval_batch_size": 64,
        "dropout": None,
        # no dropout inside the encoder: 32 steps are too few to need it, and CPU dropout costs ~40 % of a
        # training forward (bible world, MiniLM: English dev F1 0.66 without vs 0.57 with, zero-shot 0.163 vs 0.149)
        "encoder_dropout": 0.0,
        "label_subtoken": "first-nonmarker",
    },
}
EXTRA_PARAMS = ("train_language", "seed")
SCHEDULES = ("linear", "constant")
LABEL_SUBTOKENS = ("first-nonmarker", "first")
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
                self._offset[w] = next((k for k, i in enumerate(p) if i not in self.markers), 0)
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
    total = steps_per_epoch * epochs
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

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    eval_every = hp["eval_every"]
    g = torch.Generator().manual_seed(seed + 1)
    curve: list[dict[str, Any]] = []
    best: dict[str, Any] = {"f1": -1.0, "step": 0}
    best_state: dict[str, torch.Tensor] | None = None
    loss_sum, loss_n, step = 0.0, 0, 0
    t0 = time.perf_counter()

    def evaluate_dev(epoch: float) -> None:
        nonlocal best_state, loss_sum, loss_n
        pred = predict(tagger, feat, dev, labels, batch_size=int(hp["eval_batch_size"]), pad_id=pad_id,
                       device=device, precision=precision)
        s = score(pred, [d.tags for d in dev])
        point = {"step": step, "epoch": round(epoch, 4), **{f"dev_{k}": v for k, v in s.items()},
                 "train_loss": loss_sum / loss_n if loss_n else None, "lr": sched.get_last_lr()[0]}
        curve.append(point)
        loss_sum, loss_n = 0.0, 0
        log.info("dev at step %d: %s", step, s)
        if s["f1"] > best["f1"]:
            best.update(f1=s["f1"], step=step, epoch=point["epoch"], **{f"dev_{k}": v for k, v in s.items()})
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in tagger.state_dict().items()}

    devices, device_type = _rng_devices(device)
    tagger.train()
    with torch.random.fork_rng(devices=devices, device_type=device_type):
        torch.manual_seed(seed)  # dropout draws, inside the fork: the global RNG is left as it was
        for epoch in range(epochs):
            if hp.get("group_by_length"):
                batches = shuffled_length_batches([len(s.input_ids) for s in segs], bs, g)
            else:
                order = torch.randperm(len(segs), generator=g).tolist()
                batches = [order[b0:b0 + bs] for b0 in range(0, len(order), bs)]
            for bi, idx in enumerate(batches):
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
                step += 1
                loss_sum += float(loss.detach())
                loss_n += 1
                if advance is not None:
                    advance(1)
                if eval_every and step % int(eval_every) == 0:
                    evaluate_dev(epoch + (bi + 1) / len(batches))
            if not curve or curve[-1]["step"] != step:
                evaluate_dev(epoch + 1.0)
    if best_state is not None:
        tagger.load_state_dict(best_state)
    tagger.eval()
    return FineTuneResult(curve=curve, best=best, steps=step, seconds=round(time.perf_counter() - t0, 3))


# -- the task ---------------------------------------------------------------------------------------------------
def _save_tagger(tagger: TokenTagger, out: Path) -> None:
    from safetensors.torch import save_model

    save_model(tagger, str(out / WEIGHTS))


def keeps_weights(train_seconds: float) -> bool:
    """Whether a tagger that took ``train_seconds`` to fine-tune is worth storing."""
    return float(train_seconds) >= KEEP_WEIGHTS_SECONDS


def _json_writer(name: str, obj: Any) -> Callable[[Path], None]:
    def write(out: Path) -> None:
        (out / name).write_text(json.dumps(obj, indent=1))

    return write


def _load_tagger(tagger: TokenTagger, path: Path) -> None:
    from safetensors.torch import load_model

    load_model(tagger, str(path / WEIGHTS), device=str(next(tagger.parameters()).device))


class TaggingTask:
    name: ClassVar[str]
    description: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]
    headline: ClassVar[str] = "f1"
    higher_is_better: ClassVar[bool] = True

    @staticmethod
    def score(predictions: list[list[str]], references: list[list[str]]) -> dict[str, float]:
        raise NotImplementedError

    def languages(self, world: Any) -> list[str]:
        """Every language with a test set (the training language included)."""
        return world.task_languages(self.name)

    def hyperparameters(self, settings: TaskSettings) -> dict[str, Any]:
        """The resolved fine-tuning settings: profile, then ``settings.params`` overrides, then the seed."""
        if settings.profile not in PROFILES:
            raise ConfigError(f"task {self.name!r}: unknown profile {settings.profile!r}; "
                              f"choose from {', '.join(PROFILES)}")
        hp = dict(PROFILES[settings.profile])
        unknown = sorted(set(settings.params) - set(hp) - set(EXTRA_PARAMS))
        if unknown:
            raise ConfigError(f"task {self.name!r}: unknown param(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(set(hp) | set(EXTRA_PARAMS)))}")
        hp.update(settings.params)
        if isinstance(hp["eval_every"], dict):
            hp["eval_every"] = hp["eval_every"].get(self.name)
        hp.setdefault("seed", settings.seed)
        hp["seed"] = int(hp["seed"])
        for key in ("epochs", "batch_size", "max_length", "eval_batch_size"):
            if not isinstance(hp[key], int) or hp[key] < 1:
                raise ConfigError(f"task {self.name!r}: {key} must be a positive integer, got {hp[key]!r}")
        for key in ("eval_every", "max_train_sentences", "max_dev_sentences", "max_test_sentences"):
            if hp[key] is not None and (not isinstance(hp[key], int) or hp[key] < 1):
                raise ConfigError(f"task {self.name!r}: {key} must be a positive integer or null, got {hp[key]!r}")
        for key in ("lr", "adam_eps", "weight_decay", "grad_clip"):  # YAML may hand "2e-5" over as a string
            try:
                hp[key] = float(hp[key])
            except (TypeError, ValueError):
                raise ConfigError(f"task {self.name!r}: {key} must be a number, got {hp[key]!r}") from None
        for key in ("dropout", "encoder_dropout"):
            if hp[key] is not None:
                hp[key] = float(hp[key])
                if not 0.0 <= hp[key] < 1.0:
                    raise ConfigError(f"task {self.name!r}: {key} must be in [0, 1), got {hp[key]!r}")
        if hp["schedule"] not in SCHEDULES:
            raise ConfigError(f"task {self.name!r}: schedule must be one of {', '.join(SCHEDULES)}")
        if hp["label_subtoken"] not in LABEL_SUBTOKENS:
            raise ConfigError(f"task {self.name!r}: label_subtoken must be one of {', '.join(LABEL_SUBTOKENS)}, "
                              f"got {hp['label_subtoken']!r}")
        return hp

    def evaluate(self, model: Any, tokenizer: Any, world: Any, languages: list[str],
                 settings: TaskSettings) -> TaskResult:
        hp = self.hyperparameters(settings)
        train_lang = str(hp.pop("train_language", None) or world.pivot)
        if not languages:
            return TaskResult(scores={m: {} for m in self.metrics}, extras={"n_sentences": {}})
        check_task_languages(world, self.name, [*languages, train_lang])
        device = torch.device(settings.device)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

        train = read_tagging_split(world, self.name, train_lang, "train")[:hp["max_train_sentences"]]
        dev = read_tagging_split(world, self.name, train_lang, "dev")[:hp["max_dev_sentences"]]
        labels = self._labels(world, train, dev)
        caps = [c for c in (settings.max_sentences, hp["max_test_sentences"]) if c is not None]
        test_cap = min(caps) if caps else None
        tests = {lang: read_tagging_split(world, self.name, lang, "test")[:test_cap] for lang in languages}
        key_inputs = {
            "version": TAGGER_VERSION, "task": self.name, "model": settings.model_key, "train_language": train_lang,
            "hyperparameters": hp, "labels": labels, "precision": settings.precision,
            "train": sha256_file(tagging_split_path(world, self.name, train_lang, "train")),
            "dev": sha256_file(tagging_split_path(world, self.name, train_lang, "dev")),
            "tokenizer": {"class": type(tokenizer).__name__, "size": len(tokenizer)},
        }
        cache = None
        if settings.cache_dir is not None and settings.model_key:
            cache = ProductCache(Path(settings.cache_dir))
            cache.root = Path(settings.cache_dir)  # products go to <cache_dir>/<kind>/<key>
        if cache is None:
            log.info("%s: no cache_dir or model_key given; the tagger is fine-tuned and not cached", self.name)
        feat = Featurizer(tokenizer, max_input_length(model, tokenizer, int(hp["max_length"])), hp["label_subtoken"])
        trained: dict[str, Any] = {}

        def train_tagger() -> tuple[TokenTagger, dict[str, Any]]:
            tagger = build_tagger(model, len(labels), hp["dropout"], hp["seed"], device, hp["encoder_dropout"])
            steps = batches_per_epoch(len(feat.segments(train, None)), int(hp["batch_size"]),
                                      bool(hp["group_by_length"])) * int(hp["epochs"])
            with progress(settings, f"{self.name}: fine-tuning on {train_lang}", steps) as advance:
                fit = fine_tune(tagger, feat, train, dev, labels, self.score, hp, seed=hp["seed"], pad_id=pad_id,
                                device=device, precision=settings.precision, advance=advance)
            info = {"curve": fit.curve, "best": fit.best, "steps": fit.steps, "train_seconds": fit.seconds,
                    "labels": labels}
            trained.update(tagger=tagger)
            return tagger, info

        def build(out: Path) -> dict[str, Any]:
            tagger, info = train_tagger()
            kept = keeps_weights(info["train_seconds"])
            if kept:
                _save_tagger(tagger, out)
            (out / "tagger.json").write_text(json.dumps(info, indent=1))
            return {"best": info["best"], "weights": kept, "world": getattr(world, "name", None)}

        product = None
        tagger_key: str | None = None
        if cache is not None:
            product = cache.get_or_build("tagger", key_inputs, build)
            info = json.loads((product.path / "tagger.json").read_text())
            tagger_key = product.key
        else:
            _, info = train_tagger()

        scores: dict[str, dict[str, float]] = {m: {} for m in self.metrics}
        items: dict[str, dict[str, ItemStats]] = {}
        cached_langs = []
        todo = {}
        for lang, sents in tests.items():
            test_inputs = {"tagger": tagger_key, "lang": lang, "n": len(sents),
                           "test": sha256_file(tagging_split_path(world, self.name, lang, "test"))}
            found = cache.lookup("tagger-test", test_inputs) if cache is not None else None
            if found is not None:
                s = json.loads((found.path / "scores.json").read_text())
                cached_langs.append(lang)
                for m in self.metrics:
                    scores[m][lang] = float(s[m])
                    items.setdefault(m, {})[lang] = ItemStats(**s["items"][m])
            else:
                todo[lang] = test_inputs
        if todo:
            tagger = trained.get("tagger")
            if tagger is None and (product.path / WEIGHTS).is_file():  # type: ignore[union-attr]
                # a cached tagger with its weights: rebuild its architecture and load them
                tagger = build_tagger(model, len(labels), hp["dropout"], hp["seed"], device, hp["encoder_dropout"])
                _load_tagger(tagger, product.path)  # type: ignore[union-attr]
            elif tagger is None:  # a cached record without weights: fine-tune the same tagger again
                tagger, again = train_tagger()
                if again["best"] != info["best"] or again["steps"] != info["steps"]:
                    log.warning("%s: the tagger fine-tuned again selected %s, the cached record says %s",
                                self.name, again["best"], info["best"])
            total = sum(len(tests[lang]) for lang in todo)
            with progress(settings, f"{self.name}: zero-shot test", total) as advance:
                for lang, test_inputs in todo.items():
                    sents = tests[lang]
                    pred = predict(tagger, feat, sents, labels, batch_size=int(hp["eval_batch_size"]),
                                   pad_id=pad_id, device=device, precision=settings.precision)
                    gold = [t.tags for t in sents]
                    s = self.score(pred, gold)
                    s["items"] = tagging_item_stats(pred, gold)
                    advance(len(sents))
                    for m in self.metrics:
                        scores[m][lang] = float(s[m])
                        items.setdefault(m, {})[lang] = ItemStats(**s["items"][m])
                    if cache is not None:
                        cache.get_or_build("tagger-test", test_inputs, _json_writer("scores.json", s))
        extras = {
            "train_language": train_lang,
            "n_train": len(train),
            "n_dev": len(dev),
            "n_sentences": {lang: len(s) for lang, s in tests.items()},
            "labels": labels,
            "hyperparameters": {**hp, "train_language": train_lang},
            "profile": settings.profile,
            "dev_curve": info["curve"],
            "best": info["best"],
            "steps": info["steps"],
            "train_seconds": info["train_seconds"],
            "tagger_key": tagger_key,
            "tagger_cached": bool(product is not None and product.cached),
            "test_cached": cached_langs,
        }
        return TaskResult(scores=scores, extras=extras, label_source=label_sources(world, self.name, languages),
                          items=items)

    def _labels(self, world: Any, train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence]) -> list[str]:
        meta = world.task_meta(self.name)
        if isinstance(meta.get("labels"), list) and meta["labels"]:
            labels = [str(x) for x in meta["labels"]]
            extra = sorted({t for s in [*train, *dev] for t in s.tags} - set(labels))
            if extra:
                raise ConfigError(f"task {self.name!r}: tags {', '.join(extra)} are not in meta.json's labels")
            return labels
        return sorted({t for s in [*train, *dev] for t in s.tags})


@TASKS.register("ner")
class NamedEntityRecognition(TaggingTask):
    name: ClassVar[str] = "ner"
    description: ClassVar[str] = ("NER (WikiANN-style IOB2 PER/LOC/ORG): fine-tune on the pivot language, select "
                                  "on its dev set, zero-shot entity F1 (seqeval) on every language")
    metrics: ClassVar[tuple[str, ...]] = ("f1", "precision", "recall")

    @staticmethod
    def score(predictions: list[list[str]], references: list[list[str]]) -> dict[str, float]:
        return ner_scores(predictions, references)


@TASKS.register("pos")
class PartOfSpeech(TaggingTask):
    name: ClassVar[str] = "pos"
    description: ClassVar[str] = ("POS (UD UPOS): fine-tune on the pivot language, select on its dev set, zero-shot "
                                  "seqeval F1 on bare tags (the papers' number) and token accuracy on every language")
    metrics: ClassVar[tuple[str, ...]] = ("f1", "acc")

    @staticmethod
    def score(predictions: list[list[str]], references: list[list[str]]) -> dict[str, float]:
        return pos_scores(predictions, references)
