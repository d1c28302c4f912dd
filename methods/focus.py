"""FOCUS (Dobler & de Melo, EMNLP 2023; spec ``methods.md`` §2.4, reference code ``konstantinjdobler/focus``).

1. **Overlap** (``focus`` rule, paper setting: exact match including case and the beginning-of-word marker, fuzzy
   match only for number/punctuation/whitespace tokens; special tokens are ordinary tokens matched by their text,
   and count as symbols). Overlapping target tokens copy their source row (Eq. 1).
2. **Auxiliary embeddings**: a token-level fastText model trained on the world's target-language text tokenized
   with the *target* tokenizer (every language's text, in code order, one sentence per line, tokens joined by
   spaces; the native token strings, ``▁`` included, as ``tokenizer.tokenize`` gives them, which is how the
   reference code writes them: a piece the vocabulary lacks keeps its surface text, so ``<unk>`` itself gets a
   vector only if the text holds the string; empty lines are left out). Paper settings (App. B):
   dim 300, 3 epochs, minCount 10; CBOW with 10 negatives as the reference code (its comment: "more closely
   aligned with MLM"), other settings fastText's defaults (minn 3, maxn 6, lr 0.05, ws 5, bucket 2M). The model
   is cached (see :mod:`methods.fasttext_util`); ``fasttext_model`` uses a prebuilt one instead.
3. A target token *has* an auxiliary vector when it is in the fastText vocabulary (it reached minCount) and its
   vector is not all zero (the reference code's ``is_very_rare_token``).
4. **Anchors**: the overlapping tokens with an auxiliary vector. Overlapping tokens without one are still copied
   but are not anchors (reference code).
5. For every additional (non-overlapping) token ``a`` with a vector: cosine similarity to **every** anchor (Eq.
   2-3), ``w = sparsemax(c_a)`` over the raw cosines (Eq. 4-5: no temperature, no top-k), and
   ``e_t[a] = sum_o w_o e_s[o]``, a convex combination of the anchors' **pretrained source** rows (Eq. 6).
6. Additional tokens without a vector (and all of them when there is no anchor) get the per-dimension Gaussian
   of E_s (App. B, "as done by WECHSEL"): row ``a`` of :func:`methods.random_init.fallback_matrix` with
   ``ctx.generator(0)``, the same draw as ``random``. The reference code draws ``torch.normal(mean, std)`` with
   the unbiased std and ``torch.Generator().manual_seed(42)``; WECHSEL (whose fallback the paper names) uses the
   population std, as we do. Fallback rows are random either way and are not compared in the parity test.

Which reference it follows. By default the overlap is ``deepfocus``'s (``get_overlapping_tokens`` with
``exact_match_all=True, match_symbols=True, fuzzy_match_all=False``, the paper's setting): canonical strings
compared exactly, case-sensitively, whatever the source's normalizer; special tokens matched by their text like any
other token (so a BERT source's ``[CLS]`` never copies into an XLM-R-style ``<s>``); a target special token that
does not match is an additional token like any other: a FOCUS row when it has a vector (fastText's end-of-line
token ``</s>`` always has one; ``<unk>`` has one when the text produces it), else the Gaussian. The parity tests
(``tests/parity``) check this row by row against ``deepfocus`` on a real uncased English WordPiece source and a
real SentencePiece target.

Where it departs, on request (a run that sets them logs them as ``method.overlap`` / ``method.specials``):

* ``overlap="casefold"``: for an uncased source (its normalizer lowercases and strips accents), the target's
  strings are folded the same way before the comparison, because the source model only ever saw folded text
  (``▁The`` copies ``the``). ``deepfocus`` copies fewer tokens here and initializes those by FOCUS.
* ``specials="role"``: special tokens are copied by role (``[CLS]`` -> ``<s>``, ``[SEP]`` -> ``</s>``, ...),
  never by text; a copied ``</s>`` with a fastText vector is then an anchor carrying ``[SEP]``'s row.

Paper vs code (pinned by the parity test): the reference code defaults to ``fasttext_model_dim=100`` and
``match_symbols=False`` (no fuzzy matching of symbol tokens); the paper uses dim 300 and fuzzy symbol matching. We
follow the paper. The other code-only settings we keep (CBOW, neg 10) fill gaps the paper leaves ("mostly default
hyper-parameters"). The fallback draw differs (step 6), and we compute the similarities in blocks with a
partial sort for sparsemax; neither changes a FOCUS row beyond float rounding.

Vocabulary extension: the reference code's extension mode trains fastText with the language-specific tokenizer
and restricts anchors to tokens of that tokenizer. A harness world has one target tokenizer (the extended one), so
FOCUS runs as in its replacement setting on that tokenizer: fastText on text tokenized with it, every overlapping
token with a vector an anchor. Many languages: FOCUS needs no per-language protocol (one fastText over all
languages' text); ``stats["per_language"]`` still reports the provenance counts per language, with tokens assigned
to languages as in :mod:`methods.multilang`, and ``stats["missing"]`` the languages without text.

Parameters (``ctx.params``): ``dim`` (300), ``epochs`` (3), ``min_count`` (10), ``model`` ("cbow"), ``neg`` (10),
``minn`` (3), ``maxn`` (6), ``bucket`` (2,000,000), ``lr`` (0.05), ``fasttext_seed`` (0, fastText's default, so
the model is shared across run seeds; ``null`` ties it to the run's seed), ``fasttext_model`` (path of a prebuilt
token-level fastText ``.bin``: skips training), ``languages`` (text languages to train on; ``null`` = all),
``max_lines`` (per language; ``null`` = all), ``symbols`` ("code": the reference code's symbol test, or "unicode",
see :func:`methods.overlap.is_symbol_token`), ``overlap`` ("exact": ``deepfocus``'s case-sensitive match, or
"casefold", see above), ``specials`` ("string": ``deepfocus``'s, or "role"), ``block_size`` (1024 additional
tokens per similarity block), ``sparsemax_k`` (256: rows are sorted only to this depth, exact either way), ``assign_rule`` ("relative"),
``save_weights`` (write every method row's anchors and weights to ``ctx.workdir/focus_weights.npz``), ``threads``
(1: reproducible; see :mod:`methods.fasttext_util` for why 10+ trains better and is not reproducible).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.errors import ConfigError, MissingResourceError
from harness.registry import METHODS
from methods.base import InitContext, InitResult, Provenance
from methods.fasttext_util import (
    cached_model,
    in_vocabulary,
    load_model,
    read_text_lines,
    sha256_of,
    tokenizer_fingerprint,
    word_vectors,
)
from methods.multilang import (
    assign_languages,
    language_token_counts,
    per_language_counts,
    shared_counts_dir,
    text_files,
    world_languages,
)
from methods.overlap import OVERLAP_MODES, SPECIALS_MODES
from methods.random_init import FALLBACK_SALT, check_mapping, copy_rows, fallback_matrix
from methods.sparsemax import sparsemax_topk

log = logging.getLogger(__name__)


CORPUS_RECIPE = "tokenize-v2"  # how the fastText corpus is written (part of the model's cache key)


def token_strings(tokenizer: Any, lines: list[str]) -> list[list[str]]:
    """Each line as ``tokenizer.tokenize(line)`` gives it, which is how ``deepfocus`` writes its fastText corpus:
    the token strings, except that a piece the vocabulary lacks keeps its surface text (``Z``) instead of the unknown
    token's string (``<unk>``)."""
    enc = tokenizer(lines, add_special_tokens=False)
    if getattr(enc, "encodings", None):
        return [enc.tokens(i) for i in range(len(lines))]
    return [tokenizer.tokenize(line) for line in lines]


def _normalize(x: torch.Tensor) -> torch.Tensor:
    norm = x.norm(dim=1, keepdim=True)
    return torch.where(norm > 0, x / norm.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


def focus_combine(new_vectors: torch.Tensor, anchor_vectors: torch.Tensor, anchor_rows: torch.Tensor, *,
                  block_size: int = 1024, sparsemax_k: int = 256, device: str = "cpu",
                  progress: Any = None) -> tuple[torch.Tensor, list[np.ndarray], list[np.ndarray]]:
    """Eq. 2-6: for each row of ``new_vectors``, sparsemax over its cosines to all ``anchor_vectors``, then the
    weighted sum of ``anchor_rows``. Returns ``(rows, support indices per row, weights per row)``."""
    n, d = new_vectors.shape[0], anchor_rows.shape[1]
    out = torch.empty((n, d), dtype=anchor_rows.dtype)
    supports: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    if n == 0:
        return out, supports, weights
    anchors = _normalize(anchor_vectors.to(device, torch.float32))
    rows = anchor_rows.to(device, torch.float32)
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        sims = _normalize(new_vectors[start:stop].to(device, torch.float32)) @ anchors.T
        w = sparsemax_topk(sims, k=sparsemax_k)
        out[start:stop] = (w @ rows).to("cpu", anchor_rows.dtype)
        w_cpu = w.cpu()
        r_idx, c_idx = torch.nonzero(w_cpu > 0, as_tuple=True)  # row-major: each row's support in anchor order
        cuts = np.cumsum(torch.bincount(r_idx, minlength=stop - start).numpy())[:-1]
        supports.extend(np.split(c_idx.numpy(), cuts))
        weights.extend(np.split(w_cpu[r_idx, c_idx].numpy(), cuts))
        if progress is not None:
            progress(stop - start)
    return out, supports, weights


@METHODS.register("focus")
class FocusInit:
    """FOCUS: overlap copied (FOCUS rule), sparsemax combinations of anchor rows in a token-level fastText space."""

    name: ClassVar[str] = "focus"
    description: ClassVar[str] = ("FOCUS: overlap copied (exact, fuzzy for symbols); other tokens a sparsemax-weighted "
                                  "mean of overlapping tokens' source rows by cosine in a token-level fastText "
                                  "trained on target text; per-dimension Gaussian for tokens under minCount")
    requires: ClassVar[frozenset[str]] = frozenset({"target_text"})
    overlap_rule: ClassVar[str] = "focus"
    supports_factorized: ClassVar[bool] = False
    defaults: ClassVar[dict[str, Any]] = {
        "dim": 300, "epochs": 3, "min_count": 10, "model": "cbow", "neg": 10, "minn": 3, "maxn": 6,
        "bucket": 2_000_000, "lr": 0.05, "fasttext_seed": 0, "fasttext_model": None, "languages": None,
        "max_lines": None, "symbols": "code", "overlap": "exact", "specials": "string", "block_size": 1024, "sparsemax_k": 256, "assign_rule": "relative",
        "save_weights": False, "threads": 1,
    }

    def _params(self, ctx: InitContext) -> dict[str, Any]:
        unknown = set(ctx.params) - set(self.defaults)
        if unknown:
            raise ConfigError(f"method 'focus' has no parameter(s) {sorted(unknown)}; it takes "
                              f"{sorted(self.defaults)}")
        p = {**self.defaults, **ctx.params}
        for key in ("dim", "epochs", "min_count", "block_size", "sparsemax_k", "threads"):
            if int(p[key]) < 1:
                raise ConfigError(f"focus: {key} must be >= 1, not {p[key]}")
        if p["model"] not in ("cbow", "skipgram"):
            raise ConfigError(f"focus: model must be 'cbow' or 'skipgram', not {p['model']!r}")
        if p["overlap"] not in OVERLAP_MODES:
            raise ConfigError(f"focus: overlap must be one of {list(OVERLAP_MODES)}, not {p['overlap']!r}")
        if p["specials"] not in SPECIALS_MODES:
            raise ConfigError(f"focus: specials must be one of {list(SPECIALS_MODES)}, not {p['specials']!r}")
        if p["symbols"] not in ("code", "unicode"):
            raise ConfigError(f"focus: symbols must be 'code' or 'unicode', not {p['symbols']!r}")
        return p

    @staticmethod
    def overlap_options(p: dict[str, Any]) -> dict[str, Any]:
        """The ``focus`` overlap rule's options for these parameters (all named: they are the mapping's key)."""
        return {"symbols": p["symbols"], "overlap": p["overlap"], "specials": p["specials"]}

    def fasttext_settings(self, p: dict[str, Any], seed: int) -> dict[str, Any]:
        return {"model": p["model"], "dim": int(p["dim"]), "epoch": int(p["epochs"]), "minCount": int(p["min_count"]),
                "neg": int(p["neg"]), "minn": int(p["minn"]), "maxn": int(p["maxn"]), "bucket": int(p["bucket"]),
                "lr": float(p["lr"]), "seed": int(seed if p["fasttext_seed"] is None else p["fasttext_seed"]),
                "thread": int(p["threads"])}

    def initialize(self, ctx: InitContext) -> InitResult:
        p = self._params(ctx)
        if ctx.factorized:
            raise ConfigError("focus is defined on full-dimension embeddings (spec Appendix B); use dim: null")
        mapping = ctx.mapping_for(self.overlap_rule, **self.overlap_options(p))
        check_mapping(ctx, mapping)
        tok = ctx.target_tokenizer
        n_t = mapping.target_size

        def bar(label: str, total: int) -> Any:
            return ctx.progress(label, total) if ctx.progress is not None else None

        texts = text_files(ctx.world)
        wanted = list(p["languages"]) if p["languages"] is not None else world_languages(ctx.world)
        missing = {lang: ["target_text"] for lang in wanted if lang not in texts}
        texts = {lang: path for lang, path in texts.items() if lang in wanted}
        if not texts and p["fasttext_model"] is None:
            raise MissingResourceError("method 'focus' needs target-language text to train its fastText model, and "
                                       f"the world has none for {wanted}")

        # 2. the auxiliary token-level fastText model
        settings = self.fasttext_settings(p, ctx.seed)
        if p["fasttext_model"] is not None:
            model = load_model(p["fasttext_model"])
            ft_info: dict[str, Any] = {"path": str(p["fasttext_model"]), "trained": False}
        else:
            inputs = {"tokenizer": tokenizer_fingerprint(tok), "max_lines": p["max_lines"],
                      "texts": [[lang, sha256_of(path)] for lang, path in sorted(texts.items())],
                      "recipe": CORPUS_RECIPE}

            def write_corpus(f: Any) -> int:
                n = 0
                for _lang, path in sorted(texts.items()):
                    lines = list(read_text_lines(path, p["max_lines"]))
                    for start in range(0, len(lines), 2000):
                        for tokens in token_strings(tok, lines[start:start + 2000]):
                            if tokens:
                                f.write(" ".join(tokens) + "\n")
                                n += 1
                return n

            cm = cached_model(ctx.cache_dir, "focus-tokens", inputs, settings, write_corpus)
            model = cm.model
            ft_info = {"path": str(cm.path) if cm.path else None, "cached": cm.cached, "key": cm.key,
                       "trained": not cm.cached}
        ft_info.update(words=len(model.get_words()), dim=int(model.get_dimension()), settings=settings)

        # 3. auxiliary vectors of every target token (native strings, as the fastText corpus has them)
        native = tok.convert_ids_to_tokens(list(range(n_t)))
        x = word_vectors(model, native)
        has_vec = in_vocabulary(model, native) & (np.abs(x).sum(axis=1) > 0)

        src = ctx.source_matrix.detach().float().cpu()
        matrix = fallback_matrix(src, n_t, ctx.generator(FALLBACK_SALT))
        provenance = np.full(n_t, Provenance.RANDOM, dtype=np.int8)
        copied = np.zeros(n_t, dtype=bool)
        copied[list(mapping.copy)] = True
        anchors = np.array([t for t in sorted(mapping.copy) if has_vec[t]], dtype=np.int64)
        new_with_vec = np.flatnonzero(~copied & has_vec)
        if len(anchors) == 0 and len(new_with_vec):
            log.warning("focus: no overlapping token has a fastText vector; all %d additional tokens fall back to "
                        "the Gaussian", len(new_with_vec))
            new_with_vec = np.zeros(0, dtype=np.int64)
        anchor_src = torch.tensor([mapping.copy[int(t)] for t in anchors], dtype=torch.long)
        rows, supports, weights = focus_combine(
            torch.from_numpy(x[new_with_vec]), torch.from_numpy(x[anchors]), src[anchor_src],
            block_size=int(p["block_size"]), sparsemax_k=int(p["sparsemax_k"]), device=ctx.device,
            progress=bar("FOCUS: sparsemax combinations", len(new_with_vec)))
        if len(new_with_vec):
            matrix[torch.from_numpy(new_with_vec)] = rows
            provenance[new_with_vec] = Provenance.METHOD
        copy_rows(matrix, src, mapping, provenance)

        artifacts: dict[str, Path] = {}
        if p["save_weights"] and ctx.workdir is not None:
            path = Path(ctx.workdir) / "focus_weights.npz"
            lengths = np.array([len(s) for s in supports], dtype=np.int64)
            np.savez_compressed(path, target_ids=new_with_vec, anchor_target_ids=anchors, lengths=lengths,
                                support=np.concatenate(supports) if supports else np.zeros(0, np.int64),
                                weights=np.concatenate(weights) if weights else np.zeros(0, np.float32))
            artifacts["weights"] = path

        # per-language report
        counts = language_token_counts(tok, texts, cache_dir=shared_counts_dir(ctx.cache_dir),
                                       max_lines=p["max_lines"])
        assignment = assign_languages(counts, n_t, rule=p["assign_rule"])
        support_sizes = [len(s) for s in supports]
        stats = {
            "overlap": {k: v for k, v in mapping.stats.items() if k != "unk"},
            "fasttext": ft_info,
            "anchors": int(len(anchors)),
            "overlap_without_vector": int(copied.sum() - len(anchors)),
            "additional": int((~copied).sum()),
            "additional_with_vector": int(len(new_with_vec)),
            "additional_without_vector": int((~copied).sum() - len(new_with_vec)),
            "mean_support": float(np.mean(support_sizes)) if support_sizes else None,
            "max_support": int(max(support_sizes)) if support_sizes else None,
            "mean_top_weight": float(np.mean([w.max() for w in weights])) if weights else None,
            "fallback": "per-dimension normal, mean/std (ddof=0) of E_s",
            "languages": sorted(texts),
            "per_language": per_language_counts(assignment.lang_of, provenance, assignment.languages),
            "assignment": {"rule": assignment.rule, "min_count": assignment.min_count},
            "missing": missing,
        }
        return InitResult(matrix=matrix, provenance=provenance, copy=dict(mapping.copy), stats=stats,
                          artifacts=artifacts)
