"""The board says what it means (issue 62, points 1, 4 and 5): every column holds the values of one step, a row
that blew up is marked on every board and kept out of the notes' averages, and a decoder's board says each metric's
direction, what bits per byte are, each row's held-out loss beside the uniform guess, and which sign of a
difference is better. Runs are written in the runner's schema (tests/_leaderboard_runs.py), no `harness run`."""

from __future__ import annotations

import html
import io
import re

import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from tests._leaderboard_runs import LANGS, _build, mixed_experiment


def _renderings(lb) -> dict[str, str]:
    """The terminal (boards and the `harness run` table), Markdown, CSV (every board's and the long file) and HTML
    renderings of a leaderboard (the HTML with its entities read back)."""
    from leaderboard.render_csv import board_csv, long_csv
    from leaderboard.render_html import leaderboard_html
    from leaderboard.render_markdown import leaderboard_md
    from leaderboard.render_terminal import render_text
    from leaderboard.summary import render, summaries

    con = Console(width=400, record=True, file=io.StringIO())
    for table in summaries(lb):
        render(table, con)
    return {"terminal": render_text(lb.boards, claims=lb.claims), "summary": con.export_text(),
            "markdown": leaderboard_md(lb), "csv": "\n".join(board_csv(b) for b in lb.boards) + long_csv(lb),
            "html": html.unescape(leaderboard_html(lb))}


# -- 1. one step a column -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed_lb(tracking_uri):
    return _build(tracking_uri, mixed_experiment(tracking_uri, "meaning-mixed"), bootstrap=0)


TWO_STEP = "random d=full cpt=2 cpt.precision=fp32 eval=fp32"


def test_every_column_holds_the_values_of_one_step(mixed_lb):
    """`--cpt-steps 2` beside step-0-only rows: no board holds a row's step 0 beside another's step 2; the final
    board shows every row at step 0, the 2-step budget's final step is a board of its own, and the `harness run`
    table has a column for each."""
    from leaderboard.model import board_dict

    for b in mixed_lb.boards:
        assert b.step is not None, b.title  # every board names its one step
        steps = {s for r in b.rows for s in r.steps}
        assert len(steps) <= 1 and steps <= {b.step}, (b.title, steps)
        assert "each row's final step" not in b.title
    final = next(b for b in mixed_lb.boards if b.kind == "final" and b.metric == "acc@10")
    assert final.step == 0 and final.step_label == "step 0, before CPT" and len(final.rows) == 5
    # the 2-step row at step 0 (20 + j hits of 50 at the final step, half of them at step 0), not at step 2
    assert final.row(TWO_STEP).value(LANGS[0]) == pytest.approx(10 / 50)
    budget = mixed_lb.budget_boards(final)
    assert [(b.step, [r.label for r in b.rows]) for b in budget] == [(2, [TWO_STEP])]
    assert budget[0].row(TWO_STEP).value(LANGS[0]) == pytest.approx(20 / 50)
    assert budget[0].step_label == "step 2 (final of the 2-step CPT budget)"
    deltas = [b for b in mixed_lb.boards if b.kind == "delta" and b.metric == "acc@10"]
    assert [(d.step, [r.label for r in d.rows]) for d in deltas] == [(2, [TWO_STEP])]
    assert all(set(board_dict(b)["rows"][0]["steps"]) <= {b.step} for b in mixed_lb.boards if b.kind == "final")
    out = _renderings(mixed_lb)
    for name, text in out.items():
        assert "each row's final step" not in text and "@ step" not in text, name
    head = next(line for line in out["summary"].splitlines() if "sr-t acc@10" in line)
    assert head.count("sr-t acc@10") == 2, head  # a column at step 0 and one at the 2-step budget's final step
    assert "step 0, before CPT" in out["summary"] and "step 2 (final of the 2-step CPT budget)" in out["summary"]
    for name in ("markdown", "html", "terminal"):
        assert "step 2 (final of the 2-step CPT budget)" in out[name], name
    assert "step,sr-t" not in out["csv"] and ",step," not in out["csv"].splitlines()[0]  # no per-row step column
    assert len({b.id for b in mixed_lb.boards}) == len(mixed_lb.boards)  # a file per board


# -- runs of a chosen held-out loss, norm ratio and task scores ------------------------------------------------
def _cell(client, exp_id: str, method: str, *, heldout: tuple[float, float], vocab: int, task: str, scores: dict,
          objective: str = "mlm", norm: float | None = None, source: str = "src", cpt_steps: int = 10,
          higher: bool = True) -> None:
    """One cell run (seed 1, the cpu profile, CPT of ``cpt_steps`` steps, tasks evaluated at step 0 as the main job
    does) whose held-out loss goes from ``heldout[0]`` at step 0 to ``heldout[1]``, whose init report names a
    ``vocab``-token target vocabulary, with its task run of ``scores`` ({metric: {lang: value}}, at step 0)."""
    from mlflow.entities import Metric, Param

    from harness.core.record import metric_key
    from tests._leaderboard_runs import LANG_META, _log_json

    tags = {"harness.kind": "cell", "harness.method": method, "harness.source": source, "harness.dim": "full",
            "harness.seed": "1", "harness.profile": "cpu", "harness.world": "fakeworld",
            "harness.final_step": str(cpt_steps), "harness.task_final_step": "0",
            "harness.cell": f"{method}-1-cpu-{source}-full"}
    parent = client.create_run(exp_id, tags=tags, run_name=f"{method}-s1").info.run_id
    client.log_batch(parent, params=[Param(k, v) for k, v in {
        "method": method, "seed": "1", "world_hash": "abc", "cpt.steps": str(cpt_steps), "cpt.lr": "5e-5",
        "cpt.eval_tasks": "False", "eval_precision": "fp32", "cpt.precision": "fp32", "cpu_kernels": "avx2"}.items()])
    ms = [Metric("init/copied", 100.0, 0, 0), Metric("init/method", 50.0, 0, 0), Metric("init/random", 10.0, 0, 0),
          Metric("cpt/heldout_loss", heldout[0], 0, 0), Metric("cpt/heldout_loss", heldout[1], 0, cpt_steps)]
    if norm is not None:
        ms.append(Metric("init/row_norm_ratio", norm, 0, 0))
    client.log_batch(parent, metrics=ms)
    _log_json(client, parent, {"method": method, "counts": {"copied": 100, "method": 50, "random": 10, "unk": 0},
                               "target_vocab_size": vocab, "surgery": {"mode": "extension", "objective": objective}},
              "init_report.json")
    _log_json(client, parent, LANG_META, "languages.json")
    ttags = {**{k: v for k, v in tags.items() if k not in ("harness.kind", "harness.final_step",
                                                            "harness.task_final_step")},
             "harness.kind": "task", "harness.task": task, "harness.parent": parent, "mlflow.parentRunId": parent,
             "harness.task.headline": next(iter(scores)), "harness.task.higher_is_better": str(higher).lower(),
             "harness.task.metrics": ",".join(scores)}
    trun = client.create_run(exp_id, tags=ttags, run_name=task).info.run_id
    client.log_batch(trun, metrics=[Metric(metric_key(task, m, lang), v, 0, 0) for m, per in scores.items()
                                    for lang, v in per.items()])
    client.set_terminated(trun)
    client.set_terminated(parent)


def _experiment(tracking_uri: str, name: str, rows: dict, **kw):
    """An experiment of one cell a method (``rows``: method -> (held-out loss at step 0, at step 10) or a dict of
    more :func:`_cell` arguments), each with an sr-t task run, and its leaderboard."""
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment(name)
    for i, (method, spec) in enumerate(rows.items()):
        spec = spec if isinstance(spec, dict) else {"heldout": spec}
        args = {"vocab": 860, "task": "sr-t", "scores": {"acc@10": {lang: 0.3 + 0.01 * (i + j)
                                                                    for j, lang in enumerate(LANGS)}}, **kw, **spec}
        _cell(client, exp_id, method, **args)
    return _build(tracking_uri, name, bootstrap=0)


# -- 4. blow-ups marked ---------------------------------------------------------------------------------------
def test_a_row_that_blew_up_is_marked_on_every_board_and_left_out_of_the_notes(tracking_uri):
    """CLP's held-out loss at 1,915.9 nats against ln |V| = 6.76 (the synthetic world): marked on every board and
    rendering, and the CPT note names it instead of averaging it in; the others' mean is theirs alone."""
    lb = _experiment(tracking_uri, "meaning-blowup", {
        "ofa": (7.5, 7.2), "random": (7.9, 7.6), "fvt": (7.4, 7.1), "focus": (7.6, 7.3), "clp": (1915.9, 1800.0)})
    assert lb.boards
    for b in lb.boards:
        marked = [r.label for r in b.rows if r.blowup]
        assert marked == ["clp d=full"], (b.title, marked)
        assert "1,915.9 nats" in b.row("clp d=full").blowup and "ln |V| = 6.76" in b.row("clp d=full").blowup
        assert any(n.startswith("blew up: clp d=full (held-out loss 1,915.9 nats") for n in b.notes), b.notes
    note = next(n for b in lb.boards for n in b.notes if "took the held-out MLM loss" in n)
    # the four others alone: (7.5 + 7.9 + 7.4 + 7.6) / 4 = 7.60 to (7.2 + 7.6 + 7.1 + 7.3) / 4 = 7.30
    assert "from 7.60 to 7.30 nats (mean over 4 row(s)" in note, note
    assert "left out of these means, as they blew up: clp d=full" in note
    out = _renderings(lb)
    for name in ("terminal", "summary", "markdown", "html"):
        assert "[blew up]" in out[name], name
    assert out["csv"].splitlines()[0].endswith(",better,blew_up")  # the CSV: why, in a column of its own
    assert re.search(r"clp d=full \[blew up\] +│", out["summary"]), out["summary"]
    assert re.search(r"clp d=full\[blew up\]|clp d=full \[blew up\]", out["terminal"])
    assert "| clp d=full **[blew up]** |" in out["markdown"]
    assert '<span class="blowup" title="held-out loss 1,915.9 nats' in out["html"]
    assert re.search(r"^clp d=full,ours,1,.*,held-out loss 1,915\.9 nats", out["csv"], re.M) or \
        '"held-out loss 1,915.9 nats' in out["csv"]
    ofa_line = next(line for line in out["csv"].splitlines() if line.startswith("ofa d=full,"))
    assert ofa_line.endswith(",")  # not marked: an empty field


def test_rows_above_the_guess_but_not_far_above_it_are_not_marked_and_the_board_says_why(tracking_uri):
    """The main job's encoder: every row at 15 to 17 nats against ln |V| = 11.7 (a 120,000-token vocabulary) after
    a short CPT: none blew up, and the note says once that a CPT this short is the reason."""
    lb = _experiment(tracking_uri, "meaning-short-cpt", {
        "ofa": (16.8, 15.2), "random": (17.4, 17.0), "focus": (16.9, 15.9), "wechsel": (17.0, 16.1)},
        vocab=120_000)
    assert not [r.label for b in lb.boards for r in b.rows if r.blowup]
    final = next(b for b in lb.boards if b.kind == "final")
    note = next(n for n in final.notes if "took the held-out MLM loss" in n)
    assert "ln |V| = 11.70; every row stays above it (15.20 to 17.00 nats) but none far above it: a CPT this " \
           "short leaves the new rows barely trained, which is no blow-up" in note, note
    assert "[blew up]" not in "".join(_renderings(lb).values())


def test_embedding_rows_far_outside_the_source_mark_a_row(tracking_uri):
    """A row whose computed rows' largest norm is 40x the source rows' largest (init/row_norm_ratio) is marked, even
    where its loss looks ordinary; 3x is not far outside."""
    lb = _experiment(tracking_uri, "meaning-norms", {
        "ofa": {"heldout": (7.5, 7.2), "norm": 0.9}, "omp": {"heldout": (7.8, 7.5), "norm": 40.0},
        "focus": {"heldout": (7.6, 7.3), "norm": 3.0}})
    final = next(b for b in lb.boards if b.kind == "final")
    assert {r.label: r.blowup for r in final.rows if r.blowup} == {
        "omp d=full": "its computed rows' largest norm 40.0x the source rows' largest"}


def test_the_blowup_rule_bounds():
    """Three times both bounds: over ln |V| alone (every row) or over the others alone is not a blow-up; one row
    alone is judged by ln |V|; a row with no held-out loss is judged by its norms only."""
    from leaderboard.blowups import find_blowups

    class C:  # a cell run: what the rule reads
        def __init__(self, method, first, last=None, norm=None, source="src"):
            self.profile, self.source, self.method = "cpu", source, method
            self.curves = {"cpt/heldout_loss": [(0, first), (10, first if last is None else last)]} if first else {}
            self.metrics = {"init/row_norm_ratio": norm} if norm is not None else {}

    def marked(cells, ln_v=6.76):
        return sorted(k for _, k in find_blowups(cells, lambda c: c.method, lambda cs: (860, ln_v)))

    assert marked([C("a", 7.0), C("b", 7.2), C("c", 22.0)]) == ["c"]  # 22.0 > 3 x 6.76 and > 3 x 7.1
    assert marked([C("a", 7.0), C("b", 7.2), C("c", 20.0)]) == []  # 20.0 < 3 x 6.76 = 20.28
    assert marked([C("a", 30.0), C("b", 31.0), C("c", 32.0)]) == []  # all far above ln |V|, none above the others
    assert marked([C("a", 1.0), C("b", 1.0), C("c", 3.5)], ln_v=11.7) == []  # above the others, below ln |V|
    assert marked([C("a", 21.0)]) == ["a"]  # alone: ln |V| only
    assert marked([C("a", 7.0, 25.0), C("b", 7.0)]) == ["a"]  # its final step counts too
    assert marked([C("a", 0, norm=10.5), C("b", 0, norm=10.0)]) == ["a"]
    # each source apart: a decoder's rows do not set an encoder's bounds
    assert marked([C("a", 7.0), C("b", 7.2, source="dec"), C("c", 25.0, source="dec")]) == ["c"]


# -- 5. a decoder's boards a reader understands ------------------------------------------------------------------
@pytest.fixture(scope="module")
def decoder_lb(tracking_uri):
    """A decoder's rows (the clm task: bpb, then loss; lower is better) after a 10-step CPT, tasks at step 0: ofa
    ahead of random on bpb, CLP blown up (120 nats at step 0 against ln |V| = 11.70)."""
    def scores(base: float) -> dict:
        return {"bpb": {lang: base + 0.01 * j for j, lang in enumerate(LANGS)},
                "loss": {lang: 3 * base + 0.01 * j for j, lang in enumerate(LANGS)}}

    return _experiment(tracking_uri, "meaning-decoder", {
        "ofa": {"heldout": (13.1, 12.4), "scores": scores(1.50)},
        "random": {"heldout": (14.0, 13.5), "scores": scores(1.60)},
        "clp": {"heldout": (120.0, 60.0), "scores": scores(9.0)}},
        vocab=120_000, objective="clm", task="clm", source="dec", higher=False)


def test_a_decoder_board_says_each_metric_s_direction_and_defines_bits_per_byte(decoder_lb):
    out = _renderings(decoder_lb)
    bpb = next(b for b in decoder_lb.boards if b.metric == "bpb" and b.kind == "final")
    assert "dec (decoder, causal LM)" in bpb.title
    assert "(↓ lower is better)" in out["terminal"] and "*↓ lower is better;" in out["markdown"]
    assert '<p class="hint">↓ lower is better;' in out["html"]
    assert re.search(r"clm bpb ↓", out["summary"]) and re.search(r"clm loss ↓|clm bpb ↓", out["summary"])
    assert ",lower," in out["csv"]  # the long file's "better" column
    definition = "bpb ↓ (bits per byte): the held-out text's summed negative log-likelihood over ln 2 times its " \
                 "UTF-8 bytes; lower is better"
    assert any(n.startswith(definition) for n in bpb.notes)
    for name in ("terminal", "summary", "markdown", "html"):
        assert definition in " ".join(out[name].split()), name


def test_a_decoder_board_shows_each_row_s_held_out_loss_beside_the_guess(decoder_lb):
    """Each row's held-out loss (the CPT diagnostic, nats) at the board's step in a column of its own, the uniform
    guess's ln |V| beside it, on every rendering and in `harness run`'s table."""
    bpb = next(b for b in decoder_lb.boards if b.metric == "bpb" and b.kind == "final")
    assert ("cpt/heldout_loss", "held-out loss ↓ (nats, guess 11.70)") in bpb.init_columns()
    assert {r.label: r.init["cpt/heldout_loss"] for r in bpb.rows} == {
        "ofa d=full": pytest.approx(13.1), "random d=full": pytest.approx(14.0), "clp d=full": pytest.approx(120.0)}
    loss = next(b for b in decoder_lb.boards if b.metric == "loss" and b.kind == "final")
    guess = next(r for r in loss.paper_rows if r.label.startswith("uniform guess"))
    assert guess.init["cpt/heldout_loss"] == pytest.approx(11.695, abs=1e-3)
    out = _renderings(decoder_lb)
    for name in ("terminal", "markdown", "html"):
        assert "held-out loss ↓ (nats, guess 11.70)" in out[name] and "13.10" in out[name], name
    assert "cpt/heldout_loss" in out["csv"].splitlines()[0]
    summary = out["summary"]
    assert re.search(r"held-out loss ↓ nats", summary)
    assert re.search(r"ofa d=full .*│ +13\.10 │", summary) and re.search(r"uniform guess \(ln \|V\|\) .*│ +11\.70 │",
                                                                          summary), summary


def test_the_open_question_says_which_sign_of_its_difference_is_better(decoder_lb):
    """OFA > random on a decoder's bpb: the difference names what it subtracts, the metric's direction and who
    is ahead, in the Markdown and HTML tables; the terminal says it in a line under its table."""
    from leaderboard.render_terminal import render_overview

    ofa = next(o for o in decoder_lb.open_question if o.result.claim.a == "ofa")
    assert ofa.result.diff == pytest.approx(-0.10)
    said = "-0.100 (ofa − random; bpb ↓: ofa ahead)"
    con = Console(width=300, record=True, file=io.StringIO())
    render_overview(decoder_lb, con)
    terminal = " ".join(con.export_text().split())
    assert "diff = OFA or HyperOFA minus random on each task's headline metric; on clm bpb ↓ a diff below 0 is " \
           "the method ahead" in terminal  # under the table, whose cells keep the width they had
    out = _renderings(decoder_lb)
    for name in ("markdown", "html"):
        assert said in out[name], name
    # each note once: the definition of bits per byte under the table, not again among the boards' notes
    assert terminal.count("bpb ↓ (bits per byte): the held-out text's summed negative log-likelihood") == 1


def test_the_init_report_logs_how_far_the_new_rows_norms_reach(synthetic_world, tmp_path):
    """init/row_norm_ratio: the largest norm of the rows a method did not copy over the source rows' largest, in the
    init report's method statistics (logged as an ``init/*`` metric); None where every row was copied."""
    import numpy as np
    import torch

    from harness.initialize import initialize_model, row_norm_ratio
    from methods.base import InitResult, Provenance

    source = torch.tensor([[3.0, 4.0], [0.0, 1.0]])  # largest norm 5
    rows = torch.tensor([[60.0, 80.0], [30.0, 40.0], [0.0, 10.0]])  # the copied row (norm 100) does not count
    prov = np.array([Provenance.COPIED, Provenance.METHOD, Provenance.RANDOM], dtype=np.int8)
    assert row_norm_ratio(InitResult(rows, prov), source) == pytest.approx(10.0)  # 50 / 5; the copied row aside
    assert row_norm_ratio(InitResult(rows, np.zeros(3, dtype=np.int8)), source) is None  # every row copied
    rep = initialize_model(synthetic_world, "src", "random", dim=None, seed=1, params={}, out_dir=tmp_path / "r",
                           mapping_cache_dir=tmp_path / "maps")
    ratio = rep["method_stats"]["row_norm_ratio"]
    assert 0 < ratio < 10  # random rows drawn from the source's per-dimension normal lie within its scale
