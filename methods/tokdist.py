"""Token Distillation (Dobler, Elliott & de Melo, ICLR 2026; spec ``methods-2026.md`` §3): each new token's input
row learned so that the frozen source model, reading a snippet with the token's source pieces merged into the one
new id, gives the hidden states it gives on the original pieces.

The harness's path, the paper's (``paper/apply_embedding_init.py`` with ``init_method="token_distillation"``):

1. **Pre-init**: the harness's FVT (:class:`methods.fvt.FVTInit`): shared tokens copied under the ``ofa`` rule,
   every other token the mean of the source rows of its source tokenization ``p(w)`` (:func:`methods.fvt
   .source_pieces`, the token spelled in its word position).
2. **Snippets** from the world's CPT text (``resources/cpt/*.txt``): each file tokenized by the source tokenizer
   (no special tokens), its lines joined into one document; every occurrence of ``p(w)`` as a subsequence of ids
   (word-internal matches included, as the reference's Aho-Corasick finds them) gives a window of ``snippet_len``
   ids centred on it (``floor((L - n) / 2)`` before, shifted at the document's edges; only full windows), in
   corpus order; the first ``snippets`` are kept, with BOS (or CLS) prepended.
3. **Distillation**: every kept snippet of every distilled token pooled; the student input is the snippet with
   every pattern merged, greedy longest match from the left over all patterns (:func:`merge_snippets`, the
   reference's ``transform_input_token_format``); the loss the MSE between the student's last hidden states and
   the teacher's at the unmerged positions and the last piece of each merged span; AdamW (lr 1e-4, no weight
   decay), a linear schedule with warm-up over half the steps, ``batch_size`` 16, one epoch, the last incomplete
   batch dropped (:func:`distill`). Only the new rows are parameters: the source rows cannot change.
4. Tokens with fewer than ``snippets`` full windows, those beyond the budget (``max_tokens``, the most frequent
   first), those the source spells as one piece and those merged in no step (another pattern swallows theirs)
   keep their FVT row; each is reported (``method_stats.routes``
   and ``artifacts/tokdist_routes.jsonl``: every non-copied token with its route and snippet count), none dropped.

Deviations from the reference, each named: the model runs in eval mode (no dropout; the reference's
``model.train()`` draws dropout masks from the global RNG in both passes), unless ``dropout`` is set (then with a
seeded RNG); the batch order is a permutation from ``ctx.generator`` instead of the global RNG after
``seed_everything(42)``; the backbone (``AutoModel``) is run, not the LM head, whose logits the loss does not use;
the first ``snippets`` full windows are taken from every occurrence in the text, not from the first 150 found.
The ``cpu`` profile distills a named budget of tokens with fewer snippets (``profiles``): at the paper's settings
a CPU needs hours.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.core.errors import ConfigError, HarnessError
from harness.core.registry import METHODS
from methods.base import InitContext, InitResult, Method, Provenance, Reference, TokenMapping
from methods.canonical import detect_kind
from methods.fvt import FVTInit, source_pieces
from methods.overlap import SPECIAL_PREFIX
from methods.params import Param

log = logging.getLogger(__name__)

ORDER_SALT = 0x70D15  # ctx.generator(salt) for the order of the snippets
DROPOUT_SALT = 0x70D16  # the dropout masks when ``dropout`` is set
OFFSET_BEFORE, OFFSET_AFTER = 50, 150  # the reference's snippet bounds around a match (paper/ahocorasick.py)


# -- snippets ----------------------------------------------------------------------------------------------------
def find_windows(docs: Sequence[Sequence[int]], patterns: dict[tuple[int, ...], int], length: int,
                 wanted: int) -> tuple[dict[int, list[list[int]]], dict[int, int]]:
    """The first ``wanted`` full windows of ``length`` ids around each pattern's occurrences in ``docs`` (in
    corpus order), and each pattern's number of occurrences. ``patterns``: pattern -> key. Every occurrence
    counts, overlapping ones and those inside longer matches included (the reference's overlapping
    Aho-Corasick)."""
    by_len: dict[int, dict[tuple[int, ...], int]] = {}
    for pat, key in patterns.items():
        by_len.setdefault(len(pat), {})[tuple(pat)] = key
    lengths = sorted(by_len)
    firsts = {pat[0] for pat in patterns}
    windows: dict[int, list[list[int]]] = {key: [] for key in patterns.values()}
    counts: dict[int, int] = dict.fromkeys(patterns.values(), 0)
    for doc in docs:
        doc = list(doc)
        size = len(doc)
        for start, tok in enumerate(doc):
            if tok not in firsts:
                continue
            for n in lengths:  # one look-up per pattern length, however many patterns share the first id
                key = by_len[n].get(tuple(doc[start:start + n]))
                if key is None:
                    continue
                counts[key] += 1
                if len(windows[key]) >= wanted:
                    continue
                w = window(doc, start, n, length, size)
                if w is not None:
                    windows[key].append(w)
    return windows, counts


def window(doc: Sequence[int], start: int, n: int, length: int, size: int) -> list[int] | None:
    """The window of ``length`` ids around the match ``doc[start:start + n]``, as the reference cuts it
    (``paper/apply_embedding_init.py``: half the other ids before, shifted at the bounds of its snippet, which
    reaches ``OFFSET_BEFORE`` ids before the match and ``OFFSET_AFTER`` after); None when it is not full."""
    if n > length:
        return None
    rest = length - n
    can_before = min(OFFSET_BEFORE, start)
    can_after = min(OFFSET_AFTER, size - start - n)
    before = max(0, rest // 2)
    after = rest - before
    if after > can_after:
        before, after = rest - can_after, can_after
    if before > can_before:
        before, after = can_before, rest - can_before
    piece = list(doc[start - before:start + n + after])
    return piece[:length] if len(piece) >= length else None


# -- the reference's two functions, written from the spec (§3.3) ------------------------------------------------
def merge_snippets(snippets: Iterable[Sequence[int]], patterns: dict[tuple[int, ...], int],
                   pad_id: int) -> list[dict[str, list[int]]]:
    """Each snippet with every pattern merged into its new id: greedy longest match from the left over all
    ``patterns`` (pattern -> new id); ``merged_seq`` right-padded with ``pad_id`` to the snippet's length,
    ``original_seq`` the snippet, ``unmerged_to_merged_mask`` 1 at each unmerged id and at the last id of each
    merged span (the teacher positions the student's positions line up with)."""
    longest = max(len(p) for p in patterns)
    by_len: list[dict[tuple[int, ...], int]] = [{} for _ in range(longest + 1)]
    for pat, new_id in patterns.items():
        by_len[len(pat)][tuple(pat)] = new_id
    out = []
    for snippet in snippets:
        text = [int(t) for t in snippet]
        merged: list[int] = []
        mask = [0] * len(text)
        i = 0
        while i < len(text):
            for n in range(min(longest, len(text) - i), 0, -1):
                new_id = by_len[n].get(tuple(text[i:i + n]))
                if new_id is not None:
                    merged.append(new_id)
                    mask[i + n - 1] = 1
                    i += n
                    break
            else:
                merged.append(text[i])
                mask[i] = 1
                i += 1
        out.append({"merged_seq": merged + [pad_id] * (len(text) - len(merged)), "original_seq": text,
                    "unmerged_to_merged_mask": mask})
    return out


class ExtendedEmbedding(torch.nn.Module):
    """The source's input table, frozen, followed by the new rows, the only parameter: id ``n + j`` is new row
    ``j``. The model's own position logic sees the ids (RoBERTa's positions skip its padding id)."""

    def __init__(self, base: torch.nn.Embedding, new_rows: torch.Tensor):
        super().__init__()
        self.base = base
        self.n = int(base.weight.shape[0])
        self.new = torch.nn.Parameter(new_rows.detach().clone().to(base.weight.dtype))

    @property
    def weight(self) -> torch.Tensor:  # what models read of their input table (its dtype, its device)
        return self.base.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        is_new = (ids >= self.n).unsqueeze(-1)
        old = torch.nn.functional.embedding(ids.clamp(max=self.n - 1), self.base.weight)
        new = torch.nn.functional.embedding((ids - self.n).clamp(min=0), self.new)
        return torch.where(is_new, new, old)


def linear_warmup(step: int, warmup: int, total: int) -> float:
    """HF's ``linear`` schedule: from 0 up to 1 over ``warmup`` steps, then down to 0 at ``total``."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def batches_of(n: int, batch_size: int, epochs: int, generator: torch.Generator) -> list[list[int]]:
    """A shuffled order of ``n`` samples per epoch, cut into full batches (the last incomplete one dropped)."""
    out = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator).tolist()
        out += [perm[i:i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]
    return out


def distill(backbone: torch.nn.Module, new_rows: torch.Tensor, samples: list[dict[str, list[int]]],
            batches: list[list[int]], *, lr: float = 1e-4, warmup_share: float = 0.5, target_layer: int = -1,
            steps_per_epoch: int | None = None, epochs: int = 1, train_mode: bool = False,
            on_step: Callable[[int, float], None] | None = None) -> tuple[torch.Tensor, list[float]]:
    """Learn ``new_rows`` (ids ``n, n + 1, ...`` after the backbone's ``n`` input rows) by distillation on
    ``samples`` (:func:`merge_snippets`), one optimizer step per batch of ``batches`` (sample indices); the
    reference's ``train_embeddings`` with ``loss_methods=["MSE-on-hiddens"]``, original rows protected. The
    backbone is left as it was. Returns the rows and each step's loss."""
    base = backbone.get_input_embeddings()
    ext = ExtendedEmbedding(base, new_rows)
    frozen = [(p, p.requires_grad) for p in backbone.parameters()]
    for p, _ in frozen:
        p.requires_grad_(False)
    was_training = backbone.training
    backbone.set_input_embeddings(ext)
    backbone.train(train_mode)
    try:
        opt = torch.optim.AdamW([ext.new], lr=lr, weight_decay=0.0)
        per_epoch = steps_per_epoch if steps_per_epoch is not None else len(batches) // max(1, epochs)
        warmup, total = int(warmup_share * per_epoch), epochs * per_epoch
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: linear_warmup(s, warmup, total))
        losses = []
        for step, batch in enumerate(batches):
            merged = torch.tensor([samples[i]["merged_seq"] for i in batch])
            original = torch.tensor([samples[i]["original_seq"] for i in batch])
            mask = torch.tensor([samples[i]["unmerged_to_merged_mask"] for i in batch]).bool()
            # the student's real positions: the first sum(mask) of each row (pads follow), whatever the pad id
            n_real = mask.sum(dim=1, keepdim=True)
            student_pos = torch.arange(merged.shape[1]).unsqueeze(0) < n_real
            h_s = backbone(merged, output_hidden_states=True).hidden_states[target_layer].float()
            with torch.no_grad():
                h_t = backbone(original, output_hidden_states=True).hidden_states[target_layer].float()
            loss = torch.nn.functional.mse_loss(h_s[student_pos], h_t[mask])
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(float(loss.item()))
            if on_step is not None:
                on_step(step, losses[-1])
        return ext.new.detach().clone(), losses
    finally:
        backbone.set_input_embeddings(base)
        backbone.train(was_training)
        for p, flag in frozen:
            p.requires_grad_(flag)


def _budget_ok(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


# -- the method --------------------------------------------------------------------------------------------------
@METHODS.register("tokdist")
class TokenDistillationInit(Method):
    """Token Distillation: FVT pre-init, then each new token's row distilled from the frozen source model."""

    name: ClassVar[str] = "tokdist"
    description: ClassVar[str] = ("Token Distillation (Dobler et al. 2026): FVT, then each new token's row "
                                  "learned so that the frozen source model's last hidden states on CPT snippets "
                                  "match those of its source pieces; needs the source model itself and CPT text "
                                  "(cpu profile: the 300 most frequent new tokens, 8 snippets each)")
    requires: ClassVar[frozenset[str]] = frozenset({"cpt_text"})
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = False
    # an untied output table is not distilled (the loss never reaches it): the paper zeroes its new rows
    # (untied_output = "zero"), "method" gives them the input side's rows
    serves_untied_output: ClassVar[bool] = False
    needs: ClassVar[tuple[str, ...]] = ("the source model",)  # run on CPT snippets, not only its table
    params = (
        Param("snippets", 25, "snippets per token (fewer full windows in the text: the token keeps its FVT row)",
              "int", low=1),
        Param("snippet_len", 50, "ids per snippet, centred on the token's pieces (BOS/CLS prepended)", "int", low=2),
        Param("batch_size", 16, "snippets per optimizer step (all tokens' snippets pooled and shuffled)", "int",
              low=1),
        Param("lr", 1e-4, "AdamW learning rate (no weight decay; linear schedule, warm-up half of epoch 1)",
              "float", above=0),
        Param("epochs", 1, "passes over the snippets", "int", low=1),
        Param("max_tokens", None, "distill only the most frequent new tokens in the CPT text (null: all); the "
              "others keep their FVT row, reported", "int", check=_budget_ok, expect="an integer >= 1"),
        Param("target_layer", -1, "hidden states matched (-1: the last; 0 is the embedding output)", "int"),
        Param("dropout", False, "run the model in train mode (dropout on, seeded) as the reference does", "bool",
              choices=(False, True)),
        Param("max_lines", None, "CPT lines read per language file (null: all)", "int", low=1),
    )
    # cpu: a named budget, the most frequent new tokens with fewer snippets (benchmarks/bench_methods_2026.py
    # times the paper's settings and this budget)
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"cpu": {"max_tokens": 300, "snippets": 8}}
    # spec §3.6: ~3,000 tokens x 25 snippets / 16 = 4,687 steps of a 135M model, minutes on a GPU
    init_hours: ClassVar[float] = 0.2
    reference: ClassVar[Reference] = Reference(
        "konstantinjdobler/token-distillation@ac9ef2c",
        "transform_input_token_format identical on hand-made snippets; train_embeddings on a tiny random Llama: "
        "every step's loss to 1e-6, the new rows after the last step to 1e-5, original rows bit for bit",
        ("tests/parity/test_tokdist_parity.py",))

    def initialize(self, ctx: InitContext) -> InitResult:
        p = self.resolve_params(ctx)
        self.full_dimension_only(ctx)
        if ctx.source_model is None:
            raise ConfigError("tokdist needs the source model itself (InitContext.source_model), not only its "
                              "embedding table; run it through the harness (harness init / run)")
        if p["snippet_len"] < 2:
            raise ConfigError("tokdist: snippet_len must be >= 2")
        base = FVTInit().initialize(InitContext(**{**ctx.__dict__, "params": {}}))
        matrix, provenance = base.matrix.clone(), base.provenance.copy()
        mapping = self.mapping(ctx)
        routes, patterns = self._candidates(ctx.source_tokenizer, mapping, provenance)

        t0 = time.perf_counter()
        docs = self.documents(ctx, p)
        windows, counts = find_windows(docs, patterns, int(p["snippet_len"]), int(p["snippets"]))
        mining_s = time.perf_counter() - t0
        chosen = self._choose(p, patterns, windows, counts, routes)
        losses: list[float] = []
        train_s = 0.0
        n_steps = 0
        if chosen:
            losses, n_steps, train_s = self._distill_chosen(ctx, p, chosen, patterns, windows, matrix, routes)

        route_counts = self._route_counts(p, routes)
        artifacts = self._write_routes(ctx, mapping, routes)
        budget = p["max_tokens"]
        stats = {**base.stats, "routes": dict(sorted(route_counts.items())),
                 "distilled": route_counts.get("distilled", 0), "chosen": len(chosen),
                 "budget": {"max_tokens": budget, "snippets": int(p["snippets"]),
                            "snippet_len": int(p["snippet_len"])},
                 "steps": n_steps, "loss_first": losses[0] if losses else None,
                 "loss_last": losses[-1] if losses else None,
                 "loss_mean_last10": float(np.mean(losses[-10:])) if losses else None,
                 "seconds": {"mining": round(mining_s, 3), "training": round(train_s, 3)},
                 "cpt_tokens": int(sum(len(d) for d in docs)),
                 "train_mode": bool(p["dropout"])}
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(base.copy), stats=stats,
                          artifacts=artifacts)

    @staticmethod
    def _candidates(st: Any, mapping: TokenMapping, provenance: np.ndarray
                    ) -> tuple[dict[int, dict[str, Any]], dict[tuple[int, ...], int]]:
        """Every FVT-initialized new token's route so far, and the source pieces of those that could be distilled
        (spelled in two pieces or more, the first target token spelled so) -> their target id."""
        kind = detect_kind(st)
        routes: dict[int, dict[str, Any]] = {}
        patterns: dict[tuple[int, ...], int] = {}  # source pieces -> the first target id spelled so
        for tid, canonical in enumerate(mapping.target_tokens):
            if tid in mapping.copy or canonical.startswith(SPECIAL_PREFIX) or provenance[tid] != Provenance.METHOD:
                continue
            ids = tuple(source_pieces(st, kind, canonical))
            if len(ids) < 2:
                routes[tid] = {"route": "fvt_single_piece", "pieces": list(ids)}
                continue
            if ids in patterns:  # two target tokens spelled alike (a case variant): the second keeps FVT
                routes[tid] = {"route": "fvt_same_pieces", "pieces": list(ids), "as": patterns[ids]}
                continue
            patterns[ids] = tid
            routes[tid] = {"route": None, "pieces": list(ids)}
        return routes, patterns

    @staticmethod
    def _choose(p: dict[str, Any], patterns: dict[tuple[int, ...], int], windows: dict[int, list[list[int]]],
                counts: dict[int, int], routes: dict[int, dict[str, Any]]) -> list[tuple[int, ...]]:
        """The patterns to distill: those with ``snippets`` full windows, the most frequent first, up to the
        ``max_tokens`` budget; the others' routes say why not."""
        enough = []
        for pat, tid in patterns.items():
            routes[tid]["occurrences"] = counts[tid]
            routes[tid]["snippets"] = len(windows[tid])
            if len(windows[tid]) < int(p["snippets"]):
                routes[tid]["route"] = "fvt_too_few_snippets"
            else:
                enough.append(pat)
        enough.sort(key=lambda pat: (-counts[patterns[pat]], patterns[pat]))  # the most frequent first
        budget = p["max_tokens"]
        chosen = enough if budget is None else enough[:int(budget)]
        for pat in enough[len(chosen):]:
            routes[patterns[pat]]["route"] = "fvt_over_budget"
        return chosen

    def _distill_chosen(self, ctx: InitContext, p: dict[str, Any], chosen: list[tuple[int, ...]],
                        patterns: dict[tuple[int, ...], int], windows: dict[int, list[list[int]]],
                        matrix: torch.Tensor, routes: dict[int, dict[str, Any]]) -> tuple[list[float], int, float]:
        """Distil the chosen tokens' rows on their snippets (merged into the student's input) into ``matrix``;
        (the losses, the steps, the training seconds)."""
        st = ctx.source_tokenizer
        bos = st.bos_token_id if st.bos_token_id is not None else st.cls_token_id
        prefix = [] if bos is None else [int(bos)]
        model = ctx.source_model()
        layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
        if layers and not -(layers + 1) <= int(p["target_layer"]) <= layers:
            raise ConfigError(f"tokdist: target_layer {p['target_layer']} is outside the source model's hidden "
                              f"states (-{layers + 1} to {layers}); give one in that range, or -1 (the last)")
        n_rows = int(model.get_input_embeddings().weight.shape[0])
        new_id = {pat: n_rows + j for j, pat in enumerate(chosen)}
        pad = st.pad_token_id if st.pad_token_id is not None else st.eos_token_id
        if pad is None:
            pad = 0  # the student's positions are counted, not found by the pad id (spec §3.8)
        snippets = [prefix + w for pat in chosen for w in windows[patterns[pat]]]
        samples = merge_snippets(snippets, new_id, int(pad))
        batches = batches_of(len(samples), int(p["batch_size"]), int(p["epochs"]),
                             ctx.generator(ORDER_SALT))
        n_steps = len(batches)
        init_rows = torch.stack([matrix[patterns[pat]] for pat in chosen])
        bar = self.bar(ctx, "Token Distillation: steps", n_steps)

        def on_step(step: int, loss: float) -> None:
            if bar is not None:
                bar(1)
            if ctx.log_metric is not None and (step % 10 == 0 or step == n_steps - 1):
                ctx.log_metric("tokdist/loss", loss, step)

        t1 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=ctx.generator(DROPOUT_SALT))))
            rows, losses = distill(
                model.to(ctx.device), init_rows.to(ctx.device), samples, batches, lr=float(p["lr"]),
                target_layer=int(p["target_layer"]), epochs=int(p["epochs"]),
                steps_per_epoch=n_steps // int(p["epochs"]), train_mode=bool(p["dropout"]), on_step=on_step)
        train_s = time.perf_counter() - t1
        if not torch.isfinite(rows).all():
            raise HarnessError("tokdist: the distilled rows are not finite; lower lr")
        # a token merged in no step (a pattern another one always swallows, greedy from the left, or whose
        # snippets fell in the dropped last batch) had no gradient: its row is FVT's, and it is said so
        seen = {t for b in batches for i in b for t in samples[i]["merged_seq"] if t >= n_rows}
        for j, pat in enumerate(chosen):
            tid = patterns[pat]
            if n_rows + j in seen:
                matrix[tid] = rows[j].float().cpu()
                routes[tid]["route"] = "distilled"
            else:
                routes[tid]["route"] = "fvt_never_merged"
        del model
        return losses, n_steps, train_s

    @staticmethod
    def _route_counts(p: dict[str, Any], routes: dict[int, dict[str, Any]]) -> dict[str, int]:
        route_counts: dict[str, int] = {}
        for info in routes.values():
            route_counts[info["route"]] = route_counts.get(info["route"], 0) + 1
        if route_counts.get("fvt_too_few_snippets"):
            log.warning("tokdist: %d new tokens have fewer than %d snippets of %d ids in the CPT text; they keep "
                        "their FVT rows (artifacts/tokdist_routes.jsonl)", route_counts["fvt_too_few_snippets"],
                        p["snippets"], p["snippet_len"])
        return route_counts

    @staticmethod
    def _write_routes(ctx: InitContext, mapping: TokenMapping, routes: dict[int, dict[str, Any]]
                      ) -> dict[str, Path]:
        """``tokdist_routes.jsonl`` in the workdir: every reported token, its route and snippet count."""
        artifacts: dict[str, Path] = {}
        if ctx.workdir is not None:
            path = Path(ctx.workdir) / "tokdist_routes.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for tid in sorted(routes):
                    f.write(json.dumps({"id": tid, "token": mapping.target_tokens[tid], **routes[tid]},
                                       ensure_ascii=False) + "\n")
            artifacts["routes"] = path
        return artifacts

    @staticmethod
    def documents(ctx: InitContext, p: dict[str, Any]) -> list[list[int]]:
        """Each CPT file of the world as one document of source ids (its lines tokenized without special tokens,
        joined in order)."""
        files = ctx.world.resource_files("cpt_text") if ctx.world is not None else []
        if not files:
            raise ConfigError("tokdist needs the world's CPT text (resources/cpt/*.txt) to mine snippets from")
        docs = []
        limit = p["max_lines"]
        for path in files:
            with open(path, encoding="utf-8") as f:
                lines = [ln.rstrip("\n") for i, ln in enumerate(f) if limit is None or i < limit]
            lines = [ln for ln in lines if ln.strip()]
            doc: list[int] = []
            for start in range(0, len(lines), 1024):
                enc = ctx.source_tokenizer(lines[start:start + 1024], add_special_tokens=False)["input_ids"]
                for ids in enc:
                    doc += ids
            docs.append(doc)
        return docs


def steps_at(n_tokens: int, snippets: int, batch_size: int, epochs: int = 1) -> int:
    """Optimizer steps of a run that distills ``n_tokens`` with ``snippets`` each."""
    return epochs * math.floor(n_tokens * snippets / batch_size)
