"""HyperOFA (Özeren, Liu, Schütze; spec ``methods.md`` §2.3, seeds 000 and 001, reference ``enesozeren/hyper-ofa``).

OFA's pipeline with the convex combination replaced by a trained hypernetwork (:mod:`methods.hypernetwork`):

1. ``ctx.source_matrix`` is F_s (the harness factorizes E_s ~= F_s P when a dim is given) or E_s.
2. Matching (seed 000 §3.3): a token is matched with a word when the word's tokenization contains it; the same
   bipartite graph as OFA (:func:`methods.ofa.subword_word_edges`, the reference's surface variants ``w``,
   ``" " + w`` and a capitalized one), with each (token, word) edge counted once (the reference's ``list(set())``).
3. Training pairs (seed 000 §3.4, fn. 5): (matched word vectors of source token i, F_s[i]) for every source token
   with at least one matched word; split train / validation / test with a seeded permutation (reference code
   97 / 2.5 / 0.5 %; validation and test get at least ``min(min_eval_pairs, n // 10)`` pairs each so that small
   vocabularies keep a usable validation set).
4. Sets longer than ``max_set`` (the paper's "maximum context size" 256; the ``cpu`` preset's 64) are cut once, on
   both sides, to a random subset drawn from a generator seeded by (seed, token id) (``truncate="random"``, the
   default). The reference takes the first 256 ids of a Python ``set``, an arbitrary but hash-ordered choice;
   ``truncate="first"`` takes the first 256 in word-file order instead. Augmentation (shuffle, 50-100 % sub-
   sampling) then works within the kept subset.
5. The hypernetwork is trained (loss, optimizer, schedule, augmentation, bucketing, early stopping: see
   :mod:`methods.hypernetwork`), and, unless ``control=False``, the same network with the same seed on the same
   split with the training targets permuted among the training tokens (the shuffled-target control). Both
   validation cosines go into the stats: ``val_cosine`` (the kept checkpoint's) and ``control_val_cosine``.
6. Initialization (seed 000 §3.5): overlapping tokens copy their source row (``ofa`` overlap rule, special tokens
   by their text as the reference does, ``specials="string"``; ``specials="role"`` is the harness's variant, as for
   ``ofa``); every other
   target token with at least one matched word is predicted by the hypernetwork (eval mode, no augmentation, the
   set in word-file order); the rest take the per-dimension Gaussian of the source matrix -- the same rows as
   ``ofa`` and ``random`` give them with the same seed. So the copied / method / random counts equal OFA's.

Sizing (``preset``): ``"paper"`` is the paper's preset (seed 000 Table 6) by source kind and D' (``HN-R-100`` ...
``HN-X-400``; the paper's rule for other dims), which the ``paper`` profile sets; ``"auto"`` follows the run's
profile (``ctx.profile``): the paper's preset under ``paper``, otherwise the ``cpu`` preset (sized by measurement
for the main job's 2-core budget, see ``benchmarks/bench_hypernetwork.py``). Any
preset name of :data:`methods.hypernetwork.PRESETS` can be given, and ``hidden`` / ``layers`` / ``epochs`` /
``patience`` / ``batch_size`` / ``max_set`` / ``lr`` override it. Every preset trains as the paper does, until the
validation loss stops improving (``patience`` epochs without an improvement; ``epochs`` only bounds the run). The
``cpu`` preset (1 layer, hidden 64, batch 128, patience 5, at most 60 epochs) trains with lr 1e-3 (at the paper's
1e-4 its validation loss still falls after 90 epochs), cuts sets to 64 vectors instead of 256 (bounds the cost of
very common pieces; no loss measured), and, when ``batch_size`` is not given, shrinks its batch for small
vocabularies so that an epoch has at least 8 batches.

Contrastive temperature (seed 000 A.2): 0.5 for the monolingual (RoBERTa) and 0.25 for the multilingual (XLM-R)
source. ``temperature=None`` derives it from ``source_kind``; ``source_kind="auto"`` reads the world: the source
model is the one whose folder the source tokenizer was loaded from, and it is monolingual when its manifest entry
lists one language (``languages``) or says ``kind``/``multilingual``, or when ``languages.json`` marks exactly one
language as seen by it.

Caching: the trained network (``model.safetensors`` + ``config.json`` with its curve) is a product under
``ctx.cache_dir/products/hypernetwork/<key>``, the key hashing the word vectors' identity, the source matrix, the
source tokenizer, every hyperparameter, the device type and the seed. A cached network is reused and its curve
written to the workdir again. The learning curve (per epoch: training loss, validation loss, validation cosine,
learning rate) is reported three ways: in the stats (``curve`` and ``control_curve``, columns, so in the init
report), in ``ctx.workdir`` as ``curves.json`` (``hypernetwork/<series>`` per epoch, logged by the runner as the
MLflow series ``init/hypernetwork/<series>``) and ``hypernetwork_curve.png`` (with ``hypernetwork.json``), and in
the log, one line per epoch.

Parameters (``ctx.params``), defaults in :attr:`HyperOFAInit.defaults`: ``preset``, ``arch`` ("bilstm" |
"setformer"), ``hidden``, ``layers``, ``heads``, ``pooling`` ("mean" | "cls"), ``dropout`` (0.4), ``max_set``
(preset's), ``truncate``, ``split`` ([0.97, 0.025, 0.005]), ``min_eval_pairs`` (32), ``epochs`` (max epochs),
``patience``, ``min_delta``, ``batch_size``, ``lr`` (1e-4), ``lr_step_epochs`` (10), ``lr_gamma`` (0.95),
``weight_decay`` (0), ``loss_lambda`` (0.1), ``temperature``, ``source_kind``, ``loss_form`` ("code" | "paper-000" |
"report-001"), ``augment_prob`` (0.5), ``augment_min_fraction`` (0.5), ``augment_min_set`` (4), ``shuffle_sets``
(True), ``bucket_factor`` (40), ``amp`` ("auto" | "bf16" | "off"; "auto" is the harness's ``auto``: bf16 on a CUDA GPU
that computes it natively, compute capability 8.0 or more, else off, :func:`resolve_amp`), ``control`` (True), ``source_languages`` /
``target_languages`` / ``max_words`` (as OFA), ``specials`` ("string", as OFA), ``cache`` (True).

Reference behaviour (``enesozeren/hyper-ofa``; checked by ``tests/test_hyperofa.py`` and
``tests/test_hypernetwork.py`` against fixtures that ``scripts/reference/make_ofa_fixtures.sh`` made with the
authors' code on the bible world's assets): the matched
word sets of every source and target token, the training pairs (every source token with a matched word, its
``F_s`` row as the target), the overlap and the copied / predicted / Gaussian counts are the reference's; the
hypernetwork's forward pass, loss and padding are the reference's on the same weights and batch. Departures by
design: the split (a seeded generator with a floor on the held-out sets; the reference: ``np.random.seed(42)``
shuffle, 97/2.5/0.5 %), the cut of sets longer than ``max_set`` (a seeded random subset or the first in file order;
the reference: the first 256 of a ``list(set())``, hash-ordered), per-epoch shuffling of every set (the reference
shuffles only the sub-sampled ones), the batch order (length-grouped batches in shuffled order; the reference: the
groups in order), early stopping on the validation loss (the reference: a fixed number of epochs, the best of every
20th), the CPU preset's sizes, and the Gaussian rows' generator.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.hashing import hash_obj
from harness.core.kernels import identity as kernel_identity
from harness.core.precision import resolve_precision
from harness.core.registry import METHODS
from methods import own_cost
from methods.base import InitContext, InitResult, Method, Reference, TokenMapping
from methods.combine import place
from methods.hypernetwork import (
    ARCHS,
    HN_VERSION,
    LOSS_FORMS,
    POOLINGS,
    PRESETS,
    HypernetConfig,
    Preset,
    TrainConfig,
    TrainOutcome,
    load_hypernetwork,
    paper_preset,
    parameter_count,
    plot_curves,
    predict,
    save_hypernetwork,
    train_hypernetwork,
)
from methods.hypernetwork_data import TRUNCATIONS, split_pairs, truncate_set
from methods.hyperofa_data import HyperData, cached_word_sets
from methods.overlap import SPECIALS_MODES
from methods.params import Param
from methods.shared import FALLBACK_SALT, copy_rows, gaussian_start, overlap_stats, tokenizer_fingerprint
from methods.wordvectors import load_word_vectors, shared_vectors_dir

log = logging.getLogger(__name__)

SPLIT_SALT, TRAIN_SALT, CONTROL_SALT, PERMUTE_SALT = 31, 32, 33, 34
TEMPERATURE = {"mono": 0.5, "multi": 0.25}  # seed 000 App. A.2
CURVE_SERIES = ("train_loss", "val_loss", "val_cosine", "lr")


# -- source kind --------------------------------------------------------------------------------------------
def _kind_of_entry(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return None
    kind = entry.get("kind")
    if kind in TEMPERATURE:
        return str(kind)
    if isinstance(entry.get("multilingual"), bool):
        return "multi" if entry["multilingual"] else "mono"
    langs = entry.get("languages")
    if isinstance(langs, list) and langs:
        return "mono" if len(langs) == 1 else "multi"
    return None


def detect_source_kind(world: Any, source_tokenizer: Any) -> tuple[str | None, str]:
    """``(kind or None, how it was decided)`` for the source model the tokenizer belongs to."""
    manifest = getattr(world, "manifest", None) or {}
    sources = manifest.get("sources") or {}
    name = None
    tok_path = getattr(source_tokenizer, "name_or_path", None)
    if tok_path and hasattr(world, "source_dir"):
        for s in sources:
            try:
                if Path(tok_path).resolve() == Path(world.source_dir(s)).resolve():
                    name = s
                    break
            except (ConfigError, OSError, TypeError):
                continue
    if name is None and len(sources) == 1:
        name = next(iter(sources))
    if name is None:
        return None, "the source model could not be identified from the world"
    kind = _kind_of_entry(sources.get(name))
    if kind is not None:
        return kind, f"manifest entry of source {name!r}"
    seen = [code for code, lang in (getattr(world, "languages", None) or {}).items()
            if bool(getattr(lang, "seen", {}).get(name))]
    if seen:
        return ("mono" if len(seen) == 1 else "multi"), f"languages seen by source {name!r} ({len(seen)})"
    if name in TEMPERATURE:
        return name, f"source name {name!r}"
    return None, f"source {name!r} says nothing about its languages"


# -- the method ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Sizing:
    """How a call is sized: the source kind, the preset, the contrastive temperature (each with how it was
    decided), the mixed precision and the longest word set."""

    kind: str | None
    kind_how: str
    preset: Preset
    sizing: str
    temperature: float
    temp_how: str
    amp: str
    max_set: int


def _hash_tensor(t: torch.Tensor) -> str:
    a = t.detach().to("cpu", torch.float32).contiguous().numpy()
    h = hashlib.sha256(str(a.shape).encode())
    h.update(a.tobytes())
    return h.hexdigest()[:16]


def learning_curve(outcome: TrainOutcome) -> dict[str, list[Any]]:
    """The per-epoch curve as columns (``epoch``, ``train_loss``, ``val_loss``, ``val_cosine``, ``lr``; NaN as
    None), for the init report."""
    series = {k: dict((int(e), float(v)) for e, v in outcome.curves.get(k, [])) for k in CURVE_SERIES}
    epochs = sorted(set().union(*series.values()))
    out: dict[str, list[Any]] = {"epoch": epochs}
    for k, points in series.items():
        out[k] = [round(points[e], 6) if e in points and math.isfinite(points[e]) else None for e in epochs]
    return out


def _finite(points: list[list[float]]) -> list[list[float]]:
    return [[int(s), float(v)] for s, v in points if math.isfinite(v)]



def resolve_amp(amp: str, device: torch.device) -> str:
    """The hypernetwork's mixed precision: ``bf16`` or ``off`` as named, and ``auto`` as every precision of the
    harness resolves it (:func:`harness.core.precision.resolve_precision`): bf16 only on a CUDA GPU that computes
    it natively (not on one that emulates it, a V100 or a T4, which ``torch.cuda.is_bf16_supported`` counts), off
    on every CPU."""
    if amp != "auto":
        return amp
    return "bf16" if resolve_precision("auto", str(device)) == "bf16" else "off"

@METHODS.register("hyperofa")
class HyperOFAInit(Method):
    """HyperOFA: copy overlap, a trained hypernetwork (word-vector set -> coordinates) for tokens with matched words,
    per-dimension Gaussian for the rest."""

    name: ClassVar[str] = "hyperofa"
    description: ClassVar[str] = ("HyperOFA: a BiLSTM hypernetwork trained to map a source token's matched "
                                  "multilingual word vectors to its source (coordinate) row predicts the new "
                                  "tokens; overlap copied (OFA rule); per-dimension Gaussian for tokens without "
                                  "a matched word")
    requires: ClassVar[frozenset[str]] = frozenset({"word_vectors"})
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = True
    params: ClassVar[tuple[Param, ...]] = (
        Param("preset", "auto", "network size and training preset ('auto': the profile's; 'paper': the paper's "
              "for the source kind and D')", "str",
              check=lambda v: v in ("auto", "paper") or v in PRESETS or str(v).startswith("HN-"),
              expect=f"'auto', 'paper' or one of {sorted(PRESETS)}"),
        Param("arch", "bilstm", "hypernetwork architecture", "str", choices=ARCHS),
        Param("hidden", None, "hidden size (null: the preset's)", "int"),
        Param("layers", None, "layers (null: the preset's)", "int"),
        Param("heads", 4, "attention heads (setformer)", "int"),
        Param("pooling", "mean", "set pooling", "str", choices=POOLINGS),
        Param("dropout", 0.4, "dropout", "float"),
        Param("max_set", None, "longest word set (null: the preset's)", "int"),
        Param("truncate", "random", "how longer sets are cut", "str", choices=TRUNCATIONS),
        Param("split", [0.97, 0.025, 0.005], "train / validation / test ratios", "list",
              check=lambda s: (isinstance(s, (list, tuple)) and len(s) == 3
                               and all(isinstance(r, (int, float)) and r >= 0 for r in s)
                               and math.isclose(sum(s), 1.0, abs_tol=1e-6)),
              expect="three non-negative ratios (train, validation, test) summing to 1"),
        Param("min_eval_pairs", 32, "least pairs in the validation and test sets", "int"),
        Param("epochs", None, "most epochs (null: the preset's)", "int"),
        Param("patience", None, "epochs without improvement that stop training (null: the preset's)", "int"),
        Param("min_delta", 0.0, "least improvement of the validation loss", "float"),
        Param("batch_size", None, "batch size (null: the preset's)", "int"),
        Param("lr", None, "learning rate (null: the preset's)", "float"),
        Param("lr_step_epochs", 10, "StepLR step", "int"),
        Param("lr_gamma", 0.95, "StepLR factor", "float"),
        Param("weight_decay", 0.0, "Adam weight decay", "float"),
        Param("loss_lambda", 0.1, "weight of the contrastive term", "float"),
        Param("temperature", None, "contrastive temperature (null: by source kind)", "float"),
        Param("source_kind", "auto", "monolingual or multilingual source ('auto': read from the world)", "str",
              choices=("auto", "mono", "multi")),
        Param("loss_form", "code", "which loss formula", "str", choices=LOSS_FORMS),
        Param("augment_prob", 0.5, "probability of sub-sampling a set", "float"),
        Param("augment_min_fraction", 0.5, "smallest sub-sample fraction", "float"),
        Param("augment_min_set", 4, "sets smaller than this are not sub-sampled", "int"),
        Param("shuffle_sets", True, "shuffle every set each epoch", "bool"),
        Param("bucket_factor", 40, "length-grouped batching factor", "int"),
        Param("amp", "auto", "mixed precision", "str", choices=("auto", "bf16", "off")),
        Param("control", True, "also train the shuffled-target control", "bool"),
        Param("source_languages", None, "as ofa", "list"),
        Param("target_languages", None, "as ofa", "list"),
        Param("max_words", None, "as ofa", "int"),
        Param("specials", "string", "special tokens: by their text (reference) or by role", "str",
              choices=SPECIALS_MODES),
        Param("cache", True, "reuse a trained network with the same inputs", "bool"),
    )
    # cpu: trains as the paper's, until the validation loss stops improving: 5 epochs without an improvement stop
    # it, 60 bound it (bible/mono: 17-31 epochs, 50-90 CPU-s on one thread); paper: the paper's preset
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"cpu": {"epochs": 60, "patience": 5},
                                                     "paper": {"preset": "paper"}}
    init_hours: ClassVar[float] = 1.0
    reference: ClassVar[Reference] = Reference(
        "enesozeren/hyper-ofa@47c55b9", "the same word sets, training pairs, copies and provenance of every row; "
        "the hypernetwork's forward pass, loss and gradients on the reference's weights; the trained network's "
        "predicted rows not compared",
        ("tests/test_hyperofa.py::test_word_sets_and_training_pairs_match_the_authors_code",
         "tests/test_hyperofa.py::test_hyperofa_rows_are_copied_predicted_or_drawn_as_the_authors_assemble_them",
         "tests/test_hypernetwork.py::test_hypernetwork_forward_loss_and_gradients_match_the_authors_code"))

    # -- parameters ------------------------------------------------------------------------------------------
    def _preset(self, p: dict[str, Any], ctx: InitContext, kind: str | None, dim: int) -> tuple[Preset, str]:
        name = p["preset"]
        if name == "auto":  # the run's profile decides: the paper's preset under `paper`, else the CPU preset
            if ctx.profile != "paper":
                return PRESETS["cpu"], "auto: the CPU preset (sized for the main job's 2-core budget)"
            name, how = "paper", "auto (paper profile)"
        else:
            how = "named"
        if name == "paper":
            if kind is None:
                raise ConfigError("hyperofa: the paper's preset depends on whether the source model is "
                                  "monolingual; pass source_kind ('mono' or 'multi') or a preset name")
            return paper_preset(kind, dim), f"{how}: the paper's preset (seed 000 Table 6)"
        if name in PRESETS:
            return PRESETS[name], how
        parts = str(name).split("-")  # HN-R-<dim> / HN-X-<dim> for a dim the paper did not use
        if len(parts) == 3 and parts[1] in ("R", "X") and parts[2].isdigit():
            return paper_preset("mono" if parts[1] == "R" else "multi", int(parts[2])), "named (paper's rule)"
        raise ConfigError(f"hyperofa: unknown preset {name!r}; choose 'auto', 'paper' or one of {sorted(PRESETS)}")

    # -- main ------------------------------------------------------------------------------------------------
    def initialize(self, ctx: InitContext) -> InitResult:
        p = self.resolve_params(ctx)
        mapping = self.mapping(ctx, specials=p["specials"])
        files = ctx.world.resource_files("word_vectors")
        if not files:
            raise MissingResourceError("method 'hyperofa' needs word vectors, and the world provides none")

        def bar(label: str, total: int) -> Callable[[int], None] | None:
            return self.bar(ctx, label, total)

        src = ctx.source_matrix.detach().float().cpu()
        n_s, dim = src.shape
        device = torch.device(ctx.device)
        size = self._sizing(p, ctx, dim, device)
        data = self._data(ctx, p, files, mapping, n_s, size.max_set, bar)
        try:
            split = split_pairs(len(data.train_tokens), p["split"], int(p["min_eval_pairs"]), ctx.rng(SPLIT_SALT))
        except ValueError as exc:
            raise ConfigError(f"hyperofa: {exc}: only {len(data.train_tokens)} source tokens match a word; the "
                              f"hypernetwork needs word vectors covering the source vocabulary") from exc
        cfg, tcfg = self._configs(p, size, data.wv.dim, dim, len(split[0]))
        targets = src[torch.from_numpy(data.train_tokens)]
        ident = {"v": HN_VERSION, "wv": data.wv_ident, "source_matrix": _hash_tensor(src),
                 "source_tokenizer": tokenizer_fingerprint(ctx.source_tokenizer), "model": asdict(cfg),
                 "train": asdict(tcfg), "data": {"max_set": size.max_set, "truncate": p["truncate"],
                                                 "split": [float(r) for r in p["split"]],
                                                 "min_eval_pairs": int(p["min_eval_pairs"]),
                                                 "languages": sorted(data.src_langs) if data.src_langs else None},
                 "seed": int(ctx.seed), "device": device.type, **kernel_identity()}
        model, main, main_cached = self._train_or_load(ctx, p, ident, cfg, tcfg, data.vectors, data.src_sets,
                                                       targets, split, control=False,
                                                       label="HyperOFA: hypernetwork epochs")
        control = None
        control_cached = None
        if p["control"]:
            _, control, control_cached = self._train_or_load(ctx, p, ident, cfg, tcfg, data.vectors, data.src_sets,
                                                             targets, split, control=True,
                                                             label="HyperOFA: control (shuffled targets) epochs")
        matrix, provenance, pred_norm = self._rows(ctx, mapping, src, data, model, tcfg, device, bar)
        artifacts = self._write_artifacts(ctx, main, control, cfg, size.preset)
        stats = self._stats(p, mapping, size, data, split, cfg, tcfg, model, (main, main_cached),
                            (control, control_cached), pred_norm, targets)
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats,
                          artifacts=artifacts)

    def _sizing(self, p: dict[str, Any], ctx: InitContext, dim: int, device: torch.device) -> _Sizing:
        """The network's preset, the contrastive temperature and the precision, each with how it was decided."""
        if p["source_kind"] != "auto":
            kind, kind_how = p["source_kind"], "parameter"
        else:
            kind, kind_how = detect_source_kind(ctx.world, ctx.source_tokenizer)
        preset, sizing = self._preset(p, ctx, kind, dim)
        if p["temperature"] is not None:
            temperature, temp_how = float(p["temperature"]), "parameter"
        elif kind is not None:
            temperature, temp_how = TEMPERATURE[kind], f"{kind} source ({kind_how})"
        else:
            raise ConfigError(f"hyperofa: cannot tell whether the source model is monolingual ({kind_how}); pass "
                              f"source_kind ('mono' -> temperature 0.5, 'multi' -> 0.25) or temperature")
        amp = resolve_amp(p["amp"], device)
        max_set = int(p["max_set"] if p["max_set"] is not None else preset.max_set)
        if max_set < 1:
            raise ConfigError(f"hyperofa: max_set must be >= 1, not {max_set}")
        return _Sizing(kind, kind_how, preset, sizing, temperature, temp_how, amp, max_set)

    @staticmethod
    def _data(ctx: InitContext, p: dict[str, Any], files: list[Path], mapping: TokenMapping, n_s: int, max_set: int,
              bar: Callable[[str, int], Callable[[int], None] | None]) -> HyperData:
        """The word vectors, the matched word sets of both vocabularies, and the cut sets of the training pairs and of
        the tokens to predict."""
        n_t = mapping.target_size
        wv = load_word_vectors(files, cache_dir=shared_vectors_dir(ctx.cache_dir), max_words=p["max_words"])
        wv_ident = hash_obj([(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files] + [p["max_words"]])
        src_langs = set(p["source_languages"]) if p["source_languages"] is not None else None
        tgt_langs = set(p["target_languages"]) if p["target_languages"] is not None else None
        ws_s = cached_word_sets(ctx.source_tokenizer, wv, wv_ident, languages=src_langs, cache_dir=ctx.cache_dir,
                                progress=bar("HyperOFA: source word sets", len(wv)))
        ws_t = cached_word_sets(ctx.target_tokenizer, wv, wv_ident, languages=tgt_langs, cache_dir=ctx.cache_dir,
                                progress=bar("HyperOFA: target word sets", len(wv)))
        if ws_s.n_tokens != n_s:
            raise ValueError(f"source tokenizer has {ws_s.n_tokens} tokens, the source matrix {n_s} rows")
        if ws_t.n_tokens != n_t:
            raise ValueError(f"target tokenizer has {ws_t.n_tokens} tokens, the mapping {n_t}")

        copied = np.zeros(n_t, dtype=bool)
        copied[list(mapping.copy)] = True
        train_tokens = np.flatnonzero(ws_s.lengths > 0)
        wise = np.flatnonzero(~copied & (ws_t.lengths > 0))
        src_sets = [truncate_set(ws_s.get(i), max_set, p["truncate"], ctx.seed, int(i)) for i in train_tokens]
        tgt_sets = [truncate_set(ws_t.get(i), max_set, p["truncate"], ctx.seed, int(i)) for i in wise]
        used = np.unique(np.concatenate([*src_sets, *tgt_sets, np.zeros(0, np.int64)]))
        vectors = torch.from_numpy(np.asarray(wv.vectors[used], dtype=np.float32))
        src_sets = [np.searchsorted(used, s) for s in src_sets]
        tgt_sets = [np.searchsorted(used, s) for s in tgt_sets]
        return HyperData(wv=wv, wv_ident=wv_ident, src_langs=src_langs, ws_s=ws_s, ws_t=ws_t, copied=copied,
                         train_tokens=train_tokens, wise=wise, vectors=vectors, src_sets=src_sets, tgt_sets=tgt_sets)

    @staticmethod
    def _configs(p: dict[str, Any], size: _Sizing, input_dim: int, dim: int, n_train: int
                 ) -> tuple[HypernetConfig, TrainConfig]:
        """The network's and the training's configuration: the preset's, as the parameters override it."""
        preset = size.preset
        max_epochs = int(p["epochs"] or preset.max_epochs)
        batch_size = int(p["batch_size"] or preset.batch_size)
        if p["batch_size"] is None and preset.min_batches:  # small vocabularies: enough steps per epoch
            batch_size = max(8, min(batch_size, n_train // preset.min_batches))
        try:
            cfg = preset.config(input_dim=input_dim, output_dim=dim, dropout=float(p["dropout"]), arch=p["arch"],
                                heads=int(p["heads"]), pooling=p["pooling"])
            if p["hidden"] is not None or p["layers"] is not None:
                cfg = HypernetConfig(**{**asdict(cfg), "hidden": int(p["hidden"] or cfg.hidden),
                                        "layers": int(p["layers"] or cfg.layers)})
            tcfg = TrainConfig(
                max_epochs=max_epochs, patience=int(p["patience"] or preset.patience),
                min_delta=float(p["min_delta"]), batch_size=batch_size,
                lr=float(p["lr"] if p["lr"] is not None else preset.lr),
                lr_step_epochs=int(p["lr_step_epochs"]), lr_gamma=float(p["lr_gamma"]),
                weight_decay=float(p["weight_decay"]), loss_lambda=float(p["loss_lambda"]),
                temperature=size.temperature, loss_form=p["loss_form"], shuffle_sets=bool(p["shuffle_sets"]),
                augment_prob=float(p["augment_prob"]), augment_min_fraction=float(p["augment_min_fraction"]),
                augment_min_set=int(p["augment_min_set"]), bucket_factor=int(p["bucket_factor"]), amp=size.amp)
        except ValueError as exc:
            raise ConfigError(f"hyperofa: {exc}") from exc
        return cfg, tcfg

    def _rows(self, ctx: InitContext, mapping: TokenMapping, src: torch.Tensor, data: HyperData,
              model: torch.nn.Module, tcfg: TrainConfig, device: torch.device,
              bar: Callable[[str, int], Callable[[int], None] | None]) -> tuple[torch.Tensor, np.ndarray, float]:
        """Gaussian everywhere, the hypernetwork's predictions, then the copies; the predicted rows' mean norm."""
        matrix, provenance = gaussian_start(src, mapping.target_size, ctx.generator(FALLBACK_SALT))
        pred_norm = float("nan")
        if len(data.wise):
            advance = bar("HyperOFA: predicting", len(data.wise))
            pred = predict(model, data.vectors, data.tgt_sets, device=device, batch_size=tcfg.eval_batch_size,
                           amp=tcfg.amp)
            if not torch.isfinite(pred).all():
                raise ConfigError("hyperofa: the hypernetwork predicted non-finite values; lower lr or use amp='off'")
            place(matrix, provenance, data.wise, pred.to(matrix.dtype))
            pred_norm = float(pred.norm(dim=1).mean())
            if advance is not None:
                advance(len(data.wise))
        copy_rows(matrix, src, mapping, provenance)
        return matrix, provenance, pred_norm

    @staticmethod
    def _stats(p: dict[str, Any], mapping: TokenMapping, size: _Sizing, data: HyperData,
               split: tuple[np.ndarray, np.ndarray, np.ndarray], cfg: HypernetConfig, tcfg: TrainConfig,
               model: torch.nn.Module, trained: tuple[TrainOutcome, bool],
               controlled: tuple[TrainOutcome | None, bool | None], pred_norm: float, targets: torch.Tensor
               ) -> dict[str, Any]:
        """The init report: the network's and the control's cosines and curves, the sizing and the data."""
        (main, main_cached), (control, control_cached) = trained, controlled
        ws_s, ws_t, train_tokens, wise = data.ws_s, data.ws_t, data.train_tokens, data.wise
        return {
            "overlap": overlap_stats(mapping),
            "val_cosine": main.val_cosine,
            "control_val_cosine": None if control is None else control.val_cosine,
            "val_cosine_gain": None if control is None else main.val_cosine - control.val_cosine,
            "val_cosine_max": main.val_cosine_max,
            "test_cosine": main.test_cosine,
            "control_test_cosine": None if control is None else control.test_cosine,
            "best_val_loss": main.best_val_loss,
            "best_epoch": main.best_epoch, "epochs": main.epochs_run, "stopped_early": main.stopped_early,
            "patience": tcfg.patience, "max_epochs": tcfg.max_epochs,
            "curve": learning_curve(main), "control_curve": None if control is None else learning_curve(control),
            "control_best_epoch": None if control is None else control.best_epoch,
            "control_epochs": None if control is None else control.epochs_run,
            "train_seconds": main.seconds, "control_train_seconds": None if control is None else control.seconds,
            "pairs_per_second": main.pairs_per_second,
            "hypernetwork_cached": main_cached, "control_cached": control_cached,
            "train_pairs": int(len(split[0])), "val_pairs": int(len(split[1])), "test_pairs": int(len(split[2])),
            "hn_parameters": parameter_count(model),
            "preset": size.preset.name, "sizing": size.sizing, "source_kind": size.kind,
            "source_kind_from": size.kind_how, "temperature": size.temperature, "temperature_from": size.temp_how,
            "amp": size.amp, "max_set": size.max_set, "truncate": p["truncate"], "loss_form": tcfg.loss_form,
            "hypernetwork": asdict(cfg), "training": asdict(tcfg),
            "words": len(data.wv), "word_dim": data.wv.dim,
            "source_subwords_matched": int(len(train_tokens)), "target_subwords_matched": int((ws_t.lengths > 0).sum()),
            "source_sets_truncated": int((ws_s.lengths[train_tokens] > size.max_set).sum()),
            "target_sets_truncated": int((ws_t.lengths[wise] > size.max_set).sum()) if len(wise) else 0,
            "mean_source_set": float(ws_s.lengths[train_tokens].mean()) if len(train_tokens) else 0.0,
            "vectors_per_epoch": int(sum(len(data.src_sets[i]) for i in split[0])),
            "wise": int(len(wise)), "no_word_match": int((~data.copied & (ws_t.lengths == 0)).sum()),
            # the L1-dominated loss pulls uncertain predictions towards the coordinate-wise median: how far the
            # predicted rows shrink next to the rows they were trained on
            "predicted_row_norm": None if not math.isfinite(pred_norm) else round(pred_norm, 6),
            "source_row_norm": round(float(targets.norm(dim=1).mean()), 6) if len(targets) else None,
        }

    # -- training with the product cache ---------------------------------------------------------------------
    def _train_or_load(self, ctx: InitContext, p: dict[str, Any], ident: dict[str, Any], cfg: HypernetConfig,
                       tcfg: TrainConfig, vectors: torch.Tensor, sets: list[np.ndarray], targets: torch.Tensor,
                       split: tuple[np.ndarray, np.ndarray, np.ndarray], *, control: bool, label: str
                       ) -> tuple[torch.nn.Module, TrainOutcome, bool]:
        salt = CONTROL_SALT if control else TRAIN_SALT
        seed = int(ctx.rng(salt).integers(0, 2**62))
        if control:  # the training targets permuted among the training tokens; validation and test stay true
            targets = targets.clone()
            tr = torch.from_numpy(split[0])
            perm = torch.from_numpy(ctx.rng(PERMUTE_SALT).permutation(len(tr)))
            targets[tr] = targets[tr[perm]]
        inputs = {**ident, "control": control}

        def run() -> tuple[torch.nn.Module, TrainOutcome]:
            advance = ctx.progress(label, tcfg.max_epochs) if ctx.progress is not None else None
            name = "control" if control else "main"

            def on_epoch(epoch: int, values: dict[str, float]) -> None:
                log.info("hyperofa %s hypernetwork epoch %d: train loss %.4f, val loss %.4f, val cosine %.4f", name,
                         epoch, values["train_loss"], values["val_loss"], values["val_cosine"])
                if ctx.log_metric is not None:
                    for k, v in values.items():
                        if math.isfinite(v):
                            ctx.log_metric(f"hypernetwork/{'control_' if control else ''}{k}", float(v), epoch)

            model, outcome = train_hypernetwork(cfg, tcfg, vectors, sets, targets, split, seed=seed,
                                                device=ctx.device, progress=advance, on_epoch=on_epoch)
            log.info("hyperofa %s hypernetwork: val cosine %.4f (best epoch %d of %d, %.1fs)", name,
                     outcome.val_cosine, outcome.best_epoch, outcome.epochs_run, outcome.seconds)
            return model, outcome

        if ctx.cache_dir is None or not p["cache"]:
            model, outcome = run()
            return model, outcome, False
        from harness.core.cache import ProductCache

        cache = ProductCache(Path(ctx.cache_dir))
        built: dict[str, Any] = {}

        def build(folder: Path) -> dict[str, Any]:
            t_build = time.perf_counter()
            model, outcome = run()
            save_hypernetwork(folder, model, {"outcome": outcome.summary(), "curves": outcome.curves})
            built["model"], built["outcome"] = model, outcome
            built["seconds"] = time.perf_counter() - t_build
            return {"val_cosine": outcome.val_cosine}

        t_get = time.perf_counter()
        prod = cache.get_or_build("hypernetwork", inputs, build)
        # its training is this cell's cost; waiting for another process that trains it is not
        own_cost.exclude(own_cost.WAITING, time.perf_counter() - t_get - built.get("seconds", 0.0))
        if "model" in built:
            return built["model"], built["outcome"], False
        model, meta = load_hypernetwork(prod.path, device=ctx.device)
        o = meta["outcome"]
        outcome = TrainOutcome(state_dict={}, curves=meta["curves"], **o)
        return model, outcome, True

    def _write_artifacts(self, ctx: InitContext, main: TrainOutcome, control: TrainOutcome | None,
                         cfg: HypernetConfig, preset: Preset) -> dict[str, Path]:
        if ctx.workdir is None:
            return {}
        wd = Path(ctx.workdir)
        wd.mkdir(parents=True, exist_ok=True)
        curves = {f"hypernetwork/{k}": _finite(v) for k, v in main.curves.items()}
        if control is not None:
            curves.update({f"hypernetwork/control_{k}": _finite(v) for k, v in control.curves.items() if k != "lr"})
        cpath = wd / "curves.json"
        existing = json.loads(cpath.read_text()) if cpath.is_file() else {}
        cpath.write_text(json.dumps({**existing, **curves}))
        plot = {k.removeprefix("hypernetwork/"): v for k, v in curves.items() if not k.endswith("/lr")}
        title = (f"HyperOFA hypernetwork {preset.name} ({cfg.arch}, {cfg.layers}x{cfg.hidden}): val cosine "
                 f"{main.val_cosine:.3f}" + ("" if control is None else f", shuffled-target control "
                                              f"{control.val_cosine:.3f}"))
        png = plot_curves(plot, wd / "hypernetwork_curve.png", title=title)
        info = wd / "hypernetwork.json"
        info.write_text(json.dumps({"preset": preset.name, "config": asdict(cfg), "outcome": main.summary(),
                                    "control": None if control is None else control.summary()}, indent=1))
        return {"curves": cpath, "curve_plot": png, "hypernetwork": info}

