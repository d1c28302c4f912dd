import json

import pytest
from mlflow.tracking import MlflowClient

from harness.core.errors import ConfigError
from harness.cpt import batch_layout


@pytest.mark.parametrize("effective, per_dev, n, expected", [
    (512, 32, 4, (32, 4)),   # HyperOFA: 32 per GPU x 4 accumulation x 4 GPUs
    (512, 32, 1, (32, 16)),
    (384, 12, 4, (12, 8)),   # OFA XLM-R: 12 x 8 x 4
    (16, 16, 2, (8, 1)),
    (16, 16, 1, (16, 1)),
    (12, 8, 1, (6, 2)),
])
def test_the_effective_batch_is_kept_whatever_the_devices(effective, per_dev, n, expected):
    got = batch_layout(effective, per_dev, n)
    assert got == expected
    assert got[0] * got[1] * n == effective and got[0] <= per_dev


def test_an_impossible_layout_is_a_clear_error():
    with pytest.raises(ConfigError, match="effective batch 10"):
        batch_layout(10, 4, 4)


def test_cpt_on_two_processes_matches_the_schema(run_cli, tracking_uri, harness_home):
    """One cell's CPT over the two GPUs of a node (torchrun), every accelerator branch taken on the CPU: the cell's
    process is pinned to both GPUs, the batch is searched once in it before the ranks start (each rank then reads
    that layout), the ranks run with the GPU's loader workers and logging interval (the last step logged)."""
    exp = "t-ddp"
    r = run_cli("run", "--world", "synthetic", "--methods", "random", "--tasks", "mlm", "--cpt-steps", "3",
                "--cpt-devices", "2", "--experiment", exp, "--seeds", "21", "--keep-products", check=True,
                env={"HARNESS_EMULATE_ACCELERATOR": "1", "HARNESS_EMULATE_GPUS": "2"})
    assert "CPT on 2 processes" in r.stderr
    c = MlflowClient(tracking_uri)
    e = c.get_experiment_by_name(exp)
    (parent,) = c.search_runs([e.experiment_id], filter_string="tags.`harness.kind` = 'cell'")
    assert sorted(m.step for m in c.get_metric_history(parent.info.run_id, "cpt/train_loss")) == [3]
    assert parent.data.tags["harness.gpus"] == "0,1"
    (product,) = [p for p in (harness_home / "products" / "cpt").glob("*")
                  if (p / "_DONE.json").is_file() and json.loads((p / "_DONE.json").read_text()).get("seed") == 21]
    layouts = json.loads((product / "layout.json").read_text())
    assert len(layouts) == 1 and layouts[0]["why"].startswith("batch search")  # searched once, not per rank
    specs = list((harness_home / "products" / "cpt").glob("*.launch/cpt_spec.json"))
    assert specs and json.loads(specs[0].read_text())["settings"]["devices"] == 2


def test_a_damaged_cpt_product_is_reported_and_computed_again(run_cli, harness_home):
    """The CPT product's marker records every file's size and sha256; a truncated checkpoint is never loaded."""
    job = ["run", "--world", "synthetic", "--methods", "random", "--tasks", "mlm", "--cpt-steps", "2",
           "--seeds", "23", "--keep-products"]
    run_cli(*job, "--experiment", "t-cpt-damage", check=True)
    products = [p for p in (harness_home / "products" / "cpt").glob("*")
                if (p / "_DONE.json").is_file() and json.loads((p / "_DONE.json").read_text()).get("seed") == 23]
    assert len(products) == 1
    marker = json.loads((products[0] / "_DONE.json").read_text())
    weights = [rel for rel in marker["files"] if rel.endswith(".safetensors")]
    assert weights, marker["files"]
    target = products[0] / weights[0]
    whole = target.read_bytes()
    target.write_bytes(whole[: len(whole) // 2])  # truncated
    r = run_cli(*job, "--experiment", "t-cpt-damage-2", check=True)
    assert "damaged" in r.stderr and weights[0] in r.stderr
    assert target.read_bytes() == whole  # computed again, bit for bit
