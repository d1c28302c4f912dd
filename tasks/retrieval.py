"""Sentence retrieval, SR-B (Bible) and SR-T (Tatoeba), with the OFA/HyperOFA/Glot500 protocol.

Protocol (spec/methods.md §3.1-3.2, §6 item 18):

- no fine-tuning: the evaluated model is used as it is;
- a sentence vector is the mean of the hidden states at layer 8 of a 12-layer model (HF ``hidden_states[8]``,
  ``hidden_states[0]`` being the embedding output) over **all** non-padding positions, special tokens included;
  other depths use ``round(8/12 * n_layers)`` (at least 1), recorded in the result's extras;
- cosine similarity; every pivot-language (English) sentence is a query, searched among the target-language
  sentences aligned with it by id; ``acc@10`` (headline) and ``acc@1`` are the fractions of queries whose aligned
  sentence is among the 10 / 1 nearest candidates;
- at most 500 (SR-B) / 1,000 (SR-T) pairs per language, the first ones in the target file's order, further capped
  by ``settings.max_sentences``; sentences truncated at 512 tokens.

The model runs only up to the layer it needs (a forward hook on that layer stops the forward), in
``torch.inference_mode()``, with batches of similar length. Works for ``*ForMaskedLM`` models and any model whose
``.base_model`` returns hidden states (a factorized-embedding model keeps the HF encoder).

Task params (``settings.params``): ``layer`` (override the scaled layer), ``max_length`` (512), ``batch_size``
(``settings.batch_size``), ``max_pairs`` (lower the protocol cap), ``search`` (``auto`` | ``torch`` | ``faiss``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from harness.core.errors import ConfigError
from harness.core.objective import POOLED_LAYER, objective_of_model, pooled_layer
from harness.core.precision import autocast
from harness.core.registry import TASKS
from tasks.base import DeclaredLanguages, ItemStats, TaskResult, TaskSettings
from tasks.data import (
    RetrievalPairs,
    base_encoder,
    check_task_languages,
    label_sources,
    length_batches,
    max_input_length,
    num_layers,
    on_device,
    pad_batch,
    progress,
    read_id_texts,
    read_retrieval_pairs,
)
from tasks.metrics import SEARCH_BACKENDS, l2_normalize, search_topk, topk_hits

log = logging.getLogger(__name__)

REFERENCE_LAYER = 8  # of a 12-layer model, HF hidden_states index
REFERENCE_DEPTH = 12
KS = (1, 10)
_LAYER_LIST_NAMES = ("layer", "layers", "h", "block", "blocks")


def retrieval_layer(n_layers: int) -> int:
    """The hidden-state index used for sentence vectors: 8 for 12 layers, scaled for other depths, at least 1."""
    if n_layers < 1:
        raise ConfigError(f"a model with {n_layers} layers has no hidden layer to pool")
    return min(n_layers, max(1, round(REFERENCE_LAYER / REFERENCE_DEPTH * n_layers)))


def find_layer_list(encoder: nn.Module, n_layers: int) -> nn.ModuleList | None:
    """The encoder's list of transformer layers (``encoder.layer`` in BERT/XLM-R), if it has one of that length."""
    for name, mod in encoder.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n_layers and name.rsplit(".", 1)[-1] in _LAYER_LIST_NAMES:
            return mod
    return None


class _StopForward(Exception):
    """Raised by the hook on the last layer needed, so the layers above it never run."""


class LayerEncoder:
    """Mean-pooled hidden states of one layer, running the encoder no higher than that layer."""

    def __init__(self, model: nn.Module, layer: int, n_layers: int):
        if not 1 <= layer <= n_layers:
            raise ConfigError(f"retrieval layer {layer} is outside 1..{n_layers} for this model")
        self.encoder = base_encoder(model)
        self.layer = layer
        self.layers = find_layer_list(self.encoder, n_layers)
        if self.layers is None:
            log.info("no layer list found in %s; running the full forward with output_hidden_states",
                     type(self.encoder).__name__)

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``hidden_states[layer]`` for the batch, (batch, seq, dim)."""
        if self.layers is None:
            out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
            return out.hidden_states[self.layer]
        captured: dict[str, torch.Tensor] = {}

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            captured["h"] = output[0] if isinstance(output, tuple) else output
            raise _StopForward

        handle = self.layers[self.layer - 1].register_forward_hook(hook)
        try:
            self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        except _StopForward:
            pass
        finally:
            handle.remove()
        if "h" not in captured:
            raise RuntimeError(f"layer {self.layer} of {type(self.encoder).__name__} did not run in the forward")
        return captured["h"]

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Mean over all non-padding positions (special tokens included), float32 (batch, dim)."""
        h = self.hidden(input_ids, attention_mask).float()
        m = attention_mask.to(h.dtype).unsqueeze(-1)
        return (h * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)


def encode_sentences(model: nn.Module, tokenizer: Any, texts: Sequence[str], *, layer: int, n_layers: int,
                     batch_size: int = 32, max_length: int = 512, precision: str = "fp32",
                     advance: Callable[[int], None] | None = None) -> torch.Tensor:
    """Sentence vectors (n, dim) on the CPU, float32, in the order of ``texts``; the model must be in eval mode
    on its device (see :func:`tasks.data.on_device`)."""
    if not texts:
        raise ValueError("encode_sentences: no sentences")
    enc = LayerEncoder(model, layer, n_layers)
    device = next(iter(model.parameters())).device
    ids = tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=max_length)["input_ids"]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out: torch.Tensor | None = None
    with torch.inference_mode(), autocast(device, precision):
        for batch in length_batches([len(s) for s in ids], batch_size):
            b = pad_batch([ids[i] for i in batch], pad_id)
            vec = enc.pooled(b["input_ids"].to(device), b["attention_mask"].to(device)).float().cpu()
            if out is None:
                out = torch.empty((len(texts), vec.shape[1]), dtype=torch.float32)
            out[torch.tensor(batch)] = vec
            if advance is not None:
                advance(len(batch))
    assert out is not None
    return out


class RetrievalTask(DeclaredLanguages):
    name: ClassVar[str]
    description: ClassVar[str]
    max_pairs: ClassVar[int]
    metrics: ClassVar[tuple[str, ...]] = ("acc@10", "acc@1")
    headline: ClassVar[str] = "acc@10"
    higher_is_better: ClassVar[bool] = True
    PARAMS: ClassVar[tuple[str, ...]] = ("layer", "max_length", "batch_size", "max_pairs", "search")
    pivot_queries: ClassVar[bool] = True  # every language with data but the pivot, which gives the queries

    def _params(self, settings: TaskSettings) -> dict[str, Any]:
        unknown = sorted(set(settings.params) - set(self.PARAMS))
        if unknown:
            raise ConfigError(f"task {self.name!r}: unknown param(s) {', '.join(unknown)}; "
                              f"known: {', '.join(self.PARAMS)}")
        p = {"layer": None, "max_length": 512, "batch_size": settings.batch_size, "max_pairs": self.max_pairs,
             "search": "auto", **settings.params}
        if p["search"] not in SEARCH_BACKENDS:
            raise ConfigError(f"task {self.name!r}: search must be one of {', '.join(SEARCH_BACKENDS)}")
        for key in ("max_length", "batch_size", "max_pairs"):
            if not isinstance(p[key], int) or p[key] < 1:
                raise ConfigError(f"task {self.name!r}: {key} must be a positive integer, got {p[key]!r}")
        return p

    def evaluate(self, model: Any, tokenizer: Any, world: Any, languages: list[str],
                 settings: TaskSettings) -> TaskResult:
        p = self._params(settings)
        pivot = world.pivot
        if pivot in languages:
            log.info("%s: the pivot %s provides the queries and is not scored", self.name, pivot)
        langs = [lang for lang in languages if lang != pivot]
        check_task_languages(world, self.name, langs)
        if not langs:
            return TaskResult(scores={m: {} for m in self.metrics}, extras={"n_pairs": {}})
        cap = min(self.max_pairs, p["max_pairs"], settings.max_sentences or self.max_pairs)
        n_layers = num_layers(model)
        source_objective = objective_of_model(model)
        if p["layer"] is not None:
            layer = int(p["layer"])
        else:  # an encoder's layer 8 of 12 (scaled); a decoder's middle layer (harness.core.objective)
            layer = retrieval_layer(n_layers) if source_objective == "mlm" else pooled_layer(source_objective, n_layers)

        pivot_texts = read_id_texts(world.task_dir(self.name) / f"{pivot}.jsonl")
        pairs: dict[str, RetrievalPairs] = {lang: read_retrieval_pairs(world, self.name, lang, pivot_texts, cap)
                                            for lang in langs}
        query_ids = list(dict.fromkeys(i for pr in pairs.values() for i in pr.ids))
        total = len(query_ids) + sum(len(pr.ids) for pr in pairs.values())
        max_length = max_input_length(model, tokenizer, p["max_length"])
        enc_kw = {"layer": layer, "n_layers": n_layers, "batch_size": p["batch_size"], "max_length": max_length,
                  "precision": settings.precision}

        scores: dict[str, dict[str, float]] = {m: {} for m in self.metrics}
        items: dict[str, dict[str, ItemStats]] = {}
        t0 = time.perf_counter()
        with on_device(model, settings.device), progress(settings, f"{self.name}: encoding", total) as advance:
            qvec = encode_sentences(model, tokenizer, [pivot_texts[i] for i in query_ids], advance=advance, **enc_kw)
            qrow = {i: r for r, i in enumerate(query_ids)}
            qvec = l2_normalize(qvec)
            search_s = 0.0
            for lang in langs:
                pr = pairs[lang]
                cvec = l2_normalize(encode_sentences(model, tokenizer, pr.candidates, advance=advance, **enc_kw))
                q = qvec[torch.tensor([qrow[i] for i in pr.ids])]
                ts = time.perf_counter()
                _, neighbours = search_topk(q, cvec, max(KS), backend=p["search"])
                search_s += time.perf_counter() - ts
                hits = topk_hits(neighbours, torch.arange(len(pr.ids)), KS)
                for m in self.metrics:
                    scores[m][lang] = float(hits[m].float().mean())
                    items.setdefault(m, {})[lang] = ItemStats(hits[m].float().tolist(), [1.0] * len(pr.ids))
        extras = {
            "layer": layer,
            "n_layers": n_layers,
            "pooling": "mean over all non-padding positions, special tokens included",
            "similarity": "cosine",
            "queries": pivot,
            "n_pairs": {lang: len(pairs[lang].ids) for lang in langs},
            "max_pairs": cap,
            "max_length": max_length,
            "search": "torch" if p["search"] == "auto" else p["search"],
            "seconds": round(time.perf_counter() - t0, 3),
            "seconds_search": round(search_s, 3),
        }
        if source_objective != "mlm":  # (an encoder's extras stay as they were)
            extras["objective"] = source_objective
            extras["layer_rule"] = f"middle layer of a decoder: round({POOLED_LAYER[source_objective][0]}/" \
                                   f"{POOLED_LAYER[source_objective][1]} x layers), Skean et al. 2025"

        return TaskResult(scores=scores, extras=extras, label_source=label_sources(world, self.name, langs),
                          items=items)


@TASKS.register("sr-b")
class SentenceRetrievalBible(RetrievalTask):
    name: ClassVar[str] = "sr-b"
    description: ClassVar[str] = ("Sentence retrieval on Bible verses: English queries, layer-8 mean pooling, "
                                  "cosine, top-10 accuracy, at most 500 pairs per language")
    max_pairs: ClassVar[int] = 500


@TASKS.register("sr-t")
class SentenceRetrievalTatoeba(RetrievalTask):
    name: ClassVar[str] = "sr-t"
    description: ClassVar[str] = ("Sentence retrieval on Tatoeba: English queries, layer-8 mean pooling, "
                                  "cosine, top-10 accuracy, at most 1,000 pairs per language")
    max_pairs: ClassVar[int] = 1000
