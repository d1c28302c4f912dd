"""Parity of ``omp`` with mergekit 0.1.5's ``batch_omp`` where the world has a donor model (spec ``methods-2026.md``
§1.5-1.6): a Llama with untied tables and padding rows beyond the target tokenizer (as Gemma pads), made here for the
synthetic world's target tokenizer (``fixtures/clp_synthetic``), saved and read back by the method from the world's
``donor_dir``. mergekit's rule: the input table's new rows are an OMP over the anchors in the donor's input table; an
untied source's head a second, independent OMP in the donor's head; rows beyond the tokenizer belong to no token.

Compared, row by row, for both tables: the anchors picked (the same ids in the same order) and the rows to 1e-5
(float32, as mergekit); the copied rows bit for bit. The donor's tables for mergekit are read by transformers (the
model loaded whole), not by the method's own reader.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from methods.base import InitContext, Provenance
from methods.omp import OMPInit
from methods.overlap import mapping_cache
from tests.parity.common import mergekit_omp, report

pytestmark = pytest.mark.parity

FIXTURES = Path(__file__).parent / "fixtures"
PADDING = 8  # donor rows beyond the target tokenizer
DIM = 96  # above k = 64: the pursuit runs its full k


class DonorWorld:
    name = "derived"

    def __init__(self, donor: Path) -> None:
        self.donor_dir = donor

    def resource_files(self, kind: str) -> list[Path]:
        return []  # no CPT text: a helper could not be trained


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    data = dict(np.load(FIXTURES / "clp_synthetic.npz"))
    st = AutoTokenizer.from_pretrained(FIXTURES / "clp_synthetic" / "source")
    tt = AutoTokenizer.from_pretrained(FIXTURES / "clp_synthetic" / "target")
    folder = tmp_path_factory.mktemp("donor") / "llama-untied"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(vocab_size=len(tt) + PADDING, hidden_size=DIM, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64,
                                     tie_word_embeddings=False)).save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tables = {"input": model.get_input_embeddings().weight.detach().clone(),
              "output": model.get_output_embeddings().weight.detach().clone()}
    assert tables["input"].shape[0] == len(tt) + PADDING
    return data, st, tt, folder, tables


@pytest.mark.parametrize("table", ["input", "output"])
def test_omp_with_a_world_donor_matches_mergekit(pair, table, tmp_path):
    mk = mergekit_omp()
    data, st, tt, folder, tables = pair
    src = torch.from_numpy(data["source"])
    if table == "output":  # an untied source head: another table of the source's rows
        src = torch.from_numpy(np.random.default_rng(5).standard_normal(src.shape).astype(np.float32))
    ctx = InitContext(source_matrix=src, source_tokenizer=st, target_tokenizer=tt,
                      mapping_for=mapping_cache(st, tt, None), world=DonorWorld(folder), seed=1,
                      params={"k": 64, "save_weights": True}, workdir=tmp_path, table=table)
    res = OMPInit().initialize(ctx)
    assert res.stats["donor_model"]["donor"] == "world donor" and res.stats["k_used"] == 64
    assert res.stats["donor_model"]["rows"] == len(tt) + PADDING
    mapping = ctx.mapping_for("exact", specials="role")
    donor = tables[table][:len(tt)]  # mergekit indexes the donor by token id: rows beyond the tokenizer unused
    anchors = torch.tensor(sorted(mapping.copy))  # ordered by donor id (ties follow the order)
    new = torch.tensor([t for t in range(len(tt)) if t not in mapping.copy])
    idx, coeff = mk.batch_omp(donor[new], donor[anchors], 64)
    src_anchor_rows = src[torch.tensor([mapping.copy[int(t)] for t in anchors])]
    theirs = torch.einsum("bk,bkd->bd", coeff, src_anchor_rows[idx])
    z = np.load(res.artifacts["weights"])
    assert np.array_equal(z["target_ids"], new.numpy())
    same_order = (torch.from_numpy(z["picked"]) == idx).all(dim=1)
    assert bool(same_order.all()), f"{int((~same_order).sum())} rows pick other anchors than mergekit"
    ours = res.matrix[new]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    assert (res.provenance[new.numpy()] == Provenance.METHOD).all()
    for t, s in mapping.copy.items():
        assert torch.equal(res.matrix[t], src[s])
    other = OMPInit().initialize(dataclasses.replace(ctx, table="input" if table == "output" else "output",
                                                     workdir=None))
    assert not torch.equal(other.matrix[new], ours)  # the other table's donor space picks otherwise
    report(f"omp (world donor, untied Llama with {PADDING} padding rows, {table} table, k=64) vs mergekit 0.1.5 "
           f"batch_omp: {len(new)} rows, the same anchors in the same order, largest difference "
           f"{float((ours - theirs).abs().max()):.1e}")
