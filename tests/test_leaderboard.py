"""Leaderboard tests on runs written in the test with MlflowClient, in the runner's exact schema (fast), and on one
real `harness run` (through the CLI)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from harness.core.tracking import Tracker, metric_key

LANGS = ["aaa_Latn", "bbb_Latn", "ccc_Cyrl", "ddd_Grek"]
LANG_META = {
    "aaa_Latn": {"script": "Latn", "seen": True, "resource_level": "high", "text_chars": 900},
    "bbb_Latn": {"script": "Latn", "seen": False, "resource_level": "mid", "text_chars": 500},
    "ccc_Cyrl": {"script": "Cyrl", "seen": False, "resource_level": "low", "text_chars": 300},
    "ddd_Grek": {"script": "Grek", "seen": False, "resource_level": "low", "text_chars": 200},
}
LABELS = {"aaa_Latn": "gold", "bbb_Latn": "gold", "ccc_Cyrl": "gold", "ddd_Grek": "silver"}
N_ITEMS = 50
FINAL = 10
# correct queries (of 50) at the final step, per method, seed and language; None = language not evaluated
HITS = {
    ("alpha", 1): {"aaa_Latn": 40, "bbb_Latn": 30, "ccc_Cyrl": 20, "ddd_Grek": 10},
    ("alpha", 2): {"aaa_Latn": 42, "bbb_Latn": 30, "ccc_Cyrl": 24, "ddd_Grek": 10},
    ("beta", 1): {"aaa_Latn": 35, "bbb_Latn": 30, "ccc_Cyrl": 25, "ddd_Grek": 15},
    ("beta", 2): {"aaa_Latn": 35, "bbb_Latn": 30, "ccc_Cyrl": 27, "ddd_Grek": 13},
    ("gamma", 1): {"aaa_Latn": 45, "bbb_Latn": 5, "ccc_Cyrl": None, "ddd_Grek": 25},
}


def _items(hits: int, salt: int) -> dict:
    """50 queries with exactly ``hits`` correct ones, in a fixed shuffled order."""
    rng = np.random.default_rng(abs(salt))
    num = np.zeros(N_ITEMS)
    num[:hits] = 1.0
    rng.shuffle(num)
    return {"num": num.tolist(), "den": [1.0] * N_ITEMS, "transform": "identity"}


def _log_json(client: MlflowClient, run_id: str, obj: object, path: str) -> None:
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / Path(path).name
        p.write_text(json.dumps(obj))
        sub = str(Path(path).parent)
        client.log_artifact(run_id, str(p), None if sub == "." else sub)


def make_cell(client: MlflowClient, exp_id: str, method: str, seed: int, *, profile: str = "cpu",
              world: str = "fakeworld", source: str = "src", dim: str = "full", task: str = "sr-t",
              hits: dict | None = None, tables: bool = True, items: bool = True, init: dict | None = None,
              final: int = FINAL, params: dict | None = None,
              versions: dict | None = None) -> tuple[str, str]:
    """One parent run and its task run, as harness.runner writes them. Scores at step 0 are half the final ones."""
    from mlflow.entities import Metric, Param

    tags = {"harness.kind": "cell", "harness.method": method, "harness.source": source, "harness.dim": dim,
            "harness.seed": str(seed), "harness.profile": profile, "harness.world": world,
            "harness.final_step": str(final), "harness.cell": f"{method}-{seed}-{profile}-{source}-{dim}"}
    parent = client.create_run(exp_id, tags=tags, run_name=f"{method}-{dim}-s{seed}").info.run_id
    ps = {"method": method, "seed": str(seed), "world_hash": "abc123", "cpt.steps": str(final), "cpt.lr": "5e-5",
          **{f"method.{k}": str(v) for k, v in (params or {}).items()},
          **{f"version.{k}": str(v) for k, v in (versions or {}).items()}}
    client.log_batch(parent, params=[Param(k, v) for k, v in ps.items()])
    init = init or {"copied": 100, "method": 50, "random": 10, "unk": 0, "seconds": 1.0 + seed}
    ms = [Metric(f"init/{k}", float(v), 0, 0) for k, v in init.items()]
    ms += [Metric("cpt/train_loss", 5.0 - 0.1 * s - 0.01 * seed, 0, s) for s in range(1, final + 1)]
    ms += [Metric("cpt/heldout_loss", 5.0 - 0.05 * s, 0, s) for s in (0, final)]
    client.log_batch(parent, metrics=ms)
    _log_json(client, parent, {"method": method, "overlap_rule": "ofa", "counts": init,
                               "surgery": {"mode": "extension", "bias_policy": "remap"}}, "init_report.json")
    _log_json(client, parent, LANG_META, "languages.json")
    ttags = {k: v for k, v in tags.items() if k not in ("harness.kind", "harness.final_step")}
    ttags.update({"harness.kind": "task", "harness.task": task, "harness.parent": parent,
                  "mlflow.parentRunId": parent})
    trun = client.create_run(exp_id, tags=ttags, run_name=task).info.run_id
    hits = hits if hits is not None else HITS[(method, seed)]
    for step in (0, final):
        scores: dict[str, dict[str, float]] = {"acc@10": {}, "acc@1": {}}
        its: dict[str, dict[str, dict]] = {"acc@10": {}, "acc@1": {}}
        for lang, h in hits.items():
            if h is None:
                continue
            k = h if step == final else h // 2
            scores["acc@10"][lang] = k / N_ITEMS
            scores["acc@1"][lang] = (k // 2) / N_ITEMS
            salt = seed * 1000 + sum(map(ord, lang))
            its["acc@10"][lang] = _items(k, salt)
            its["acc@1"][lang] = _items(k // 2, salt + 7)
        metrics = [Metric(metric_key(task, m, lang), v, 0, step) for m, per in scores.items()
                   for lang, v in per.items()]
        metrics += [Metric(metric_key(task, m, "avg"), float(np.mean(list(per.values()))), 0, step)
                    for m, per in scores.items()]
        client.log_batch(trun, metrics=metrics)
        if tables:
            _log_json(client, trun, {"task": task, "step": step, "scores": scores, "averages": {},
                                     "label_source": {lang: LABELS.get(lang, "gold") for lang in scores["acc@10"]},
                                     "extras": {}, "seconds": 0.1}, f"tables/{task}_step{step}.json")
        if items:
            _log_json(client, trun, its, f"items/{task}_step{step}.json")
    client.set_terminated(trun)
    client.set_terminated(parent)
    return parent, trun


@pytest.fixture(scope="module")
def fake_exp(tracking_uri) -> str:
    """Experiment ``lb-fake``: alpha (2 seeds), beta (2 seeds; seed 2 without tables artifact: read from the metric
    histories), gamma (1 seed, no ccc_Cyrl, no items, logs a validation cosine), and alpha in another profile."""
    client = MlflowClient(tracking_uri)
    name = "lb-fake"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        make_cell(client, exp_id, "alpha", 1)
        make_cell(client, exp_id, "alpha", 2)
        make_cell(client, exp_id, "beta", 1)
        make_cell(client, exp_id, "beta", 2, tables=False)
        make_cell(client, exp_id, "gamma", 1, items=False,
                  init={"copied": 100, "method": 60, "random": 0, "unk": 0, "seconds": 9.0, "val_cosine": 0.75})
        make_cell(client, exp_id, "alpha", 1, profile="paper", hits={lang: 49 for lang in LANGS})
    return name


def _build(tracking_uri: str, name: str, **kw):
    from leaderboard.collect import collect_experiment
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    data = collect_experiment(client, client.get_experiment_by_name(name))
    return build_leaderboard(data, **kw)


@pytest.fixture(scope="module")
def lb(fake_exp, tracking_uri):
    return _build(tracking_uri, fake_exp, bootstrap=200)


def _board(lb, kind="final", metric="acc@10", profile="cpu", step=None):
    return next(b for b in lb.boards if b.kind == kind and b.metric == metric and b.profile == profile
                and (step is None or b.step == step))


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
        assert "2 of 2 tested claims of the papers hold on this run." in text, kind  # cpu and paper
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


# -- renderings -------------------------------------------------------------------------------------------
def _shown_numbers(b) -> list[str]:
    from leaderboard import fmt

    out = []
    for r in b.rows:
        out += [fmt.cell(b, e.mean) for e in r.entries.values()]
        out += [fmt.cell(b, r.avg)] if r.avg is not None else []
        out += [fmt.cell(b, r.avg_common), fmt.rank(r.mean_rank)]
    return out


def test_every_rendering_shows_the_table_numbers(lb):
    from leaderboard.render_csv import board_csv, long_csv
    from leaderboard.render_html import leaderboard_html
    from leaderboard.render_markdown import board_md, leaderboard_md
    from leaderboard.render_terminal import render_text

    b = _board(lb)
    text = render_text([b])
    md = leaderboard_md(lb)
    page = leaderboard_html(lb)
    for s in _shown_numbers(b):
        assert s in text and s in md and s in page, s
    for r in b.rows:
        assert r.label in text and r.label in md and r.label in page
    assert "gaps" in text and "gaps" in "\n".join(board_md(b))
    # csv: full precision, same numbers
    rows = {r["row"]: r for r in csv.DictReader(io.StringIO(board_csv(b)))}
    for r in b.rows:
        for lang in b.languages:
            v = r.value(lang)
            assert (rows[r.label][lang] == "") if v is None else float(rows[r.label][lang]) == v
        assert (rows[r.label]["avg"] == "") == (r.avg is None)
        assert r.mean_rank is None or float(rows[r.label]["mean_rank"]) == r.mean_rank
    long = list(csv.DictReader(io.StringIO(long_csv(lb))))
    cell = next(x for x in long if x["row"] == "alpha d=full" and x["language"] == "aaa_Latn"
                and x["kind"] == "final" and x["metric"] == "acc@10" and x["profile"] == "cpu")
    e = b.row("alpha d=full").entries["aaa_Latn"]
    assert float(cell["mean"]) == e.mean and float(cell["ci_low"]) == e.ci[0] and cell["n"] == "2"


def test_terminal_marks_the_best_per_column(lb):
    from rich.console import Console

    from leaderboard.render_terminal import render

    b = _board(lb)
    con = Console(width=300, record=True, force_terminal=True, color_system="truecolor", file=io.StringIO())
    render(b, con, details=False)
    out = con.export_text(styles=True)
    # gamma is best on aaa_Latn (0.900): printed bold green; alpha's 0.820 is not
    assert re.search(r"\x1b\[1;32m0\.900", out) and not re.search(r"\x1b\[1;32m0\.820", out)
    # a column where every row scores the same (jpn_Jpan NER: 0.000 for all) has no best, and nothing is painted
    from leaderboard.tables import Board, Entry, Row

    zero = Board("e", "ner", "f1", "cpu", True, "step", 0, [], [
        Row(m, {"jpn_Jpan": Entry([0.0], ["1"]), "fra_Latn": Entry([v], ["1"])}) for m, v in (("a", 0.2), ("b", 0.3))])
    assert zero.best("jpn_Jpan") is None and zero.best("fra_Latn") == 0.3
    con = Console(width=300, record=True, force_terminal=True, color_system="truecolor", file=io.StringIO())
    render(zero, con, details=False)
    assert not re.search(r"\x1b\[1;32m0\.000", con.export_text(styles=True))
    assert zero.best_of([0.0, 0.1, 0.1]) == 0.1 and zero.best_of([0.3]) == 0.3
    transposed = Console(width=300, record=True, file=io.StringIO())
    render(b, transposed, transpose=True, details=False)
    lines = transposed.export_text().splitlines()
    assert any(line.strip("│ ").startswith("aaa_Latn") for line in lines)  # languages are rows


def test_html_is_self_contained_and_sortable(lb):
    from leaderboard.render_html import leaderboard_html

    page = leaderboard_html(lb)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # nothing is fetched at view time: no external scripts, styles, images or fonts
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert not re.search(r"url\(|@import", page)
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert page.count("<svg") >= 3  # per-language bars, held-out and training loss curves
    assert 'class="board sortable"' in page and "addEventListener('click'" in page
    assert "gamma d=full" in page and "val cos" in page


# -- published figures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def glot_exp(tracking_uri) -> str:
    client = MlflowClient(tracking_uri)
    name = "lb-glot"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        for m in ("alpha", "beta"):
            make_cell(client, exp_id, m, 1, world="glot500", source="xlm-roberta-base", dim="100")
    return name


def test_paper_rows_beside_ours_never_ranked(glot_exp, tracking_uri, monkeypatch):
    calls = []

    def reference_scores(task, model_setting, step=None):
        calls.append((task, model_setting, step))
        if task != "sr-t":
            raise KeyError(task)
        return {"Ofa-multi-100": {"aaa_Latn": 99.0, "bbb_Latn": 99.0, "ccc_Cyrl": 99.0, "ddd_Grek": 99.0},
                "Random-multi-100": {"aaa_Latn": 1.0}}

    fake = types.ModuleType("harness.worlds.glot500")
    fake.reference_scores = reference_scores
    monkeypatch.setitem(sys.modules, "harness.worlds.glot500", fake)
    with_paper = _build(tracking_uri, glot_exp, bootstrap=0)
    b = _board(with_paper)
    assert ("sr-t", "multi-100", FINAL) in calls and ("sr-t", "multi-100", 0) in calls
    labels = [r.label for r in b.paper_rows]
    assert labels == ["paper: Ofa-multi-100", "paper: Random-multi-100"]
    ofa = b.row("paper: Ofa-multi-100")
    assert ofa.value("aaa_Latn") == pytest.approx(0.99) and ofa.mean_rank is None  # percentages -> fractions
    assert "published percentages divided by 100" in b.notes
    # our rows: same ranks and tests as without the published figures, although the paper row is "best"
    monkeypatch.setitem(sys.modules, "harness.worlds.glot500", None)  # module absent: no paper rows, no error
    plain = _board(_build(tracking_uri, glot_exp, bootstrap=0))
    assert plain.paper_rows == []
    assert [(r.label, r.mean_rank) for r in b.rows] == [(r.label, r.mean_rank) for r in plain.rows]
    assert [(p.a, p.b, p.p_value) for p in b.pairs] == [(p.a, p.b, p.p_value) for p in plain.pairs]
    assert b.best("aaa_Latn") == pytest.approx(0.8)
    from leaderboard.render_html import leaderboard_html

    assert '<tbody class="paper">' in leaderboard_html(with_paper)


def test_paper_rows_from_the_glot500_reference(tracking_uri):
    """With the glot500 world's own reference module: HyperOFA Table 13 (SR-T, multi-400) beside step-0 runs."""
    ref = pytest.importorskip("harness.worlds.glot500")
    if not hasattr(ref, "reference_scores"):
        pytest.skip("the glot500 world has no reference_scores")
    client = MlflowClient(tracking_uri)
    name = "lb-glot-ref"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        for m, hits in (("ofa", {"tur_Latn": 12, "ell_Grek": 10}), ("random", {"tur_Latn": 11, "ell_Grek": 9})):
            make_cell(client, exp_id, m, 1, world="glot500", source="xlm-roberta-base", dim="400", hits=hits,
                      final=0)
    lb = _build(tracking_uri, name, bootstrap=0)
    b = _board(lb, step=0)
    paper = {r.label: r for r in b.paper_rows}
    assert {"paper: ofa", "paper: random", "paper: hyperofa"} <= set(paper)
    assert paper["paper: ofa"].value("tur_Latn") == pytest.approx(0.222)  # 22.2 as printed, as a fraction
    assert paper["paper: hyperofa"].value("ell_Grek") == pytest.approx(0.203)
    assert [r.label for r in b.rows] == ["ofa d=400", "random d=400"] and b.rows[0].mean_rank == 1.0


# -- MLflow publishing ------------------------------------------------------------------------------------
def test_publish_logs_one_leaderboard_run_and_updates_it(fake_exp, tracking_uri, lb, tmp_path):
    from leaderboard.publish import publish

    tracker = Tracker(tracking_uri)
    client = tracker.client
    exp_id = client.get_experiment_by_name(fake_exp).experiment_id
    first = publish(tracker, lb, tmp_path / "out")
    second = publish(tracker, lb, tmp_path / "out")
    assert first.run_id == second.run_id
    runs = client.search_runs([exp_id], "tags.`harness.kind` = 'leaderboard'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    arts = {a.path for a in client.list_artifacts(first.run_id)}
    assert {"leaderboard.html", "leaderboard.md", "leaderboard.csv", "leaderboard.txt", "leaderboard.json",
            "tables", "csv"} <= arts
    b = _board(lb)
    table = f"tables/{b.id}.json"
    assert table in {a.path for a in client.list_artifacts(first.run_id, "tables")}
    doc = json.loads(Path(client.download_artifacts(first.run_id, table, str(tmp_path))).read_text())
    assert len(doc["data"]) == len(b.rows) + len(b.paper_rows)  # replaced on re-render, not appended to
    row = dict(zip(doc["columns"], doc["data"][[d[0] for d in doc["data"]].index("alpha d=full")], strict=True))
    assert row["aaa_Latn"] == pytest.approx(0.82) and row["avg"] == pytest.approx(b.row("alpha d=full").avg)
    logged = json.loads(runs[0].data.tags["mlflow.loggedArtifacts"])
    assert {"path": table, "type": "table"} in logged and len(logged) == len(lb.boards)
    assert "alpha d=full" in runs[0].data.tags["mlflow.note.content"]
    # headline summaries as metrics of the run, for the UI's charts and run comparison
    m = runs[0].data.metrics
    assert m["leaderboard/cpu/sr-t/acc_at_10/alpha d_full/avg"] == pytest.approx(b.row("alpha d=full").avg)
    assert m["leaderboard/cpu/sr-t/acc_at_10/gamma d_full/mean_rank"] == pytest.approx(5 / 3)
    assert "leaderboard/cpu/sr-t/acc_at_10/gamma d_full/avg" not in m  # gaps: no average
    assert (tmp_path / "out" / "leaderboard.html").is_file()
    assert len(list((tmp_path / "out" / "csv").glob("*.csv"))) == len(lb.boards)


def test_out_dir_names_are_safe(tmp_path):
    from leaderboard.publish import out_dir_for, safe_dir_name

    assert safe_dir_name("bible/xlmr") == Path("bible/xlmr")
    assert safe_dir_name("../../etc") == Path("etc")
    assert safe_dir_name("a b:c") == Path("a_b_c")
    assert out_dir_for("w/s", tmp_path, several=False) == tmp_path
    assert out_dir_for("w/s", tmp_path, several=True) == tmp_path / "w" / "s"


# -- the command -----------------------------------------------------------------------------------------
def test_leaderboard_command_prints_writes_and_logs(fake_exp, tracking_uri, tmp_path):
    from rich.console import Console

    from leaderboard.publish import run_leaderboard

    con = Console(width=400, record=True, file=io.StringIO())
    assert run_leaderboard(tracking_uri, fake_exp, out=tmp_path / "o", bootstrap=50, console=con) == 0
    out = con.export_text()
    assert "lb-fake · sr-t · acc@10 · step 10 (final) · profile cpu" in out
    assert "lb-fake · sr-t · acc@10 · step 10 (final) · profile paper" in out
    assert "acc@1 " not in out and "slices" in out and "paired Wilcoxon" in out
    assert f"HTML: {tmp_path / 'o' / 'leaderboard.html'}" in out
    con = Console(width=400, record=True, file=io.StringIO())
    run_leaderboard(tracking_uri, fake_exp, step="0", metric="acc@1", per_seed=True, write=False, console=con)
    out = con.export_text()
    assert "acc@1 · step 0 ·" in out and "alpha d=full s=2" in out and "HTML:" not in out
    con = Console(width=400, record=True, file=io.StringIO())
    run_leaderboard(tracking_uri, "no-such-experiment", console=con)
    assert "no results yet" in con.export_text()


@pytest.mark.slow
def test_cli_on_a_real_run(run_cli, tracking_uri, tmp_path):
    exp = "t-lb-real"
    run_cli("run", "--world", "synthetic", "--methods", "random", "--tasks", "mlm", "--seeds", "1,2",
            "--cpt-steps", "2", "--experiment", exp, check=True)
    out = tmp_path / "board"
    r = run_cli("leaderboard", "--experiment", exp, "--out", str(out), "--bootstrap", "100", check=True)
    langs = ["qaa_Latn", "qab_Latn", "qac_Latn", "qad_Cyrl", "qae_Grek"]
    assert all(lang in r.stdout for lang in langs) and "random d=full" in r.stdout
    assert "step 2 (final)" in r.stdout and "slices" in r.stdout
    html = out / "leaderboard.html"
    assert f"HTML: {html}" in r.stdout and html.is_file()
    # the printed per-language means are the means of the two seeds' logged values; the std matches the runner's
    # own aggregate run
    client = MlflowClient(tracking_uri)
    exp_id = client.get_experiment_by_name(exp).experiment_id
    tasks = client.search_runs([exp_id], "tags.`harness.kind` = 'task'")
    (agg,) = client.search_runs([exp_id], "tags.`harness.kind` = 'aggregate'")
    assert len(tasks) == 2
    for lang in langs:
        vals = [next(m.value for m in client.get_metric_history(t.info.run_id, f"mlm/loss/{lang}") if m.step == 2)
                for t in tasks]
        mean = sum(vals) / 2
        assert f"{mean:.3f}" in r.stdout
        hist = client.get_metric_history(agg.info.run_id, f"mlm/loss/{lang}/std")
        std = next(m.value for m in hist if m.step == 2)
        assert f"±{std:.3f}" in r.stdout
    (board_run,) = client.search_runs([exp_id], "tags.`harness.kind` = 'leaderboard'")
    assert "leaderboard.html" in {a.path for a in client.list_artifacts(board_run.info.run_id)}


def test_an_interrupted_render_marks_the_run_failed_and_the_next_one_repairs_it(fake_exp, tracking_uri, lb,
                                                                                  tmp_path, monkeypatch):
    from leaderboard.publish import publish

    tracker = Tracker(tracking_uri)

    def broken(*a, **k):
        raise OSError("artifact store unavailable")

    with monkeypatch.context() as m:
        m.setattr(tracker.client, "log_table", broken)
        with pytest.raises(OSError):
            publish(tracker, lb, tmp_path / "o")
    exp_id = tracker.client.get_experiment_by_name(fake_exp).experiment_id
    (run,) = tracker.client.search_runs([exp_id], "tags.`harness.kind` = 'leaderboard'")
    assert run.info.status == "FAILED" and "artifact store unavailable" in run.data.tags["harness.error"]
    again = publish(tracker, lb, tmp_path / "o")
    run = tracker.client.get_run(again.run_id)
    assert again.run_id == run.info.run_id and run.info.status == "FINISHED"
    assert "harness.error" not in run.data.tags


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
    labels = variant_labels([plain, variant, other])
    assert labels == {plain: "focus d=full (defaults)", variant: "focus d=full (overlap=casefold, specials=role)",
                      other: "ofa d=full"}
    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    console.print(labels[variant])
    assert "(overlap=casefold, specials=role)" in console.export_text()


# -- terminal width ---------------------------------------------------------------------------------------
WIDE_LANGS = [f"l{i:02d}_{'Latn' if i % 3 else 'Cyrl'}" for i in range(14)]  # 14: languages stay columns
WIDE_METHODS = ["alpha", "wechsel+overlap-long-variant", "beta", "focus-with-a-long-name"]


@pytest.fixture(scope="module")
def wide_exp(tracking_uri) -> str:
    """Experiment ``lb-wide``: 14 languages and long method names, far wider than 100 columns."""
    client = MlflowClient(tracking_uri)
    name = "lb-wide"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        for k, m in enumerate(WIDE_METHODS):
            make_cell(client, exp_id, m, 1, world="wideworld",
                      hits={lang: (7 * i + 11 * k) % 50 for i, lang in enumerate(WIDE_LANGS)})
    return name


_BOX_PAIRS = {"┏": "┓", "┃": "┃", "┡": "┩", "│": "│", "├": "┤", "└": "┘"}


def _check_fits(text: str, width: int) -> None:
    from rich.cells import cell_len

    for line in text.splitlines():
        assert cell_len(line) <= width and len(line) <= width, line
        body = line.rstrip()
        if body[:1] in _BOX_PAIRS:  # a table line is never cut: it closes with its own border
            assert body[-1] == _BOX_PAIRS[body[0]], line


@pytest.mark.parametrize("columns", ["100", None])
def test_piped_leaderboard_fits_100_columns_and_keeps_every_language(run_cli, wide_exp, tmp_path, columns):
    """``COLUMNS=100 harness leaderboard | cat`` (and piped without COLUMNS: 100): no line over 100 cells, no
    table cut at a border, every language column and every row shown; the files keep the whole tables."""
    out = tmp_path / "o"
    env = {"COLUMNS": columns} if columns else {}
    proc = run_cli("leaderboard", "--experiment", wide_exp, "--out", str(out), "--no-log", "--bootstrap", "0",
                   env=env, check=True)
    text = proc.stdout
    _check_fits(text, 100)
    board = text[text.index("lb-wide · sr-t · acc@10 · step 10 (final)"):text.index("slices ·")]
    assert "part 1/" in board  # it did not fit in one table
    for lang in WIDE_LANGS:
        assert re.search(rf"┃ +{lang} +┃", board), lang
    for m in WIDE_METHODS:
        assert re.search(rf"│ {re.escape(m)} ", board), m  # every row, its name wrapped at words only
    for col in ("avg", "rank", "copied", "method", "random"):
        assert re.search(rf"┃ +{col} +┃", board), col
    # the text file holds the whole board in one table: one header line with every language
    whole = (out / "leaderboard.txt").read_text()
    assert any(all(lang in line for lang in WIDE_LANGS) for line in whole.splitlines())


def test_terminal_tables_split_at_any_width_and_drop_nothing(lb):
    from rich.console import Console

    from leaderboard.render_terminal import render, render_claims

    b = _board(lb)
    for width in (40, 60, 100, 300):
        con = Console(width=width, record=True, file=io.StringIO())
        render_claims(lb.claims, con)
        render(b, con)
        text = con.export_text()
        _check_fits(text, width)
        for lang in b.languages:
            assert lang in text
        for s in _shown_numbers(b):
            assert s in text, (width, s)
        assert ("part 1/" in text) == (width < 300), width  # split where it must be, whole where it fits


def test_a_column_where_every_row_scores_the_same_is_named_in_every_rendering():
    from rich.console import Console

    from leaderboard.render_html import board_html
    from leaderboard.render_markdown import board_md
    from leaderboard.render_terminal import render
    from leaderboard.tables import Board, Entry, Leaderboard, Row

    zero = Board("e", "ner", "f1", "cpu", True, "step", 0, ["fra_Latn", "jpn_Jpan"], [
        Row(m, {"jpn_Jpan": Entry([0.0], ["1"]), "fra_Latn": Entry([v], ["1"])}) for m, v in (("a", 0.2), ("b", 0.3))])
    note = "no best in jpn_Jpan (every row 0.000)"
    con = Console(width=200, record=True, file=io.StringIO())
    render(zero, con, details=False)
    assert note in con.export_text()
    md = "\n".join(board_md(zero))
    assert note in md and "**0.000**" not in md and "**0.300**" in md
    page = board_html(Leaderboard("e", [zero], [], {}, []), zero)
    assert note in page and page.count('class="tie"') == 2 and page.count('class="best"') == 1
    # a tie between some rows above the rest is still the best
    top = Board("e", "ner", "f1", "cpu", True, "step", 0, ["fra_Latn"], [
        Row(m, {"fra_Latn": Entry([v], ["1"])}) for m, v in (("a", 0.3), ("b", 0.3), ("c", 0.1))])
    assert "no best" not in "\n".join(board_md(top)) and "**0.300**" in "\n".join(board_md(top))
