"""Leaderboard tables and their statistics (means, ranks, bootstrap intervals, paired tests, slices), on runs
written in the test with MlflowClient in the runner's exact schema (``tests/_leaderboard_runs.py``)."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests._leaderboard_runs import FINAL, LANGS, _board, _build, make_cell


# -- tables -----------------------------------------------------------------------------------------------
def test_board_means_std_and_seed_aggregation(lb):
    b = _board(lb)
    assert b.step == FINAL and b.task == "sr-t" and b.higher_is_better
    assert [r.label for r in b.rows] == ["gamma d=full", "alpha d=full", "beta d=full"]
    alpha = b.row("alpha d=full")
    e = alpha.entries["aaa_Latn"]
    assert e.values == [0.8, 0.84] and e.seeds == ["1", "2"]
    assert e.mean == pytest.approx(0.82) and e.std == pytest.approx(np.std([0.8, 0.84], ddof=1))
    beta = b.row("beta d=full")  # seed 2 came from the metric histories: same numbers
    assert beta.entries["ccc_Cyrl"].values == [0.5, 0.54]
    assert b.row("gamma d=full").entries["aaa_Latn"].std is None
    # every step is a board: step 0, the final step, and the delta
    assert {(x.kind, x.step) for x in lb.boards if x.metric == "acc@10" and x.profile == "cpu"} == {
        ("step", 0), ("final", FINAL), ("delta", FINAL)}
    assert _board(lb, "step", step=0).row("alpha d=full").entries["aaa_Latn"].values == [0.4, 0.42]


def test_averages_skip_incomplete_rows(lb):
    b = _board(lb)
    assert b.languages == LANGS and b.common == ["aaa_Latn", "bbb_Latn", "ddd_Grek"]
    assert b.row("alpha d=full").avg == pytest.approx((0.82 + 0.6 + 0.44 + 0.2) / 4)
    assert b.row("beta d=full").avg == pytest.approx((0.7 + 0.6 + 0.52 + 0.28) / 4)
    gamma = b.row("gamma d=full")
    assert gamma.avg is None and "ccc_Cyrl" not in gamma.entries  # shown as a gap, no average
    assert gamma.avg_common == pytest.approx((0.9 + 0.1 + 0.5) / 3)
    assert b.row("alpha d=full").avg_common == pytest.approx((0.82 + 0.6 + 0.2) / 3)


def test_mean_ranks_with_ties(lb):
    b = _board(lb)
    # aaa: gamma 1, alpha 2, beta 3; bbb: alpha = beta = 0.6 share 1.5, gamma 3; ddd: gamma 1, beta 2, alpha 3
    assert b.row("gamma d=full").mean_rank == pytest.approx((1 + 3 + 1) / 3)
    assert b.row("alpha d=full").mean_rank == pytest.approx((2 + 1.5 + 3) / 3)
    assert b.row("beta d=full").mean_rank == pytest.approx((3 + 1.5 + 2) / 3)
    # equal mean rank: the higher common average comes first
    assert [r.label for r in b.rows][1:] == ["alpha d=full", "beta d=full"]


def test_rank_helpers():
    from leaderboard.stats import mean_ranks, ranks_with_ties

    assert ranks_with_ties([0.9, 0.5, 0.5, 0.1], higher_is_better=True) == [1.0, 2.5, 2.5, 4.0]
    assert ranks_with_ties([3.0, 1.0, 2.0], higher_is_better=False) == [3.0, 1.0, 2.0]
    r = mean_ranks({"a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3}, "c": {"x": 0}}, ["x", "y"], True)
    assert r == {"a": 1.75, "b": 1.25, "c": None}
    from scipy.stats import rankdata  # the ranks scipy gives, on many small samples with many ties

    rng = np.random.default_rng(0)
    for _ in range(500):
        v = rng.integers(0, 4, rng.integers(1, 10)).astype(float)
        for higher in (True, False):
            assert ranks_with_ties(list(v), higher) == list(rankdata(-v if higher else v, method="average"))


def test_profiles_are_never_mixed(lb):
    cpu = _board(lb)
    paper = _board(lb, profile="paper")
    assert [r.label for r in paper.rows] == ["alpha d=full"]
    assert paper.row("alpha d=full").entries["aaa_Latn"].values == [0.98]
    assert all(0.98 not in r.entries["aaa_Latn"].values for r in cpu.rows)


def test_a_table_mixing_major_library_versions_says_so(tracking_uri, lb):
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment("lb-versions")
    make_cell(client, exp_id, "alpha", 1, versions={"torch": "2.13.0+cpu", "transformers": "5.24.0"})
    make_cell(client, exp_id, "beta", 1, versions={"torch": "2.14.1", "transformers": "6.0.0"})
    mixed = _board(_build(tracking_uri, "lb-versions", bootstrap=0))
    assert any("different major versions of transformers (5, 6)" in n for n in mixed.notes), mixed.notes
    assert not any("torch" in n for n in mixed.notes)  # 2.13 and 2.14 share a major version
    assert not any("major versions" in n for n in _board(lb).notes)


def test_a_table_names_its_task_protocol_and_rows_that_ran_another(tracking_uri, lb):
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment("lb-protocol")
    proto = {"epochs": 2, "lr": 0.0003, "label_subtoken": "first-nonmarker"}
    make_cell(client, exp_id, "alpha", 1, task_params={**proto, "seed": 1})
    make_cell(client, exp_id, "alpha", 2, task_params={**proto, "seed": 2})
    notes = _board(_build(tracking_uri, "lb-protocol", bootstrap=0)).notes
    (note,) = [n for n in notes if "protocol" in n]
    assert note == "sr-t protocol: epochs=2, label_subtoken=first-nonmarker, lr=0.0003"  # the seed is the row's own
    make_cell(client, exp_id, "beta", 1, task_params={**proto, "lr": 0.0001, "seed": 1})
    notes = _board(_build(tracking_uri, "lb-protocol", bootstrap=0)).notes
    assert "sr-t protocol: epochs=2, label_subtoken=first-nonmarker" in notes
    assert "rows ran different sr-t protocols (lr: 0.0001, 0.0003): their numbers may not be comparable" in notes
    assert not any("protocol" in n for n in _board(lb).notes)  # runs that logged no settings: nothing claimed


def test_a_table_names_its_incomplete_cells(tracking_uri, lb):
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment("lb-incomplete")
    make_cell(client, exp_id, "alpha", 1)
    killed, _ = make_cell(client, exp_id, "beta", 1)
    client.set_terminated(killed, status="KILLED")
    notes = _board(_build(tracking_uri, "lb-incomplete", bootstrap=0)).notes
    (note,) = [n for n in notes if "incomplete cells" in n]
    assert "beta" in note and "KILLED" in note and "alpha" not in note
    assert not any("incomplete" in n for n in _board(lb).notes)


def test_claims_on_a_board_without_the_papers_methods(lb, tmp_path):
    """alpha/beta/gamma are no paper's methods: every pairwise claim is not tested; the held-out MLM curves of
    every row fall, so the CPT claim holds; every rendering carries the table and its sentence."""
    from leaderboard.publish import write_files

    cpu = [c for c in lb.claims if c.profile == "cpu"]
    assert {c.status for c in cpu if c.claim.kind != "cpt"} == {"not tested"}
    (cpt,) = [c for c in cpu if c.claim.kind == "cpt"]
    assert cpt.status == "holds" and cpt.task == "held-out diagnostic"
    files = write_files(lb, tmp_path, generated="now")
    for kind in ("md", "html", "txt"):
        text = files[kind].read_text()
        assert ("2 hold, 0 contradicted, 0 inconclusive of the 2 tested claims of the papers on this run"
                in text), kind  # cpu and paper
        assert "CPT lowers the held-out MLM loss for every method" in text, kind
    assert json.loads(files["json"].read_text())["claims"][0]["status"] == "not tested"


def test_init_report_columns(lb):
    b = _board(lb)
    alpha, gamma = b.row("alpha d=full"), b.row("gamma d=full")
    assert alpha.init["init/copied"] == 100 and alpha.init["init/seconds"] == pytest.approx(2.5)  # mean of 2, 3
    assert "init/val_cosine" not in alpha.init and gamma.init["init/val_cosine"] == 0.75
    assert [name for _, name in b.init_columns()] == ["copied", "method", "random", "init s", "val cos"]
    v = next(x for x in lb.variants if x.label == "alpha d=full" and x.profile == "cpu")
    assert v.settings["overlap rule"] == "ofa" and v.settings["seeds"] == "1, 2"
    assert "lr=5e-5" in v.settings["CPT"] and v.settings["LM-head bias"] == "remap"
    assert v.curves["cpt/heldout_loss"] == [(0, 5.0), (FINAL, pytest.approx(4.5))]


# -- bootstrap --------------------------------------------------------------------------------------------
def test_bootstrap_is_deterministic_and_contains_the_estimate(fake_exp, tracking_uri, lb):
    again = _build(tracking_uri, fake_exp, bootstrap=200)
    other = _build(tracking_uri, fake_exp, bootstrap=200, bootstrap_seed=7)
    b, b2, b3 = _board(lb), _board(again), _board(other)
    n_ci = 0
    for r in b.rows:
        for lang, e in r.entries.items():
            assert e.ci == b2.row(r.label).entries[lang].ci  # same seed, same interval
            if e.ci is None:
                continue
            n_ci += 1
            assert e.ci[0] <= e.mean <= e.ci[1]
            assert e.ci[1] - e.ci[0] > 0
    assert n_ci == 8  # alpha and beta: 4 languages each
    assert b.row("gamma d=full").entries["aaa_Latn"].ci is None  # one seed, no items: nothing to resample
    assert any(b3.row(r.label).entries[lang].ci != e.ci for r in b.rows for lang, e in r.entries.items() if e.ci)


def test_bootstrap_levels():
    from leaderboard.stats import ItemSample, SeedSample, bootstrap_ci

    # items only: close to the binomial normal interval
    num = np.zeros(400)
    num[:200] = 1
    s = SeedSample(0.5, [(1.0, ItemSample(num, np.ones(400)))])
    lo, hi = bootstrap_ci([s], resamples=1000, seed=3, key="k")
    se = math.sqrt(0.25 / 400)
    assert lo == pytest.approx(0.5 - 1.96 * se, abs=0.01) and hi == pytest.approx(0.5 + 1.96 * se, abs=0.01)
    assert bootstrap_ci([s], resamples=1000, seed=3, key="k") == (lo, hi)
    assert bootstrap_ci([s], resamples=1000, seed=3, key="other") != (lo, hi)
    # seeds only: the interval of a mean of three values stays within their range
    lo, hi = bootstrap_ci([SeedSample(v) for v in (1.0, 2.0, 3.0)], resamples=500, seed=0, key="s")
    assert 1.0 <= lo < 2.0 < hi <= 3.0
    assert bootstrap_ci([SeedSample(1.0)], resamples=500) is None
    # the exp transform (perplexity from summed losses) is applied per replicate
    ppl = ItemSample(np.array([2.0, 2.0]), np.array([1.0, 1.0]), "exp")
    assert ppl.value() == pytest.approx(math.exp(2.0))


def test_delta_board_pairs_the_steps(lb):
    d = _board(lb, "delta")
    alpha = d.row("alpha d=full").entries["aaa_Latn"]
    assert alpha.values == pytest.approx([(40 - 20) / 50, (42 - 21) / 50])
    assert alpha.ci is not None and alpha.ci[0] <= alpha.mean <= alpha.ci[1]
    assert d.step_label == f"delta step {FINAL} - step 0"
    # the cpu profile's post-CPT tables say they are a smoke test; step 0 and the paper profile do not
    assert any("smoke test" in n for n in d.notes) and any("smoke test" in n for n in _board(lb, "final").notes)
    assert not any("smoke test" in n for n in _board(lb, "step", step=0).notes)
    assert not any("smoke test" in n for n in _board(lb, "final", profile="paper").notes)


# -- paired test ------------------------------------------------------------------------------------------
def test_paired_wilcoxon_on_a_crafted_case():
    from leaderboard.stats import holm, paired_test

    a = {f"l{i}": 0.5 + 0.05 * i for i in range(6)}
    b = {k: v - 0.1 for k, v in a.items()}
    a["tie"] = b["tie"] = 0.3
    t = paired_test("A", "B", a, b, higher_is_better=True)
    assert (t.n, t.wins, t.ties, t.losses) == (7, 6, 1, 0)
    assert t.p_value == pytest.approx(2 / 2 ** 6)  # exact: all six non-zero differences positive
    assert t.statistic == 0.0 and t.median_diff == pytest.approx(0.1)
    lower = paired_test("A", "B", a, b, higher_is_better=False)  # for a loss, A is worse everywhere
    assert (lower.wins, lower.losses) == (0, 6) and lower.p_value == t.p_value
    same = paired_test("A", "B", {"x": 1.0}, {"x": 1.0}, True)
    assert same.p_value == 1.0 and same.ties == 1
    assert holm([0.01, 0.04, 0.03, None]) == [pytest.approx(0.03), pytest.approx(0.06), pytest.approx(0.06), None]


def test_board_pairs(lb):
    b = _board(lb)
    ab = next(p for p in b.pairs if {p.a, p.b} == {"alpha d=full", "beta d=full"})
    sign = 1 if ab.a == "alpha d=full" else -1
    # alpha - beta: aaa +0.12, bbb 0 (tie), ccc -0.08, ddd -0.08
    assert ab.n == 4 and ab.ties == 1
    assert (ab.wins, ab.losses) == ((1, 2) if sign == 1 else (2, 1))
    assert len(b.pairs) == 3 and all(p.p_holm is not None and p.p_holm >= p.p_value for p in b.pairs)


# -- slices -----------------------------------------------------------------------------------------------
def _slice(b, dim, value):
    return next(s for s in b.slices if s.dimension == dim and s.value == value)


def test_slices(lb):
    b = _board(lb)
    assert {(s.dimension, s.value) for s in b.slices} == {
        ("script", "Latn"), ("script", "Cyrl"), ("script", "Grek"), ("seen", "seen"), ("seen", "unseen"),
        ("resource level", "high"), ("resource level", "mid"), ("resource level", "low"),
        ("label source", "gold"), ("label source", "silver")}
    latn = _slice(b, "script", "Latn")
    assert latn.averages["alpha d=full"] == pytest.approx((0.82 + 0.6) / 2)
    assert latn.averages["gamma d=full"] == pytest.approx((0.9 + 0.1) / 2)
    assert _slice(b, "script", "Cyrl").averages["gamma d=full"] is None  # gamma has no ccc_Cyrl
    unseen = _slice(b, "seen", "unseen")
    assert unseen.averages["beta d=full"] == pytest.approx((0.6 + 0.52 + 0.28) / 3)
    assert unseen.averages["gamma d=full"] is None
    assert _slice(b, "seen", "seen").averages["gamma d=full"] == pytest.approx(0.9)
    assert _slice(b, "label source", "silver").averages["beta d=full"] == pytest.approx(0.28)
    assert _slice(b, "resource level", "low").languages["alpha d=full"] == ["ccc_Cyrl", "ddd_Grek"]
    d = _board(lb, "delta")
    assert _slice(d, "script", "Grek").averages["alpha d=full"] == pytest.approx((10 - 5) / 50)


def test_select_boards(lb):
    from harness.core.errors import ConfigError
    from leaderboard.tables import select_boards

    assert [(b.kind, b.metric) for b in select_boards(lb.boards, step="final") if b.profile == "cpu"] == [
        ("final", "acc@10")]
    assert {b.step for b in select_boards(lb.boards, step="0")} == {0}
    assert len(select_boards(lb.boards, step="all", metric="all")) == len(lb.boards)
    assert all(b.metric == "acc@1" for b in select_boards(lb.boards, step="all", metric="acc@1"))
    with pytest.raises(ConfigError):
        select_boards(lb.boards, step="later")


def test_variant_labels_name_only_the_parameters_that_differ_and_survive_the_terminal():
    """Two FOCUS rows: one run logged only the profile's settings, the other every parameter with two changed; the
    labels name just the changed ones (the method's declared defaults fill what a run did not log), in a form the
    terminal's markup does not swallow."""
    from rich.console import Console

    from leaderboard.tables import VariantKey, variant_labels

    plain = VariantKey("focus", "full", "src", json.dumps({"dim": "100", "max_lines": "None"}))
    every = {"dim": "100", "max_lines": "None", "epochs": "3", "overlap": "casefold", "specials": "role"}
    variant = VariantKey("focus", "full", "src", json.dumps(every))
    other = VariantKey("ofa", "full", "src", "{}")
    from harness.cell import method_tags
    from harness.core.registry import METHODS

    defaults = {"focus": json.loads(method_tags(METHODS.get("focus"))["method_defaults"])}  # as the cells are tagged
    labels = variant_labels([plain, variant, other], defaults)
    assert labels == {plain: "focus d=full (defaults)", variant: "focus d=full (overlap=casefold, specials=role)",
                      other: "ofa d=full"}
    # cells logged before the tag: every parameter that differs is named
    assert variant_labels([plain, variant, other])[variant] == \
        "focus d=full (epochs=3, overlap=casefold, specials=role)"
    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    console.print(labels[variant])
    assert "(overlap=casefold, specials=role)" in console.export_text()


def test_untagged_task_facts_are_the_builtin_tasks_facts():
    """Runs logged before the task tags existed are read with what each built-in task declares (read from its
    source, not imported): the same facts its tagged runs carry."""
    from harness.core.record_read import task_facts_from_tags
    from harness.core.registry import TASKS
    from harness.evaluation import task_tags
    from leaderboard.collect import untagged_task_facts

    for name in TASKS.names():
        assert untagged_task_facts(name) == task_facts_from_tags(task_tags(TASKS.get(name))), name
    assert untagged_task_facts("no-such-task").headline is None


def test_the_task_tags_decide_the_headline_and_the_direction(tracking_uri):
    """A task no registry here knows: its runs' tags say the headline metric and that lower is better; a tag-less
    run of it has no headline and ranks higher-is-better."""
    client = MlflowClient(tracking_uri)
    for name, tagged in (("lb-tagged", True), ("lb-untagged", False)):
        exp_id = client.create_experiment(name)
        for method, seed in (("alpha", 1), ("beta", 1)):
            _, trun = make_cell(client, exp_id, method, seed, task="xq")
            if tagged:
                for k, v in {"headline": "acc@1", "higher_is_better": "false", "metrics": "acc@1,acc@10"}.items():
                    client.set_tag(trun, f"harness.task.{k}", v)
        lb = _build(tracking_uri, name, bootstrap=0)
        finals = [b for b in lb.boards if b.kind == "final" and b.profile == "cpu"]
        if tagged:
            assert [b.metric for b in finals] == ["acc@1", "acc@10"]
            assert [b.metric for b in finals if b.headline] == ["acc@1"]
            assert not any(b.higher_is_better for b in finals)
            board = finals[0]
            best = min(board.rows, key=lambda r: r.mean_rank)
            assert best.avg == min(r.avg for r in board.rows) < max(r.avg for r in board.rows)  # lower ranks first
        else:
            assert not any(b.headline for b in finals) and all(b.higher_is_better for b in finals)
