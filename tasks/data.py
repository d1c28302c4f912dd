"""Task data loading from the world layout, shared helpers for batching and progress.

Layout (see :mod:`harness.worlds.base`)::

    tasks/sr-b/<lang>.jsonl                  {"id", "text"}; the pivot language's file holds the queries
    tasks/ner/<lang>/{train,dev,test}.jsonl  {"tokens": [...], "tags": [...]}
    tasks/<task>/meta.json                   {"languages": {code: {"label_source": ...}}, ...}
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.objective import bits_per_byte
from harness.core.positions import usable_positions
from harness.worlds.base import read_jsonl
from tasks.base import ItemStats, TaskResult

log = logging.getLogger(__name__)


# -- languages ----------------------------------------------------------------------------------------------
def task_language_info(world: Any, task: str) -> dict[str, dict[str, Any]]:
    meta = world.task_meta(task)
    langs = meta.get("languages", {})
    if not isinstance(langs, dict):
        raise MissingResourceError(f"{world.task_dir(task) / 'meta.json'}: 'languages' must map codes to info")
    return langs


def label_sources(world: Any, task: str, languages: Sequence[str]) -> dict[str, str]:
    info = task_language_info(world, task)
    return {lang: str(info.get(lang, {}).get("label_source", "gold")) for lang in languages}


def check_task_languages(world: Any, task: str, languages: Sequence[str]) -> None:
    """Every requested language must have data for ``task`` in ``world`` (missing ones are never skipped)."""
    have = set(task_language_info(world, task))
    missing = [lang for lang in languages if lang not in have]
    if missing:
        raise MissingResourceError(
            f"task {task!r} has no data for {', '.join(missing)} in world {world.name!r} "
            f"(it has {', '.join(sorted(have)) or 'none'}); drop them from the run's languages"
        )


# -- retrieval ----------------------------------------------------------------------------------------------
@dataclass
class RetrievalPairs:
    lang: str
    ids: list[str]
    queries: list[str]  # pivot-language sentences (the queries), aligned with ``candidates``
    candidates: list[str]  # target-language sentences


def read_id_texts(path: Path) -> dict[str, str]:
    if not path.is_file():
        raise MissingResourceError(f"retrieval data file {path} is missing; rebuild the world")
    out: dict[str, str] = {}
    for n, row in enumerate(read_jsonl(path), 1):
        if "id" not in row or "text" not in row:
            raise MissingResourceError(f"{path} line {n}: rows need 'id' and 'text'")
        key = str(row["id"])
        if key in out:
            raise MissingResourceError(f"{path} line {n}: duplicate id {key!r}")
        out[key] = str(row["text"])
    return out


def read_retrieval_pairs(world: Any, task: str, lang: str, pivot_texts: dict[str, str],
                         max_pairs: int | None) -> RetrievalPairs:
    """The first ``max_pairs`` sentences of ``lang`` (file order) whose id also has a pivot sentence."""
    target = read_id_texts(world.task_dir(task) / f"{lang}.jsonl")
    ids = [i for i in target if i in pivot_texts]
    if max_pairs is not None:
        ids = ids[:max_pairs]
    if not ids:
        raise MissingResourceError(
            f"task {task!r}: {lang} shares no sentence id with the pivot {world.pivot} "
            f"({world.task_dir(task)}); rebuild the world"
        )
    return RetrievalPairs(lang, ids, [pivot_texts[i] for i in ids], [target[i] for i in ids])


# -- tagging ------------------------------------------------------------------------------------------------
@dataclass
class TaggedSentence:
    tokens: list[str]
    tags: list[str]


def read_tagging_split(world: Any, task: str, lang: str, split: str) -> list[TaggedSentence]:
    path = tagging_split_path(world, task, lang, split)
    if not path.is_file():
        what = "the training language needs train and dev files" if split != "test" else "test file missing"
        raise MissingResourceError(f"task {task!r}: {path} is missing ({what}); rebuild the world "
                                   f"or choose another train_language")
    out = []
    for n, row in enumerate(read_jsonl(path), 1):
        tokens, tags = row.get("tokens"), row.get("tags")
        if not isinstance(tokens, list) or not isinstance(tags, list) or len(tokens) != len(tags):
            raise MissingResourceError(f"{path} line {n}: rows need equally long 'tokens' and 'tags' lists")
        if tokens:
            out.append(TaggedSentence([str(t) for t in tokens], [str(t) for t in tags]))
    if not out:
        raise MissingResourceError(f"{path} holds no sentences")
    return out


def tagging_split_path(world: Any, task: str, lang: str, split: str) -> Path:
    return world.task_dir(task) / lang / f"{split}.jsonl"


# -- model helpers ------------------------------------------------------------------------------------------
def model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def base_encoder(model: torch.nn.Module) -> torch.nn.Module:
    """The encoder that returns hidden states: ``model.base_model`` (HF heads, factorized models) or the model."""
    base = getattr(model, "base_model", None)
    return base if isinstance(base, torch.nn.Module) else model


def num_layers(model: torch.nn.Module) -> int:
    for obj in (getattr(model, "config", None), getattr(base_encoder(model), "config", None)):
        n = getattr(obj, "num_hidden_layers", None)
        if isinstance(n, int) and n > 0:
            return n
    raise ConfigError("the evaluated model has no config.num_hidden_layers; pass the layer explicitly "
                      "(task param 'layer')")


def max_input_length(model: torch.nn.Module, tokenizer: Any, wanted: int) -> int:
    """``wanted``, capped by what the model's position embeddings and the tokenizer allow."""
    limit = wanted
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        limit = min(limit, tok_max)
    cfg = getattr(model, "config", None) or getattr(base_encoder(model), "config", None)
    pos = usable_positions(cfg) if cfg is not None else None
    return limit if pos is None else min(limit, pos)


def special_affixes(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special ids a tokenizer puts before and after one sequence (``<s>`` / ``</s>``, ``[CLS]`` / ``[SEP]``)."""
    for probe in ("a", "x", "1", "hello"):
        bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = tokenizer(probe, add_special_tokens=True)["input_ids"]
        if not bare:
            continue
        for i in range(len(full) - len(bare) + 1):
            if full[i:i + len(bare)] == bare:
                return list(full[:i]), list(full[i + len(bare):])
    full = tokenizer("", add_special_tokens=True)["input_ids"]
    cls = [tokenizer.cls_token_id] if getattr(tokenizer, "cls_token_id", None) is not None else []
    return cls, [t for t in full if t not in cls]


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int, *, labels: Sequence[Sequence[int]] | None = None,
              label_pad: int = -100) -> dict[str, torch.Tensor]:
    """Right-pad id lists into ``input_ids`` / ``attention_mask`` (and ``labels``) tensors."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[r, :len(s)] = 1
    out = {"input_ids": ids, "attention_mask": mask}
    if labels is not None:
        lab = torch.full((len(seqs), width), label_pad, dtype=torch.long)
        for r, s in enumerate(labels):
            lab[r, :len(s)] = torch.tensor(list(s), dtype=torch.long)
        out["labels"] = lab
    return out


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first, stable), for padding-light inference."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def batches_per_epoch(n: int, batch_size: int, grouped: bool, group: int = 50) -> int:
    """How many batches an epoch of ``n`` items has (plain random batches, or :func:`shuffled_length_batches`)."""
    if not grouped:
        return math.ceil(n / batch_size)
    size = group * batch_size
    return sum(math.ceil(min(size, n - m0) / batch_size) for m0 in range(0, n, size))


def shuffled_length_batches(lengths: Sequence[int], batch_size: int, generator: torch.Generator,
                            group: int = 50) -> list[list[int]]:
    """Training batches of similar length in a random order (the idea of HF's ``group_by_length``): the indices
    are shuffled, cut into mega-batches of ``group`` x ``batch_size``, each sorted by length and cut into
    batches, and the batches shuffled. Every index appears once; deterministic in ``generator``."""
    perm = torch.randperm(len(lengths), generator=generator).tolist()
    size = group * batch_size
    batches: list[list[int]] = []
    for m0 in range(0, len(perm), size):
        mega = sorted(perm[m0:m0 + size], key=lambda i: -lengths[i])
        batches.extend(mega[b0:b0 + batch_size] for b0 in range(0, len(mega), batch_size))
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[k] for k in order]


@contextlib.contextmanager
def on_device(model: torch.nn.Module, device: str | torch.device) -> Iterator[torch.nn.Module]:
    """Run ``model`` on ``device`` in eval mode; its device and training mode are restored afterwards."""
    device = torch.device(device)
    before, training = model_device(model), model.training
    moved = before.type != device.type or (device.index is not None and before.index != device.index)
    if moved:
        log.info("moving the evaluated model from %s to %s for the task", before, device)
        model.to(device)
    model.eval()
    try:
        yield model
    finally:
        model.train(training)
        if moved:
            model.to(before)


# -- progress -----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def progress(settings: Any, description: str, total: int) -> Iterator[Callable[[int], None]]:
    """An ``advance(n)`` callback: the run's progress hook (``settings.progress(description, total)``) when given,
    else :func:`harness.core.progress.track` (a transient rich bar on a terminal, plain progress lines when piped)."""
    hook = getattr(settings, "progress", None)
    if callable(hook):
        advance = hook(description, total)
        yield advance if callable(advance) else (lambda n: None)
        return
    from harness.core.progress import track

    with track(description, total) as advance:
        yield advance


# -- held-out text scored by a language model (clm, mlm-bpb) ---------------------------------------------------------
def held_out_settings(profiles: dict[str, dict[str, Any]], settings: Any, model: torch.nn.Module, tokenizer: Any,
                      *, cap_sentences: bool = False) -> dict[str, Any]:
    """A held-out-text task's settings: its profile's (the ``cpu`` profile's for an unknown one), the task params
    over them, the run's cap of sentences (replacing the profile's, or at most it with ``cap_sentences``), and the
    longest input the model takes."""
    cfg = {**profiles.get(settings.profile, profiles["cpu"]), **settings.params}
    if settings.max_sentences is not None:
        cfg["max_sentences"] = (min(int(cfg["max_sentences"]), settings.max_sentences)
                                if cap_sentences and cfg["max_sentences"] is not None else settings.max_sentences)
    cfg["max_length"] = max_input_length(model, tokenizer, int(cfg["max_length"]))
    return cfg


@dataclass
class TextScores:
    """Per language, from each sentence's nats, scored tokens and UTF-8 bytes: ``loss`` (nats a token, token-
    weighted), ``ppl`` (exp of it) and ``bpb`` (the nats over ln 2 times the bytes:
    :func:`harness.core.objective.bits_per_byte`), each with its per-sentence statistics (bootstrap)."""

    metrics: tuple[str, ...]
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, lang: str, nats: list[float], tokens: list[float], n_bytes: list[int], **counts: int) -> None:
        loss = sum(nats) / max(sum(tokens), 1.0)
        values = {"loss": (loss, ItemStats(nats, tokens)),
                  "ppl": (math.exp(min(loss, 50.0)), ItemStats(nats, tokens, transform="exp")),
                  "bpb": (bits_per_byte(sum(nats), sum(n_bytes)),
                          ItemStats([n / math.log(2) for n in nats], [float(b) for b in n_bytes]))}
        for m in self.metrics:
            self.scores.setdefault(m, {})[lang] = values[m][0]
            self.items.setdefault(m, {})[lang] = values[m][1]
        self.counts[lang] = {"sentences": len(nats), "tokens": int(sum(tokens)), "bytes": sum(n_bytes), **counts}

    def result(self, world: Any, data_task: str, languages: Sequence[str], protocol: str,
               cfg: dict[str, Any]) -> TaskResult:
        return TaskResult(scores=self.scores, items=self.items, extras={
            "counts": self.counts, "protocol": protocol, "hyperparameters": {
                "protocol": protocol, "max_length": cfg["max_length"], "max_sentences": cfg["max_sentences"],
                "data": f"tasks/{data_task}"}},
            label_source=label_sources(world, data_task, languages))
