import math

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from harness.core.registry import TASKS
from tasks.base import TaskSettings
from tasks.mlm import fixed_masks


@pytest.fixture(scope="module")
def source(synthetic_world):
    d = synthetic_world.source_dir("src")
    return AutoModelForMaskedLM.from_pretrained(d).eval(), AutoTokenizer.from_pretrained(d)


def test_fixed_masks_are_deterministic_and_bert_like():
    ids = [[0] + list(range(10, 110)) + [2]] * 20
    a = fixed_masks(ids, {0, 1, 2}, 500, 499, 0.15, seed=123)
    b = fixed_masks(ids, {0, 1, 2}, 500, 499, 0.15, seed=123)
    c = fixed_masks(ids, {0, 1, 2}, 500, 499, 0.15, seed=124)
    assert a == b and a != c
    for _masked, labels in a:
        chosen = [i for i, lab in enumerate(labels) if lab != -100]
        assert len(chosen) == 15  # 15 % of the 100 non-special positions
        assert labels[0] == -100 and labels[-1] == -100  # specials never selected
        assert all(labels[i] == ids[0][i] for i in chosen)
    n_mask = sum(m[i] == 499 for m, lab in a for i, x in enumerate(lab) if x != -100)
    assert 0.7 < n_mask / (15 * 20) < 0.9  # about 80 % become <mask>


def test_same_model_same_score_and_per_language(source, synthetic_world):
    model, tok = source
    task = TASKS.get("mlm")()
    langs = task.languages(synthetic_world)
    assert set(langs) == set(synthetic_world.languages)
    s = TaskSettings(seed=1, max_sentences=40)
    r1 = task.evaluate(model, tok, synthetic_world, langs, s)
    r2 = task.evaluate(model, tok, synthetic_world, langs, s)
    assert r1.scores == r2.scores
    assert set(r1.scores["loss"]) == set(langs)
    for lang in langs:
        assert math.isclose(r1.scores["ppl"][lang], math.exp(r1.scores["loss"][lang]), rel_tol=1e-9)
    assert r1.averages()["loss"] == pytest.approx(sum(r1.scores["loss"].values()) / len(langs))


def test_trained_model_beats_an_untrained_one_on_its_language(source, synthetic_world):
    model, tok = source
    task = TASKS.get("mlm")()
    s = TaskSettings(seed=1, max_sentences=60)
    trained = task.evaluate(model, tok, synthetic_world, ["qaa_Latn"], s).scores["loss"]["qaa_Latn"]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        fresh = type(model)(model.config).eval()
    untrained = task.evaluate(fresh, tok, synthetic_world, ["qaa_Latn"], s).scores["loss"]["qaa_Latn"]
    assert trained < untrained - 1.0
    assert untrained == pytest.approx(math.log(len(tok)), abs=1.0)  # an untrained head is near-uniform


def test_item_stats_recompute_the_scores(source, synthetic_world):
    model, tok = source
    task = TASKS.get("mlm")()
    res = task.evaluate(model, tok, synthetic_world, ["qab_Latn", "qae_Grek"], TaskSettings(max_sentences=30))
    for metric in ("loss", "ppl"):
        for lang in ("qab_Latn", "qae_Grek"):
            st = res.items[metric][lang]
            assert len(st.num) == len(st.den) == 30
            assert st.value() == pytest.approx(res.scores[metric][lang], rel=1e-6)
