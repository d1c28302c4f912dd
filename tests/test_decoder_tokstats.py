"""Tokenizer statistics per language (harness.tokstats): fertility, bytes a token, UNK rate, and the target's
token occurrences by provenance, against a count by hand; written into the init report."""

from __future__ import annotations

import numpy as np
import pytest

from harness.tokstats import language_stats
from tests._decoder_fixtures import source_tokenizer, target_tokenizer


def test_language_stats_by_hand():
    tok = target_tokenizer()
    lines = ["the cat sat", "Haus ñ"]
    ids = [tok(x, add_special_tokens=False)["input_ids"] for x in lines]
    n = sum(map(len, ids))
    prov = np.zeros(len(tok), dtype=np.int8)
    haus = tok.convert_tokens_to_ids("ĠHaus")
    prov[haus] = 1
    got = language_stats(tok, lines, prov)
    assert got["tokens"] == n and got["words"] == 5
    assert got["fertility"] == pytest.approx(n / 5)
    assert got["bytes_per_token"] == pytest.approx((11 + 7) / n)  # "ñ" is two bytes
    occurrences = sum(seq.count(haus) for seq in ids)
    assert occurrences == 0  # "Haus" starts the line: no leading space, so not the "ĠHaus" piece
    assert got["method"] == 0 and got["copied"] == pytest.approx(1.0)
    got = language_stats(tok, [" Haus Haus"], prov)
    assert got["method"] == pytest.approx(1.0) and got["copied"] == 0
    src = language_stats(source_tokenizer(), lines)
    assert src["fertility"] > got["fertility"] and "copied" not in src and src["unk_rate"] == 0


def test_the_init_report_holds_each_languages_tokenizer_statistics(synthetic_world, tmp_path):
    from harness.initialize import initialize_model

    rep = initialize_model(synthetic_world, "dec", "random", dim=None, seed=1, params={}, out_dir=tmp_path / "i",
                           mapping_cache_dir=tmp_path / "maps")
    stats = rep["tokenizer_stats"]
    assert sorted(stats) == sorted(synthetic_world.languages)
    pivot, other = stats["qaa_Latn"], stats["qad_Cyrl"]
    # the source tokenizer was learned on the pivot: it reads the Cyrillic language as UNK, the target does not
    assert other["source"]["unk_rate"] > 0.3 > other["target"]["unk_rate"]
    assert pivot["target"]["copied"] > other["target"]["copied"]
    for lang in stats.values():
        t = lang["target"]
        assert t["copied"] + t["method"] + t["random"] + t["unk"] == pytest.approx(1.0)
