"""Bits per byte of a masked LM: the pseudo-log-likelihood of every token of each held-out sentence (Salazar et
al. 2020, "Masked Language Model Scoring"), so that an encoder's rows compare with a decoder's ``clm`` bits per
byte on one scale.

Protocol ``mlm-pll``: each sentence of the world's held-out text (the ``mlm`` task's files) is tokenized with the
tokenizer's special tokens; every non-special token is masked in turn (one copy of the sentence per token, the
other tokens left as they are) and scored by the model at that position; an unknown piece (UNK) is a token of
the text and is scored too (a source that reads a script as UNK predicts it cheaply: read the ``counts``). Per
language:

* ``bpb``: the summed negative log-likelihood of all tokens over ``ln 2`` times the sentences' UTF-8 bytes
  (:func:`harness.core.objective.bits_per_byte`);
* ``loss``: the same nats per token (the pseudo-log-likelihood's mean).

It costs one forward pass per token (the head at the masked position only), so the cpu profile scores 50
sentences per language. It is its own task (``mlm-bpb``), beside the ``mlm`` task and its fixed masks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from harness.core.masked_head import masked_logits
from harness.core.objective import utf8_bytes
from harness.core.precision import autocast
from harness.core.registry import TASKS
from harness.worlds.base import read_lines
from tasks.base import DeclaredLanguages, TaskResult, TaskSettings
from tasks.data import TextScores, held_out_settings, length_batches

PROTOCOL = "mlm-pll"
DATA_TASK = "mlm"
PROFILES: dict[str, dict[str, Any]] = {
    "paper": {"max_sentences": 500, "max_length": 512, "batch_size": 64},
    "cpu": {"max_sentences": 50, "max_length": 128, "batch_size": 64},
}


def added_specials(tokenizer: Any) -> set[int]:
    """The special ids a tokenizer adds or pads with (not UNK: an unknown piece is a token of the text)."""
    return set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}


def pll_nats(model: Any, tokenizer: Any, ids: list[list[int]], batch_size: int, device: torch.device,
             precision: str) -> list[float]:
    """The negative pseudo-log-likelihood (nats) of each sequence: every token of the text masked in turn."""
    special = added_specials(tokenizer)
    copies: list[tuple[int, list[int], int]] = []  # (sentence, masked ids, masked position)
    for k, seq in enumerate(ids):
        for p, t in enumerate(seq):
            if t not in special:
                masked = list(seq)
                masked[p] = tokenizer.mask_token_id
                copies.append((k, masked, p))
    out = [0.0] * len(ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    with torch.inference_mode(), autocast(device, precision):
        for batch in length_batches([len(c[1]) for c in copies], batch_size):
            width = max(len(copies[j][1]) for j in batch)
            inp = torch.full((len(batch), width), pad, dtype=torch.long)
            att = torch.zeros_like(inp)
            lab = torch.full_like(inp, -100)
            for r, j in enumerate(batch):
                k, masked, p = copies[j]
                inp[r, : len(masked)] = torch.tensor(masked)
                att[r, : len(masked)] = 1
                lab[r, p] = ids[k][p]
            logits, targets = masked_logits(model, inp.to(device), att.to(device), lab.to(device))
            nll = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none").tolist()
            for r, j in enumerate(batch):  # one selected position per row, in row order
                out[copies[j][0]] += nll[r]
    return out


@TASKS.register("mlm-bpb")
class MaskedLMBitsPerByte(DeclaredLanguages):
    name: ClassVar[str] = "mlm-bpb"
    description: ClassVar[str] = ("bits per byte of a masked LM: pseudo-log-likelihood of every token of each "
                                  "held-out sentence (lower is better; encoder sources)")
    metrics: ClassVar[tuple[str, ...]] = ("bpb", "loss")
    headline: ClassVar[str] = "bpb"
    higher_is_better: ClassVar[bool] = False
    objectives: ClassVar[frozenset[str]] = frozenset({"mlm"})
    language_data: ClassVar[str] = "mlm"  # DATA_TASK: the world's held-out text per language

    def evaluate(self, model: Any, tokenizer: Any, world: Any, languages: list[str],
                 settings: TaskSettings) -> TaskResult:
        cfg = held_out_settings(PROFILES, settings, model, tokenizer, cap_sentences=True)
        device = torch.device(settings.device)
        model.eval()
        out = TextScores(self.metrics)
        special = added_specials(tokenizer)
        for lang in languages:
            lines = read_lines(world.task_dir(DATA_TASK) / f"{lang}.txt")[: cfg["max_sentences"]]
            ids = tokenizer(lines, truncation=True, max_length=int(cfg["max_length"]))["input_ids"]
            # a cut sentence is scored on the text its kept tokens decode to (nats and bytes of the same text)
            texts = [tokenizer.decode(s, skip_special_tokens=True) if len(s) >= cfg["max_length"] else t
                     for s, t in zip(ids, lines, strict=True)]
            nats = pll_nats(model, tokenizer, ids, int(cfg["batch_size"]), device, settings.precision)
            out.add(lang, nats, [float(sum(1 for t in s if t not in special)) for s in ids],
                    [utf8_bytes(t) for t in texts])
        return out.result(world, DATA_TASK, languages, PROTOCOL, cfg)
