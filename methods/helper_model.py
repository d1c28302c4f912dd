"""What OMP token transplantation and CLP / CLP+ share: the ``exact`` overlap rule, the helper model that uses the
target tokenizer (its input table is CLP's similarity space and OMP's default donor space), and FOCUS's token-level
fastText vectors as the other donor space OMP can take (spec ``methods-2026.md`` §1.2, §1.6, §2.1-2.2).

**The ``exact`` overlap rule.** Both references copy a target token only when its string is in the source vocabulary,
without FOCUS's fuzzy symbols or OFA's case-insensitive step: mergekit's ``normalized_vocabulary`` (special tokens by
role, word-start markers normalized) and CLP's ``get_vocab()`` intersection (raw strings, special tokens by their
text). ``exact`` compares the canonical strings of :mod:`methods.canonical` (the word-start marker of SentencePiece,
byte-level BPE and WordPiece all normalized, so that a WordPiece source and a SentencePiece target still share
``" the"``), with ``specials="role"`` (mergekit) or ``specials="string"`` (CLP). On two tokenizers of one family the
canonical match is the raw-string match; across families the raw-string match of the reference collapses (spec §2.5),
which the canonical one avoids (a documented deviation).

**The helper model.** CLP needs "a small model that already uses the target tokenizer" (the papers took a pretrained
GPT-2 of the target language). A harness world has none, so one is trained, once per world and kind of source, on the
world's CPT text tokenized with the target tokenizer: an encoder (masked LM, XLM-R layout) for an encoder source, a
decoder (causal LM, Llama layout) for a decoder source, input and output tables tied. Its size, steps, batch and
learning rate are parameters (the ``cpu`` profile fixes small ones); every draw comes from a generator seeded by
``helper_seed`` (0 by default, so one helper serves every run seed, as FOCUS's fastText model does). Its training is
a product of the cache (``<home>/cache/methods/helper/products/helper-model/<key>``), keyed by the target
tokenizer, the text's digests, the objective and every training setting; the loss curve is kept with it and logged.
``helper_model`` names a trained model folder (any HF model whose input table has a row per target token) instead.

**The donor.** Where the world names a donor (``world.donor_dir``: a pretrained model that owns the target
vocabulary, as the papers' helper and mergekit's donor are), its tables are read instead (:mod:`methods.donor`)
and no helper is trained; an explicit ``helper_model`` still comes first. Which one served is said in the tables'
``info`` (``donor``: :data:`DONOR_PARAM`, :data:`DONOR_WORLD` or :data:`DONOR_TRAINED`, with its path, identity,
rows, dimension and whether it is tied), which the methods report as ``donor_model``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.core.errors import ConfigError, MissingResourceError
from methods import own_cost
from methods.canonical import CanonicalVocab
from methods.donor import donor_digest, read_donor
from methods.fasttext_util import read_text_lines, sha256_of
from methods.overlap import SPECIALS_MODES, exact_table, match_specials, register_rule, string_of
from methods.params import Param
from methods.shared import tokenizer_fingerprint

log = logging.getLogger(__name__)

HELPER_VERSION = 2  # bump when the helper's training changes: cached helpers are then trained again
HELPER_KIND = "helper-model"  # the product kind under <home>/cache/methods/helper/products/
# which model's tables serve as the helper / donor (the init report's ``donor_model.donor``)
DONOR_PARAM = "helper_model param"
DONOR_WORLD = "world donor"
DONOR_TRAINED = "helper model (trained)"
DONOR_FIELDS = ("donor", "path", "identity", "rows", "dim", "tied", "world_identity")


# -- the overlap rule ------------------------------------------------------------------------------------------
@register_rule("exact")
def exact_rule(source: CanonicalVocab, target: CanonicalVocab, *,
               specials: str = "role") -> tuple[dict[int, int], dict[str, Any]]:
    """OMP (mergekit) and CLP: a target token is copied when its canonical string is a source token's (the highest
    source id wins a tie); special tokens by role (``"role"``, mergekit) or by their text (``"string"``, CLP)."""
    if specials not in SPECIALS_MODES:
        raise ValueError(f"specials must be one of {SPECIALS_MODES}, not {specials!r}")
    copy = match_specials(source, target) if specials == "role" else {}
    n_special = len(copy)
    table = exact_table(source, specials)
    n_exact = 0
    for tid in range(len(target)):
        c = string_of(target, tid, specials)
        if c is not None and c in table:
            copy[tid] = table[c]
            n_exact += 1
    return copy, {"special": n_special, "exact": n_exact, "specials": specials}


# -- the helper model's parameters -----------------------------------------------------------------------------
HELPER_PARAMS: tuple[Param, ...] = (
    Param("helper_model", None, "a trained model folder whose input table has a row per target token (skips "
          "training the helper; comes before the world's donor)", "path"),
    Param("helper_objective", "auto", "the helper's kind: that of the source (auto), masked LM or causal LM", "str",
          choices=("auto", "mlm", "clm")),
    Param("helper_hidden", 256, "helper hidden size (its embedding dimension)", "int", low=8),
    Param("helper_layers", 4, "helper transformer layers", "int", low=1),
    Param("helper_heads", 4, "helper attention heads", "int", low=1),
    Param("helper_steps", 20_000, "helper training steps", "int", low=1),
    Param("helper_batch", 64, "helper sequences per step", "int", low=1),
    Param("helper_seq_len", 128, "helper tokens per sequence", "int", low=8),
    Param("helper_lr", 5e-4, "helper peak learning rate (AdamW, 5 % warm-up, linear decay)", "float", above=0),
    Param("helper_max_lines", None, "CPT text lines per language the helper reads (null: all)", "int"),
    Param("helper_seed", 0, "seed of the helper's initialization, masks and batches (null: the run's seed)", "int"),
)
# the cpu profile's helper: 2 layers x 128, 400 steps of 32 x 64 tokens (a minute of one core on the synthetic
# world; the vocabulary projection at the masked positions only, so the bible world's 100k+ target tokens cost
# a few times more per step). 128 dimensions keep OMP's k = 64 below the donor dimension (spec §1.6)
HELPER_CPU = {"helper_hidden": 128, "helper_layers": 2, "helper_heads": 4, "helper_steps": 400, "helper_batch": 32,
              "helper_seq_len": 64, "helper_lr": 2e-3, "helper_max_lines": 20_000}


@dataclass
class HelperTables:
    """The helper's tables indexed by target id: ``input`` (|V_t| x d_h, float32); ``output`` is None when tied."""

    input: np.ndarray
    output: np.ndarray | None
    info: dict[str, Any] = field(default_factory=dict)


def cpt_texts(world: Any) -> dict[str, Path]:
    return {p.stem: p for p in world.resource_files("cpt_text")}


def source_objective(world: Any, source_tokenizer: Any) -> str:
    """``"mlm"`` or ``"clm"``: the kind of the world's source that uses ``source_tokenizer`` (read from its
    ``config.json``; the only source's when there is one). A method sees tables, never the model: this only
    picks the helper's training objective."""
    def kind_of(name: str) -> str:
        info = world.manifest.get("sources", {}).get(name)
        declared = info.get("objective") if isinstance(info, dict) else None
        if declared in ("mlm", "clm"):
            return declared
        try:
            cfg = json.loads((Path(world.source_dir(name)) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "mlm"
        archs = " ".join(cfg.get("architectures") or [])
        return "clm" if ("CausalLM" in archs or cfg.get("is_decoder")) else "mlm"

    names = list(getattr(world, "sources", []) or [])
    kinds = {n: kind_of(n) for n in names}
    if len(set(kinds.values())) <= 1:
        return next(iter(kinds.values()), "mlm")
    from transformers import AutoTokenizer

    want = tokenizer_fingerprint(source_tokenizer)
    for name in names:
        try:
            if tokenizer_fingerprint(AutoTokenizer.from_pretrained(world.source_dir(name))) == want:
                return kinds[name]
        except (OSError, ValueError):
            continue
    return "mlm"


def helper_cache_root(cache_dir: Path | None) -> Path | None:
    """Where the helper products live: one folder shared by ``omp``, ``clp`` and ``clp+`` (a sibling of their
    own method cache folders)."""
    return None if cache_dir is None else Path(cache_dir).parent / "helper"


def helper_settings(p: dict[str, Any], objective: str, seed: int) -> dict[str, Any]:
    return {"objective": objective, "hidden": int(p["helper_hidden"]), "layers": int(p["helper_layers"]),
            "heads": int(p["helper_heads"]), "steps": int(p["helper_steps"]), "batch": int(p["helper_batch"]),
            "seq_len": int(p["helper_seq_len"]), "lr": float(p["helper_lr"]), "max_lines": p["helper_max_lines"],
            "seed": int(seed if p["helper_seed"] is None else p["helper_seed"])}


def world_donor(world: Any) -> Path | None:
    """The world's donor model folder (a model that owns the target vocabulary), or None."""
    folder = getattr(world, "donor_dir", None)
    return None if folder is None else Path(folder)


def donor_summary(info: dict[str, Any]) -> dict[str, Any]:
    """Which model served as the helper / donor, as the init report says it (:data:`DONOR_FIELDS`: ``identity`` is
    a hash of the rows read, ``world_identity`` the world manifest's hash of the donor, for a world's donor)."""
    return {k: info[k] for k in DONOR_FIELDS if k in info}


def table_for(tables: HelperTables, ctx: Any) -> np.ndarray:
    """The helper's / donor's table that serves the source table the method is called on: its output table when
    the method computes the source's untied output table (``ctx.table == "output"``) and the donor's is untied,
    else its input table (mergekit's rule for OMP's head, llm-cva's for CLP+'s)."""
    if getattr(ctx, "table", "input") == "output" and tables.output is not None:
        return tables.output
    return tables.input


def helper_tables(ctx: Any, p: dict[str, Any], *, who: str) -> HelperTables:
    """The helper's tables for this context: loaded from ``helper_model``, else from the world's donor, else the
    cached helper trained on the world's CPT text (trained now when missing)."""
    tok = ctx.target_tokenizer
    n_t = len(tok)
    if p["helper_model"] is not None:
        tables = _tables_of_folder(Path(p["helper_model"]), n_t, who)
        tables.info.update(donor=DONOR_PARAM, trained=False)
        return tables
    donor = world_donor(ctx.world)
    if donor is not None:
        tables = _tables_of_folder(donor, n_t, who, what="world's donor model")
        entry = (getattr(ctx.world, "manifest", None) or {}).get("donor")
        tables.info.update(donor=DONOR_WORLD, trained=False,
                           world_identity=entry.get("identity") if isinstance(entry, dict) else None)
        return tables
    texts = cpt_texts(ctx.world)
    if not texts:
        raise MissingResourceError(f"method {who!r} trains its helper model on the world's CPT text, and world "
                                   f"{getattr(ctx.world, 'name', '?')!r} has none (or give helper_model)")
    objective = p["helper_objective"]
    if objective == "auto":
        objective = source_objective(ctx.world, ctx.source_tokenizer)
    settings = helper_settings(p, objective, ctx.seed)
    inputs = {"v": HELPER_VERSION, "tokenizer": tokenizer_fingerprint(tok), "vocab": n_t,
              "texts": [[lang, sha256_of(path)] for lang, path in sorted(texts.items())], "settings": settings}

    def train(folder: Path | None) -> tuple[Any, dict[str, Any]]:
        model, curve, meta = train_helper(tok, texts, settings, progress=ctx.progress, log_metric=ctx.log_metric)
        if folder is not None:
            model.save_pretrained(folder / "model")
            (folder / "curve.json").write_text(json.dumps({"loss": curve, **meta}))
        return model, {"curve": curve, **meta}

    root = helper_cache_root(ctx.cache_dir)
    if root is None:
        model, meta = train(None)
        tables = HelperTables(*_tables_of_model(model), info={"trained": True, "cached": False,
                                                              "settings": settings, **_summary(meta)})
        return _trained_info(tables)
    from harness.core.cache import ProductCache

    built: dict[str, Any] = {}

    def build(folder: Path) -> dict[str, Any]:
        t_build = time.perf_counter()
        built["model"], built["meta"] = train(folder)
        built["seconds"] = time.perf_counter() - t_build
        return _summary(built["meta"])

    t_get = time.perf_counter()
    prod = ProductCache(root).get_or_build(HELPER_KIND, inputs, build)
    # the training is this cell's cost, once; waiting for another process's training is not
    own_cost.exclude(own_cost.WAITING, time.perf_counter() - t_get - built.get("seconds", 0.0))
    own_cost.shared(HELPER_KIND, "model" in built, built.get("seconds"))
    if "model" in built:
        tables = HelperTables(*_tables_of_model(built["model"]))
        meta = built["meta"]
    else:
        tables = _tables_of_folder(prod.path / "model", n_t, who)
        meta = json.loads((prod.path / "curve.json").read_text())
        if ctx.log_metric is not None:  # the cached helper's curve, logged with this run too
            for step, loss in meta.get("curve", meta.get("loss", [])):
                ctx.log_metric("helper/loss", float(loss), int(step))
    tables.info.update(path=str(prod.path), key=prod.key, cached=prod.cached, trained="model" in built,
                       settings=settings, **_summary(meta))
    return _trained_info(tables)


def _trained_info(tables: HelperTables) -> HelperTables:
    tables.info.update(donor=DONOR_TRAINED, rows=int(tables.input.shape[0]), dim=int(tables.input.shape[1]),
                       tied=tables.output is None, identity=donor_digest(tables.input, tables.output))
    return tables


def _summary(meta: dict[str, Any]) -> dict[str, Any]:
    curve = meta.get("curve") or meta.get("loss") or []
    return {"seconds": meta.get("seconds"), "tokens": meta.get("tokens"), "sequences": meta.get("sequences"),
            "first_loss": curve[0][1] if curve else None, "final_loss": curve[-1][1] if curve else None}


def _tables_of_model(model: Any) -> tuple[np.ndarray, np.ndarray | None]:
    inp = model.get_input_embeddings().weight.detach().float().cpu()
    out = model.get_output_embeddings()
    tied = out is None or out.weight is model.get_input_embeddings().weight
    return inp.numpy().copy(), None if tied else out.weight.detach().float().cpu().numpy().copy()


def _tables_of_folder(folder: Path, n_t: int, who: str, what: str = "helper_model") -> HelperTables:
    """The tables of a model folder whose rows are indexed by the target tokenizer (:func:`methods.donor.
    read_donor`: padding rows dropped, too few rows refused)."""
    inp, out, info = read_donor(folder, n_t, who=who, what=what)
    return HelperTables(inp, out, info=info)


# -- training -------------------------------------------------------------------------------------------------
def _sequences(tok: Any, texts: dict[str, Path], settings: dict[str, Any]) -> torch.Tensor:
    """The CPT text, every language in code order, tokenized with the target tokenizer, each line closed by the
    end-of-sequence token, cut into rows of ``seq_len - 1`` tokens each opened by the start token."""
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.cls_token_id
    stream: list[int] = []
    for _lang, path in sorted(texts.items()):
        lines = list(read_text_lines(path, settings["max_lines"]))
        for start in range(0, len(lines), 2000):
            for ids in tok(lines[start:start + 2000], add_special_tokens=False)["input_ids"]:
                stream.extend(ids)
                if eos is not None:
                    stream.append(eos)
    width = settings["seq_len"] - (1 if bos is not None else 0)
    n = len(stream) // width
    if n == 0:
        raise MissingResourceError(f"the helper model's training text holds {len(stream)} tokens, fewer than one "
                                   f"sequence of {settings['seq_len']}")
    rows = torch.tensor(stream[: n * width], dtype=torch.long).view(n, width)
    if bos is not None:
        rows = torch.cat([torch.full((n, 1), bos, dtype=torch.long), rows], dim=1)
    return rows


def build_helper(tok: Any, settings: dict[str, Any]) -> Any:
    """An untrained helper of the given kind, sized by ``settings``, for the target tokenizer ``tok``."""
    hidden, heads = settings["hidden"], settings["heads"]
    if hidden % heads:
        raise ConfigError(f"helper_hidden ({hidden}) must be a multiple of helper_heads ({heads})")
    common = dict(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=settings["layers"],
                  num_attention_heads=heads, intermediate_size=4 * hidden, tie_word_embeddings=True,
                  pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    if settings["objective"] == "clm":
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaForCausalLM(LlamaConfig(max_position_embeddings=settings["seq_len"], **common))
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    pad = tok.pad_token_id if tok.pad_token_id is not None else 1
    return XLMRobertaForMaskedLM(XLMRobertaConfig(max_position_embeddings=settings["seq_len"] + pad + 1,
                                                  type_vocab_size=1, **common))


def mask_tokens(ids: torch.Tensor, tok: Any, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of ``ids`` (15 % of the non-special positions; of those 80 % the mask token, 10 % a random
    token, 10 % kept), every draw from ``generator``; returns ``(inputs, labels)`` with -100 where nothing is
    predicted."""
    special = torch.zeros_like(ids, dtype=torch.bool)
    for sid in set(getattr(tok, "all_special_ids", []) or []):
        special |= ids == sid
    chosen = (torch.rand(ids.shape, generator=generator) < 0.15) & ~special
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    action = torch.rand(ids.shape, generator=generator)
    inputs = ids.clone()
    mask_id = tok.mask_token_id if tok.mask_token_id is not None else tok.unk_token_id
    inputs[chosen & (action < 0.8)] = mask_id
    randoms = torch.randint(len(tok), ids.shape, generator=generator)
    swap = chosen & (action >= 0.8) & (action < 0.9)
    inputs[swap] = randoms[swap]
    return inputs, labels


@dataclass
class _Loss:
    loss: torch.Tensor


def masked_loss(model: Any, inputs: torch.Tensor, labels: torch.Tensor) -> _Loss:
    """The masked-LM loss of the helper with the vocabulary projection computed at the masked positions only (the
    same loss as ``model(input_ids, labels=labels).loss``; a 100k-token vocabulary makes the full logits the
    largest cost of a step)."""
    hidden = model.roberta(input_ids=inputs).last_hidden_state
    where = labels != -100
    if not bool(where.any()):
        return _Loss(hidden.sum() * 0.0)
    logits = model.lm_head(hidden[where])
    return _Loss(torch.nn.functional.cross_entropy(logits.float(), labels[where]))


def train_helper(tok: Any, texts: dict[str, Path], settings: dict[str, Any], *, progress: Any = None,
                 log_metric: Any = None) -> tuple[Any, list[list[float]], dict[str, Any]]:
    """Train the helper from scratch; returns ``(model, [[step, loss], ...], meta)``."""
    # the model's initialization and its dropout draw from the global RNG: seeded here, restored after
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings["seed"])
        return _train_helper(tok, texts, settings, progress=progress, log_metric=log_metric)


def _train_helper(tok: Any, texts: dict[str, Path], settings: dict[str, Any], *, progress: Any = None,
                  log_metric: Any = None) -> tuple[Any, list[list[float]], dict[str, Any]]:
    t0 = time.perf_counter()
    rows = _sequences(tok, texts, settings)
    gen = torch.Generator().manual_seed(settings["seed"])
    model = build_helper(tok, settings)
    opt = torch.optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.01)
    steps = settings["steps"]
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm)))
    advance = progress("helper model: training steps", steps) if progress is not None else None
    model.train()
    curve: list[list[float]] = []
    every = max(1, steps // 50)
    running = []
    for step in range(steps):
        batch = rows[torch.randint(len(rows), (settings["batch"],), generator=gen)]
        if settings["objective"] == "clm":
            out = model(input_ids=batch, labels=batch)
        else:
            inputs, labels = mask_tokens(batch, tok, gen)
            out = masked_loss(model, inputs, labels)
        loss = out.loss
        if not torch.isfinite(loss):
            raise RuntimeError(f"helper model training diverged at step {step} (loss {loss.item()}); lower "
                               f"helper_lr")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        running.append(float(loss.item()))
        if (step + 1) % every == 0 or step + 1 == steps:
            value = float(np.mean(running))
            running = []
            curve.append([step + 1, round(value, 6)])
            if log_metric is not None:
                log_metric("helper/loss", value, step + 1)
        if advance is not None:
            advance(1)
    model.eval()
    meta = {"seconds": round(time.perf_counter() - t0, 3), "sequences": int(len(rows)),
            "tokens": int(rows.numel()), "parameters": int(sum(p.numel() for p in model.parameters()))}
    log.info("helper model (%s, %dx%d, %d steps): loss %.3f -> %.3f in %.1fs", settings["objective"],
             settings["layers"], settings["hidden"], steps, curve[0][1], curve[-1][1], meta["seconds"])
    return model, curve, meta


# -- FOCUS's fastText vectors as a donor space ----------------------------------------------------------------
def focus_vectors(ctx: Any) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """FOCUS's token-level fastText vectors of every target token, with the settings ``focus`` has under the run's
    profile, taken from (or trained into) FOCUS's own cache: ``(vectors |V_t| x d, has_vector, info)``. A token
    has a vector when it reached minCount and its vector is not zero (FOCUS's rule)."""
    from methods.fasttext_util import cached_model, in_vocabulary, word_vectors
    from methods.focus import FocusInit, token_corpus
    from methods.multilang import text_files, world_languages
    from methods.params import resolve

    given = FocusInit.profile_defaults(ctx.profile) if ctx.profile else {}
    p = resolve("focus", FocusInit.params, given)
    tok = ctx.target_tokenizer
    texts = text_files(ctx.world)
    wanted = list(p["languages"]) if p["languages"] is not None else world_languages(ctx.world)
    texts = {lang: path for lang, path in texts.items() if lang in wanted}
    if not texts:
        raise MissingResourceError("the donor space 'fasttext' is FOCUS's fastText model, trained on the world's "
                                   "target-language text, and the world has none")
    inputs, write_corpus = token_corpus(tok, texts, p["max_lines"])
    focus_cache = None if ctx.cache_dir is None else Path(ctx.cache_dir).parent / "focus"
    cm = cached_model(focus_cache, "focus-tokens", inputs, FocusInit().fasttext_settings(p, ctx.seed), write_corpus)
    native = tok.convert_ids_to_tokens(list(range(len(tok))))
    x = word_vectors(cm.model, native).astype(np.float32)
    has = in_vocabulary(cm.model, native) & (np.abs(x).sum(axis=1) > 0)
    info = {"path": str(cm.path) if cm.path else None, "key": cm.key, "cached": cm.cached,
            "dim": int(cm.model.get_dimension()), "with_vector": int(has.sum())}
    return x, has, info


def table_digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]


def relative_residual(approx: torch.Tensor, target: torch.Tensor) -> float:
    """Mean over rows of ``|target - approx| / |target|`` (rows of norm 0 left out)."""
    norm = target.norm(dim=1)
    keep = norm > 0
    if not bool(keep.any()):
        return math.nan
    return float(((target - approx).norm(dim=1)[keep] / norm[keep]).mean())
