"""What a researcher reads first: a terminal leaderboard that fits a screen for the main job, rows of different
variants never in one column unlabelled on any board the harness renders, one name and enough digits for each
number, and a loss beside the uniform guess's."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from tests._leaderboard_runs import MAIN_METHODS, main_job_experiment, mixed_experiment

# the rows of the mixed home (tests/_leaderboard_runs.py: MIXED): each carries the qualifiers that set it apart
MIXED_LABELS = {
    "ofa d=full cpt=10 cpt.precision=fp32 eval=fp32",
    "random d=full cpt=10 cpt.precision=fp32 eval=fp32",
    "random d=full cpt=10 cpt.precision=fp32 eval=bf16",
    "random d=full cpt=10 cpt.precision=bf16 eval=bf16",
    "random d=full cpt=2 cpt.precision=fp32 eval=fp32",
}


def _printed(tracking_uri: str, experiment: str, width: int = 160, **kw) -> str:
    from leaderboard.publish import run_leaderboard

    con = Console(width=width, record=True, file=io.StringIO())
    assert run_leaderboard(tracking_uri, experiment, console=con, write=False, bootstrap=0, **kw) == 0
    return con.export_text()


@pytest.fixture(scope="module")
def main_shaped(tracking_uri) -> str:
    return main_job_experiment(tracking_uri)


@pytest.fixture(scope="module")
def mixed(tracking_uri) -> str:
    return mixed_experiment(tracking_uri)


@pytest.fixture(scope="module")
def mixed_lb(mixed, tracking_uri):
    from tests._leaderboard_runs import _build

    return _build(tracking_uri, mixed, bootstrap=0)


def test_the_main_jobs_leaderboard_fits_a_screen(main_shaped, tracking_uri):
    """14 methods x 3 seeds, 2 tasks: `harness leaderboard` at 160 columns prints at most 60 lines, none wider: the
    claims once (each claim once per task, no row wrapped over lines), one table of every row's average per task,
    and a line naming --langs, --claims and the HTML page; --langs prints the per-language tables."""
    text = _printed(tracking_uri, main_shaped)
    lines = text.splitlines()
    shown = sum(max(1, -(-len(line.rstrip()) // 160)) for line in lines)  # a longer line takes more than one
    assert shown <= 60, f"{shown} lines:\n{text}"
    assert max(len(line.rstrip()) for line in lines if line[:1] in "┏┃┡│└") <= 160  # every table meets the width
    assert text.count("the papers' claims on this run") == 1
    for statement in ("OFA > random at step 0", "FOCUS > random at step 0"):
        claim_rows = [line for line in lines if statement in line]
        assert len(claim_rows) == 2 and {"sr-t", "ner"} == {t for t in ("sr-t", "ner")
                                                             if any(f"│ {t} " in r for r in claim_rows)}, claim_rows
    table = text[text.index("average over languages"):]
    for method in MAIN_METHODS:
        assert re.search(rf"│ {re.escape(method)} d=full +│ 0\.\d{{3}} ± 0\.\d{{3}} \(3 seeds\)", table), method
    assert "step 0, before CPT" in table and "(final)" not in table  # the step each row shows, after 10 CPT steps
    assert re.search(r"--langs.*--claims.*the HTML page", " ".join(text.split()))
    langs = _printed(tracking_uri, main_shaped, langs=True)
    assert "main-shaped · sr-t · acc@10 · step 0, before CPT" in langs and "la_Latn" not in text
    assert re.search(r"┃ +laa_Latn +┃", langs) and "paired Wilcoxon" in langs
    detail = _printed(tracking_uri, main_shaped, claims=True)
    assert "wins" in detail and "p-value" not in text.split("more:")[0].lower()


def test_the_claims_detail_and_the_flags(main_shaped, tracking_uri):
    from harness.cli import build_parser

    args = build_parser().parse_args(["leaderboard", "--langs", "--claims"])
    assert args.langs and args.claims
    detail = _printed(tracking_uri, main_shaped, claims=True)
    assert "holds: the interval lies on the claim's side" in " ".join(detail.split())  # the legend
    assert "main-shaped · profile cpu" not in detail  # the claims alone


def test_every_renderer_labels_the_rows_of_a_mixed_home(mixed, mixed_lb, tracking_uri, run_cli, tmp_path):
    """fp32, `[cpt] precision = "fp32"` with `--precision bf16`, bf16, and `--cpt-steps 2` beside the profile's 10:
    `harness run`'s table, `harness leaderboard` (overview and per-language tables, slices, paired tests),
    Markdown, CSV, HTML and compare all show the five rows under labels that set them apart (ofa's row too), with
    no default printed as '-' and no setting that does not separate rows (cpt.eval_tasks)."""
    from mlflow.tracking import MlflowClient

    from leaderboard.compare import from_experiment
    from leaderboard.render_csv import board_csv, long_csv
    from leaderboard.render_html import leaderboard_html
    from leaderboard.render_markdown import leaderboard_md
    from leaderboard.summary import render, summaries
    from tests._leaderboard_runs import _board

    final = _board(mixed_lb, metric="acc@10")
    assert {r.label for r in final.rows} == MIXED_LABELS
    assert {p.a for p in final.pairs} | {p.b for p in final.pairs} == MIXED_LABELS  # the paired tests
    assert all(set(s.averages) >= MIXED_LABELS for s in final.slices)

    def shows_all(text: str, where: str) -> None:
        for label in MIXED_LABELS:
            assert label in text, (where, label)
        assert not re.search(r"=-[\s),]", text) and "cpt.eval_tasks=" not in text, where

    con = Console(width=400, record=True, file=io.StringIO())
    for table in summaries(mixed_lb):
        render(table, con)
    shows_all(con.export_text(), "harness run")
    shows_all(_printed(tracking_uri, mixed, width=400), "harness leaderboard")
    langs = _printed(tracking_uri, mixed, width=400, langs=True)
    shows_all(langs[langs.index("slices ·"):langs.index("paired Wilcoxon")], "slices")
    shows_all(langs[langs.index("paired Wilcoxon"):], "paired tests")
    shows_all(leaderboard_md(mixed_lb), "markdown")
    shows_all(long_csv(mixed_lb), "csv")
    shows_all(board_csv(final), "board csv")
    shows_all(leaderboard_html(mixed_lb, generated="now"), "html")
    client = MlflowClient(tracking_uri)
    side = from_experiment(client, client.get_experiment_by_name(mixed))
    assert {label for t in side.tables.values() for label in t.rows} == MIXED_LABELS  # compare's rows
    cli = run_cli("leaderboard", "--experiment", mixed, "--langs", "--no-write", "--bootstrap", "0",
                  env={"COLUMNS": "400"}, check=True)
    shows_all(cli.stdout, "the command")


def test_each_claim_is_tested_within_one_numerics_and_one_cpt_budget(mixed_lb):
    """OFA > random compares ofa's fp32 row with random's fp32 row of the same CPT budget, never a bf16 or a
    2-step row; the CPT claim is one verdict per group of rows, each over that group's rows only."""
    ofa = [c for c in mixed_lb.claims if c.claim.id == "ofa>random"]
    assert len(ofa) == 1 and ofa[0].status != "not tested"
    assert ofa[0].numerics == "evaluation fp32, CPT fp32, 10 CPT steps"
    assert ofa[0].diff == pytest.approx(0.2)  # 30 + j against 20 + j hits of 50: the fp32 random row, not bf16's
    cpt = [c for c in mixed_lb.claims if c.claim.id == "cpt"]
    assert sorted((c.numerics, c.n) for c in cpt) == [
        ("evaluation bf16, CPT bf16, 10 CPT steps", 1), ("evaluation bf16, CPT fp32, 10 CPT steps", 1),
        ("evaluation fp32, CPT fp32, 10 CPT steps", 2), ("evaluation fp32, CPT fp32, 2 CPT steps", 1)]
    others = [c for c in mixed_lb.claims if c.claim.id == "focus>random"]
    assert len(others) == 1 and others[0].status == "not tested" and others[0].detail == "no focus row"


def test_the_step_each_row_shows_and_the_digits_of_a_change(mixed_lb, main_shaped, tracking_uri):
    from leaderboard import fmt
    from leaderboard.model import board_dict
    from tests._leaderboard_runs import _board, _build

    final = _board(mixed_lb, metric="acc@10")
    # every row at step 0 (one step a column); the 2-step budget's final step is a board of its own
    assert final.step == 0 and final.step_label == "step 0, before CPT"
    assert {r.label: r.steps for r in final.rows}["random d=full cpt=2 cpt.precision=fp32 eval=fp32"] == [0]
    assert sorted(json.dumps(r["steps"]) for r in board_dict(final)["rows"]) == ["[0]"] * 5
    assert [b.step for b in mixed_lb.budget_boards(final)] == [2]
    main = _board(_build(tracking_uri, main_shaped, bootstrap=0), metric="acc@10")
    assert main.step == 0 and main.step_label == "step 0, before CPT"
    assert fmt.pair(6.1234, 6.1189) == ("6.123", "6.119") and fmt.pair(6.12, 6.12) == ("6.12", "6.12")
    assert fmt.pair(5.0, 4.5) == ("5.00", "4.50")
    assert fmt.signed(-0.00083) == "-0.00083" and fmt.signed(0.2) == "+0.200"
    note = next(n for n in final.notes if "took the held-out MLM loss" in n)
    # each budget on its own, and the uniform guess over the 860-token vocabulary beside it
    assert "2 CPT steps took the held-out MLM loss (the CPT diagnostic) from 5.00 to 4.90 nats" in note
    assert "10 CPT steps took the held-out MLM loss (the CPT diagnostic) from 5.00 to 4.50 nats" in note
    assert "ln |V| = 6.76" in note


def test_a_loss_board_has_the_uniform_guess_beside_its_rows():
    import math

    from harness.core.record_read import CellRecord
    from leaderboard.cpt_notes import guess_row

    cell = CellRecord(run_id="r", method="ofa", source="src", dim="full", seed="1", profile="cpu", world="w",
                   status="FINISHED", final_step=10, params={}, metrics={})
    cell.init_report = {"target_vocab_size": 122776}
    row = guess_row("mlm", "loss", ["aaa_Latn", "bbb_Latn"], [cell])
    assert row is not None and row.kind == "guess" and row.value("aaa_Latn") == pytest.approx(math.log(122776))
    assert round(row.value("bbb_Latn"), 2) == 11.72
    assert guess_row("mlm", "ppl", ["aaa_Latn"], [cell]).value("aaa_Latn") == 122776
    assert guess_row("sr-t", "acc@10", ["aaa_Latn"], [cell]) is None  # not a loss


def test_a_cell_prints_one_language_model_loss_a_step(run_cli, tracking_uri):
    """`harness run --tasks sr-t,mlm`: at step 0 the mlm task's loss is the one MLM number printed (the CPT
    diagnostic, measured on its own sentences, is logged only); after CPT the diagnostic, named for what it is, with
    its step-0 value; its results table says which step its columns show."""
    exp = "one-mlm-number"
    r = run_cli("run", "--world", "synthetic", "--methods", "random", "--tasks", "sr-t,mlm", "--experiment", exp,
                "--workers", "1", check=True)
    step0 = [line for line in r.stderr.splitlines() if "@ step 0" in line]
    assert len([line for line in step0 if "loss" in line]) == 1 and any("mlm @ step 0: loss avg" in x for x in step0)
    after = [line for line in r.stderr.splitlines() if "@ step 10" in line]
    assert len(after) == 1 and re.search(r"CPT diagnostic \(held-out MLM loss\) @ step 10: \d+\.\d{4} \(step 0: "
                                         r"\d+\.\d{4}\)", after[0]), after
    assert "step 0, before CPT" in r.stdout and "(final)" not in r.stdout
    guess = next(line for line in r.stdout.splitlines() if "uniform guess (ln |V|)" in line)  # below the rows
    # under the mlm loss only (the cost columns beside the averages empty: a guess costs nothing)
    assert re.search(r"│ +- +│ +\d+\.\d{3} │( +│)*$", guess.rstrip()), r.stdout
