"""The transplant measure: a derived world's bits-per-byte references (the source with its own tokenizer, the donor
with the target tokenizer), computed once by the clm task's own scoring, logged to MLflow, and read back by the
leaderboard as reference rows and a BPB-retained board with intervals; nothing of it for a built world."""

from __future__ import annotations

import numpy as np
import pytest

WORLD = "tx-dec"
EXP = "t-transplant"


@pytest.fixture(scope="module")
def derived(synthetic_world, tmp_path_factory):
    """A derived world: a tiny Llama with a Unigram tokenizer as the source, another Llama's byte-level BPE as the
    target tokenizer and that Llama as the donor."""
    from harness.cli import main
    from harness.worlds import get_world
    from tests.test_world_derive import _model

    d = tmp_path_factory.mktemp("transplant-models")
    src, donor = _model(d / "llama-unigram", "llama", "unigram"), _model(d / "llama-bpe", "llama", "bpe")
    assert main(["world", "derive", WORLD, "--from", "synthetic", "--source", str(src), "--target-tokenizer",
                 str(donor), "--donor", str(donor)]) == 0
    return get_world(WORLD, build=False)


@pytest.fixture(scope="module")
def ran(derived, harness_home, tracking_uri):
    import os
    import subprocess
    import sys

    env = {**os.environ, "HARNESS_HOME": str(harness_home), "MLFLOW_TRACKING_URI": tracking_uri,
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--world", WORLD, "--methods", "random",
                           "--tasks", "clm", "--cpt-steps", "0", "--experiment", EXP], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _settings(**kw):
    from tasks.base import TaskSettings

    return TaskSettings(**{"profile": "cpu", "seed": 0, "device": "cpu", "precision": "fp32", **kw})


def test_the_references_are_the_clm_tasks_own_scores_computed_once(derived, harness_home):
    from transformers import AutoTokenizer

    from harness.core.cache import ProductCache
    from harness.initialize import load_model
    from harness.transplant import PRODUCT, compute_references, reference_models
    from tasks.clm import CausalLMLoss

    task, langs = CausalLMLoss(), derived.task_languages("mlm")[:2]
    assert [r["role"] for r in reference_models(derived, derived.default_source, "clm")] == ["ceiling", "donor"]
    refs = compute_references(derived, derived.default_source, "clm", task, _settings(), langs)
    src = derived.source_dir(derived.default_source)
    own = task.evaluate(load_model(src), AutoTokenizer.from_pretrained(src), derived, langs, _settings())
    don = task.evaluate(load_model(derived.donor_dir), AutoTokenizer.from_pretrained(derived.target_tokenizer_dir),
                        derived, langs, _settings())
    for lang in langs:
        assert refs["ceiling"][lang]["scores"]["bpb"] == pytest.approx(own.scores["bpb"][lang], rel=1e-9)
        assert refs["donor"][lang]["scores"]["bpb"] == pytest.approx(don.scores["bpb"][lang], rel=1e-9)
        assert len(refs["ceiling"][lang]["items"]["bpb"]["num"]) == own.extras["counts"][lang]["sentences"]
    # the second time every one is a finished product: nothing is scored again
    cache = ProductCache()
    from harness import transplant

    calls = []
    real = task.evaluate
    task.evaluate = lambda *a, **k: calls.append(1) or real(*a, **k)
    assert compute_references(derived, derived.default_source, "clm", task, _settings(), langs, cache) == refs
    assert not calls and len(list((harness_home / "products" / PRODUCT).glob("[0-9a-f]*"))) >= 4
    # other task settings are another reference
    other = transplant.product_inputs(derived, reference_models(derived, derived.default_source, "clm")[0], "clm",
                                      _settings(max_sentences=3), langs[0])
    assert cache.lookup(PRODUCT, other) is None


def test_a_built_world_has_no_references(synthetic_world):
    from harness.transplant import applies

    assert not applies(synthetic_world, "clm") and not applies(synthetic_world, "mlm-bpb")


def test_the_run_logs_them_and_the_board_shows_the_bpb_retained(ran, derived, tracking_uri):
    from mlflow.tracking import MlflowClient

    from leaderboard.collect import collect_experiment
    from leaderboard.model import REFERENCE, RETAINED
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(EXP)
    data = collect_experiment(client, exp)
    assert len(data.references) == 1 and set(data.references[0].docs) == {"ceiling", "donor"}
    ref = data.references[0]
    langs = sorted(ref.docs["ceiling"])
    lb = build_leaderboard(data, bootstrap=200)
    bpb = next(b for b in lb.boards if b.task == "clm" and b.metric == "bpb" and b.kind == "final")
    refs = {r.label: r for r in bpb.paper_rows if r.kind == REFERENCE}
    ceiling = refs[f"ceiling: {derived.default_source} with its own tokenizer"]
    assert any(label.startswith("donor with the target tokenizer") for label in refs)
    assert sorted(ceiling.entries) == langs and all(e.ci is not None for e in ceiling.entries.values())
    (ours,) = bpb.rows
    assert ceiling.init[RETAINED] == 1.0 and RETAINED in ours.init
    kept = next(b for b in lb.boards if b.task == "clm" and b.metric == RETAINED and b.kind == "final")
    row = kept.row(ours.label)
    for lang in langs:
        want = ref.docs["ceiling"][lang]["scores"]["bpb"] / ours.entries[lang].mean
        assert row.entries[lang].mean == pytest.approx(want)
        lo, hi = row.entries[lang].ci
        assert lo <= row.entries[lang].mean <= hi and lo < hi
    assert row.avg == pytest.approx(np.mean([row.entries[lang].mean for lang in langs]))
    assert row.avg_ci is not None and row.avg_ci[0] <= row.avg <= row.avg_ci[1]
    assert ours.init[RETAINED] == pytest.approx(row.avg)
    assert any("the ceiling is" in n and "with its own tokenizer" in n for n in kept.notes)
    assert any("the ceiling is" in n for n in bpb.notes)
    assert [r.kind for r in kept.paper_rows] == [REFERENCE]
    # once per run: a second command finds them logged
    from harness.core.record import Kind, kind_filter

    runs = client.search_runs([exp.experiment_id], kind_filter(Kind.REFERENCE))
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"


def test_the_run_s_table_shows_the_references_and_the_bpb_retained(ran, derived, tracking_uri):
    """The table `harness run` ends with: the references' bits per byte in the task's column and a BPB-retained
    column (the row's average with its interval; 1.000 for the ceiling), defined under the table."""
    from mlflow.tracking import MlflowClient

    from leaderboard.collect import collect_experiment
    from leaderboard.model import METRIC_NOTES, RETAINED
    from leaderboard.summary import summaries
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    lb = build_leaderboard(collect_experiment(client, client.get_experiment_by_name(EXP)), bootstrap=200)
    (table,) = summaries(lb)
    col = next(f"{t} · {step}" for t, _m, step in table.tasks if t == "clm BPB retained")
    bpb = next(f"{t} · {step}" for t, m, step in table.tasks if t == "clm" and m.startswith("bpb"))
    kept = next(b for b in lb.boards if b.metric == RETAINED and b.kind == "final")
    (ours,) = kept.rows
    lo, hi = ours.avg_ci
    assert table.cells[(ours.label, col)] == f"{ours.avg:.3f} [{lo:.3f}, {hi:.3f}]"
    ceiling = next(r for r in table.rows if r.startswith("ceiling:"))
    assert table.cells[(ceiling, col)] == "1.000"
    donor = next(r for r in table.rows if r.startswith("donor with the target tokenizer"))
    board = next(b for b in lb.boards if b.task == "clm" and b.metric == "bpb" and b.kind == "final")
    refs = {r.label: r for r in board.paper_rows}
    assert table.cells[(ceiling, bpb)] == f"{refs[ceiling].avg:.3f}" and (donor, bpb) in table.cells
    assert METRIC_NOTES[RETAINED] in table.notes


def test_the_paired_interval_resamples_sentences_and_seeds():
    from leaderboard.retained import ratio_ci
    from leaderboard.stats import ItemSample

    rng = np.random.default_rng(0)
    den = rng.integers(20, 60, size=50).astype(float)
    bits = den * rng.uniform(1.0, 8.0, size=50)
    top = ItemSample(bits, den)
    same = ItemSample(bits.copy(), den)
    # the same bits on the same sentences, drawn together (paired): every resample keeps the ratio at 1
    assert ratio_ci([(1.0, same)], top, resamples=200, level=0.95, seed=0, key="x") == pytest.approx((1.0, 1.0))
    noisy = ItemSample(den * rng.uniform(2.0, 6.0, size=50), den)
    lo, hi = ratio_ci([(0.5, noisy)], top, resamples=200, level=0.95, seed=0, key="x")
    assert lo < hi
    # one seed without sentences: no interval; two seeds: the seeds' spread
    assert ratio_ci([(0.5, None)], top, resamples=200, level=0.95, seed=0, key="x") is None
    lo, hi = ratio_ci([(0.5, None), (0.7, None)], top, resamples=200, level=0.95, seed=0, key="x")
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.7)


@pytest.fixture(scope="module")
def derived_encoder(synthetic_world, tmp_path_factory):
    """A derived encoder world: a tiny BERT (WordPiece) as the source, an XLM-R's Unigram tokenizer as the target
    and that XLM-R as the donor; beside it, the same source with a Llama donor (another objective)."""
    from harness.cli import main
    from harness.worlds import get_world
    from tests.test_world_derive import _model

    d = tmp_path_factory.mktemp("transplant-encoders")
    src, donor = _model(d / "bert-wordpiece", "bert", "wordpiece"), _model(d / "xlmr-unigram", "xlmr", "unigram")
    assert main(["world", "derive", "tx-enc", "--from", "synthetic", "--source", str(src), "--target-tokenizer",
                 str(donor), "--donor", str(donor)]) == 0
    llama = _model(d / "llama-bpe", "llama", "bpe")
    assert main(["world", "derive", "tx-enc-clm-donor", "--from", "synthetic", "--source", str(src),
                 "--target-tokenizer", str(llama), "--donor", str(llama)]) == 0
    return get_world("tx-enc", build=False), get_world("tx-enc-clm-donor", build=False)


def test_an_encoders_references_are_the_mlm_bpb_tasks_own_scores(derived_encoder):
    """The encoder's transplant measure (mlm-bpb): the ceiling is the source scored with its own tokenizer and the
    donor with the target tokenizer, by the mlm-bpb task's own scoring; a donor of another objective (a causal LM)
    is no reference of a masked-LM measure."""
    from transformers import AutoTokenizer

    from harness.initialize import load_model
    from harness.transplant import applies, compute_references, reference_models
    from tasks.mlm_bpb import MaskedLMBitsPerByte

    world, clm_donor = derived_encoder
    assert applies(world, "mlm-bpb")
    task, langs = MaskedLMBitsPerByte(), world.task_languages("mlm")[:2]
    source = world.default_source
    assert [r["role"] for r in reference_models(world, source, "mlm-bpb")] == ["ceiling", "donor"]
    assert [r["role"] for r in reference_models(clm_donor, clm_donor.default_source, "mlm-bpb")] == ["ceiling"]
    assert [r["role"] for r in reference_models(clm_donor, clm_donor.default_source, "clm")] == ["ceiling", "donor"]
    refs = compute_references(world, source, "mlm-bpb", task, _settings(), langs)
    src = world.source_dir(source)
    own = task.evaluate(load_model(src), AutoTokenizer.from_pretrained(src), world, langs, _settings())
    don = task.evaluate(load_model(world.donor_dir), AutoTokenizer.from_pretrained(world.target_tokenizer_dir),
                        world, langs, _settings())
    for lang in langs:
        assert refs["ceiling"][lang]["scores"]["bpb"] == pytest.approx(own.scores["bpb"][lang], rel=1e-9)
        assert refs["donor"][lang]["scores"]["bpb"] == pytest.approx(don.scores["bpb"][lang], rel=1e-9)
        assert refs["ceiling"][lang]["scores"]["bpb"] != pytest.approx(refs["donor"][lang]["scores"]["bpb"])
