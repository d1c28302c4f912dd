"""Tik-to-Tok (Remy, Delobelle et al., "Translating Language Models One Token at a Time"; seed 004, spec
``methods.md`` §2.6): the dictionary + bilingual fastText version. The parallel-corpus / fast_align variant
("trans-tokenization", §2.7) is out of scope.

Per target language ``L`` with a word translation dictionary ``pivot -> L``:

1. **Symmetric bigram corpus** (§3.1). Every dictionary pair ``(s, t)`` becomes the four two-word lines
   ``T(t) T(t)``, ``T(t) S(s)``, ``S(s) T(t)``, ``S(s) S(s)``, so a word is paired equally often with itself and
   with its translation. ``S(w)`` / ``T(w)`` put the source / target language tag before *and* after the word
   (tags: ``source_tag`` "Ⓢ", ``target_tag`` "Ⓣ", characters that do not occur in text). **Compound
   augmentation** (``compound_augmentation``, default on as in all of the seed's experiments): the same four
   lines again with both words carrying only the start tag, and again with only the end tag ("partial
   compounds"). Exact duplicate pairs are dropped, pairs with whitespace inside a word are skipped (the seed has
   no way to use multiword expressions), and the lines are shuffled with ``fasttext_seed`` (fastText reads its
   corpus in order and decays the learning rate along it).
2. **fastText** (§3.2): skip-gram, minn 4, maxn 7, dim 64, 5 epochs, other settings fastText's defaults except
   minCount = 1: "all words from both languages are included in the fastText output space", and a word occurs
   only 4 times per pair in the corpus, under fastText's default minCount of 5. Cached.
3. **Token matching** (§3.3), in this order:

   a. non-alphabetic target tokens (``tiktotok`` overlap rule): shared with the source -> the source row is
      reused (copied); not shared -> the source **UNK** row. Special tokens are copied by role.
   b. word-start tokens whose word (the token without its beginning-of-word marker, exact string) is a target
      word of the dictionary: its translations, **sorted by frequency** (``frequency="source_text"``: how often
      the translation occurs as a word in the source-language text, ties in dictionary order;
      ``"dictionary"``: dictionary order), each represented by its **first source sub-token** (which is the
      translation itself when it is one source token; a bare beginning-of-word marker that SentencePiece emits
      before an unknown first character is skipped, and a translation whose tokenization is only UNK is
      dropped). Candidates are the translations, so two translations with the same first sub-token give that
      row two weights.
   c. every other alphabetic token (in-word tokens; word-start tokens not in the dictionary; alphabetic tokens
      the source shares -- no false friends such as "of"): its fastText vector "after prepending and/or
      appending the language tags, as appropriate for that token" (``tag_policy="bow"``: a word-start token
      gets the start tag, an in-word token the end tag -- the two partial forms the compound augmentation
      trains; ``"start"``: only word-start tokens get a (start) tag; ``"none"``: no tags), the 3 best source
      tokens by cosine (source tokens embedded the same way with the source tag; special tokens and tokens
      with a zero vector are not candidates). A target token whose vector is zero (no known n-gram) takes the
      UNK row.

4. **Weights** (§3.3) over a ranked list of ``n`` candidates: 30% extra to the first, 10% extra to the second,
   60% spread evenly over all ``n``: ``(0.3 + 0.6/n, 0.1 + 0.6/n, 0.6/n, ...)``; for ``n = 1`` the formula gives
   0.9, and the seed is silent, so the single candidate gets ``single_weight`` = 1.0 (a convex combination,
   as for every other n). ``e_t = sum_k w_k e_s[k]`` (float64, stored as float32).
5. No random rows anywhere ("Tik-to-Tok initializes all embeddings using the source model").

Many target languages (:mod:`methods.multilang`): each token goes through the dictionary and fastText model of
the language that uses it most. Tokens assigned to the **source language** itself (the pivot;
``source_language="identity"``): the translation of a source-language word is the word itself, so an alphabetic
token that the source vocabulary has (exact canonical string) is copied (the false-friend argument does not apply
within one language); every other one follows the rules above with the identity dictionary (a word-start token
translates to its own word, represented by the word's first source sub-token) and, for in-word tokens, a fastText
model trained the same way on the identity pairs ``(s, s)`` of all source-side dictionary words (both sides with
the source tag). ``source_language="none"`` treats them as tokens of no language. Alphabetic tokens of no
language, or of a language without a dictionary, take the UNK row (Tik-to-Tok's only fallback).

Parameters (``ctx.params``): ``dim`` (64), ``epochs`` (5), ``minn`` (4), ``maxn`` (7), ``min_count`` (1),
``model`` ("skipgram"), ``bucket`` (2,000,000), ``lr`` (0.05), ``fasttext_seed`` (0), ``threads`` (1),
``neighbors`` (3), ``weights`` ([0.3, 0.1, 0.6]: first bonus, second bonus, even share), ``single_weight``
(1.0), ``source_tag`` ("Ⓢ"), ``target_tag`` ("Ⓣ"), ``tag_policy`` ("bow"), ``compound_augmentation`` (true),
``shuffle`` (true), ``frequency`` ("source_text"), ``source_language`` ("identity"), ``languages`` (``null`` =
all), ``max_lines`` (``null``), ``assign_rule`` ("relative"), ``assign_min_count`` (1), ``block_size`` (1024),
``save_plan`` (write every row's route, source ids and weights to ``ctx.workdir/tiktotok_plan.jsonl``),
``max_pairs`` (``null`` = all: the dictionary pairs a language's fastText corpus is built from; when set, the
pairs whose target word is most frequent in the language's text are kept (for the source-language space, the
source words most frequent in the pivot text), ties in dictionary order. Seed 004 trains on the whole dictionary;
the ``cpu`` profile caps it because a skip-gram over a 100k-pair dictionary's bigram corpus takes minutes per
language on one thread. The dictionary route itself always uses every pair), ``workers`` (``null`` = the CPUs
available: how many fastText spaces train side by side, each in its own single-threaded process; it changes the
time, never the result).
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.registry import METHODS
from methods.base import InitContext, InitResult, Method, Provenance, Reference, TokenMapping
from methods.canonical import detect_kind
from methods.combine import Cosine, RankWeights
from methods.fasttext_util import (
    TrainJob,
    cached_model,
    prefetch_models,
    read_text_lines,
    split_words,
    word_vectors,
)
from methods.multilang import (
    assign_languages,
    dictionary_files,
    dictionary_for,
    language_token_counts,
    per_language_counts,
    read_dictionary,
    shared_counts_dir,
    text_files,
    world_languages,
)
from methods.overlap import SPECIAL_PREFIX
from methods.params import Param, fasttext_params, fasttext_settings

log = logging.getLogger(__name__)
CORPUS_RECIPE = "tiktotok-bigrams-v1"
TAG_POLICIES = ("bow", "start", "none")
ROUTES = ("copy", "unk", "dictionary", "fasttext")


def tag_word(text: str, tag: str, *, start: bool, end: bool) -> str:
    return (tag if start else "") + text + (tag if end else "")


def token_form(canonical: str, tag: str, policy: str) -> str:
    """A token's string for the fastText model (see ``tag_policy`` in the module docstring)."""
    bow = canonical.startswith(" ")
    text = canonical[1:] if bow else canonical
    if policy == "bow":
        return tag_word(text, tag, start=bow, end=not bow)
    if policy == "start":
        return tag_word(text, tag, start=bow, end=False)
    if policy == "none":
        return text
    raise ConfigError(f"tiktotok: tag_policy must be one of {TAG_POLICIES}, not {policy!r}")


def clean_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Dictionary pairs without exact duplicates and without words that contain whitespace."""
    seen: set[tuple[str, str]] = set()
    out = []
    for s, t in pairs:
        if not s or not t or any(c.isspace() for c in s + t) or (s, t) in seen:
            continue
        seen.add((s, t))
        out.append((s, t))
    return out


def top_pairs(pairs: list[tuple[str, str]], freq: Counter[str], side: int,
              limit: int | None) -> list[tuple[str, str]]:
    """At most ``limit`` pairs: those whose word on ``side`` (0 source, 1 target) is most frequent in ``freq``,
    ties in the given order; the kept pairs stay in the given order. ``limit=None`` keeps them all."""
    if limit is None or len(pairs) <= int(limit):
        return pairs
    order = sorted(range(len(pairs)), key=lambda k: (-freq[pairs[k][side]], k))
    return [pairs[k] for k in sorted(order[:int(limit)])]


def bigram_corpus(pairs: list[tuple[str, str]], source_tag: str, target_tag: str, *,
                  compound_augmentation: bool = True, shuffle_seed: int | None = 0) -> list[str]:
    """The symmetric bigram corpus of ``(source_word, target_word)`` pairs (see the module docstring)."""
    variants = [(True, True)] + ([(True, False), (False, True)] if compound_augmentation else [])
    lines: list[str] = []
    for s, t in pairs:
        for start, end in variants:
            a = tag_word(t, target_tag, start=start, end=end)
            b = tag_word(s, source_tag, start=start, end=end)
            lines += [f"{a} {a}", f"{a} {b}", f"{b} {a}", f"{b} {b}"]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(lines)
    return lines


@dataclass
class RowPlan:
    """How every target row is built: ``route[i]`` and the weighted source ids (``None``: not planned yet)."""

    n: int
    route: list[str | None] = field(default_factory=list)
    sources: list[list[int]] = field(default_factory=list)
    weights: list[list[float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.route:
            self.route = [None] * self.n
            self.sources = [[] for _ in range(self.n)]
            self.weights = [[] for _ in range(self.n)]

    def set(self, i: int, route: str, sources: list[int], weights: list[float]) -> None:
        self.route[i] = route
        self.sources[i] = [int(s) for s in sources]
        self.weights[i] = [float(w) for w in weights]

    def matrix(self, source: torch.Tensor) -> torch.Tensor:
        src = source.detach().cpu().double()
        out = torch.zeros((self.n, src.shape[1]), dtype=torch.float64)
        for i in range(self.n):
            if self.sources[i]:
                out[i] = torch.tensor(self.weights[i], dtype=torch.float64) @ src[self.sources[i]]
        return out.to(source.dtype)


class FastTextSpace:
    """One bilingual fastText model and the source tokens embedded in it (the candidates of route c)."""

    def __init__(self, model: Any, source_canonical: list[str], source_tag: str, policy: str):
        self.model = model
        self.policy = policy
        cand = [i for i, c in enumerate(source_canonical) if not c.startswith(SPECIAL_PREFIX)]
        vecs = word_vectors(model, [token_form(source_canonical[i], source_tag, policy) for i in cand])
        keep = np.abs(vecs).sum(axis=1) > 0
        self.source_ids = np.array(cand, dtype=np.int64)[keep]
        self.source_vectors = torch.from_numpy(vecs[keep]).double()

    def nearest(self, canonical: list[str], tag: str, k: int, block_size: int = 1024
                ) -> list[tuple[list[int], list[float]] | None]:
        """Top-``k`` source ids (best first) and cosines for each token (float64 :class:`methods.combine.Cosine`,
        ``torch.topk``'s order); ``None`` for a zero vector."""
        vecs = torch.from_numpy(word_vectors(self.model, [token_form(c, tag, self.policy) for c in canonical]))
        vecs = vecs.double()
        out: list[tuple[list[int], list[float]] | None] = []
        k = min(k, len(self.source_ids))
        cosine = Cosine(torch.float64, ties="topk")
        cosine.prepare(vecs, self.source_vectors, "cpu")
        zero = (vecs.norm(dim=1) == 0).tolist()
        for start in range(0, len(canonical), block_size):
            stop = min(start + block_size, len(canonical))
            vals, idx = cosine.top(start, stop, k) if k > 0 else (None, None)
            for r in range(stop - start):
                if zero[start + r] or k == 0:
                    out.append(None)
                else:
                    out.append((self.source_ids[idx[r].numpy()].tolist(), vals[r].tolist()))
        return out


class _SourceSide:
    """The source side of a plan, looked up as the routes need it: the pivot, the UNK id, the source tokens
    (canonical; exact strings of the non-special ones), source-word frequencies in the pivot's text (to rank
    translations), each word's first source sub-token, each language's word frequencies (for ``max_pairs``) and
    the dictionary pairs its fastText space is trained on (each computed once)."""

    def __init__(self, ctx: InitContext, p: dict[str, Any], pivot: str, unk_id: int, texts: dict[str, Path],
                 dicts: dict[str, list[tuple[str, str]]], canonical: list[str]):
        self.tokenizer = ctx.source_tokenizer
        self.p, self.pivot, self.unk_id, self.texts, self.dicts = p, pivot, unk_id, texts, dicts
        self.freq: Counter[str] = Counter()  # frequencies of source words (for sorting translations)
        if p["frequency"] == "source_text" and pivot in texts:
            for line in read_text_lines(texts[pivot], p["max_lines"]):
                self.freq.update(split_words(line))
        self.canonical = canonical
        self.exact = {c: i for i, c in enumerate(canonical) if not c.startswith(SPECIAL_PREFIX)}
        self.kind = detect_kind(ctx.source_tokenizer)
        self.source_words = sorted({s for pairs in dicts.values() for s, _ in pairs})
        self._first: dict[str, int | None] = {}
        self._word_freqs: dict[str, Counter[str]] = {}
        self._pairs: dict[str, list[tuple[str, str]]] = {}

    def first_token(self, word: str) -> int | None:
        if word not in self._first:
            text = " " + word if self.kind == "bytelevel" else word
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            toks = [i for i in ids if self.canonical[i] != " "]  # skip a bare beginning-of-word marker
            self._first[word] = toks[0] if toks and toks[0] != self.unk_id else None
        return self._first[word]

    def word_freq(self, lang: str) -> Counter[str]:
        if lang not in self._word_freqs:
            c: Counter[str] = Counter()
            if self.p["max_pairs"] is not None and lang in self.texts:
                for line in read_text_lines(self.texts[lang], self.p["max_lines"]):
                    c.update(split_words(line))
            self._word_freqs[lang] = c
        return self._word_freqs[lang]

    def space_pairs(self, lang: str) -> list[tuple[str, str]]:  # once per language: the prefetch and the loop
        if lang not in self._pairs:
            self._pairs[lang] = (
                top_pairs([(s, s) for s in self.source_words], self.word_freq(self.pivot), 0, self.p["max_pairs"])
                if lang == self.pivot else top_pairs(self.dicts[lang], self.word_freq(lang), 1, self.p["max_pairs"]))
        return self._pairs[lang]


@METHODS.register("tiktotok")
class TikToTokInit(Method):
    """Tik-to-Tok (seed 004): dictionary translations, else 3 nearest source tokens in a bilingual fastText."""

    name: ClassVar[str] = "tiktotok"
    description: ClassVar[str] = ("Tik-to-Tok (dictionary + bilingual fastText): shared non-alphabetic tokens copied, "
                                  "unshared ones UNK; dictionary words the ranked mean of their translations, other "
                                  "tokens of their 3 nearest source tokens (30/10/60 weights); no random rows")
    requires: ClassVar[frozenset[str]] = frozenset({"dictionary", "target_text"})
    overlap_rule: ClassVar[str] = "tiktotok"
    supports_factorized: ClassVar[bool] = False
    params: ClassVar[tuple[Param, ...]] = (
        *fasttext_params(dim=64, epochs=5, min_count=1, model="skipgram", minn=4, maxn=7),
        Param("neighbors", 3, "nearest source tokens of a token without a dictionary entry", "int", low=1),
        Param("weights", [0.3, 0.1, 0.6], "rank weights [first, second, share]", "list",
              check=lambda w: len(w) == 3 and all(float(x) >= 0 for x in w),
              expect="three non-negative numbers [first, second, share]"),
        Param("single_weight", 1.0, "the weight of a single candidate", "float"),
        Param("source_tag", "Ⓢ", "tag around source words in the bigram corpus", "str"),
        Param("target_tag", "Ⓣ", "tag around target words in the bigram corpus", "str"),
        Param("tag_policy", "bow", "where a token's tag goes", "str", choices=TAG_POLICIES),
        Param("compound_augmentation", True, "add the partial-compound lines", "bool"),
        Param("shuffle", True, "shuffle the corpus with fasttext_seed", "bool"),
        Param("frequency", "source_text", "how translations are ranked", "str",
              choices=("source_text", "dictionary")),
        Param("source_language", "identity", "the source language's own tokens", "str",
              choices=("identity", "none")),
        Param("languages", None, "target languages (null: all of the world's)", "list"),
        Param("max_lines", None, "lines of text per language (null: all)", "int"),
        Param("assign_rule", "relative", "how tokens are assigned to languages", "str"),
        Param("assign_min_count", 1, "occurrences a token needs to be assigned to a language", "int"),
        Param("block_size", 1024, "target rows per similarity block", "int", low=1),
        Param("save_plan", False, "write tiktotok_plan.jsonl (route, sources, weights of every row)", "bool"),
        Param("max_pairs", None, "dictionary pairs per language, most frequent first (null: all)", "int", low=1),
        Param("workers", None, "fastText models trained side by side (null: the CPUs available)", "int"),
    )
    # cpu: smaller vectors, one epoch and fewer n-gram buckets for the 23 bilingual models, every dictionary pair
    # and line of text. Measured on the bible world (seed 1, step 0): the paper's dim 64 x 5 epochs took 750 s of
    # the main job's first Tik-to-Tok cell (a loaded machine); dim 32 x 1 epoch 1 min 41 s, with SR-T acc@10
    # 0.249 (0.246 at 64 x 5) and NER F1 0.163 (0.126)
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "cpu": {"dim": 32, "epochs": 1, "bucket": 200_000, "max_lines": None, "max_pairs": None}}
    init_hours: ClassVar[float] = 0.3
    reference: ClassVar[Reference] = Reference(
        "trans-tokenizers 0.1.4", "where the algorithms coincide (docs/methods/tiktotok.md): rows from the same "
        "pairs by remap_model (one source bit for bit, all to 1e-6), the copied rows by map_tokens; tested by hand: "
        "every route and weight of a hand-computed example (tests/test_tiktotok.py)",
        ("tests/parity/test_tiktotok_parity.py",))

    def resolve_params(self, ctx: InitContext) -> dict[str, Any]:
        p = super().resolve_params(ctx)
        tags = (p["source_tag"], p["target_tag"])
        if any(not t or any(c.isspace() for c in t) for t in tags) or tags[0] == tags[1]:
            raise ConfigError("tiktotok: source_tag and target_tag must be distinct, non-empty and without spaces")
        return p

    def fasttext_settings(self, p: dict[str, Any]) -> dict[str, Any]:
        return fasttext_settings(p)

    def space_job(self, p: dict[str, Any], pairs: list[tuple[str, str]], target_tag: str, label: str) -> TrainJob:
        """The bilingual fastText model of one language (``label``) trained on its bigram corpus."""
        seed = int(p["fasttext_seed"]) if p["shuffle"] else None
        inputs = {"recipe": CORPUS_RECIPE, "pairs": _pairs_digest(pairs), "source_tag": p["source_tag"],
                  "target_tag": target_tag, "compound": bool(p["compound_augmentation"]), "shuffle": seed}

        def write(f: Any) -> int:
            lines = bigram_corpus(pairs, p["source_tag"], target_tag,
                                  compound_augmentation=bool(p["compound_augmentation"]), shuffle_seed=seed)
            for line in lines:
                f.write(line + "\n")
            return len(lines)

        return TrainJob(f"tiktotok-{label}", inputs, self.fasttext_settings(p), write)

    def train_space(self, ctx: InitContext, p: dict[str, Any], pairs: list[tuple[str, str]], target_tag: str,
                    source_canonical: list[str], label: str) -> tuple[FastTextSpace, dict[str, Any]]:
        job = self.space_job(p, pairs, target_tag, label)
        cm = cached_model(ctx.cache_dir, job.kind, job.inputs, job.settings, job.write_corpus)
        info = {"path": str(cm.path) if cm.path else None, "cached": cm.cached, "pairs": len(pairs),
                "words": len(cm.model.get_words())}
        return FastTextSpace(cm.model, source_canonical, p["source_tag"], p["tag_policy"]), info

    def initialize(self, ctx: InitContext) -> InitResult:
        p = self.resolve_params(ctx)
        self.full_dimension_only(ctx)
        mapping = self.mapping(ctx)
        plan, stats = self.plan(ctx, p, mapping)
        matrix = plan.matrix(ctx.source_matrix.detach().float().cpu())
        code = {"copy": Provenance.COPIED, "unk": Provenance.UNK, "dictionary": Provenance.METHOD,
                "fasttext": Provenance.METHOD}
        provenance = np.array([code[r] for r in plan.route], dtype=np.int8)  # type: ignore[index]
        copy = {i: plan.sources[i][0] for i in range(plan.n) if plan.route[i] == "copy"}
        artifacts: dict[str, Path] = {}
        if p["save_plan"] and ctx.workdir is not None:
            path = Path(ctx.workdir) / "tiktotok_plan.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for i in range(plan.n):
                    f.write(json.dumps({"id": i, "route": plan.route[i], "sources": plan.sources[i],
                                        "weights": plan.weights[i]}) + "\n")
            artifacts["plan"] = path
        stats["per_language"] = per_language_counts(stats.pop("_lang_of"), provenance, stats["assignment"]["languages"])
        return InitResult(matrix=matrix, provenance=provenance, copy=copy, stats=stats, artifacts=artifacts)

    # ----------------------------------------------------------------------------------------------------------
    def plan(self, ctx: InitContext, p: dict[str, Any], mapping: TokenMapping) -> tuple[RowPlan, dict[str, Any]]:
        world = ctx.world
        n_t = mapping.target_size
        pivot = getattr(world, "pivot", None)
        if not pivot:
            raise ConfigError("tiktotok: the world names no pivot (source) language")
        unk_id = getattr(ctx.source_tokenizer, "unk_token_id", None)
        if unk_id is None:
            raise ConfigError("tiktotok: the source tokenizer has no UNK token, which Tik-to-Tok falls back to")
        first_w, second_w, share = (float(w) for w in p["weights"])
        weights = RankWeights(first_w, second_w, share, float(p["single_weight"])).for_count

        plan = RowPlan(n_t)
        # a. non-alphabetic tokens and specials (overlap rule)
        for t, s in mapping.copy.items():
            plan.set(t, "copy", [s], [1.0])
        for t in mapping.stats.get("unk", []):
            plan.set(int(t), "unk", [unk_id], [1.0])

        # languages, dictionaries, assignment
        texts = text_files(world)
        wanted, missing, dicts = self._dictionaries(world, p, pivot, texts)
        counted = {la: path for la, path in texts.items() if la in wanted}
        counts = language_token_counts(ctx.target_tokenizer, counted, cache_dir=shared_counts_dir(ctx.cache_dir),
                                       max_lines=p["max_lines"],
                                       progress=self.bar(ctx, "Tik-to-Tok: token counts", len(counted)))
        assignment = assign_languages(counts, n_t, rule=p["assign_rule"], min_count=int(p["assign_min_count"]))
        source = _SourceSide(ctx, p, pivot, unk_id, texts, dicts, mapping.source_tokens)
        self._prefetch_spaces(ctx, p, assignment.languages, source)
        per_lang: dict[str, dict[str, Any]] = {}
        for lang in assignment.languages:
            ids = [i for i in assignment.ids_of(lang).tolist() if plan.route[i] is None]
            per_lang[lang] = self._plan_language(ctx, p, plan, lang, ids, missing, source, mapping.target_tokens,
                                                 weights)
        n_fallback = self._unk_fallback(plan, unk_id, len(mapping.copy))
        routes = Counter(r for r in plan.route)
        stats = {
            "overlap": {k: v for k, v in mapping.stats.items() if k != "unk"},
            "source_language": pivot,
            "routes": {r: int(routes.get(r, 0)) for r in ROUTES},
            "unk_fallback_unassigned": n_fallback,
            "settings": self.fasttext_settings(p),
            "tags": {"source": p["source_tag"], "target": p["target_tag"], "policy": p["tag_policy"]},
            "weights": {"first": first_w, "second": second_w, "share": share,
                        "single": float(p["single_weight"])},
            "frequency": (p["frequency"] if (p["frequency"] != "source_text" or source.freq)
                          else "dictionary (no text)"),
            "languages": per_lang,
            "assignment": {"rule": assignment.rule, "min_count": assignment.min_count,
                           "languages": assignment.languages, "sizes": assignment.sizes()},
            "missing": missing,
            "_lang_of": assignment.lang_of,
        }
        return plan, stats

    @staticmethod
    def _dictionaries(world: Any, p: dict[str, Any], pivot: str, texts: dict[str, Path]
                      ) -> tuple[list[str], dict[str, list[str]], dict[str, list[tuple[str, str]]]]:
        """The languages handled (the pivot among them), what each lacks, and each target language's cleaned
        dictionary pairs with the pivot; no non-empty dictionary at all is an error."""
        wanted = list(p["languages"]) if p["languages"] is not None else world_languages(world)
        if pivot not in wanted:
            wanted.append(pivot)
        missing: dict[str, list[str]] = {}
        dicts: dict[str, list[tuple[str, str]]] = {}
        for lang in wanted:
            need = []
            if lang not in texts:
                need.append("target_text")
            if lang != pivot:
                found = dictionary_for(world, pivot, lang)
                if found is None:
                    need.append("dictionary")
                else:
                    dicts[lang] = clean_pairs(read_dictionary(found[0], reverse=found[1]))
            if need:
                missing[lang] = need
        if not any(dicts.values()):
            raise MissingResourceError(f"tiktotok needs a non-empty dictionary {pivot}-<lang>.tsv for at least one "
                                       f"language; the world has {sorted(dictionary_files(world))}")
        return wanted, missing, dicts

    def _prefetch_spaces(self, ctx: InitContext, p: dict[str, Any], languages: list[str],
                         source: _SourceSide) -> None:
        """The fastText spaces this call may need, trained side by side first (one fastText thread per model: the
        same models as trained one after the other)."""
        jobs = []
        for lang in languages:
            if lang == source.pivot and p["source_language"] == "identity":
                jobs.append(self.space_job(p, source.space_pairs(lang), p["source_tag"], "identity"))
            elif lang != source.pivot and source.dicts.get(lang):
                jobs.append(self.space_job(p, source.space_pairs(lang), p["target_tag"], lang))
        prefetch_models(ctx.cache_dir, jobs, p["workers"],
                        progress=self.bar(ctx, "Tik-to-Tok: fastText spaces", len(jobs)))

    def _plan_language(self, ctx: InitContext, p: dict[str, Any], plan: RowPlan, lang: str, ids: list[int],
                       missing: dict[str, list[str]], source: _SourceSide, tgt_canon: list[str],
                       weights: Callable[[int], list[float]]) -> dict[str, Any]:
        """Routes b and c for the unplanned tokens ``ids`` of one language (the source language: its tokens that
        the source vocabulary has copied first); the language's report."""
        info: dict[str, Any] = {"tokens": len(ids)}
        if not ids or lang in missing and "dictionary" in missing[lang]:
            return info
        identity = lang == source.pivot
        if identity and p["source_language"] == "none":
            return info
        t2s: dict[str, list[str]] | None
        if identity:
            todo: list[int] = []
            for i in ids:
                c = tgt_canon[i]
                if c in source.exact:
                    plan.set(i, "copy", [source.exact[c]], [1.0])
                else:
                    todo.append(i)
            info["copied_identity"] = len(ids) - len(todo)
            t2s = None  # the identity dictionary: a word translates to itself
        else:
            t2s = {}
            for s, t in source.dicts[lang]:
                t2s.setdefault(t, []).append(s)
            todo = ids
        rest, info["dictionary"] = self._dictionary_route(p, plan, todo, tgt_canon, t2s, source, weights)
        if rest:
            info.update(self._fasttext_route(ctx, p, plan, lang, rest, tgt_canon, source, weights))
        return info

    @staticmethod
    def _dictionary_route(p: dict[str, Any], plan: RowPlan, todo: list[int], tgt_canon: list[str],
                          t2s: dict[str, list[str]] | None, source: _SourceSide,
                          weights: Callable[[int], list[float]]) -> tuple[list[int], int]:
        """b. Word-start tokens whose word is in the dictionary: the ranked mean of their translations' first
        source sub-tokens. The tokens left for route c, and how many took this route."""
        rest: list[int] = []
        n_dict = 0
        for i in todo:
            c = tgt_canon[i]
            if c.startswith(" ") and len(c) > 1:
                word = c[1:]
                translations = [word] if t2s is None else t2s.get(word)
                if translations:
                    if p["frequency"] == "source_text":
                        translations = sorted(translations, key=lambda w: -source.freq[w])  # stable: ties keep order
                    cands = [s for s in (source.first_token(w) for w in translations) if s is not None]
                    if cands:
                        plan.set(i, "dictionary", cands, weights(len(cands)))
                        n_dict += 1
                        continue
            rest.append(i)
        return rest, n_dict

    def _fasttext_route(self, ctx: InitContext, p: dict[str, Any], plan: RowPlan, lang: str, rest: list[int],
                        tgt_canon: list[str], source: _SourceSide, weights: Callable[[int], list[float]]
                        ) -> dict[str, Any]:
        """c. The remaining alphabetic tokens: their nearest source tokens in the language's bilingual fastText
        space (UNK for a token without a vector); the route's report."""
        if lang == source.pivot:
            space, ft_info = self.train_space(ctx, p, source.space_pairs(lang), p["source_tag"], source.canonical,
                                              "identity")
            tag = p["source_tag"]
        else:
            space, ft_info = self.train_space(ctx, p, source.space_pairs(lang), p["target_tag"], source.canonical,
                                              lang)
            tag = p["target_tag"]
        found = space.nearest([tgt_canon[i] for i in rest], tag, int(p["neighbors"]), int(p["block_size"]))
        n_ft = 0
        for i, hit in zip(rest, found, strict=True):
            if hit is None:
                plan.set(i, "unk", [source.unk_id], [1.0])
            else:
                plan.set(i, "fasttext", hit[0], weights(len(hit[0])))
                n_ft += 1
        return {"fasttext_model": ft_info, "fasttext": n_ft, "no_vector_unk": len(rest) - n_ft}

    @staticmethod
    def _unk_fallback(plan: RowPlan, unk_id: int, n_copied: int) -> int:
        """The UNK row for the tokens still unplanned (no language, a language without resources, or
        source_language="none"); how many."""
        n_fallback = 0
        for i in range(plan.n):
            if plan.route[i] is None:
                plan.set(i, "unk", [unk_id], [1.0])
                n_fallback += 1
        if not any(r in ("dictionary", "fasttext") for r in plan.route) and plan.n > n_copied:
            log.warning("tiktotok: no token went through the dictionary or fastText route; check the world's "
                        "dictionaries and text")
        return n_fallback


def _pairs_digest(pairs: list[tuple[str, str]]) -> str:
    import hashlib

    h = hashlib.sha256()
    for s, t in pairs:
        h.update(s.encode("utf-8") + b"\t" + t.encode("utf-8") + b"\n")
    return h.hexdigest()
