"""A method's own cost (issue 62, point 3): the initialization time a run records is the method's call -- not the
loading before it, not the world's model loaded for it, not a wait for a shared product another process builds (whose
training is the cost of the cell that builds it, once); the board's cost table keeps each variant of a method apart
and speaks of a CPU board in core-minutes; ``harness plan`` prices the shared helper model once."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from tests._leaderboard_runs import HITS, _build, _log_json, make_cell


# -- what a run records ----------------------------------------------------------------------------------------
def test_the_recorded_seconds_are_the_methods_call_less_the_source_model_it_loads(synthetic_world, tmp_path):
    """tokdist runs the source model (``ctx.source_model()``): the loading is the world's, not the method's; the
    tokenizers and model loaded, the model assembled and written around the call are not its cost either."""
    from harness.initialize import initialize_model
    from methods.own_cost import SOURCE_MODEL

    rep = initialize_model(synthetic_world, "src", "tokdist", dim=None, seed=1, params={"max_tokens": 20, "snippets": 1},
                           out_dir=tmp_path / "init", mapping_cache_dir=tmp_path / "maps", profile="cpu")
    loaded = rep["own_cost"]["not_own"][SOURCE_MODEL]
    assert loaded > 0
    assert rep["seconds"] == pytest.approx(rep["method_seconds"] - loaded, abs=2e-3)
    assert rep["seconds"] < rep["call_seconds"] - loaded  # loading, surgery and writing around the call left out
    assert 0 < rep["costs"]["core_minutes_plan"] < 60  # on a CPU: the plan's price, in core-minutes


def _tiny_helper_params() -> dict:
    return {"helper_model": None, "helper_objective": "mlm", "helper_hidden": 8, "helper_layers": 1,
            "helper_heads": 1, "helper_steps": 12, "helper_batch": 4, "helper_seq_len": 16, "helper_lr": 1e-3,
            "helper_max_lines": 40, "helper_seed": 0}


def test_waiting_for_the_helper_model_is_the_cost_of_the_cell_that_trains_it(synthetic_world, tmp_path):
    """Two cells need the helper model: the one that trains it pays its training; the other waits, and its wait
    is not its cost (it was the cost of a cell on another board row: counted there, once)."""
    from transformers import AutoTokenizer

    from methods import own_cost
    from methods.helper_model import HELPER_KIND, helper_tables

    tok = AutoTokenizer.from_pretrained(synthetic_world.target_tokenizer_dir)
    training = threading.Event()

    def progress(label, total):
        def advance(n):
            training.set()
            time.sleep(0.08)  # a helper that takes a second to train
        return advance

    def ctx(prog):
        return SimpleNamespace(target_tokenizer=tok, source_tokenizer=tok, world=synthetic_world, seed=1,
                               progress=prog, log_metric=None, cache_dir=tmp_path / "methods" / "clp")

    books: dict[str, own_cost.Ledger] = {}
    calls: dict[str, float] = {}

    def cell(name, prog):
        with own_cost.ledger() as book:
            t0 = time.perf_counter()
            helper_tables(ctx(prog), _tiny_helper_params(), who="clp")
            calls[name] = time.perf_counter() - t0
        books[name] = book

    builder = threading.Thread(target=cell, args=("builder", progress))
    builder.start()
    assert training.wait(60)
    cell("waiter", None)
    builder.join()
    built, waited = books["builder"], books["waiter"]
    assert [e["product"] for e in built.shared] == [HELPER_KIND] and built.shared[0]["built"]
    assert built.shared[0]["seconds"] >= 0.8 and built.own(calls["builder"]) >= 0.8  # the training: its cost
    assert waited.shared == [{"product": HELPER_KIND, "built": False, "seconds": None}]
    assert calls["waiter"] >= 0.5 and waited.not_own[own_cost.WAITING] >= calls["waiter"] - 0.3
    assert waited.own(calls["waiter"]) < 0.3  # reading the helper: its own; the wait: not


def test_waiting_for_a_fasttext_model_another_process_trains_is_not_the_waiters_cost(tmp_path):
    from harness.core.locks import exclusive
    from methods import own_cost
    from methods.fasttext_util import cached_model, model_path
    from tests.test_fasttext_prefetch import _job

    job = _job("ow")
    _, path = model_path(tmp_path, job.kind, job.inputs, job.settings)
    path.parent.mkdir(parents=True)
    held, go = threading.Event(), threading.Event()

    def other():  # another process's cell holds the model's lock for a second
        with exclusive(path):
            held.set()
            go.wait(10)
            time.sleep(1.0)

    t = threading.Thread(target=other)
    t.start()
    assert held.wait(10)
    go.set()
    with own_cost.ledger() as book:
        t0 = time.perf_counter()
        cm = cached_model(tmp_path, job.kind, job.inputs, job.settings, job.write_corpus)
        call = time.perf_counter() - t0
    t.join()
    assert not cm.cached  # the other never stored it: this cell trains it, and that is its cost
    assert book.not_own[own_cost.WAITING] >= 0.8
    assert book.own(call) == pytest.approx(call - book.not_own[own_cost.WAITING])
    assert book.shared[-1]["product"] == f"fastText {job.kind}" and book.shared[-1]["built"]


# -- the board's cost table ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_variants(tracking_uri):
    """One method at fp32 (0.01 s) and at bf16 evaluation (5 s) in one experiment, on CPU cells."""
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment("lb-costs-own")
    for seed in (1, 2):
        for precision, secs in (("fp32", 0.01), ("bf16", 5.0)):
            parent, _ = make_cell(client, exp_id, "alpha", seed, cell_params={"eval_precision": precision},
                                  hits=HITS[("alpha" if precision == "fp32" else "beta", seed)],
                                  init={"copied": 10, "method": 0, "random": 5, "unk": 0, "seconds": secs})
            _log_json(client, parent, {"method": "alpha", "device": "cpu", "overlap_rule": "ofa",
                                       "costs": {"needs": [], "gpu_hours_plan": 0.01,
                                                 "core_minutes_plan": 0.002 if precision == "fp32" else 0.09},
                                       "surgery": {"mode": "extension"}}, "init_report.json")
    return _build(tracking_uri, "lb-costs-own", bootstrap=0)


def test_the_cost_table_keeps_each_variant_apart(two_variants):
    board = next(b for b in two_variants.boards if b.costs)
    assert len(board.rows) == 2
    secs = sorted(r.seconds for r in board.costs)
    assert secs == [0.01, 5.0]  # never the median of the two variants' cells
    assert all(r.cells == 2 for r in board.costs)
    assert {r.name for r in board.costs} == {r.label for r in board.rows}


def test_times_under_a_second_are_not_multiplied_into_hundreds(two_variants):
    """"x time" and the lead's cost compare init times as a second at least: 5 s against 0.01 s is 5x, not 500x."""
    from leaderboard.costs import lead_note

    board = next(b for b in two_variants.boards if b.costs)
    assert sorted(r.ratio for r in board.costs) == [1.0, 5.0]
    note = lead_note(board)
    assert "5.0x its init time (5.0 s vs 0.01 s)" in note or "1/5 of its init time (0.01 s vs 5.0 s)" in note


def test_a_cpu_board_shows_the_plan_in_core_minutes(two_variants):
    from leaderboard.costs import CPU_PLAN, cells_of, head
    from leaderboard.render_terminal import render_text

    board = next(b for b in two_variants.boards if b.costs)
    assert CPU_PLAN in head(board) and "GPU-h (plan)" not in head(board)
    plans = sorted(cells_of(board, r)[4] for r in board.costs)
    assert plans == ["0.0", "0.1"]
    text = render_text([board], width=200)
    assert "core-min (plan)" in text and "GPU-h" not in text


def test_a_gpu_board_shows_the_plan_in_gpu_hours(two_variants):
    from leaderboard.costs import GPU_PLAN, head, plan_of

    board = next(b for b in two_variants.boards if b.costs)
    saved = [r.cpu for r in board.costs]
    try:
        board.costs[0].cpu = False  # a row whose cells ran on a GPU
        assert GPU_PLAN in head(board) and plan_of(board, board.costs[1]) == 0.01
    finally:
        for r, cpu in zip(board.costs, saved, strict=True):
            r.cpu = cpu


def test_the_summary_beside_the_averages_has_each_variants_own_cost(two_variants):
    from leaderboard.summary import COST_COLUMNS, summaries

    (table,) = summaries(two_variants)
    init = {label: cells[COST_COLUMNS.index("init s")] for label, cells in table.costs.items()}
    assert sorted(init.values()) == ["0.01", "5.0"]
    plan = {cells[COST_COLUMNS.index("plan")] for cells in table.costs.values()}
    assert plan == {"0.0 core-min", "0.1 core-min"}


# -- the plan ----------------------------------------------------------------------------------------------------
def test_the_plan_prices_the_helper_model_once_on_the_cell_that_builds_it(synthetic_world):
    from harness.config import make_config
    from harness.plan import cpu_rows
    from harness.spec import resolve
    from harness.throughput import cpu_cost

    cfg = make_config({"world": "synthetic", "methods": "clp,omp,clp+,random", "tasks": "sr-t", "seeds": [1, 2]})
    rows = cpu_rows(resolve(cfg, synthetic_world, probe=False), 2)
    cost = cpu_cost("synthetic", "src")
    helper = cost.shared("helper-model")
    assert helper > 10  # a minute of one core on the synthetic world
    users = [r for r in rows if r["method"] in ("clp", "omp", "clp+")]
    paying = [r for r in users if r["init_s"] >= helper]
    assert len(paying) == 1 and paying[0] is users[0]  # the first of them in the order the cells run
    assert all(r["init_s"] < helper for r in rows if r is not paying[0])
    assert [r for r in rows if r["method"] == "random"][0]["init_s"] < 1


def test_the_plan_prices_no_helper_model_on_a_world_with_a_donor(synthetic_world, tmp_path_factory):
    """OMP, CLP and CLP+ read a derived world's donor and train no helper model: no cell of such a world is priced
    for one (an estimate of minutes where there are seconds)."""
    from harness.cli import main
    from harness.config import make_config
    from harness.plan import cpu_rows, shared_builders
    from harness.spec import resolve
    from harness.throughput import cpu_cost
    from harness.worlds import get_world
    from tests.test_world_derive import _model

    d = tmp_path_factory.mktemp("plan-donor")
    src, donor = _model(d / "llama-unigram", "llama", "unigram"), _model(d / "llama-bpe", "llama", "bpe")
    assert main(["world", "derive", "plan-donor", "--from", "synthetic", "--source", str(src),
                 "--target-tokenizer", str(donor), "--donor", str(donor)]) == 0
    world = get_world("plan-donor", build=False)
    methods = {"methods": "clp,omp,clp+,random", "tasks": "sr-t", "seeds": [1, 2]}
    spec = resolve(make_config({"world": "plan-donor", **methods}), world, probe=False)
    helper = cpu_cost("synthetic", "src").shared("helper-model")
    assert all(r["init_s"] < helper for r in cpu_rows(spec, 2))
    assert shared_builders(list(spec.plan.cells), world="plan-donor") == {}
    plain = resolve(make_config({"world": "synthetic", **methods}), synthetic_world, probe=False)
    assert shared_builders(list(plain.plan.cells), world="synthetic") != {}
    # the bits-per-byte tasks score held-out text a language at a time, as retrieval encodes it: priced so, not as
    # NER's fine-tuning
    cost = cpu_cost("plan-donor", world.default_source)
    assert cost.task("clm") == cost.task("sr-t") < cost.task("ner") and cost.task("mlm-bpb") == cost.task("sr-t")


def test_waiting_for_a_hypernetwork_another_process_trains_is_not_the_waiters_cost(synthetic_world, tmp_path,
                                                                                    monkeypatch):
    """HyperOFA's hypernetwork is a shared product: a cell that finds another process training it waits (here: a
    second inside the product cache before the build), and that wait is not its own cost; its training is."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from harness.core.cache import ProductCache
    from harness.core.registry import METHODS
    from methods import own_cost
    from methods.factorize import factorize
    from tests.test_hyperofa import ctx_for

    s = AutoTokenizer.from_pretrained(synthetic_world.source_dir("src"))
    t = AutoTokenizer.from_pretrained(synthetic_world.target_tokenizer_dir)
    m = AutoModelForMaskedLM.from_pretrained(synthetic_world.source_dir("src"))
    coords = factorize(m.get_input_embeddings().weight.detach()[: len(s)].float().clone(), 16).coords
    real = ProductCache.get_or_build

    def after_a_wait(self, kind, inputs, build):
        time.sleep(1.0)  # another process holds the product's lock, then this one builds it
        return real(self, kind, inputs, build)

    monkeypatch.setattr(ProductCache, "get_or_build", after_a_wait)
    with own_cost.ledger() as book:
        t0 = time.perf_counter()
        METHODS.get("hyperofa")().initialize(ctx_for((synthetic_world, s, t, coords), cache_dir=tmp_path / "c"))
        call = time.perf_counter() - t0
    assert book.not_own[own_cost.WAITING] >= 0.95
    assert book.own(call) == pytest.approx(call - book.not_own[own_cost.WAITING])
