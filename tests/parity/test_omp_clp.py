"""Parity of ``omp`` with mergekit 0.1.5's ``batch_omp`` and of ``clp`` / ``clp+`` with llm-cva's
``CLPEmbeddingInitializer`` / ``CLPPlusEmbeddingInitializer`` (``gucci-j/llm-cva@4faf142``), on the synthetic world's
real tables: its source input table, its two tokenizers, the ``cpu`` profile's helper model trained on its CPT text
and FOCUS's ``cpu`` fastText vectors of the target tokens (``fixtures/clp_synthetic*``).

* mergekit (LGPL-3.0) is installed in the parity environment (``--no-deps``); its ``tokensurgeon/omp.py`` and the
  ``rope_helpers.py`` it imports are loaded by file into a package of their own, as spec ``methods-2026.md`` §1.7
  says (importing ``mergekit.tokensurgeon`` pulls in peft, immutables and more through modules OMP does not use).
  It runs here, on the fixture's tables, in both donor spaces.
* llm-cva is not on PyPI: ``tests/parity/clp_reference.py`` ran it on these inputs and kept its rows in the
  fixture; the test compares our method's rows with them (the copied rows are the source's, checked by the script).

Compared, row by row: the copies (the same target ids copy the same source ids; ours bit for bit), the anchors OMP
picks (the same ids in the same order), OMP's rows to 1e-5 (float32, as mergekit), CLP's and CLP+'s rows to rtol 1e-6
(llm-cva given the tables in float64, as we compute: with the helper's float32, sklearn's cosines carry float32
rounding, which CLP's weights ``s / sum(s)`` magnify up to 6e-5 where a token's cosines nearly cancel).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from methods.base import InitContext, Provenance
from methods.helper_model import HelperTables
from methods.overlap import mapping_cache
from tests.parity.common import mergekit_omp, report

pytestmark = pytest.mark.parity

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def fixture():
    data = dict(np.load(FIXTURES / "clp_synthetic.npz"))
    st = AutoTokenizer.from_pretrained(FIXTURES / "clp_synthetic" / "source")
    tt = AutoTokenizer.from_pretrained(FIXTURES / "clp_synthetic" / "target")
    return data, st, tt


def run_method(monkeypatch, module, name: str, fixture, params=None, donor=None, workdir=None):
    """Our method on the fixture's inputs: its helper table (or fastText vectors) handed in instead of trained."""
    data, st, tt = fixture
    helper = HelperTables(data["helper"], None, info={"fixture": True})
    monkeypatch.setattr(module, "helper_tables", lambda ctx, p, who: helper)
    if donor is not None:
        monkeypatch.setattr(module, "focus_vectors", lambda ctx: (donor[0], donor[1], {"fixture": True}))
    from harness.core.registry import METHODS

    src = torch.from_numpy(data["source"])
    ctx = InitContext(source_matrix=src, source_tokenizer=st, target_tokenizer=tt,
                      mapping_for=mapping_cache(st, tt, None), world=None, seed=1, params=dict(params or {}),
                      workdir=workdir)
    return ctx, METHODS.get(name)().initialize(ctx)


def check_clp(monkeypatch, fixture, name: str, key: str) -> None:
    import methods.clp as module

    data, st, tt = fixture
    ctx, res = run_method(monkeypatch, module, name, fixture)
    ref_copy = dict(zip(data["overlap_target"].tolist(), data["overlap_source"].tolist(), strict=True))
    assert res.copy == ref_copy  # the same overlap (get_vocab() intersection: same-family tokenizers)
    for t, s in ref_copy.items():
        assert torch.equal(res.matrix[t], ctx.source_matrix[s])
    new = data["new_target"]
    assert (res.provenance[new] == Provenance.METHOD).all()
    ours = res.matrix[torch.from_numpy(new)].double().numpy()
    theirs = data[key]
    # llm-cva ran on the tables in float64 (clp_reference.py), as we compute; our rows are then cast to float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    worst = float(np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-7)))
    report(f"{name} vs llm-cva {key}: {len(ref_copy)} copies equal, {len(new)} rows to rtol 1e-6 (largest relative "
           f"difference {worst:.1e}: our float32 cast)")


def test_clp_parity_with_llm_cva(monkeypatch, fixture):
    check_clp(monkeypatch, fixture, "clp", "clp")


def test_clp_plus_parity_with_llm_cva(monkeypatch, fixture):
    check_clp(monkeypatch, fixture, "clp+", "clp_plus")


@pytest.mark.parametrize("space", ["helper", "fasttext"])
def test_omp_parity_with_mergekit(monkeypatch, fixture, space, tmp_path):
    import methods.omp as module

    mk = mergekit_omp()
    data, st, tt = fixture
    k = 64 if space == "helper" else 49  # fastText's cpu vectors have 50 dimensions: k < d_d (spec §1.6)
    has = np.ones(len(tt), dtype=bool) if space == "helper" else data["fasttext_has"]
    table = data["helper"] if space == "helper" else data["fasttext"]
    params = {"k": 64, "save_weights": True, **({"donor": "fasttext"} if space == "fasttext" else {})}
    ctx, res = run_method(monkeypatch, module, "omp", fixture, params=params,
                          donor=(data["fasttext"], data["fasttext_has"]) if space == "fasttext" else None,
                          workdir=tmp_path)
    mapping = ctx.mapping_for("exact", specials="role")
    assert res.stats["k_used"] == k
    anchors = np.array([t for t in sorted(mapping.copy) if has[t]])  # ordered by donor id (ties follow the order)
    new = np.array([t for t in range(len(tt)) if t not in mapping.copy and has[t]])
    idx, coeff = mk.batch_omp(torch.from_numpy(table[new]), torch.from_numpy(table[anchors]), k)
    src_anchor_rows = ctx.source_matrix[torch.tensor([mapping.copy[int(t)] for t in anchors])]
    theirs = torch.einsum("bk,bkd->bd", coeff, src_anchor_rows[idx])
    ours = res.matrix[torch.from_numpy(new)]
    z = np.load(res.artifacts["weights"])  # the anchors our method picked (save_weights)
    assert np.array_equal(z["target_ids"], new)
    same_order = (torch.from_numpy(z["picked"]) == idx).all(dim=1)
    assert bool(same_order.all()), f"{int((~same_order).sum())} rows pick other anchors than mergekit"
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    assert (res.provenance[new] == Provenance.METHOD).all()
    for t, s in mapping.copy.items():
        assert torch.equal(res.matrix[t], ctx.source_matrix[s])
    report(f"omp ({space} donor, k={k}) vs mergekit 0.1.5 batch_omp: {len(new)} rows, the same {k} anchors in the "
           f"same order in every row, largest difference {float((ours - theirs).abs().max()):.1e}")

