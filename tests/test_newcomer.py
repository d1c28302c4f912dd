"""What a newcomer meets first, each checked as they would meet it (the CLI as a subprocess, a fresh home): a
plug-in method given parameters it does not declare, the README's plug-in command, ``harness list`` piped, and the
stderr of ``harness leaderboard`` (progress only: no MLflow warning, no download bars)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, home: Path, env: dict[str, str] | None = None, columns: str | None = None):
    full = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME", "COLUMNS"}}
    full.update(HARNESS_HOME=str(home), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **(env or {}))
    if columns:
        full["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, env=full,
                          timeout=600, cwd=REPO)


def _readme_plugin(tmp_path: Path) -> dict[str, str]:
    """The README's outside method (``my_methods.MeanInit``, registered as ``mean``), installed into a folder on the
    path through its entry point."""
    text = (REPO / "README.md").read_text()
    code = re.search(r"```python\n(# my_methods\.py.*?)```", text, re.S)
    assert code, "README must hold the outside-method example"
    dist = tmp_path / "plugins" / "my_methods-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[harness.methods]\nmean = my_methods:MeanInit\n")
    (tmp_path / "plugins" / "my_methods.py").write_text(code.group(1))
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), str(REPO)])}


@pytest.mark.parametrize("how", ["init", "run"])
def test_a_plugin_without_params_refuses_the_ones_given(how, tmp_path):
    """The README's plug-in declares no ``params``: ``--params`` (init) or ``[method_params.mean]`` (run) would be
    ignored, so each is refused in one line before anything is built or written."""
    env = _readme_plugin(tmp_path)
    home = tmp_path / "home"
    if how == "init":
        proc = _cli("init", "--world", "synthetic", "--method", "mean", "--params", '{"k": 3}', "--out",
                    str(tmp_path / "out"), home=home, env=env)
        flag = "--params"
    else:
        (tmp_path / "c.toml").write_text("[method_params.mean]\nk = 3\n")
        proc = _cli("run", "--world", "synthetic", "--methods", "mean", "--tasks", "mlm", "--config",
                    str(tmp_path / "c.toml"), home=home, env=env)
        flag = "method_params.mean"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert flag in lines[0] and "declares no parameters" in lines[0] and "'k'" in lines[0], lines[0]
    assert not home.exists() and not (tmp_path / "out").exists()


def test_the_readme_plugin_command_runs_on_the_synthetic_world():
    """The README's command for its plug-in names ``--world synthetic``: without it the run builds the bible world
    (hundreds of MB) before the newcomer sees the method run."""
    text = (REPO / "README.md").read_text()
    commands = re.findall(r"`(harness run [^`]*--methods mean[^`]*)`", text)
    assert commands, "the README must show how to run its plug-in"
    assert all("--world synthetic" in c for c in commands), commands


@pytest.mark.parametrize("columns, width", [(None, 100), ("80", 80)])
def test_list_fits_the_page_when_piped(columns, width, tmp_path):
    """``harness list`` piped: 100 columns (not the 200 of the run's result tables); COLUMNS where it is set."""
    proc = _cli("list", home=tmp_path / "home", columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("┃ name") for ln in lines), proc.stdout
    assert max(len(ln) for ln in lines) <= width, max(lines, key=len)


def test_leaderboard_stderr_holds_no_mlflow_warning_nor_download_bars(tmp_path):
    """A board whose description is longer than a run tag holds (MLflow's 8,000 characters), over a store whose
    artifacts are a local folder (as the harness home's are): the description is cut by the harness at a line's end
    (no MLflow truncation warning), and the cells' init reports are copied without MLflow's download bars."""
    from mlflow.tracking import MlflowClient

    from tests._leaderboard_runs import make_cell

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    exp_id = client.create_experiment("lb-long", artifact_location=(tmp_path / "art").as_uri())
    langs = [f"l{j:02d}_Latn" for j in range(40)]
    for i in range(16):
        make_cell(client, exp_id, f"method-{i:02d}", 1, hits={lang: 5 + (i + j) % 40 for j, lang in enumerate(langs)})
    proc = _cli("leaderboard", "--tracking-uri", uri, "--experiment", "lb-long", "--out", str(tmp_path / "board"),
                "--bootstrap", "0", home=tmp_path / "home", columns="200")
    assert proc.returncode == 0, proc.stderr
    assert "truncated to" not in proc.stderr and "Downloading artifacts" not in proc.stderr, proc.stderr
    (run,) = client.search_runs([exp_id], filter_string="tags.`harness.kind` = 'leaderboard'")
    note = run.data.tags["mlflow.note.content"]
    assert note.endswith("(truncated: see leaderboard.md)") and len(note) <= 8000, len(note)
    results = client.search_runs([exp_id], filter_string="tags.`harness.kind` = 'result'")
    assert results and all(client.list_artifacts(r.info.run_id, "init") for r in results)
