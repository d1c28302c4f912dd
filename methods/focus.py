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
   of E_s (App. B, "as done by WECHSEL"): row ``a`` of :func:`methods.shared.fallback_matrix` with
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
(1: reproducible; see :mod:`methods.fasttext_train` for why 10+ trains better and is not reproducible).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.core.errors import MissingResourceError
from harness.core.registry import METHODS
from methods.base import InitContext, InitResult, Method, Reference
from methods.combine import Cosine, SparsemaxTopK, place, weighted_average
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
from methods.params import Param, fasttext_params, fasttext_settings
from methods.shared import FALLBACK_SALT, copy_rows, gaussian_start, overlap_stats

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


def token_corpus(tokenizer: Any, texts: dict[str, Any], max_lines: Any) -> tuple[dict[str, Any], Any]:
    """``(inputs, write_corpus)`` of the token-level fastText corpus of ``texts`` (``{lang: path}``): the inputs that
    key its cached model, and the writer of its lines (each text line as the tokenizer's pieces, space-joined),
    which returns how many lines it wrote. FOCUS trains on it; OMP's fastText donor space reads FOCUS's model."""
    inputs = {"tokenizer": tokenizer_fingerprint(tokenizer), "max_lines": max_lines,
              "texts": [[lang, sha256_of(path)] for lang, path in sorted(texts.items())], "recipe": CORPUS_RECIPE}

    def write_corpus(f: Any) -> int:
        n = 0
        for _lang, path in sorted(texts.items()):
            lines = list(read_text_lines(path, max_lines))
            for start in range(0, len(lines), 2000):
                for tokens in token_strings(tokenizer, lines[start:start + 2000]):
                    if tokens:
                        f.write(" ".join(tokens) + "\n")
                        n += 1
        return n

    return inputs, write_corpus


def focus_combine(new_vectors: torch.Tensor, anchor_vectors: torch.Tensor, anchor_rows: torch.Tensor, *,
                  block_size: int = 1024, sparsemax_k: int = 256, device: str = "cpu",
                  progress: Any = None) -> tuple[torch.Tensor, list[np.ndarray], list[np.ndarray]]:
    """Eq. 2-6: for each row of ``new_vectors``, sparsemax over its cosines to all ``anchor_vectors``, then the
    weighted sum of ``anchor_rows`` (:func:`methods.combine.weighted_average` with a float32
    :class:`~methods.combine.Cosine` and :class:`~methods.combine.SparsemaxTopK`). Returns ``(rows, support
    indices per row, weights per row)``."""
    c = weighted_average(new_vectors, anchor_vectors, anchor_rows, similarity=Cosine(torch.float32),
                         weighting=SparsemaxTopK(sparsemax_k), block_size=block_size, device=device,
                         progress=progress)
    return c.rows, c.supports, c.support_weights


@METHODS.register("focus")
class FocusInit(Method):
    """FOCUS: overlap copied (FOCUS rule), sparsemax combinations of anchor rows in a token-level fastText space."""

    name: ClassVar[str] = "focus"
    description: ClassVar[str] = ("FOCUS: overlap copied (exact, fuzzy for symbols); other tokens a sparsemax-weighted "
                                  "mean of overlapping tokens' source rows by cosine in a token-level fastText "
                                  "trained on target text; per-dimension Gaussian for tokens under minCount")
    requires: ClassVar[frozenset[str]] = frozenset({"target_text"})
    overlap_rule: ClassVar[str] = "focus"
    supports_factorized: ClassVar[bool] = False
    params: ClassVar[tuple[Param, ...]] = (
        *fasttext_params(dim=300, epochs=3, min_count=10, model="cbow", neg=10, minn=3, maxn=6),
        Param("fasttext_model", None, "a trained token-level fastText .bin to use instead of training one", "path"),
        Param("languages", None, "target languages whose text trains fastText (null: all)", "list"),
        Param("max_lines", None, "lines of text per language (null: all)", "int"),
        Param("symbols", "code", "which tokens count as symbols (fuzzy match)", "str", choices=("code", "unicode")),
        Param("overlap", "exact", "overlap match", "str", choices=OVERLAP_MODES),
        Param("specials", "string", "special tokens: by their text (reference) or by role", "str",
              choices=SPECIALS_MODES),
        Param("block_size", 1024, "target rows per similarity block", "int", low=1),
        Param("sparsemax_k", 256, "largest scores sorted per row by the sparsemax", "int", low=1),
        Param("assign_rule", "relative", "how tokens are assigned to languages (report only)", "str"),
        Param("save_weights", False, "write focus_weights.npz (supports and weights)", "bool"),
    )
    # cpu: smaller vectors, one epoch and fewer n-gram buckets (the papers' 2M buckets x 300 dims is 2.4 GB per
    # model), never less text: every method sees all of the world's text (2,000 lines per language left FOCUS
    # falling back to random on 89k of 123k rows). Measured on the bible world (943k lines, seed 1): dim 100 x 3
    # epochs trained for 20-30 minutes of a core; dim 50 x 1 epoch in 2 min 09 s, with the same rows from FOCUS
    # (68,543) and step-0 SR-T acc@10 0.207 (0.203 +- 0.007 over 3 seeds at dim 100 x 3), NER F1 0.198 (0.133)
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "cpu": {"dim": 50, "epochs": 1, "bucket": 200_000, "max_lines": None}}
    init_hours: ClassVar[float] = 0.5
    reference: ClassVar[Reference] = Reference(
        "deepfocus 1.0.1", "on the synthetic world and a real pair (all-MiniLM-L6-v2, French Bible SentencePiece): "
        "the same copies and provenance, copied rows equal, 99.9 % of method rows at cos ≥ 0.999, the token-level "
        "fastText model bit-identical (run by tests/parity/run.sh)",
        ("tests/parity/test_parity.py::test_focus_parity_with_deepfocus",
         "tests/parity/test_realpair.py::test_focus_real_pair",
         "tests/parity/test_realpair.py::test_focus_fasttext_model_is_deepfocus_s"))

    @staticmethod
    def overlap_options(p: dict[str, Any]) -> dict[str, Any]:
        """The ``focus`` overlap rule's options for these parameters (all named: they are the mapping's key)."""
        return {"symbols": p["symbols"], "overlap": p["overlap"], "specials": p["specials"]}

    def fasttext_settings(self, p: dict[str, Any], seed: int) -> dict[str, Any]:
        return fasttext_settings(p, seed)

    def initialize(self, ctx: InitContext) -> InitResult:
        p = self.resolve_params(ctx)
        self.full_dimension_only(ctx)
        mapping = self.mapping(ctx, **self.overlap_options(p))
        tok = ctx.target_tokenizer
        n_t = mapping.target_size

        def bar(label: str, total: int) -> Any:
            return self.bar(ctx, label, total)

        texts, missing = self._texts(ctx, p)
        # 2. the auxiliary token-level fastText model
        model, ft_info = self._token_model(ctx, p, texts)

        # 3. auxiliary vectors of every target token (native strings, as the fastText corpus has them)
        native = tok.convert_ids_to_tokens(list(range(n_t)))
        x = word_vectors(model, native)
        has_vec = in_vocabulary(model, native) & (np.abs(x).sum(axis=1) > 0)

        src = ctx.source_matrix.detach().float().cpu()
        matrix, provenance = gaussian_start(src, n_t, ctx.generator(FALLBACK_SALT))
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
        place(matrix, provenance, new_with_vec, rows)
        copy_rows(matrix, src, mapping, provenance)
        artifacts = self._save_weights(ctx, p, new_with_vec, anchors, supports, weights)

        # per-language report
        counts = language_token_counts(tok, texts, cache_dir=shared_counts_dir(ctx.cache_dir),
                                       max_lines=p["max_lines"])
        assignment = assign_languages(counts, n_t, rule=p["assign_rule"])
        support_sizes = [len(s) for s in supports]
        stats = {
            "overlap": overlap_stats(mapping),
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

    @staticmethod
    def _texts(ctx: InitContext, p: dict[str, Any]) -> tuple[dict[str, Path], dict[str, list[str]]]:
        """The text of each wanted language, and the wanted languages without text."""
        texts = text_files(ctx.world)
        wanted = list(p["languages"]) if p["languages"] is not None else world_languages(ctx.world)
        missing = {lang: ["target_text"] for lang in wanted if lang not in texts}
        texts = {lang: path for lang, path in texts.items() if lang in wanted}
        if not texts and p["fasttext_model"] is None:
            raise MissingResourceError("method 'focus' needs target-language text to train its fastText model, and "
                                       f"the world has none for {wanted}")
        return texts, missing

    def _token_model(self, ctx: InitContext, p: dict[str, Any], texts: dict[str, Path]) -> tuple[Any, dict[str, Any]]:
        """The token-level fastText model (the user's, or trained on the texts tokenized by the target tokenizer,
        cached) and what the report says of it."""
        settings = self.fasttext_settings(p, ctx.seed)
        if p["fasttext_model"] is not None:
            model = load_model(p["fasttext_model"])
            ft_info: dict[str, Any] = {"path": str(p["fasttext_model"]), "trained": False}
        else:
            inputs, write_corpus = token_corpus(ctx.target_tokenizer, texts, p["max_lines"])
            cm = cached_model(ctx.cache_dir, "focus-tokens", inputs, settings, write_corpus)
            model = cm.model
            ft_info = {"path": str(cm.path) if cm.path else None, "cached": cm.cached, "key": cm.key,
                       "trained": not cm.cached}
        ft_info.update(words=len(model.get_words()), dim=int(model.get_dimension()), settings=settings)
        return model, ft_info

    @staticmethod
    def _save_weights(ctx: InitContext, p: dict[str, Any], new_with_vec: np.ndarray, anchors: np.ndarray,
                      supports: list[np.ndarray], weights: list[np.ndarray]) -> dict[str, Path]:
        """``focus_weights.npz`` in the workdir (``save_weights``): each new token's supporting anchors and weights."""
        artifacts: dict[str, Path] = {}
        if p["save_weights"] and ctx.workdir is not None:
            path = Path(ctx.workdir) / "focus_weights.npz"
            lengths = np.array([len(s) for s in supports], dtype=np.int64)
            np.savez_compressed(path, target_ids=new_with_vec, anchor_target_ids=anchors, lengths=lengths,
                                support=np.concatenate(supports) if supports else np.zeros(0, np.int64),
                                weights=np.concatenate(weights) if weights else np.zeros(0, np.float32))
            artifacts["weights"] = path
        return artifacts
