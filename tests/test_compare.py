"""``harness compare A B`` on two real experiments made by small synthetic runs (through the CLI), on runs and on
leaderboard folders, and the interval and significance logic on crafted rows."""

from __future__ import annotations

import csv
import io
import statistics

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from leaderboard.compare import SideRow, compare, lang_diff
from leaderboard.stats import ItemSample

EXP_A, EXP_B = "cmp-a", "cmp-b"
METHODS = "random,fvt"


@pytest.fixture(scope="module")
def two_experiments(harness_home, tracking_uri):
    """Two experiments on the synthetic world: the same methods, A with seed 1, B with seeds 2 and 3."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "HARNESS_HOME": str(harness_home), "MLFLOW_TRACKING_URI": tracking_uri,
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for exp, seeds in ((EXP_A, "1"), (EXP_B, "2,3")):
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--world", "synthetic", "--methods",
                               METHODS, "--tasks", "sr-t,mlm", "--cpt-steps", "0", "--seeds", seeds,
                               "--workers", "1", "--experiment", exp], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=900)
        assert proc.returncode == 0, proc.stderr
    return EXP_A, EXP_B


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _metric(client: MlflowClient, exp: str, method: str, seed: str, key: str) -> float:
    eid = client.get_experiment_by_name(exp).experiment_id
    runs = client.search_runs([eid], filter_string=f"tags.`harness.kind` = 'task' and tags.`harness.method` = "
                                                   f"'{method}' and tags.`harness.seed` = '{seed}'")
    return next(r.data.metrics[key] for r in runs if key in r.data.metrics)


def test_compare_two_experiments_per_task_and_language(run_cli, two_experiments, tracking_uri, tmp_path):
    a, b = two_experiments
    out = tmp_path / "cmp.csv"
    run_cli("compare", a, b, "--format", "csv", "--out", str(out), check=True)
    rows = _csv(out.read_text())
    client = MlflowClient(tracking_uri)
    tasks = {r["task"] for r in rows}
    assert tasks == {"sr-t", "mlm"}
    assert {r["metric"] for r in rows} == {"acc@10", "loss"}  # the headlines
    assert {r["row_a"] for r in rows} == {"random d=full", "fvt d=full"} and all(r["row_a"] == r["row_b"]
                                                                                 for r in rows)
    langs = [r for r in rows if not r["language"].startswith("avg")]
    assert langs and all(r["step"] == "final" for r in rows)
    for r in langs:
        a_v = _metric(client, a, r["row_a"].split()[0], "1", f"{r['task']}/{r['metric'].replace('@', '_at_')}"
                      f"/{r['language']}")
        b_vals = [_metric(client, b, r["row_b"].split()[0], s, f"{r['task']}/{r['metric'].replace('@', '_at_')}"
                          f"/{r['language']}") for s in ("2", "3")]
        assert float(r["a"]) == pytest.approx(a_v) and float(r["b"]) == pytest.approx(np.mean(b_vals))
        assert float(r["diff"]) == pytest.approx(float(r["a"]) - float(r["b"]))
        assert r["seeds_a"] == "1" and r["seeds_b"] == "2"
        # A has one seed with items, B two seeds with items: both sides resampled, never paired across seeds
        assert r["resampled"] == "seeds + items"
        lo, hi = float(r["ci_low"]), float(r["ci_high"])
        assert lo <= hi
        assert r["significant"] == ("yes" if lo > 0 or hi < 0 else "no")
        hib = r["higher_is_better"] == "True"
        better = "" if r["significant"] == "no" else ("A" if (float(r["diff"]) > 0) == hib else "B")
        assert r["better"] == better
    avgs = [r for r in rows if r["language"].startswith("avg")]
    assert len(avgs) == 4 and all(r["resampled"] == "languages + seeds; Wilcoxon" for r in avgs)


def test_an_experiment_against_itself_differs_nowhere(run_cli, two_experiments):
    a, _ = two_experiments
    proc = run_cli("compare", a, a, "--task", "sr-t", "--format", "md", check=True)
    md = proc.stdout
    assert md.startswith(f"# {a} vs {a}")
    assert "## sr-t · acc@10 · step 0 (final) · profile cpu · row random d=full" in md
    lines = [x for x in md.splitlines() if x.startswith("| ") and "_" in x.split("|")[1]]
    assert lines
    for x in lines:
        cells = [c.strip() for c in x.strip("|").split("|")]
        assert cells[3] == "+0.000" and cells[4] == "[+0.000, +0.000]" and cells[5] == "no", x
        assert cells[9] == "items, paired"  # one seed a side, the same world and test items: paired


def test_compare_two_runs_and_two_leaderboard_folders(run_cli, two_experiments, tracking_uri, tmp_path):
    a, b = two_experiments
    client = MlflowClient(tracking_uri)
    eid = client.get_experiment_by_name(a).experiment_id
    cells = {r.data.tags["harness.method"]: r.info.run_id
             for r in client.search_runs([eid], filter_string="tags.`harness.kind` = 'cell'")}
    # two runs (fvt against random): one row each, compared although their labels differ
    proc = run_cli("compare", cells["fvt"], cells["random"], "--format", "csv", "--task", "sr-t", check=True)
    rows = _csv(proc.stdout)
    assert {(r["row_a"], r["row_b"]) for r in rows} == {("fvt d=full", "random d=full")}
    assert all(r["resampled"] == "items, paired" for r in rows if not r["language"].startswith("avg"))
    # a task run stands for its cell
    tid = client.search_runs([eid], filter_string=f"tags.`harness.kind` = 'task' and tags.`harness.parent` = "
                                                  f"'{cells['fvt']}' and tags.`harness.task` = 'sr-t'")[0].info.run_id
    again = _csv(run_cli("compare", tid, cells["random"], "--format", "csv", "--task", "sr-t", check=True).stdout)
    assert [r["diff"] for r in again] == [r["diff"] for r in rows]
    # leaderboard folders: per-seed values only, so B's two seeds are resampled and A's single one is not
    for exp, d in ((a, "la"), (b, "lb")):
        run_cli("leaderboard", "--experiment", exp, "--out", str(tmp_path / d), "--no-log", "--bootstrap", "0",
                check=True)
    folder = _csv(run_cli("compare", str(tmp_path / "la"), str(tmp_path / "lb"), "--format", "csv",
                          check=True).stdout)
    exp_rows = _csv(run_cli("compare", a, b, "--format", "csv", check=True).stdout)
    key = ("task", "row_a", "language")
    by = {tuple(r[k] for k in key): r for r in exp_rows}
    assert len(folder) == len(exp_rows)
    for r in folder:
        other = by[tuple(r[k] for k in key)]
        assert float(r["diff"]) == pytest.approx(float(other["diff"]))
        if not r["language"].startswith("avg"):
            assert r["ci_low"] == "" and r["significant"] == "" and r["resampled"] == ""


def test_compare_names_what_it_cannot_find(run_cli, two_experiments, tmp_path):
    proc = run_cli("compare", "no-such-experiment", two_experiments[0])
    assert proc.returncode == 2 and "neither a leaderboard folder, a run id nor an experiment" in proc.stderr
    assert "cmp-a" in proc.stderr  # the experiments that do exist
    (tmp_path / "empty").mkdir()
    proc = run_cli("compare", str(tmp_path / "empty"), two_experiments[0])
    assert proc.returncode == 2 and "without leaderboard.json" in proc.stderr


def _row(label: str, hits: dict[str, list[int]], n: int = 200, world: str = "w") -> SideRow:
    """A row whose seeds answered ``hits`` of ``n`` items correctly per language (items in a fixed order)."""
    r = SideRow(label, world=world)
    for lang, per_seed in hits.items():
        r.values[lang] = [h / n for h in per_seed]
        r.items[lang] = [ItemSample(np.r_[np.ones(h), np.zeros(n - h)], np.ones(n)) for h in per_seed]
    return r


def test_interval_and_significance_on_crafted_rows():
    a = _row("m", {"x": [150], "y": [100]})
    b = _row("m", {"x": [50], "y": [100]})
    d = lang_diff("x", a, b, resamples=500, seed=0, key="k")
    assert d.diff == pytest.approx(0.5) and d.resampled == "items, paired"
    assert d.lo > 0.3 and d.significant and d.p == 0.0
    same = lang_diff("y", a, b, resamples=500, seed=0, key="k")
    assert same.diff == 0 and not same.significant and same.p == 1.0
    # rows of different worlds: the items are not the same sentences, so each side is resampled on its own
    other = _row("m", {"x": [50]}, world="v")
    assert lang_diff("x", a, other, resamples=200, seed=0, key="k").resampled == "items"
    # no items and one seed a side: no interval, nothing called significant
    bare_a, bare_b = SideRow("m", values={"x": [0.9]}), SideRow("m", values={"x": [0.1]})
    bare = lang_diff("x", bare_a, bare_b, resamples=200, seed=0, key="k")
    assert bare.lo is None and bare.significant is None
    # seeds only (a leaderboard folder): the interval comes from the seeds' spread
    sa, sb = SideRow("m", values={"x": [0.80, 0.82, 0.81]}), SideRow("m", values={"x": [0.20, 0.22, 0.21]})
    seeds = lang_diff("x", sa, sb, resamples=200, seed=0, key="k")
    assert seeds.resampled == "seeds" and seeds.significant


def test_better_follows_the_metric_direction():
    from leaderboard.compare import Side, SideTable

    def side(name: str, hits: int, hib: bool) -> Side:
        s = Side(name, "run")
        s.tables[("mlm", "loss", "cpu", "final")] = SideTable("mlm", "loss", "cpu", "final", hib, True,
                                                               {"m": _row("m", {"x": [hits]})})
        return s

    for hib, winner in ((True, "A"), (False, "B")):
        comps = compare(side("a", 150, hib), side("b", 50, hib), resamples=200)
        assert len(comps) == 1
        c = comps[0]
        assert c.better(c.lines[0]) == winner


def test_rows_meet_by_label_then_by_method_and_dim():
    from leaderboard.compare import SideTable, match_rows

    def table(*labels: str) -> SideTable:
        return SideTable("sr-t", "acc@10", "cpu", "final", True, True, {lab: SideRow(lab) for lab in labels})

    a = table("random d=full", "hyperofa d=full (epochs=60, patience=5)", "focus d=full (overlap=casefold)",
              "focus d=full (defaults)", "ofa d=100")
    b = table("random d=full", "hyperofa d=full", "focus d=full", "ofa d=full")
    got = {(x.label, y.label) for x, y in match_rows(a, b)}
    # focus has two variants in A: which one B's focus is cannot be told, so neither is compared; ofa d=100 is not
    # ofa d=full
    assert got == {("random d=full", "random d=full"), ("hyperofa d=full (epochs=60, patience=5)", "hyperofa d=full")}
    assert {(x.label, y.label) for x, y in match_rows(table("fvt d=full"), table("random d=full"))} == {
        ("fvt d=full", "random d=full")}  # two runs: their single rows


def test_compare_methods_and_row_labels_of_an_experiment_paired_by_seed(run_cli, two_experiments, tracking_uri):
    """Method names and row labels are looked for in the current experiment (the latest cell run's: B, two seeds)
    or in --experiment; two methods of one experiment meet variant by variant, their cells seed by seed and item
    by item; the footer names the experiment and the cell runs, with their ids under --ids."""
    a, b = two_experiments
    rows = _csv(run_cli("compare", "fvt", "random", "--format", "csv", "--task", "sr-t", check=True).stdout)
    assert rows and {(r["row_a"], r["row_b"]) for r in rows} == {("fvt d=full", "random d=full")}
    langs = [r for r in rows if not r["language"].startswith("avg")]
    assert all(r["seeds_a"] == r["seeds_b"] == "2" for r in langs)  # experiment B: seeds 2 and 3
    assert {r["resampled"] for r in langs} == {"seeds + items, paired"}
    client = MlflowClient(tracking_uri)
    lang = langs[0]["language"]
    diff = statistics.fmean(_metric(client, b, "fvt", s, f"sr-t/acc_at_10/{lang}") -
                            _metric(client, b, "random", s, f"sr-t/acc_at_10/{lang}") for s in ("2", "3"))
    assert float(langs[0]["diff"]) == pytest.approx(diff)
    # a row label on the other experiment: one seed a side, its items paired
    one = _csv(run_cli("compare", "fvt d=full", "random d=full", "--experiment", a, "--format", "csv", "--task",
                       "sr-t", check=True).stdout)
    assert {r["seeds_a"] for r in one if not r["language"].startswith("avg")} == {"1"}
    assert {r["resampled"] for r in one if not r["language"].startswith("avg")} == {"items, paired"}
    # where the rows are: the experiment and the cell runs; with --ids their run ids; a run id still works
    md = run_cli("compare", "fvt", "random d=full", "--task", "sr-t", "--bootstrap", "0", "--format", "md",
                 check=True).stdout
    assert f"A's rows: experiment {b}, runs fvt-full-s2, fvt-full-s3" in md
    assert f"B's rows: experiment {b}, runs random-full-s2, random-full-s3 (run ids: --ids)" in md
    eid = client.get_experiment_by_name(b).experiment_id
    cell = client.search_runs([eid], filter_string="tags.`harness.kind` = 'cell' and tags.`harness.method` = 'fvt' "
                                                   "and tags.`harness.seed` = '2'")[0]
    md = run_cli("compare", "fvt", "random", "--task", "sr-t", "--bootstrap", "0", "--ids", check=True).stdout
    assert f"fvt-full-s2 ({cell.info.run_id})" in md
    by_id = run_cli("compare", cell.info.run_id, "random", "--task", "sr-t", "--bootstrap", "0", check=True).stdout
    assert f"A's rows: experiment {b}, runs fvt-full-s2" in by_id and "random-full-s3" in by_id
    proc = run_cli("compare", "fvtt", "random")
    assert proc.returncode == 2 and f"nor a method or row label of experiment {b!r} (methods: fvt, random" \
        in proc.stderr
