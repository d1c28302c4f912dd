"""``harness compare`` says what it means: one verdict a pair (the claims' and compare's, decided by one function),
rows of different variants refused unless asked for, the step compared named by its number, an output that fits a
terminal, and every option of every command with its help. Fake MLflow runs (``tests/_leaderboard_runs.py``), read
in-process: no ``harness run``."""

from __future__ import annotations

import argparse
import csv
import io

import pytest
from mlflow.tracking import MlflowClient

from harness.core.errors import HarnessError
from tests._leaderboard_runs import LANGS, MAIN_LANGS, _build, make_cell, mixed_experiment

EXP = "verdicts"
TAGS = {"headline": "acc@10", "higher_is_better": "true", "metrics": "acc@10,acc@1"}
# correct queries (of 50) per task, method and language (seed s adds s): ofa ahead on all eight languages of sr-t
# (the claim holds), on four and behind on four of ner (inconclusive), behind on all eight of pos (contradicted),
# ahead on all four of sr-b (the Wilcoxon test over four languages cannot go below p = 0.125: inconclusive, where a
# bootstrap p alone said p < 0.001)
TASKS = {
    "sr-t": (MAIN_LANGS, lambda j: 30 + j, lambda j: 20 + j),
    "ner": (MAIN_LANGS, lambda j: 30 + j if j % 2 else 20 + j, lambda j: 25 + j),
    "pos": (MAIN_LANGS, lambda j: 15 + j, lambda j: 30 + j),
    "sr-b": (LANGS, lambda j: 30 + j, lambda j: 20 + j),
}
EXPECTED = {"sr-t": "holds", "ner": "inconclusive", "pos": "contradicted", "sr-b": "inconclusive"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A store of its own: experiment ``verdicts`` (ofa and random, two seeds, the four tasks of :data:`TASKS`,
    evaluated at step 0 after 10 CPT steps, as the main job) and ``mixed`` (rows of several variants)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('verdicts') / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp_id = client.create_experiment(EXP)
    for method, pick in (("ofa", 1), ("random", 2)):
        for seed in (1, 2):
            parent = None
            for task, spec in TASKS.items():
                hits = {lang: spec[pick](j) + seed for j, lang in enumerate(spec[0])}
                parent, _ = make_cell(client, exp_id, method, seed, task=task, hits=hits, items=False,
                                      tables=False, parent=parent, task_tags=TAGS, final=0, cpt_steps=10)
    mixed_experiment(uri)
    return uri


def _sides(uri: str, a: str, b: str, experiment: str):
    from leaderboard.compare import resolve

    client = MlflowClient(uri)
    return resolve(a, client, experiment), resolve(b, client, experiment)


def test_compare_and_the_claims_give_one_verdict_for_every_task(store):
    """``harness compare ofa random`` and the claims table on the same rows: the same interval, the same p (the
    Wilcoxon test's), and the same verdict, for every task (one function decides: stats.pair_verdict)."""
    from leaderboard.compare import compare
    from leaderboard.compare_output import to_markdown

    claims = {r.task: r for r in _build(store, EXP, bootstrap=0).claims if r.claim.id == "ofa>random"}
    assert {t: r.status for t, r in claims.items()} == EXPECTED
    a, b = _sides(store, "ofa", "random", EXP)
    comps = {c.task: c for c in compare(a, b)}
    assert set(comps) == set(TASKS)
    for task, c in comps.items():
        r, avg = claims[task], comps[task].average
        assert (c.better(avg) == "A") == (r.status == "holds"), (task, r.status, c.better(avg))
        if r.status == "contradicted":
            assert avg.hi < 0 and c.better(avg) == "B"
        if r.status == "inconclusive":
            assert avg.significant is False and c.better(avg) == "—", task
    for task in comps:  # on the same numbers
        r, avg = claims[task], comps[task].average
        assert (avg.lo, avg.hi, avg.p) == (r.interval.lo, r.interval.hi, r.p_value), task
        assert avg.diff == pytest.approx(r.diff)
    # the pair: every language ahead, an interval above 0, and yet not significant (4 languages)
    srb = comps["sr-b"].average
    assert srb.lo > 0 and srb.p == pytest.approx(0.125) and not srb.significant
    text = to_markdown(a, b, [comps["sr-b"]], resamples=2000)
    avg_line = next(x for x in text.splitlines() if x.startswith("| **avg (4)**"))
    assert "| no | 0.125 | — |" in avg_line
    assert "avg: not significant: with 4 languages the Wilcoxon test cannot go below p = 0.125" in text
    assert claims["sr-b"].design and claims["sr-b"].design in " ".join(text.split())


def test_the_claims_verdict_is_the_pair_verdict():
    """The claims' "beats" verdict follows stats.pair_verdict: where it finds a better, the claim holds."""
    from leaderboard.claims import evaluate_claims
    from leaderboard.model import Board, Entry, Row, VariantKey, finish_board
    from leaderboard.stats import pair_verdict, verdict_key

    langs = [f"l{i}_Latn" for i in range(7)]
    ofa = {x: [0.5 + 0.01 * i, 0.52 + 0.01 * i] for i, x in enumerate(langs)}
    rnd = {x: [0.3 + 0.02 * i, 0.31 + 0.02 * i] for i, x in enumerate(langs)}
    rows = [Row(m, {x: Entry(v, ["1", "2"]) for x, v in vals.items()}, variant=VariantKey(m, "full", "src"))
            for m, vals in (("ofa", ofa), ("random", rnd))]
    b = Board("exp", "sr-t", "acc@10", "cpu", True, "step", 0, [], rows)
    b.headline = True
    finish_board(b)
    res = next(r for r in evaluate_claims([b], []) if r.claim.id == "ofa>random")
    v = pair_verdict(ofa, rnd, True, key=verdict_key("sr-t", "acc@10", "cpu", 0, "ofa", "random"))
    assert v.better == "a" and res.status == "holds"
    assert (res.interval.lo, res.interval.hi, res.p_value) == (v.interval.lo, v.interval.hi, v.test.p_value)


def test_rows_of_different_variants_are_refused_unless_asked_for(store, monkeypatch, capsys):
    from harness.cli import main
    from leaderboard.compare import compare
    from leaderboard.compare_output import to_csv, to_markdown

    a_label = "random d=full cpt=2 cpt.precision=fp32 eval=fp32"
    b_label = "random d=full cpt=10 cpt.precision=fp32 eval=bf16"
    a, b = _sides(store, a_label, b_label, "mixed")
    with pytest.raises(HarnessError, match="rows of different variants .*cpt 2 / 10.*eval fp32 / bf16.*"
                                           "--across-variants"):
        compare(a, b, resamples=0)
    comps = compare(a, b, resamples=0, across_variants=True)
    assert len(comps) == 1 and comps[0].differs == ["cpt 2 / 10", "eval fp32 / bf16"]
    assert "rows of different variants (A / B): cpt 2 / 10;" in to_markdown(a, b, comps, resamples=0)
    assert {r["variants_differ"] for r in csv.DictReader(io.StringIO(to_csv(comps)))} == {
        "; ".join(comps[0].differs)}
    # two methods of one variant: compared, nothing said to differ
    same = compare(*_sides(store, "ofa", "random", "mixed"), resamples=0)
    assert same and all(c.differs == [] for c in same)
    # the command: exit 2 without the flag, the comparison with it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    args = ["compare", a_label, b_label, "--experiment", "mixed", "--tracking-uri", store, "--bootstrap", "0"]
    assert main(args) == 2
    capsys.readouterr()
    assert main([*args, "--across-variants"]) == 0
    assert "rows of different variants (A / B): cpt 2 / 10;" in capsys.readouterr().out


def test_compare_names_the_step_it_compares(store):
    """The main job's tasks are evaluated at step 0 only: the "final" table holds step-0 values and says so."""
    from leaderboard.compare import compare
    from leaderboard.compare_output import to_csv, to_markdown

    a, b = _sides(store, "ofa", "random", EXP)
    comps = compare(a, b, task="sr-t", resamples=0)
    assert "## sr-t · acc@10 · step 0 (final) · profile cpu" in to_markdown(a, b, comps, resamples=0)
    assert [c.step_title for c in comps] == ["step 0 (final)"]
    from leaderboard.compare_output import to_terminal

    assert "sr-t · acc@10 · step 0 (final) · profile cpu" in to_terminal(a, b, comps, resamples=0)
    assert "final step" not in to_terminal(a, b, comps, resamples=0)
    assert {r["cpt_step"] for r in csv.DictReader(io.StringIO(to_csv(comps)))} == {"0"}


def _long_side(name: str, label: str):
    from leaderboard.compare import Side, SideRow, SideTable

    side = Side(name, "run", experiment="e")
    row = SideRow(label, world="w", values={x: [0.5 + 0.01 * i] for i, x in enumerate(LANGS)})
    side.tables[("sr-t", "acc@10", "cpu", "final")] = SideTable("sr-t", "acc@10", "cpu", "final", True, True,
                                                                 {label: row}, at=10)
    return side


def test_compare_fits_a_terminal(store, monkeypatch, capsys):
    """The default rendering is for a terminal: no line over 160 columns, every row label whole on a line of its
    own (one wider than the terminal shortened in its middle, never wrapped); Markdown with --format md."""
    from harness.cli import main
    from leaderboard.compare import compare
    from leaderboard.compare_output import WIDTH, to_terminal

    long_a = "focus d=full (overlap=casefold, specials=role) src=xlm-roberta-base-extended cpt=10 " \
             "cpt.precision=fp32 cpt.lr=5e-05 eval=bf16 kernels=native [earlier run]"
    too_long = "x" * 200
    a, b = _long_side("a", long_a), _long_side("b", too_long)
    text = to_terminal(a, b, compare(a, b, resamples=200), resamples=200)
    lines = text.splitlines()
    assert WIDTH == 160 and max(len(x) for x in lines) <= 160
    assert f"  A: {long_a}" in lines  # whole, on one line
    b_line = next(x for x in lines if x.startswith("  B: "))
    assert "…" in b_line and b_line.startswith("  B: xxx") and len(b_line) <= 160
    # the command's default is the terminal's; Markdown where asked for
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    args = ["compare", "ofa", "random", "--experiment", EXP, "--tracking-uri", store, "--bootstrap", "0"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert max(len(x) for x in out.splitlines()) <= 160 and "| ---" not in out and not out.startswith("#")
    assert "  A: ofa d=full" in out.splitlines()
    assert main([*args, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# ofa vs random") and "| language | A | B |" in md


def _options(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, "/".join(action.option_strings) or action.dest, action.help


def test_every_option_of_every_command_has_its_help():
    from harness.cli import build_parser

    found = list(_options(build_parser(), "harness"))
    assert {"harness ui", "harness compare", "harness cache prune"} <= {f[0] for f in found}  # walked the tree
    missing = [f"{cmd} {opt}" for cmd, opt, text in found if not (text or "").strip()]
    assert not missing, f"options without help: {', '.join(missing)}"


def test_the_parser_names_compare_s_formats_and_resamples_as_compare_does():
    from harness.commands import compare as command
    from leaderboard import compare_output as module
    from leaderboard.stats import VERDICT_RESAMPLES

    assert command.FORMATS == module.FORMATS and command.VERDICT_RESAMPLES == VERDICT_RESAMPLES


def test_an_unknown_cache_kind_is_refused_with_the_kinds(run_cli, tmp_path):
    from harness.cache_admin import known_kinds

    home = tmp_path / "home"
    home.mkdir()
    for sub in ("prune", "du", "verify"):
        proc = run_cli("cache", sub, "--kind", "nosuch", env={"HARNESS_HOME": str(home)})
        assert proc.returncode == 2, (sub, proc.stdout, proc.stderr)
        err = " ".join(proc.stderr.split())
        assert "unknown kind 'nosuch'" in err and f"Kinds: {', '.join(known_kinds([]))}" in err
        assert "harness list" not in err
