"""What moves a number is in a cell's identity and on the board: the evaluation precision beside the CPT
precision. A run asking for another precision than a finished one computes new cells (it is never passed over as
finished), its rows get labels of their own, and the claims test each set of rows on its own."""

from __future__ import annotations

import json
import re

from harness.config import make_config
from leaderboard.model import Board, Entry, Row, VariantKey, finish_board


def _keys(world, **overrides) -> set[str]:
    from harness.spec import resolve

    cfg = make_config(overrides={"world": "synthetic", "methods": ["random"], "tasks": ["sr-t"], "device": "cpu",
                                 **overrides})
    return {k.key for k in resolve(cfg, world).cells.values()}


def test_the_evaluation_precision_is_part_of_a_cells_identity(synthetic_world):
    fp32 = _keys(synthetic_world)
    assert _keys(synthetic_world, precision="fp32") == fp32  # fp32 named: the same cells (fp32 is the default)
    # CPT in fp32 as before, evaluation in bf16: new cells, not the fp32 ones passed over as finished
    eval_bf16 = _keys(synthetic_world, precision="bf16", cpt={"precision": "fp32"})
    assert eval_bf16.isdisjoint(fp32)
    both_bf16 = _keys(synthetic_world, precision="bf16")
    assert both_bf16.isdisjoint(fp32) and both_bf16.isdisjoint(eval_bf16)


def test_rows_that_differ_in_precision_get_labels_of_their_own():
    from leaderboard.tables import variant_labels

    cpt = {"steps": "10", "precision": "fp32", "lr": "0.0001"}
    fp32 = VariantKey("ofa", "full", "src", "{}", json.dumps(cpt, sort_keys=True))
    cpt_bf16 = VariantKey("ofa", "full", "src", "{}", json.dumps({**cpt, "precision": "bf16"}, sort_keys=True))
    eval_bf16 = VariantKey("ofa", "full", "src", "{}", fp32.cpt, protocol=json.dumps({"eval_precision": "bf16"}))
    longer = VariantKey("ofa", "full", "src", "{}", json.dumps({**cpt, "steps": "20"}, sort_keys=True))
    labels = variant_labels([fp32, cpt_bf16, eval_bf16, longer])
    assert len(set(labels.values())) == 4, labels
    assert labels[cpt_bf16] == "ofa d=full cpt=10 cpt.precision=bf16 eval=fp32"
    assert labels[eval_bf16] == "ofa d=full cpt=10 cpt.precision=fp32 eval=bf16"
    assert labels[longer].startswith("ofa d=full cpt=20")
    # one variant alone, or variants that differ in the budget only, keep the labels they had
    assert variant_labels([fp32]) == {fp32: "ofa d=full"}
    assert variant_labels([fp32, longer]) == {fp32: "ofa d=full cpt=10", longer: "ofa d=full cpt=20"}


def test_the_claims_never_pool_rows_computed_differently():
    from leaderboard.claims import evaluate_claims

    langs = [f"l{i}_Latn" for i in range(8)]
    base = [0.20, 0.22, 0.18, 0.25, 0.30, 0.10, 0.15, 0.21]

    def row(method: str, shift: float, evaluation: str) -> Row:
        protocol = "{}" if evaluation == "fp32" else json.dumps({"eval_precision": evaluation})
        return Row(f"{method} {evaluation}", {x: Entry([v + shift + 0.001 * i], ["1"])
                                              for i, (x, v) in enumerate(zip(langs, base, strict=True))},
                   variant=VariantKey(method, "full", "src", cpt='{"precision":"fp32"}', protocol=protocol))

    # FOCUS ahead of random in fp32, behind in bf16: two verdicts, one per set of rows
    board = Board("exp", "sr-t", "acc@10", "cpu", True, "step", 0, [],
                  [row("random", 0.0, "fp32"), row("focus", 0.05, "fp32"),
                   row("random", 0.0, "bf16"), row("focus", -0.05, "bf16")])
    board.headline = True
    finish_board(board)
    results = [r for r in evaluate_claims([board], []) if r.claim.id == "focus>random"]
    assert {r.numerics: r.status for r in results} == {"evaluation fp32, CPT fp32": "holds",
                                                      "evaluation bf16, CPT fp32": "contradicted"}
    assert all(re.search(r"\(evaluation (fp32|bf16), CPT fp32\)", r.where) for r in results)


def test_a_bf16_run_after_an_fp32_one_adds_rows_and_the_fp32_cells_resume(run_cli, tmp_path):
    """The same command in fp32, then with the evaluation in bf16 ([cpt] precision = "fp32", --precision bf16):
    the second computes its cells (before, it printed "finished, every evaluation logged" for each and showed the
    fp32 numbers), the table has both rows, labelled apart; the fp32 command again passes over every cell."""
    cmd = ["run", "--world", "synthetic", "--methods", "random", "--tasks", "sr-t", "--experiment", "numerics"]
    first = run_cli(*cmd, check=True)
    assert "finished, every evaluation logged" not in first.stderr
    cfg = tmp_path / "bf16.toml"
    cfg.write_text('[cpt]\nprecision = "fp32"\n')
    second = run_cli(*cmd, "--precision", "bf16", "--config", str(cfg), check=True)
    assert "finished, every evaluation logged" not in second.stderr, second.stderr[-2000:]
    assert "bf16 on the CPU under the pinned kernels" not in first.stderr  # fp32: nothing to say
    # bf16 on the CPU, pinned: the run says at its start that ATen's reference GEMM computes its products
    assert "bf16 on the CPU under the pinned kernels: oneDNN held to AVX2 has no bf16 matrix product" in \
        " ".join(second.stderr.split()), second.stderr[-2000:]
    assert "random d=full eval=bf16" in second.stdout and re.search(r"random d=full eval=fp32", second.stdout), \
        second.stdout
    again = run_cli(*cmd, check=True)
    assert "finished, every evaluation logged: random" in again.stderr
    assert "init random" not in again.stderr


def test_bf16_cells_of_oneDNN_pinned_and_of_the_cpus_own_kernels_are_never_one_cell(run_cli):
    """``--precision bf16`` on a CPU with AVX-512 / AMX: the pinned run (oneDNN capped at AVX2) and a native one
    (oneDNN's AMX or AVX-512 BF16 kernels) measure other kernels, so the second computes its cells (it is not passed
    over as finished), and the board shows two rows labelled apart (``kernels=avx2-onednn``, ``native:<hex>``),
    never pooled; the pinned command again passes over its cells."""
    import pytest

    from harness.core import kernels
    from tests.conftest import pinned_labels

    if not kernels.can_pin() or not kernels.cpu_flags() & {"avx512f", "amx_bf16", "avx512_bf16"}:
        pytest.skip("needs an x86-64 CPU whose own kernels are not the AVX2 ones")
    cmd = ["run", "--world", "synthetic", "--methods", "random", "--tasks", "sr-t", "--experiment", "kernels",
           "--precision", "bf16", "--device", "cpu"]
    first = run_cli(*cmd, check=True)
    pinned_bf16 = pinned_labels()[1]  # "avx2-onednn" where the pins give the golden bits (an Intel CPU)
    if pinned_bf16 == kernels.PINNED_BF16:
        assert "CPU kernels:" not in first.stderr  # pinned: nothing to say
    # (the test process pinned itself: its pins are in the environment a child inherits, and a child with them
    # computes, and is measured as, the pinned set; the CPU's own kernels are a clean environment's)
    native = run_cli(*cmd, env={"HARNESS_CPU_KERNELS": "native", **{k: "" for k in (*kernels.PINS,
                                                                                   kernels.PINNED_ENV)}}, check=True)
    assert "finished, every evaluation logged" not in native.stderr, native.stderr[-2000:]
    label = re.search(r"the cells are labelled (native:[0-9a-f]{8})", native.stderr)
    assert label, native.stderr[-2000:]
    assert label.group(1) != pinned_bf16
    assert f"random d=full kernels={pinned_bf16}" in native.stdout, native.stdout
    assert f"random d=full kernels={label.group(1)}" in native.stdout, native.stdout
    again = run_cli(*cmd, check=True)
    assert "finished, every evaluation logged: random" in again.stderr and "init random" not in again.stderr
