"""Held-out masked-LM loss per language, with fixed masks (spec §3.5, "harness recommendation").

The masks are drawn once per (language, sentence) from a generator seeded by the task seed and the language, on
the token ids of the world's target tokenizer, so the same model always scores the same and every method is scored on
exactly the same masked positions. Masking follows BERT: 15% of the non-special positions are selected (at least
one per sentence); of those 80% become ``<mask>``, 10% a random token, 10% stay. The loss is the mean cross-entropy
over all selected positions of the language (token-weighted), reported as ``loss`` and ``ppl`` = exp(loss).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, ClassVar

import torch

from harness.core.masked_head import masked_logits
from harness.core.precision import autocast
from harness.core.registry import TASKS
from harness.worlds.base import read_lines
from tasks.base import DeclaredLanguages, ItemStats, TaskResult, TaskSettings
from tasks.data import length_batches, max_input_length

PROFILES: dict[str, dict[str, Any]] = {
    "paper": {"max_sentences": None, "max_length": 512, "batch_size": 32, "mlm_probability": 0.15},
    "cpu": {"max_sentences": 200, "max_length": 128, "batch_size": 32, "mlm_probability": 0.15},
}


def _lang_seed(seed: int, lang: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{lang}".encode()).digest()[:8], "little")


def fixed_masks(input_ids: list[list[int]], special_ids: set[int], vocab_size: int, mask_id: int,
                probability: float, seed: int) -> list[tuple[list[int], list[int]]]:
    """(masked input ids, labels with -100 at unselected positions) for each sentence, deterministic in ``seed``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for ids in input_ids:
        ids_t = torch.tensor(ids)
        candidates = torch.tensor([i for i, t in enumerate(ids) if t not in special_ids], dtype=torch.long)
        labels = torch.full_like(ids_t, -100)
        if len(candidates) == 0:
            out.append((ids, labels.tolist()))
            continue
        n = max(1, round(probability * len(candidates)))
        chosen = candidates[torch.randperm(len(candidates), generator=g)[:n]]
        labels[chosen] = ids_t[chosen]
        masked = ids_t.clone()
        u = torch.rand(len(chosen), generator=g)
        rand_tok = torch.randint(0, vocab_size, (len(chosen),), generator=g)
        masked[chosen[u < 0.8]] = mask_id
        swap = (u >= 0.8) & (u < 0.9)
        masked[chosen[swap]] = rand_tok[swap]
        out.append((masked.tolist(), labels.tolist()))
    return out


@TASKS.register("mlm")
class MLMLoss(DeclaredLanguages):
    name: ClassVar[str] = "mlm"
    description: ClassVar[str] = "held-out masked-LM loss per language with fixed masks (lower is better)"
    metrics: ClassVar[tuple[str, ...]] = ("loss", "ppl")
    headline: ClassVar[str] = "loss"
    higher_is_better: ClassVar[bool] = False
    objectives: ClassVar[frozenset[str]] = frozenset({"mlm"})  # masked LMs only (a decoder's is the clm task)
    # the held-out MLM loss, the CPT diagnostic the runner measures at every evaluated CPT step: when this task
    # runs at that step, its ``loss`` average is that figure (else :meth:`heldout` measures it on its own budget)
    heldout_metric: ClassVar[str] = "loss"

    def heldout(self, model: Any, tokenizer: Any, world: Any, languages: list[str],
                settings: TaskSettings) -> float | None:
        """The held-out MLM loss averaged over ``languages`` (the diagnostic after CPT steps)."""
        return self.evaluate(model, tokenizer, world, languages, settings).averages().get(self.heldout_metric)

    def evaluate(self, model: Any, tokenizer: Any, world: Any, languages: list[str],
                 settings: TaskSettings) -> TaskResult:
        cfg = {**PROFILES.get(settings.profile, PROFILES["cpu"]), **settings.params}
        if settings.max_sentences is not None:
            cfg["max_sentences"] = settings.max_sentences
        # the longest sentence the model takes (the paper profile's 512 on a model with fewer positions), logged
        cfg["max_length"] = max_input_length(model, tokenizer, int(cfg["max_length"]))
        special = set(tokenizer.all_special_ids)
        vocab_size = len(tokenizer)
        device = torch.device(settings.device)
        model.eval()
        loss_by_lang, ppl_by_lang, counts = {}, {}, {}
        items: dict[str, dict[str, ItemStats]] = {}
        for lang in languages:
            lines = read_lines(world.task_dir(self.name) / f"{lang}.txt")
            if cfg["max_sentences"]:
                lines = lines[: cfg["max_sentences"]]
            enc = tokenizer(lines, truncation=True, max_length=cfg["max_length"])["input_ids"]
            pairs = fixed_masks(enc, special, vocab_size, tokenizer.mask_token_id, cfg["mlm_probability"],
                                _lang_seed(settings.seed, lang))
            total, n_tok = 0.0, 0
            sent_loss: list[float] = [0.0] * len(pairs)
            sent_tok: list[float] = [0.0] * len(pairs)
            with torch.inference_mode(), autocast(device, settings.precision):
                # batches of similar length (less padding); the per-sentence sums go back to their sentences
                for batch in length_batches([len(p[0]) for p in pairs], cfg["batch_size"]):
                    chunk = [pairs[k] for k in batch]
                    width = max(len(p[0]) for p in chunk)
                    ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
                    labels = torch.full((len(chunk), width), -100, dtype=torch.long)
                    att = torch.zeros((len(chunk), width), dtype=torch.long)
                    for j, (m, lab) in enumerate(chunk):
                        ids[j, : len(m)] = torch.tensor(m)
                        labels[j, : len(lab)] = torch.tensor(lab)
                        att[j, : len(m)] = 1
                    lab = labels.to(device)
                    # the head at the selected positions only (masked_head): the loss of the full forward
                    logits, targets = masked_logits(model, ids.to(device), att.to(device), lab)
                    ce = torch.zeros(lab.shape, dtype=torch.float32, device=device)
                    ce[lab != -100] = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")
                    for k, s_loss, s_tok in zip(batch, ce.sum(dim=1).tolist(),
                                                (lab != -100).sum(dim=1).float().tolist(), strict=True):
                        sent_loss[k], sent_tok[k] = s_loss, s_tok
                    total += float(ce.sum())
                    n_tok += int((lab != -100).sum())
            loss = total / max(n_tok, 1)
            loss_by_lang[lang] = loss
            ppl_by_lang[lang] = math.exp(min(loss, 50.0))
            counts[lang] = {"sentences": len(lines), "masked_tokens": n_tok}
            items.setdefault("loss", {})[lang] = ItemStats(sent_loss, sent_tok)
            items.setdefault("ppl", {})[lang] = ItemStats(sent_loss, sent_tok, transform="exp")
        meta = world.task_meta(self.name).get("languages", {})
        return TaskResult(scores={"loss": loss_by_lang, "ppl": ppl_by_lang}, extras={"counts": counts, "hyperparameters": {
            "max_length": cfg["max_length"], "max_sentences": cfg["max_sentences"],
            "mlm_probability": cfg["mlm_probability"]}}, items=items,
                          label_source={lang: meta.get(lang, {}).get("label_source", "gold") for lang in languages})
