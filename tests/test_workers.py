"""The local executor's side-by-side cells: the same results as one cell after the other, no duplicate runs."""

from __future__ import annotations

import shutil

import pytest

from harness.config import make_config
from harness.executors import choose
from tests.test_ray import _cells, _metrics

GRID = ["run", "--world", "synthetic", "--methods", "random,ofa", "--tasks", "mlm", "--cpt-steps", "2"]


def test_workers_match_sequential(run_cli, tracking_uri, harness_home, tmp_path):
    """Two cells in this process (started with two threads) and the same two in two worker processes: the same
    numbers to the last bit, each cell computed on the profile's one thread wherever it ran."""
    one_thread = {"OMP_NUM_THREADS": "1"}
    seq = run_cli(*GRID, "--experiment", "w-seq", "--workers", "1", env={"OMP_NUM_THREADS": "2"}, check=True)
    assert "[random/s1]" not in seq.stderr
    home = tmp_path / "home"
    shutil.copytree(harness_home / "worlds", home / "worlds")  # every product recomputed by the workers
    par = run_cli(*GRID, "--experiment", "w-par", "--workers", "2", env={**one_thread, "HARNESS_HOME": str(home)},
                  check=True)
    assert "[random/s1]" in par.stderr and "[ofa/s1]" in par.stderr  # each worker's lines carry its cell
    cells = _cells(tracking_uri, "w-par")
    assert len(cells) == 2 and {c.info.status for c in cells} == {"FINISHED"}
    a, b = _metrics(tracking_uri, "w-seq"), _metrics(tracking_uri, "w-par")
    assert set(a) == set(b) and len(a) == 2 * 6
    for key, hist in a.items():
        assert [s for s, _ in b[key]] == [s for s, _ in hist] == [0, 2]
        for (_, x), (_, y) in zip(hist, b[key], strict=True):
            assert x == y, key
    for name in ("w-seq", "w-par"):
        assert {c.data.params["torch_threads"] for c in _cells(tracking_uri, name)} == {"1"}
    # the same command again: every cell is found done, nothing is logged twice
    run_cli(*GRID, "--experiment", "w-par", "--workers", "2", env={**one_thread, "HARNESS_HOME": str(home)},
            check=True)
    assert len(_cells(tracking_uri, "w-par")) == 2


def local_workers(cfg, device: str, n_cells: int) -> int:
    """The cells the local executor runs at once for ``cfg`` on ``device`` with ``n_cells`` left."""
    from harness.spec import cell_cpus, cpt_devices, profile_of

    return choose(cfg, device, cpt_devices(cfg), cell_cpus(profile_of(cfg))).workers_for(n_cells)


def test_local_workers_rule(monkeypatch):
    import harness.executors as ex

    monkeypatch.setattr(ex, "available_cpus", lambda: 8)
    cfg = make_config(overrides={"world": "synthetic"})
    assert local_workers(cfg, "cpu", 10) == 8  # cpu profile: one CPU per cell
    assert local_workers(cfg, "cpu", 3) == 3  # never more workers than cells
    import torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert local_workers(cfg, "cuda", 10) == 1  # one cell per GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert local_workers(cfg, "cuda", 10) == 4 and local_workers(cfg, "cuda:2", 10) == 1
    assert local_workers(make_config(overrides={"world": "synthetic", "profile": "paper"}), "cpu", 10) == 1
    assert local_workers(make_config(overrides={"world": "synthetic", "workers": 3}), "cuda", 10) == 3
    with pytest.raises(Exception, match="workers"):
        local_workers(make_config(overrides={"world": "synthetic", "workers": 0}), "cpu", 10)
