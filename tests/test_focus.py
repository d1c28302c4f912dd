"""FOCUS on the synthetic world: invariants, the sparsemax combination recomputed from the fastText model, the
fallback, determinism, the per-language report and missing text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError
from harness.core.registry import METHODS
from methods.base import InitContext, Provenance
from methods.fasttext_util import load_model, word_vectors
from methods.overlap import mapping_cache
from methods.shared import fallback_matrix
from methods.sparsemax import sparsemax

TINY_FOCUS = {"dim": 16, "epochs": 2, "bucket": 20_000, "min_count": 5}


@dataclass
class HidingWorld:
    """A world that hides some of its resource files (to test missing resources per language)."""

    world: Any
    hide: set[str]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.world, name)

    def resource_files(self, kind: str) -> list[Path]:
        return [p for p in self.world.resource_files(kind) if p.name not in self.hide]


_SOURCES: dict[str, Any] = {}


def synthetic_ctx(world: Any, cache_dir: Path, params: dict | None = None, seed: int = 0,
                  workdir: Path | None = None) -> InitContext:
    """The context initialize_model builds for the synthetic world's source model and target tokenizer."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    if "src" not in _SOURCES:
        root = world.world if isinstance(world, HidingWorld) else world
        st = AutoTokenizer.from_pretrained(root.source_dir("src"))
        tt = AutoTokenizer.from_pretrained(root.target_tokenizer_dir)
        e_s = AutoModelForMaskedLM.from_pretrained(root.source_dir("src")).get_input_embeddings().weight
        _SOURCES["src"] = (st, tt, e_s.detach()[:len(st)].float().clone())
    st, tt, e_s = _SOURCES["src"]
    return InitContext(source_matrix=e_s, source_tokenizer=st, target_tokenizer=tt,
                       mapping_for=mapping_cache(st, tt, None), world=world, seed=seed, params=dict(params or {}),
                       cache_dir=cache_dir, workdir=workdir)


def check_invariants(result: Any, ctx: InitContext, rule_copy: dict[int, int]) -> None:
    """Copied rows equal source rows bit for bit, specials preserved, no all-zero rows, counts add up."""
    m, src = result.matrix, ctx.source_matrix
    n_t = len(ctx.target_tokenizer)
    assert m.shape == (n_t, src.shape[1]) and m.dtype == torch.float32
    assert torch.isfinite(m).all()
    assert not (m == 0).all(dim=1).any()
    assert sum(result.counts().values()) == n_t
    copied = np.flatnonzero(result.provenance == Provenance.COPIED)
    assert set(copied.tolist()) == set(result.copy)
    for t, s in result.copy.items():
        assert torch.equal(m[t], src[s])
    for t, s in rule_copy.items():  # the overlap rule's copies are kept
        assert result.copy.get(t) == s
    st, tt = ctx.source_tokenizer, ctx.target_tokenizer
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "mask_token_id"):
        assert torch.equal(m[getattr(tt, name)], src[getattr(st, name)]), name
    per_lang = result.stats["per_language"]
    assert sum(v["tokens"] for v in per_lang.values()) == n_t
    for kind in ("copied", "method", "random", "unk"):
        assert sum(v[kind] for v in per_lang.values()) == result.counts()[kind]


@pytest.fixture(scope="module")
def focus_run(synthetic_world, tmp_path_factory):
    cache = tmp_path_factory.mktemp("focus-cache")
    ctx = synthetic_ctx(synthetic_world, cache, {**TINY_FOCUS, "save_weights": True},
                        workdir=tmp_path_factory.mktemp("focus-work"))
    return ctx, METHODS.get("focus")().initialize(ctx), cache


def test_focus_invariants_and_counts(focus_run):
    ctx, result, _ = focus_run
    mapping = ctx.mapping_for("focus")
    check_invariants(result, ctx, mapping.copy)
    c = result.counts()
    s = result.stats
    assert c["copied"] == len(mapping.copy) and c["unk"] == 0
    assert c["method"] == s["additional_with_vector"] > 0
    assert c["random"] == s["additional_without_vector"] > 0  # tokens under minCount exist on this world
    assert s["anchors"] + s["overlap_without_vector"] == len(mapping.copy)
    assert set(s["per_language"]) == {"qaa_Latn", "qab_Latn", "qac_Latn", "qad_Cyrl", "qae_Grek", "none"}
    assert s["missing"] == {}
    # the Greek-script language shares no token with the pivot-language source: its rows are FOCUS rows
    assert s["per_language"]["qae_Grek"]["method"] > 0 and s["per_language"]["qae_Grek"]["copied"] == 0


def test_focus_rows_are_sparsemax_combinations_of_anchor_rows(focus_run):
    ctx, result, _ = focus_run
    mapping = ctx.mapping_for("focus")
    model = load_model(result.stats["fasttext"]["path"])
    tt = ctx.target_tokenizer
    native = tt.convert_ids_to_tokens(list(range(len(tt))))
    w = np.load(result.artifacts["weights"])
    anchors = w["anchor_target_ids"]
    # anchors: the copied tokens that are in the fastText vocabulary
    words = set(model.get_words())
    assert set(anchors.tolist()) == {t for t in mapping.copy if native[t] in words}
    x_anchor = torch.from_numpy(word_vectors(model, [native[t] for t in anchors])).double()
    x_anchor = x_anchor / x_anchor.norm(dim=1, keepdim=True)
    src_rows = ctx.source_matrix[[mapping.copy[int(t)] for t in anchors]].double()
    starts = np.concatenate([[0], np.cumsum(w["lengths"])])
    for r, t in enumerate(w["target_ids"][:40]):
        assert result.provenance[t] == Provenance.METHOD
        x = torch.from_numpy(word_vectors(model, [native[t]])).double()[0]
        cos = x_anchor @ (x / x.norm())
        p = sparsemax(cos)  # over every anchor, no top-k, no temperature
        support = w["support"][starts[r]:starts[r + 1]]
        assert set(support.tolist()) == set(torch.nonzero(p > 1e-7).flatten().tolist())
        assert abs(float(p.sum()) - 1) < 1e-9
        assert torch.allclose(result.matrix[t].double(), p @ src_rows, atol=1e-5)


def test_focus_fallback_rows_are_the_shared_gaussian_draw(focus_run):
    ctx, result, _ = focus_run
    ids = np.flatnonzero(result.provenance == Provenance.RANDOM)
    expected = fallback_matrix(ctx.source_matrix, len(ctx.target_tokenizer), ctx.generator(0))
    assert torch.equal(result.matrix[ids], expected[ids])
    model = load_model(result.stats["fasttext"]["path"])
    native = ctx.target_tokenizer.convert_ids_to_tokens(ids.tolist())
    assert all(model.get_word_id(t) == -1 for t in native)  # under minCount: not in the vocabulary


def test_focus_is_deterministic_and_ignores_the_global_rng(focus_run, synthetic_world, tmp_path):
    ctx, result, cache = focus_run
    torch.manual_seed(12345)
    np.random.seed(54321)
    _ = torch.rand(100), np.random.rand(100)
    # a fresh cache: the fastText model is trained again, and must come out the same
    again = METHODS.get("focus")().initialize(synthetic_ctx(synthetic_world, tmp_path, TINY_FOCUS))
    assert again.stats["fasttext"]["trained"] and not again.stats["fasttext"]["cached"]
    assert torch.equal(again.matrix, result.matrix)
    assert np.array_equal(again.provenance, result.provenance)
    cached = METHODS.get("focus")().initialize(synthetic_ctx(synthetic_world, cache, TINY_FOCUS))
    assert cached.stats["fasttext"]["cached"]
    assert torch.equal(cached.matrix, result.matrix)
    other = METHODS.get("focus")().initialize(synthetic_ctx(synthetic_world, cache, TINY_FOCUS, seed=1))
    method = result.provenance == Provenance.METHOD
    assert torch.equal(other.matrix[torch.from_numpy(method)], result.matrix[torch.from_numpy(method)])
    assert not torch.equal(other.matrix, result.matrix)  # only the fallback draw depends on the run seed


def test_focus_reports_languages_without_text(synthetic_world, tmp_path):
    world = HidingWorld(synthetic_world, {"qae_Grek.txt"})
    result = METHODS.get("focus")().initialize(synthetic_ctx(world, tmp_path, TINY_FOCUS))
    assert result.stats["missing"] == {"qae_Grek": ["target_text"]}
    assert "qae_Grek" not in result.stats["languages"]
    assert "qae_Grek" not in result.stats["per_language"]
    # Greek-script tokens are now rare: below minCount they fall back
    assert result.counts()["random"] > 100


def test_focus_rejects_bad_params_and_factorized(synthetic_world, tmp_path):
    with pytest.raises(ConfigError, match="no parameter"):
        METHODS.get("focus")().initialize(synthetic_ctx(synthetic_world, tmp_path, {"k": 3}))
    ctx = synthetic_ctx(synthetic_world, tmp_path, TINY_FOCUS)
    ctx.factorized = True
    with pytest.raises(ConfigError, match="full-dimension embeddings only"):
        METHODS.get("focus")().initialize(ctx)
    cls = METHODS.get("focus")
    assert cls.requires == frozenset({"target_text"}) and not cls.supports_factorized


def test_focus_overlap_and_specials_params(focus_run, synthetic_world):
    """Default: deepfocus's overlap (exact; specials by their text). A BERT source's [SEP] is not "</s>", so the
    target's </s> (fastText's end-of-line token: it has a vector) is an additional token; specials="role" copies
    it from [SEP] and makes it an anchor."""
    from tests._surgery_fixtures import wordpiece_tokenizer

    _, _, cache = focus_run
    cls = METHODS.get("focus")
    assert cls.defaults["overlap"] == "exact" and cls.defaults["specials"] == "string"
    wp = wordpiece_tokenizer()
    e = torch.randn(len(wp), 8, generator=torch.Generator().manual_seed(0))
    base = synthetic_ctx(synthetic_world, cache, TINY_FOCUS)
    tt = base.target_tokenizer

    def run(**params):
        ctx = InitContext(source_matrix=e, source_tokenizer=wp, target_tokenizer=tt,
                          mapping_for=mapping_cache(wp, tt, None), world=synthetic_world, seed=0,
                          params={**TINY_FOCUS, **params}, cache_dir=cache)
        return ctx, cls().initialize(ctx)

    eos = tt.convert_tokens_to_ids("</s>")
    ctx, default = run()
    assert default.stats["overlap"]["overlap"] == "exact" and default.stats["overlap"]["specials"] == "string"
    assert default.copy == ctx.mapping_for("focus", symbols="code", overlap="exact", specials="string").copy
    assert not set(default.copy) & set(tt.all_special_ids)
    assert default.stats["anchors"] > 0 and default.provenance[eos] == Provenance.METHOD
    _, role = run(specials="role")
    assert role.copy[eos] == wp.sep_token_id and role.copy[tt.bos_token_id] == wp.cls_token_id
    assert role.stats["anchors"] > default.stats["anchors"]  # </s> (and any special in the text) has a vector
    assert torch.equal(role.matrix[eos], e[wp.sep_token_id])
    for name, bad in (("overlap", "fold"), ("specials", "name"), ("symbols", "ascii")):
        with pytest.raises(ConfigError, match=name):
            run(**{name: bad})
