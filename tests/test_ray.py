"""The Ray executor on a real local Ray instance (127.0.0.1, two worker CPUs)."""

from __future__ import annotations

import shutil

import pytest
from mlflow.tracking import MlflowClient

# one test process runs every test that starts a Ray cluster (two local clusters at once contend for its ports)
pytestmark = pytest.mark.xdist_group("ray")

pytest.importorskip("ray")

GRID = ["run", "--world", "synthetic", "--methods", "random,ofa", "--tasks", "mlm", "--seeds", "1,2",
        "--cpt-steps", "2"]


def _fresh_home(tmp_path, harness_home):
    """A new harness home holding only the (already built) synthetic world, so every product is recomputed."""
    home = tmp_path / "home"
    shutil.copytree(harness_home / "worlds", home / "worlds")
    return home


def _metrics(tracking_uri: str, experiment: str) -> dict[tuple, list[tuple[int, float]]]:
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name(experiment)
    out = {}
    runs = c.search_runs([exp.experiment_id], filter_string="tags.`harness.kind` = 'task'")
    for r in runs:
        t = r.data.tags
        for key in r.data.metrics:
            if key.startswith("mlm/loss/"):
                hist = sorted((m.step, m.value) for m in c.get_metric_history(r.info.run_id, key))
                out[(t["harness.method"], t["harness.seed"], key)] = hist
    return out


def _cells(tracking_uri: str, experiment: str):
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name(experiment)
    return c.search_runs([exp.experiment_id], filter_string="tags.`harness.kind` = 'cell'")


def test_ray_grid_equals_local_and_survives_a_killed_worker(run_cli, tracking_uri, harness_home, tmp_path):
    one_thread = {"OMP_NUM_THREADS": "1"}
    run_cli(*GRID, "--experiment", "t-local", env=one_thread, check=True)

    home = _fresh_home(tmp_path, harness_home)
    marker = tmp_path / "fault-fired"
    r = run_cli(*GRID, "--experiment", "t-ray", "--executor", "ray",
                env={**one_thread, "HARNESS_HOME": str(home), "HARNESS_FAULT_AFTER": "step0",
                     "HARNESS_FAULT_MARKER": str(marker)}, check=True)
    assert marker.exists(), "the fault hook never killed a worker"
    assert "failed" not in r.stderr.lower()

    cells = _cells(tracking_uri, "t-ray")
    assert len(cells) == 4 and {c.info.status for c in cells} == {"FINISHED"}
    assert len({c.data.tags["harness.cell"] for c in cells}) == 4  # no duplicate runs after the retry
    local, ray_ = _metrics(tracking_uri, "t-local"), _metrics(tracking_uri, "t-ray")
    assert set(local) == set(ray_) and len(local) == 2 * 2 * 6  # 2 methods x 2 seeds x (5 languages + avg)
    for key, hist in local.items():
        assert [s for s, _ in ray_[key]] == [s for s, _ in hist] == [0, 2]  # each step logged once
        for (_, a), (_, b) in zip(hist, ray_[key], strict=True):
            assert a == pytest.approx(b, rel=1e-6, abs=1e-6)
