"""A cell's identity and its products' keys (:mod:`harness.spec`: ``cell_identity``, ``identity_numerics``,
``init_inputs``, ``product_keys``), in process, field by field. Written to kill the mutants of scripts/mutation.sh
that the golden keys let live."""

from __future__ import annotations

from types import SimpleNamespace

from harness import spec as S
from harness.core.hashing import hash_obj
from harness.plan import Cell

CPT = {"steps": 3, "lr": 0.1}


def _fields(**more) -> dict:
    return {"world_hash": "W", "method_params": {"m": {"a": 1}, "other": {"b": 2}}, "profile": "P",
            "cpt": SimpleNamespace(product=lambda: dict(CPT)), "eval_precision": "fp32", "cpu_kernels": "native",
            **more}


def test_identity_numerics_only_away_from_the_defaults():
    assert S.identity_numerics("fp32", "native") == {}
    assert S.identity_numerics("bf16", "native") == {"eval_precision": "bf16"}
    assert S.identity_numerics("fp32", "avx2") == {"cpu_kernels": "avx2"}
    assert S.identity_numerics("bf16", "native:ab") == {"eval_precision": "bf16", "cpu_kernels": "native:ab"}


def test_cell_identity_field_by_field():
    cell = Cell(source="src", method="m", dim=8, seed=3)
    assert S.cell_identity(_fields(), cell) == {
        "world": "W", "source": "src", "method": "m", "params": {"a": 1}, "dim": 8, "seed": 3, "profile": "P",
        "cpt": CPT, "init_version": S.INIT_VERSION}
    ident = S.cell_identity(_fields(eval_precision="bf16", cpu_kernels="avx2",
                                    source_identity={"src": "D", "x": "E"}), cell)
    assert ident["source_identity"] == "D"
    assert (ident["eval_precision"], ident["cpu_kernels"]) == ("bf16", "avx2")
    assert "source_identity" not in S.cell_identity(_fields(source_identity={"x": "E"}), cell)
    assert "source_identity" not in S.cell_identity(_fields(source_identity={"src": ""}), cell)


def test_init_inputs_carry_the_kernels_the_decoder_and_the_code():
    ident = S.cell_identity(_fields(), Cell(source="src", method="m", dim=None, seed=1))
    base = {k: ident[k] for k in S.INIT_INPUTS}
    assert S.init_inputs(ident) == base
    assert S.init_inputs(ident, "") == base
    assert S.init_inputs(ident, "C") == {**base, "code": "C"}
    full = {**ident, "cpu_kernels": "avx2", "source_identity": "D", "eval_precision": "bf16"}
    assert S.init_inputs(full, "C") == {**base, "cpu_kernels": "avx2", "source_identity": "D", "code": "C"}


def test_product_keys():
    from harness.core.cache import cpt_product_key

    ident = S.cell_identity(_fields(), Cell(source="src", method="m", dim=None, seed=7))
    init = hash_obj(S.init_inputs(ident, "C"))
    assert S.product_keys(ident, "C") == (init, cpt_product_key(init, CPT, 7))
    for steps in (0, -1, "0"):
        no_cpt = {**ident, "cpt": {**CPT, "steps": steps}}
        assert S.product_keys(no_cpt, "C") == (init, None)
    one = {**ident, "cpt": {**CPT, "steps": "1"}}
    assert S.product_keys(one, None)[1] == cpt_product_key(hash_obj(S.init_inputs(one)), one["cpt"], 7)


def test_identity_numerics_accelerator_and_threads():
    assert S.identity_numerics("fp32", "native", "cuda", 4) == {"accelerator": "cuda", "threads": 4}
    assert S.identity_numerics("fp32", "native", None, "2") == {"threads": 2}
    assert S.identity_numerics("fp32", "native", "", 0) == {}


def test_cell_identity_carries_versions_accelerator_threads_and_tasks_where_given(monkeypatch):
    monkeypatch.setattr(S, "CPT_VERSION", 2)
    monkeypatch.setattr(S, "EVAL_VERSION", 5)
    cell = Cell(source="src", method="m", dim=8, seed=3)
    ident = S.cell_identity(_fields(accelerator="mps", fewer_threads=2, task_params={"ner": {"k": 1}}), cell)
    assert ident == {"world": "W", "source": "src", "method": "m", "params": {"a": 1}, "dim": 8, "seed": 3,
                     "profile": "P", "cpt": CPT, "init_version": S.INIT_VERSION, "cpt_version": 2,
                     "eval_version": 5, "task_params": {"ner": {"k": 1}}, "accelerator": "mps", "threads": 2}
    assert "task_params" not in S.cell_identity(_fields(task_params={}), cell)
    assert "task_params" not in S.cell_identity(_fields(task_params=None), cell)
    init = S.init_inputs(ident, "C")
    assert (init["accelerator"], init["threads"], init["code"]) == ("mps", 2, "C")
    assert "cpt_version" not in init and "eval_version" not in init and "task_params" not in init


def test_product_keys_of_a_cpt_version():
    from harness.core.cache import cpt_product_key

    ident = {**S.cell_identity(_fields(), Cell(source="src", method="m", dim=None, seed=7)), "cpt_version": 2}
    init = hash_obj(S.init_inputs(ident, None))
    assert S.product_keys(ident, None) == (init, cpt_product_key(init, {**CPT, "version": 2}, 7))
