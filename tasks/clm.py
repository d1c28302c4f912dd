"""Held-out causal-LM loss per language, in nats a token and in bits per byte (decoder sources).

Protocol ``clm-rolling-bos`` (as lm-evaluation-harness scores a text's rolling log-likelihood): each held-out
sentence (the world's held-out text, the ``mlm`` task's files) is tokenized without special tokens and preceded by
one beginning token (the tokenizer's BOS, else its EOS, as GPT-2's ``<|endoftext|>``); every token of the text is
predicted from the tokens before it, so all of them are scored and none is masked. Per language:

* ``loss``: the summed next-token cross-entropy over the scored tokens (nats a token, token-weighted);
* ``bpb``: the same nats over ``ln 2`` times the sentences' UTF-8 bytes (:func:`harness.core.objective.bits_per_byte`):
  rows whose tokenizers differ compare on this scale;
* ``ppl``: ``exp(loss)``.

A sentence longer than the model's window is cut at ``max_length`` tokens; its bytes are then those of the text the
kept tokens decode to, so nats and bytes always describe the same text (the count of cut sentences is logged).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from harness.core.objective import utf8_bytes
from harness.core.precision import autocast
from harness.core.registry import TASKS
from harness.worlds.base import read_lines
from tasks.base import DeclaredLanguages, TaskResult, TaskSettings
from tasks.data import TextScores, held_out_settings, length_batches

PROTOCOL = "clm-rolling-bos"
DATA_TASK = "mlm"  # the world's held-out text per language
PROFILES: dict[str, dict[str, Any]] = {
    "paper": {"max_sentences": None, "max_length": 1024, "batch_size": 16},
    "cpu": {"max_sentences": 200, "max_length": 128, "batch_size": 32},
}


def start_id(tokenizer: Any) -> int:
    """The token a text is scored after: BOS, else EOS (GPT-2), else the refusal."""
    for tid in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if isinstance(tid, int) and tid >= 0:
            return tid
    raise ValueError("the tokenizer has neither a BOS nor an EOS token to score a text after")


def scored_texts(tokenizer: Any, lines: list[str], max_length: int) -> tuple[list[list[int]], list[int], int]:
    """(``[start] + text ids`` per sentence, the UTF-8 bytes each scores, how many were cut to ``max_length``)."""
    first = start_id(tokenizer)
    seqs, n_bytes, cut = [], [], 0
    for text, ids in zip(lines, tokenizer(lines, add_special_tokens=False)["input_ids"], strict=True):
        if len(ids) + 1 > max_length:
            ids = ids[: max_length - 1]
            text = tokenizer.decode(ids)
            cut += 1
        seqs.append([first, *ids])
        n_bytes.append(utf8_bytes(text))
    return seqs, n_bytes, cut


HEAD_ROWS = 256  # scored positions whose vocabulary logits are computed at a time


def _split_head(model: Any) -> tuple[Any, Any, float | None] | None:
    """(the body returning the last hidden states, the output layer, the logit soft-cap) of a causal LM whose logits
    are ``cap(head(body(x)))``, as Llama, Qwen 2, Gemma 3 and GPT-2 compute them; None where it has no such parts."""
    body, head = getattr(model, "base_model", None), model.get_output_embeddings()
    if body is None or body is model or head is None:
        return None
    cap = getattr(model.config, "final_logit_softcapping", None)
    return body, head, (float(cap) if cap else None)


def _nats_split(parts: tuple[Any, Any, float | None], ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
    """The summed next-token cross-entropy of each row of the batch, the vocabulary logits computed only at the
    scored positions, :data:`HEAD_ROWS` at a time (a batch's full logits, rows x width x vocabulary in fp32, are
    most of the scoring's memory traffic: 0.9 GB for 32 sentences of 60 tokens and a 122,776-token vocabulary)."""
    body, head, cap = parts
    hidden = body(input_ids=ids, attention_mask=att).last_hidden_state[:, :-1]
    scored = att[:, 1:] == 1
    h, target = hidden[scored], ids[:, 1:][scored]
    row = torch.arange(ids.shape[0], device=ids.device).unsqueeze(1).expand_as(scored)[scored]
    sums = torch.zeros(ids.shape[0], dtype=torch.float32, device=ids.device)
    for i in range(0, h.shape[0], HEAD_ROWS):
        logits = head(h[i:i + HEAD_ROWS]).float()
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        ce = torch.nn.functional.cross_entropy(logits, target[i:i + HEAD_ROWS], reduction="none")
        sums.index_add_(0, row[i:i + HEAD_ROWS], ce)
    return sums


def _nats_full(model: Any, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
    """The same sums from the model's own logits at every position."""
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    target = ids[:, 1:].masked_fill(att[:, 1:] == 0, -100)
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none",
                                             ignore_index=-100).sum(dim=1)


def sentence_nats(model: Any, seqs: list[list[int]], pad_id: int, batch_size: int, device: torch.device,
                  precision: str) -> list[float]:
    """The summed next-token cross-entropy of each sequence's tokens after its first (nats).

    The logits come from the model's body and output layer apart (:func:`_split_head`), computed at the scored
    positions only; the first batch's first sequence is also scored from the model's own logits, and a model whose
    two answers differ by more than 1e-4 of a nat a token (a head this split does not know) is scored from its own
    logits throughout."""
    out = [0.0] * len(seqs)
    parts = _split_head(model)
    with torch.inference_mode(), autocast(device, precision):
        for n, batch in enumerate(length_batches([len(s) for s in seqs], batch_size)):
            width = max(len(seqs[k]) for k in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            att = torch.zeros((len(batch), width), dtype=torch.long)
            for j, k in enumerate(batch):
                ids[j, : len(seqs[k])] = torch.tensor(seqs[k])
                att[j, : len(seqs[k])] = 1
            ids, att = ids.to(device), att.to(device)
            if n == 0 and parts is not None:
                probe = len(seqs[batch[0]])
                one, own = ids[:1, :probe], att[:1, :probe]
                tol = 1e-4 * max(1, probe - 1) * (1 if precision == "fp32" else 100)
                if abs(float(_nats_split(parts, one, own)[0]) - float(_nats_full(model, one, own)[0])) > tol:
                    parts = None
            sums = _nats_split(parts, ids, att) if parts is not None else _nats_full(model, ids, att)
            for k, s in zip(batch, sums.tolist(), strict=True):
                out[k] = s
    return out


@TASKS.register("clm")
class CausalLMLoss(DeclaredLanguages):
    name: ClassVar[str] = "clm"
    description: ClassVar[str] = ("held-out causal-LM loss per language, every token scored after a BOS: nats a "
                                  "token and bits per byte (lower is better; decoder sources)")
    metrics: ClassVar[tuple[str, ...]] = ("bpb", "loss", "ppl")
    headline: ClassVar[str] = "bpb"
    higher_is_better: ClassVar[bool] = False
    objectives: ClassVar[frozenset[str]] = frozenset({"clm"})
    language_data: ClassVar[str] = "mlm"  # DATA_TASK: the world's held-out text per language
    # the held-out diagnostic after CPT steps for a decoder (as the mlm task's loss is for an encoder)
    heldout_metric: ClassVar[str] = "loss"

    def heldout(self, model: Any, tokenizer: Any, world: Any, languages: list[str],
                settings: TaskSettings) -> float | None:
        return self.evaluate(model, tokenizer, world, languages, settings).averages().get(self.heldout_metric)

    def evaluate(self, model: Any, tokenizer: Any, world: Any, languages: list[str],
                 settings: TaskSettings) -> TaskResult:
        cfg = held_out_settings(PROFILES, settings, model, tokenizer)
        device = torch.device(settings.device)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start_id(tokenizer)
        model.eval()
        out = TextScores(self.metrics)
        for lang in languages:
            lines = read_lines(world.task_dir(DATA_TASK) / f"{lang}.txt")[: cfg["max_sentences"]]
            seqs, n_bytes, cut = scored_texts(tokenizer, lines, int(cfg["max_length"]))
            nats = sentence_nats(model, seqs, pad_id, int(cfg["batch_size"]), device, settings.precision)
            out.add(lang, nats, [float(len(s) - 1) for s in seqs], n_bytes, cut=cut)
        return out.result(world, DATA_TASK, languages, PROTOCOL, cfg)
