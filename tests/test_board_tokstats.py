"""The tokenizer statistics on the board's report (issue 50, item 6): per source and language, fertility, bytes a
token and the UNK rate of the source's and the target tokenizer; per method, the shares of target-token occurrences
copied / computed / random / unknown, averaged over its cells -- from the cells' init reports, on the Markdown and
HTML pages and in the JSON."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from tests._leaderboard_runs import LANGS, TASK_TAGS, _build, make_cell


def _stats(copied: float, method: float) -> dict:
    """Tokenizer statistics of every language: the source splits words into 3 tokens, the target into 1.5."""
    return {lang: {"source": {"tokens": 300, "words": 100, "fertility": 3.0, "bytes_per_token": 2.0,
                              "unk_rate": 0.01 * j},
                   "target": {"tokens": 150, "words": 100, "fertility": 1.5, "bytes_per_token": 4.0,
                              "unk_rate": 0.0, "copied": copied, "method": method,
                              "random": round(1 - copied - method, 6), "unk": 0.0}}
            for j, lang in enumerate(LANGS)}


@pytest.fixture(scope="module")
def lb(tracking_uri):
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment("tokstats")
    # ofa's two seeds differ in their shares (their mean is shown); random computes no row; gamma is logged
    # before the statistics existed (it adds nothing)
    for method, seed, copied, method_share in (("ofa", 1, 0.4, 0.5), ("ofa", 2, 0.4, 0.6), ("random", 1, 0.4, 0.0)):
        make_cell(client, exp_id, method, seed, hits={lang: 20 for lang in LANGS}, task_tags=TASK_TAGS["sr-t"],
                  report={"tokenizer_stats": _stats(copied, method_share)})
    make_cell(client, exp_id, "gamma", 1, hits={lang: 20 for lang in LANGS}, task_tags=TASK_TAGS["sr-t"])
    return _build(tracking_uri, "tokstats", bootstrap=0)


def test_the_statistics_per_source_language_and_method(lb):
    (st,) = lb.tokstats
    assert st.source == "src" and sorted(st.languages) == sorted(LANGS)
    assert st.languages["ccc_Cyrl"]["source"] == {"fertility": 3.0, "bytes_per_token": 2.0, "unk_rate": 0.02}
    assert st.languages["ccc_Cyrl"]["target"]["fertility"] == 1.5
    assert sorted(st.shares) == ["ofa", "random"]  # gamma logged none
    assert st.shares["ofa"]["aaa_Latn"]["method"] == pytest.approx(0.55)  # the mean of its two seeds
    assert st.shares["random"]["aaa_Latn"]["random"] == pytest.approx(0.6)


def test_the_statistics_on_the_pages(lb, tmp_path):
    from leaderboard.publish import write_files

    write_files(lb, tmp_path, generated="now")
    md = (tmp_path / "leaderboard.md").read_text()
    assert "## Tokenizers of source src" in md
    assert "| ccc_Cyrl | 3.00 → 1.50 | 2.00 → 4.00 | 0.020 → 0.000 |" in md
    assert "| ofa | 40.0 | 55.0 | 5.0 | 0.0 | 4 |" in md and "| random | 40.0 | 0.0 | 60.0 | 0.0 | 4 |" in md
    html = (tmp_path / "leaderboard.html").read_text()
    assert 'id="tokenizers"' in html and 'href="#tokenizers"' in html and "3.00 → 1.50" in html
    doc = json.loads((tmp_path / "leaderboard.json").read_text())
    assert doc["tokenizers"][0]["shares"]["ofa"]["aaa_Latn"]["copied"] == pytest.approx(0.4)
