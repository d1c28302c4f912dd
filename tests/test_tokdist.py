"""Token Distillation (``tokdist``): the snippet merge and windows on hand-made cases, the distillation loop's
protection of the source rows, and the method on the synthetic world (routes reported, FVT rows kept where nothing
was distilled, determinism). Parity with the authors' functions: tests/parity/test_tokdist_parity.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError
from harness.core.registry import METHODS
from methods.base import InitContext, Provenance
from methods.tokdist import batches_of, distill, find_windows, linear_warmup, merge_snippets, window


def test_merge_greedy_longest_from_the_left_with_mask_on_the_last_piece():
    patterns = {(5, 6): 100, (5, 6, 7): 101, (7, 8): 102, (9,): 103}
    out = merge_snippets([[1, 5, 6, 7, 8, 5, 6], [7, 8, 9, 2], [5, 6, 7]], patterns, pad_id=0)
    # the longest pattern at 5 wins (5 6 7), then 8 is left alone; a pattern at the end merges
    assert out[0] == {"merged_seq": [1, 101, 8, 100, 0, 0, 0], "original_seq": [1, 5, 6, 7, 8, 5, 6],
                      "unmerged_to_merged_mask": [1, 0, 0, 1, 1, 0, 1]}
    assert out[1] == {"merged_seq": [102, 103, 2, 0], "original_seq": [7, 8, 9, 2],
                      "unmerged_to_merged_mask": [0, 1, 1, 1]}
    assert out[2]["merged_seq"] == [101, 0, 0] and out[2]["unmerged_to_merged_mask"] == [0, 0, 1]
    for o in out:  # the student's real positions line up with the teacher's masked ones
        assert sum(o["unmerged_to_merged_mask"]) == len([t for t in o["merged_seq"] if t != 0])


def test_windows_centred_shifted_at_the_edges_and_full_only():
    doc = list(range(100, 200))
    assert window(doc, 50, 2, 10, 100) == list(range(146, 156))  # 4 before, 4 after
    assert window(doc, 1, 2, 10, 100) == list(range(100, 110))  # shifted right at the start
    assert window(doc, 97, 2, 10, 100) == list(range(190, 200))  # shifted left at the end
    assert window(doc[:8], 2, 2, 10, 8) is None  # the document is shorter than a window
    docs = [[1, 2, 3, 1, 2] + [9] * 20, [1, 2] + [9] * 3]
    wins, counts = find_windows(docs, {(1, 2): 7, (2, 3): 8}, 6, 5)
    assert counts == {7: 3, 8: 1}  # every occurrence counts, overlapping ones included
    assert wins[7] == [[1, 2, 3, 1, 2, 9], [2, 3, 1, 2, 9, 9]] and wins[8] == [[1, 2, 3, 1, 2, 9]]


def test_schedule_and_order():
    assert [linear_warmup(s, 2, 6) for s in range(7)] == [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0]
    b = batches_of(10, 4, 1, torch.Generator().manual_seed(3))
    assert len(b) == 2 and all(len(x) == 4 for x in b) and len(set(sum(b, []))) == 8  # last batch dropped


def tiny_bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    return BertModel(cfg).eval()


def test_distill_learns_only_the_new_rows_and_leaves_the_model_as_it_was():
    model = tiny_bert()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(1)
    snippets = [[2] + torch.randint(3, 30, (12,), generator=gen).tolist() for _ in range(16)]
    for s in snippets:
        s[5:7] = [7, 8]
    samples = merge_snippets(snippets, {(7, 8): 30}, pad_id=0)
    init = model.get_input_embeddings().weight[[7, 8]].mean(0, keepdim=True)
    rows, losses = distill(model, init, samples, batches_of(16, 4, 3, gen), lr=1e-2)
    assert len(losses) == 12 and losses[-1] < losses[1]  # step 0 has lr 0 (warm-up); then the loss falls
    assert not torch.equal(rows, init)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # no source row, no weight changed
    assert isinstance(model.get_input_embeddings(), torch.nn.Embedding)
    assert all(p.requires_grad for p in model.parameters())  # as they were


@pytest.fixture(scope="module")
def tokdist_runs(synthetic_world, tmp_path_factory):
    from harness.initialize import initialize_model

    out = {}
    for name, seed in (("a", 1), ("b", 1)):
        d = tmp_path_factory.mktemp(f"tokdist-{name}")
        rep = initialize_model(synthetic_world, "src", "tokdist", dim=None, seed=seed, out_dir=d, compact=False,
                               params={"max_tokens": 20, "snippets": 4})
        out[name] = (d, rep)
    d = tmp_path_factory.mktemp("fvt")
    out["fvt"] = (d, initialize_model(synthetic_world, "src", "fvt", dim=None, seed=1, params={}, out_dir=d,
                                      compact=False))
    return out


def _rows(folder):
    from harness.initialize import load_model

    return load_model(folder).get_input_embeddings().weight.detach()


def test_tokdist_on_the_synthetic_world(tokdist_runs):
    d, rep = tokdist_runs["a"]
    stats = rep["method_stats"]
    assert stats["chosen"] == 20 and stats["distilled"] + stats["routes"].get("fvt_never_merged", 0) == 20
    assert stats["distilled"] == stats["routes"]["distilled"] > 15
    assert stats["routes"].get("fvt_over_budget", 0) > 0 and stats["steps"] == 20 * 4 // 16
    routes = [json.loads(line) for line in (d / "artifacts" / "tokdist_routes.jsonl").read_text().splitlines()]
    assert sum(stats["routes"].values()) == len(routes)
    assert all(r["route"] for r in routes)  # every non-copied token reported with its route
    few = [r for r in routes if r["route"] == "fvt_too_few_snippets"]
    assert all(r["snippets"] < 4 for r in few)
    distilled = [r for r in routes if r["route"] == "distilled"]
    chosen = [r for r in routes if r["route"] in ("distilled", "fvt_never_merged")]
    occ = sorted((r["occurrences"] for r in chosen + [r for r in routes if r["route"] == "fvt_over_budget"]),
                 reverse=True)
    assert sorted((r["occurrences"] for r in chosen), reverse=True) == occ[:20]  # the most frequent first
    prov = np.load(d / "provenance.npy")
    fvt_dir, fvt_rep = tokdist_runs["fvt"]
    assert rep["counts"] == fvt_rep["counts"]  # the provenance of FVT: distilled rows are the method's
    rows, fvt_rows = _rows(d), _rows(fvt_dir)
    ids = [r["id"] for r in distilled]
    kept = [r["id"] for r in routes if r["route"] != "distilled"]
    assert not torch.equal(rows[ids], fvt_rows[ids])
    assert all(not torch.equal(rows[i], fvt_rows[i]) for i in ids)
    assert torch.equal(rows[kept], fvt_rows[kept])  # every other token keeps FVT's row bit for bit
    same = prov != Provenance.METHOD
    assert torch.equal(rows[torch.from_numpy(same)], fvt_rows[torch.from_numpy(same)])


def test_tokdist_is_deterministic(tokdist_runs):
    assert torch.equal(_rows(tokdist_runs["a"][0]), _rows(tokdist_runs["b"][0]))
    assert tokdist_runs["a"][1]["method_stats"]["loss_last"] == tokdist_runs["b"][1]["method_stats"]["loss_last"]


def test_tokdist_declares_and_refuses(synthetic_world):
    from tests.test_focus import synthetic_ctx

    cls = METHODS.get("tokdist")
    assert cls.requires == frozenset({"cpt_text"}) and cls.profile_defaults("cpu") == {"max_tokens": 300,
                                                                                       "snippets": 8}
    assert "tokdist" in METHODS.resolve_list("all")
    ctx = synthetic_ctx(synthetic_world, None)
    assert ctx.source_model is None
    with pytest.raises(ConfigError, match="source model"):
        cls().initialize(ctx)
    with pytest.raises(ConfigError, match="max_tokens"):
        cls().initialize(InitContext(**{**ctx.__dict__, "params": {"max_tokens": 0}}))
    from harness.initialize import load_backbone

    ctx.source_model = lambda: load_backbone(synthetic_world.source_dir("src"))
    ctx.params = {"target_layer": 7, "max_tokens": 2, "snippets": 2}
    with pytest.raises(ConfigError, match="target_layer 7 is outside"):
        cls().initialize(ctx)


def test_tokdist_on_the_decoder_source(synthetic_world, tmp_path):
    """The same method on the world's decoder source (a causal LM): the backbone's last hidden states, the
    distilled rows moved from FVT's, every other row FVT's."""
    from harness.initialize import initialize_model

    if "dec" not in synthetic_world.sources:
        pytest.skip("the synthetic world has no decoder source")
    rep = initialize_model(synthetic_world, "dec", "tokdist", dim=None, seed=1, out_dir=tmp_path / "td",
                           compact=False, params={"max_tokens": 40, "snippets": 4})
    fvt = initialize_model(synthetic_world, "dec", "fvt", dim=None, seed=1, params={}, out_dir=tmp_path / "fvt",
                           compact=False)
    stats = rep["method_stats"]
    assert rep["surgery"]["objective"] == "clm" and stats["chosen"] == 40
    assert stats["distilled"] + stats["routes"].get("fvt_never_merged", 0) == 40 and stats["distilled"] > 30
    routes = [json.loads(x) for x in (tmp_path / "td" / "artifacts" / "tokdist_routes.jsonl").read_text().split("\n")
              if x]
    ids = [r["id"] for r in routes if r["route"] == "distilled"]
    rows, fvt_rows = _rows(tmp_path / "td"), _rows(tmp_path / "fvt")
    assert all(not torch.equal(rows[i], fvt_rows[i]) for i in ids)
    keep = torch.ones(len(rows), dtype=torch.bool)
    keep[ids] = False
    assert torch.equal(rows[keep], fvt_rows[keep]) and rep["counts"] == fvt["counts"]
