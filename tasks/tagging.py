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
     which on such tokenizers puts every label on ``▁``;
   - ``"last"``: the last sub-token of each word, the default on a decoder source (a causal model's first
     sub-token has seen only the words before it; its last one has read the whole word).

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

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from harness.core.cache import ProductCache
from harness.core.errors import ConfigError
from harness.core.hashing import sha256_file
from harness.core.objective import label_subtoken, objective_of_model
from harness.core.registry import TASKS
from tasks.base import DeclaredLanguages, ItemStats, TaskResult, TaskSettings
from tasks.data import (
    TaggedSentence,
    batches_per_epoch,
    check_task_languages,
    label_sources,
    max_input_length,
    progress,
    read_tagging_split,
    tagging_split_path,
)
from tasks.metrics import ner_scores, pos_scores, tagging_scores
from tasks.tagger import (
    LABEL_SUBTOKENS,
    WEIGHTS,
    Featurizer,
    TokenTagger,
    _load_tagger,
    _save_tagger,
    build_tagger,
    fine_tune,
    predict,
)

log = logging.getLogger(__name__)

TAGGER_VERSION = 1  # bump when training or the saved layout changes, so that cached taggers are not reused
# a tagger whose fine-tuning took less than this is not stored: fine-tuning it again when a later evaluation needs
# it is cheaper than keeping its weights (the cpu profile's taggers train in well under a minute)
KEEP_WEIGHTS_SECONDS = 600.0

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
    # ~35 s on 2 cores with bf16 (benchmarks/bench_tasks.py). The lr is 3e-4, chosen by measurement
    # (benchmarks/bench_ner_budget.py, bible world, OFA and random inits, seeds 1-3): at 1e-4 the 32 steps often
    # left the tagger predicting almost no entity (English dev F1 0.17-0.56 after epoch 2, 0.0 after epoch 1 for
    # 4 of 6 taggers), so a row's zero-shot F1 swung with the fine-tuning seed (OFA 0.35, 0.34, 0.04); at 3e-4
    # every tagger reaches English dev F1 0.63-0.67 after one epoch and 0.67-0.70 after two, and the seeds agree
    # (OFA 0.30, 0.34, 0.25; random 0.09, 0.10, 0.10).
    "cpu": {
        "epochs": 2,
        "lr": 3e-4,
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
# -- the task ---------------------------------------------------------------------------------------------------


def keeps_weights(train_seconds: float) -> bool:
    """Whether a tagger that took ``train_seconds`` to fine-tune is worth storing."""
    return float(train_seconds) >= KEEP_WEIGHTS_SECONDS


def _json_writer(name: str, obj: Any) -> Callable[[Path], None]:
    def write(out: Path) -> None:
        (out / name).write_text(json.dumps(obj, indent=1))

    return write




class TaggingTask(DeclaredLanguages):
    name: ClassVar[str]
    description: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]
    headline: ClassVar[str] = "f1"
    higher_is_better: ClassVar[bool] = True

    @staticmethod
    def score(predictions: list[list[str]], references: list[list[str]]) -> dict[str, float]:
        raise NotImplementedError

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
        if "label_subtoken" not in settings.params:  # the objective's rule: a decoder tags a word's last sub-token
            hp["label_subtoken"] = label_subtoken(objective_of_model(model))
        train_lang = str(hp.pop("train_language", None) or world.pivot)
        if not languages:
            return TaskResult(scores={m: {} for m in self.metrics}, extras={"n_sentences": {}})
        check_task_languages(world, self.name, [*languages, train_lang])
        device = torch.device(settings.device)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        train, dev, labels, tests = self._splits(world, train_lang, languages, settings, hp)
        key_inputs = {
            "version": TAGGER_VERSION, "task": self.name, "model": settings.model_key, "train_language": train_lang,
            "hyperparameters": hp, "labels": labels, "precision": settings.precision,
            "train": sha256_file(tagging_split_path(world, self.name, train_lang, "train")),
            "dev": sha256_file(tagging_split_path(world, self.name, train_lang, "dev")),
            "tokenizer": {"class": type(tokenizer).__name__, "size": len(tokenizer)},
        }
        cache = _tagger_cache(settings, self.name)
        feat = Featurizer(tokenizer, max_input_length(model, tokenizer, int(hp["max_length"])), hp["label_subtoken"])
        tuning = _Tuning(task=self, model=model, world=world, settings=settings, hp=hp, train_lang=train_lang,
                         device=device, pad_id=pad_id, train=train, dev=dev, labels=labels, feat=feat)
        product, info = tuning.fine_tuned(cache, key_inputs)
        tagger_key = product.key if product is not None else None
        scores, items, cached_langs, todo = self._cached_scores(world, tests, tagger_key, cache)
        if todo:
            self._test(tuning, tuning.tagger_to_test(product, info), tests, todo, cache, scores, items)
        extras = {
            "train_language": train_lang,
            "n_train": len(train),
            "n_dev": len(dev),
            "n_sentences": {lang: len(s) for lang, s in tests.items()},
            "labels": labels,
            # max_length as used: capped by what the model takes (tasks.data.max_input_length)
            "hyperparameters": {**hp, "max_length": feat.max_length, "train_language": train_lang},
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

    def _splits(self, world: Any, train_lang: str, languages: list[str], settings: TaskSettings,
                hp: dict[str, Any]) -> tuple[list[TaggedSentence], list[TaggedSentence], list[str],
                                             dict[str, list[TaggedSentence]]]:
        """The training language's train and dev sets, the labels, and each language's test set, each capped."""
        train = read_tagging_split(world, self.name, train_lang, "train")[:hp["max_train_sentences"]]
        dev = read_tagging_split(world, self.name, train_lang, "dev")[:hp["max_dev_sentences"]]
        labels = self._labels(world, train, dev)
        caps = [c for c in (settings.max_sentences, hp["max_test_sentences"]) if c is not None]
        test_cap = min(caps) if caps else None
        tests = {lang: read_tagging_split(world, self.name, lang, "test")[:test_cap] for lang in languages}
        return train, dev, labels, tests

    def _cached_scores(self, world: Any, tests: dict[str, list[TaggedSentence]], tagger_key: str | None,
                       cache: ProductCache | None) -> tuple[dict[str, dict[str, float]],
                                                            dict[str, dict[str, ItemStats]], list[str],
                                                            dict[str, dict[str, Any]]]:
        """(scores, items, cached languages, todo): the test scores the cache holds for this tagger, and the cache
        inputs of each language still to test."""
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
        return scores, items, cached_langs, todo

    def _test(self, tuning: _Tuning, tagger: TokenTagger, tests: dict[str, list[TaggedSentence]],
              todo: dict[str, dict[str, Any]], cache: ProductCache | None, scores: dict[str, dict[str, float]],
              items: dict[str, dict[str, ItemStats]]) -> None:
        """Test ``tagger`` zero-shot on each language of ``todo``: its scores into ``scores`` and ``items``, and
        into the cache."""
        hp, settings = tuning.hp, tuning.settings
        total = sum(len(tests[lang]) for lang in todo)
        with progress(settings, f"{self.name}: zero-shot test", total) as advance:
            for lang, test_inputs in todo.items():
                sents = tests[lang]
                pred = predict(tagger, tuning.feat, sents, tuning.labels, batch_size=int(hp["eval_batch_size"]),
                               pad_id=tuning.pad_id, device=tuning.device, precision=settings.precision)
                gold = [t.tags for t in sents]
                overall, item_stats = tagging_scores(pred, gold)
                s: dict[str, Any] = {m: overall[m] for m in self.metrics}
                s["items"] = {m: item_stats[m] for m in self.metrics}
                advance(len(sents))
                for m in self.metrics:
                    scores[m][lang] = float(s[m])
                    items.setdefault(m, {})[lang] = ItemStats(**s["items"][m])
                if cache is not None:
                    cache.get_or_build("tagger-test", test_inputs, _json_writer("scores.json", s))

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


def _tagger_cache(settings: TaskSettings, task: str) -> ProductCache | None:
    """The cache of taggers and their test scores (products under ``<cache_dir>/<kind>/<key>``); None without a
    ``cache_dir`` or a ``model_key``."""
    cache = None
    if settings.cache_dir is not None and settings.model_key:
        cache = ProductCache(Path(settings.cache_dir))
        cache.root = Path(settings.cache_dir)  # products go to <cache_dir>/<kind>/<key>
    if cache is None:
        log.info("%s: no cache_dir or model_key given; the tagger is fine-tuned and not cached", task)
    return cache


@dataclass
class _Tuning:
    """One evaluation's tagger: the evaluated model, the data and the settings it is fine-tuned with, and the tagger
    once fine-tuned here (``trained``)."""

    task: TaggingTask
    model: Any
    world: Any
    settings: TaskSettings
    hp: dict[str, Any]
    train_lang: str
    device: torch.device
    pad_id: int
    train: list[TaggedSentence]
    dev: list[TaggedSentence]
    labels: list[str]
    feat: Featurizer
    trained: dict[str, Any] = field(default_factory=dict)

    def new_tagger(self) -> TokenTagger:
        hp = self.hp
        return build_tagger(self.model, len(self.labels), hp["dropout"], hp["seed"], self.device,
                            hp["encoder_dropout"])

    def train_tagger(self) -> tuple[TokenTagger, dict[str, Any]]:
        """Fine-tune a new tagger; (tagger, its record: dev curve, selected step, steps, seconds, labels)."""
        hp, name = self.hp, self.task.name
        tagger = self.new_tagger()
        steps = batches_per_epoch(len(self.feat.segments(self.train, None)), int(hp["batch_size"]),
                                  bool(hp["group_by_length"])) * int(hp["epochs"])
        with progress(self.settings, f"{name}: fine-tuning on {self.train_lang}", steps) as advance:
            fit = fine_tune(tagger, self.feat, self.train, self.dev, self.labels, self.task.score, hp, seed=hp["seed"],
                            pad_id=self.pad_id, device=self.device, precision=self.settings.precision,
                            advance=advance)
        info = {"curve": fit.curve, "best": fit.best, "steps": fit.steps, "train_seconds": fit.seconds,
                "labels": self.labels}
        self.trained.update(tagger=tagger)
        return tagger, info

    def build(self, out: Path) -> dict[str, Any]:
        """The tagger product written in ``out``: its record, and its weights when they are worth keeping."""
        tagger, info = self.train_tagger()
        kept = keeps_weights(info["train_seconds"])
        if kept:
            _save_tagger(tagger, out)
        (out / "tagger.json").write_text(json.dumps(info, indent=1))
        return {"best": info["best"], "weights": kept, "world": getattr(self.world, "name", None)}

    def fine_tuned(self, cache: ProductCache | None, key_inputs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """(the cached tagger product or None without a cache, the tagger's record): fine-tuned unless cached."""
        if cache is not None:
            product = cache.get_or_build("tagger", key_inputs, self.build)
            return product, json.loads((product.path / "tagger.json").read_text())
        _, info = self.train_tagger()
        return None, info

    def tagger_to_test(self, product: Any, info: dict[str, Any]) -> TokenTagger:
        """The tagger to test: the one fine-tuned here, else the cached one's weights, else (a cached record without
        weights) the same tagger fine-tuned again."""
        tagger = self.trained.get("tagger")
        if tagger is None and (product.path / WEIGHTS).is_file():
            # a cached tagger with its weights: rebuild its architecture and load them
            tagger = self.new_tagger()
            _load_tagger(tagger, product.path)
        elif tagger is None:  # a cached record without weights: fine-tune the same tagger again
            tagger, again = self.train_tagger()
            if again["best"] != info["best"] or again["steps"] != info["steps"]:
                log.warning("%s: the tagger fine-tuned again selected %s, the cached record says %s",
                            self.task.name, again["best"], info["best"])
        return tagger
