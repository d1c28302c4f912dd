"""The board by source (issue 50, item 7): every board's header names its rows' source models and their kinds; the
papers' claims, made on encoders, are tested on encoder rows only; the open question -- do OFA and HyperOFA help a
decoder as they help an encoder? -- gets its own table, source by source, in every rendering."""

from __future__ import annotations

import io
import json

import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from tests._leaderboard_runs import LANGS, TASK_TAGS, _board, _build, make_cell

# correct queries of 50 per language at the final step (step 0: half): on the encoder OFA and HyperOFA lead random
# everywhere; on the decoder they trail it everywhere
HITS = {("enc", "random"): 10, ("enc", "ofa"): 30, ("enc", "hyperofa"): 29,
        ("dec", "random"): 40, ("dec", "ofa"): 12, ("dec", "hyperofa"): 14}


def _experiment(tracking_uri: str, name: str, sources: tuple[str, ...]) -> str:
    client = MlflowClient(tracking_uri)
    if client.get_experiment_by_name(name) is None:
        exp_id = client.create_experiment(name)
        for source in sources:
            for method in ("random", "ofa", "hyperofa"):
                for seed in (1, 2):
                    hits = {lang: HITS[(source, method)] + 2 * j + seed for j, lang in enumerate(LANGS)}
                    # the encoder's cells are logged as before decoders existed (no objective in the init report):
                    # read as an encoder's
                    make_cell(client, exp_id, method, seed, source=source, hits=hits, task_tags=TASK_TAGS["sr-t"],
                              objective="clm" if source == "dec" else None)
    return name


@pytest.fixture(scope="module")
def mixed(tracking_uri):
    return _build(tracking_uri, _experiment(tracking_uri, "by-source", ("enc", "dec")), bootstrap=200)


def test_every_header_names_the_sources_and_their_kinds(mixed, tracking_uri):
    kinds = "sources dec (decoder, causal LM), enc (encoder, masked LM)"
    assert all(b.title.endswith(kinds) for b in mixed.boards)
    assert {r.label for r in _board(mixed).rows} == {f"{m} d=full src={s}" for m in ("random", "ofa", "hyperofa")
                                                    for s in ("enc", "dec")}
    alone = _build(tracking_uri, _experiment(tracking_uri, "by-source-enc", ("enc",)), bootstrap=200)
    assert all(b.title.endswith("· source enc (encoder, masked LM)") for b in alone.boards)
    assert alone.open_question == []  # no decoder's rows: no question asked of them


def test_the_papers_claims_stay_on_the_encoder(mixed):
    tested = [c for c in mixed.claims if c.status != "not tested"]
    # (the other methods' rows are not on the board); the CPT claim on the held-out MLM loss of the encoder's rows
    assert {c.claim.id for c in tested} == {"ofa>random", "hyperofa~ofa", "cpt"}
    assert all(c.numerics.endswith("source enc") for c in tested if c.claim.kind != "cpt")
    assert not any("dec" in c.numerics + c.detail for c in mixed.claims)
    cpt = next(c for c in tested if c.claim.kind == "cpt")
    assert cpt.n == 3 and "src=enc" in cpt.detail  # the encoder's three rows, none of the decoder's


def test_the_open_question_source_by_source(mixed):
    got = {(o.source, o.result.claim.id): o for o in mixed.open_question}
    assert list(dict.fromkeys(o.source for o in mixed.open_question)) == ["enc", "dec"]  # the encoder first
    assert set(got) == {(s, c) for s in ("enc", "dec") for c in ("open:ofa>random", "open:hyperofa>random")}
    assert got[("dec", "open:ofa>random")].objective == "decoder, causal LM"
    enc, dec = got[("enc", "open:ofa>random")].result, got[("dec", "open:ofa>random")].result
    # at step 0 (half the final hits): OFA ahead of random on the encoder, behind it on the decoder
    assert enc.diff > 0.15 and dec.diff < -0.2
    assert dec.status == "contradicted" and dec.interval.hi < 0
    assert enc.status == "inconclusive" and enc.languages_needed  # 4 languages: the test cannot reach p < 0.05
    assert enc.n == dec.n == len(LANGS)


def test_the_open_question_in_every_rendering(mixed, tmp_path):
    from leaderboard.publish import write_files
    from leaderboard.render_terminal import render_overview

    console = Console(width=160, record=True, file=io.StringIO(), color_system=None)
    render_overview(mixed, console)
    text = console.export_text()
    assert "Do OFA and HyperOFA help a decoder as they help an encoder?" in text
    assert "the open question, source by source" in text and "dec (decoder, causal LM) · sr-t" in text
    assert "contradicted" in text
    files = write_files(mixed, tmp_path, generated="now")
    md = (tmp_path / "leaderboard.md").read_text()
    assert "## The open question: OFA and HyperOFA on a decoder" in md and "| dec (decoder, causal LM) |" in md
    html = (tmp_path / "leaderboard.html").read_text()
    assert 'id="open-question"' in html and "dec (decoder, causal LM)" in html
    doc = json.loads((tmp_path / "leaderboard.json").read_text())
    assert {(o["source"], o["claim"]) for o in doc["open_question"]} == {
        (s, c) for s in ("enc", "dec") for c in ("open:ofa>random", "open:hyperofa>random")}
    assert all(b["sources"] == {"enc": "mlm", "dec": "clm"} for b in doc["boards"])
    assert files
