"""Publishing a leaderboard: the MLflow leaderboard run, the written files, the ``harness leaderboard`` command
(on runs written in the test, and ``-m slow`` on one real ``harness run``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.core.tracking import Tracker
from tests._leaderboard_runs import _board


# -- MLflow publishing ------------------------------------------------------------------------------------
def test_publish_logs_one_leaderboard_run_and_updates_it(fake_exp, tracking_uri, lb, tmp_path):
    from leaderboard.publish import publish

    tracker = Tracker(tracking_uri)
    client = tracker.client
    exp_id = client.get_experiment_by_name(fake_exp).experiment_id
    first = publish(tracker, lb, tmp_path / "out")
    second = publish(tracker, lb, tmp_path / "out")
    assert first.run_id == second.run_id
    runs = client.search_runs([exp_id], "tags.`harness.kind` = 'leaderboard'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    arts = {a.path for a in client.list_artifacts(first.run_id)}
    assert {"leaderboard.html", "leaderboard.md", "leaderboard.csv", "leaderboard.txt", "leaderboard.json",
            "tables", "csv"} <= arts
    b = _board(lb)
    table = f"tables/{b.id}.json"
    assert table in {a.path for a in client.list_artifacts(first.run_id, "tables")}
    doc = json.loads(Path(client.download_artifacts(first.run_id, table, str(tmp_path))).read_text())
    assert len(doc["data"]) == len(b.rows) + len(b.paper_rows)  # replaced on re-render, not appended to
    row = dict(zip(doc["columns"], doc["data"][[d[0] for d in doc["data"]].index("alpha d=full")], strict=True))
    assert row["aaa_Latn"] == pytest.approx(0.82) and row["avg"] == pytest.approx(b.row("alpha d=full").avg)
    logged = json.loads(runs[0].data.tags["mlflow.loggedArtifacts"])
    assert {"path": table, "type": "table"} in logged and len(logged) == len(lb.boards)
    assert "alpha d=full" in runs[0].data.tags["mlflow.note.content"]
    # headline summaries as metrics of the run, for the UI's charts and run comparison
    m = runs[0].data.metrics
    assert m["leaderboard/cpu/sr-t/acc_at_10/alpha d_full/avg"] == pytest.approx(b.row("alpha d=full").avg)
    assert m["leaderboard/cpu/sr-t/acc_at_10/gamma d_full/mean_rank"] == pytest.approx(5 / 3)
    assert "leaderboard/cpu/sr-t/acc_at_10/gamma d_full/avg" not in m  # gaps: no average
    assert (tmp_path / "out" / "leaderboard.html").is_file()
    assert len(list((tmp_path / "out" / "csv").glob("*.csv"))) == len(lb.boards)


def test_out_dir_names_are_safe(tmp_path):
    from leaderboard.publish import out_dir_for, safe_dir_name

    assert safe_dir_name("bible/xlmr") == Path("bible/xlmr")
    assert safe_dir_name("../../etc") == Path("etc")
    assert safe_dir_name("a b:c") == Path("a_b_c")
    assert out_dir_for("w/s", tmp_path, several=False) == tmp_path
    assert out_dir_for("w/s", tmp_path, several=True) == tmp_path / "w" / "s"


# -- the command -----------------------------------------------------------------------------------------
def test_leaderboard_command_prints_writes_and_logs(fake_exp, tracking_uri, tmp_path):
    from rich.console import Console

    from leaderboard.publish import run_leaderboard

    con = Console(width=400, record=True, file=io.StringIO())
    assert run_leaderboard(tracking_uri, fake_exp, out=tmp_path / "o", bootstrap=50, console=con, langs=True) == 0
    out = con.export_text()
    assert "lb-fake · sr-t · acc@10 · step 10 (final) · profile cpu" in out
    assert "lb-fake · sr-t · acc@10 · step 10 (final) · profile paper" in out
    assert "acc@1 " not in out and "slices" in out and "paired Wilcoxon" in out
    assert f"HTML: {tmp_path / 'o' / 'leaderboard.html'}" in out
    con = Console(width=400, record=True, file=io.StringIO())
    run_leaderboard(tracking_uri, fake_exp, step="0", metric="acc@1", per_seed=True, write=False, console=con)
    out = con.export_text()
    assert "acc@1 · step 0 ·" in out and "alpha d=full s=2" in out and "HTML:" not in out
    # by default one screen: the claims, each row's average per task (both profiles), where the rest is
    con = Console(width=400, record=True, file=io.StringIO())
    run_leaderboard(tracking_uri, fake_exp, write=False, bootstrap=0, console=con)
    out = con.export_text()
    assert "lb-fake · profile cpu" in out and "lb-fake · profile paper" in out and "--langs" in out
    assert "slices ·" not in out and "paired Wilcoxon" not in out and "lb-fake · sr-t · acc@10" not in out
    con = Console(width=400, record=True, file=io.StringIO())
    run_leaderboard(tracking_uri, "no-such-experiment", console=con)
    assert "no results yet" in con.export_text()


def test_the_leaderboard_command_imports_no_task_method_or_torch(fake_exp, tracking_uri, harness_home):
    """`harness leaderboard` on runs reads all it needs of the tasks and methods from MLflow."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO
    from tests.test_registry import TORCH_FREE

    env = {**os.environ, "HARNESS_HOME": str(harness_home), "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-c", TORCH_FREE, "leaderboard", "--langs", "--experiment", fake_exp,
                           "--no-write",
                           "--bootstrap", "20", "--tracking-uri", tracking_uri], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lb-fake · sr-t · acc@10" in proc.stdout and "HEAVY:\n" in proc.stdout, proc.stdout[-500:]


@pytest.mark.slow
def test_cli_on_a_real_run(run_cli, tracking_uri, tmp_path):
    exp = "t-lb-real"
    run_cli("run", "--world", "synthetic", "--methods", "random", "--tasks", "mlm", "--seeds", "1,2",
            "--cpt-steps", "2", "--experiment", exp, check=True)
    out = tmp_path / "board"
    r = run_cli("leaderboard", "--experiment", exp, "--langs", "--out", str(out), "--bootstrap", "100", check=True)
    langs = ["qaa_Latn", "qab_Latn", "qac_Latn", "qad_Cyrl", "qae_Grek"]
    assert all(lang in r.stdout for lang in langs) and "random d=full" in r.stdout
    assert "step 2 (final)" in r.stdout and "slices" in r.stdout
    html = out / "leaderboard.html"
    assert f"HTML: {html}" in r.stdout and html.is_file()
    # the printed per-language means are the means of the two seeds' logged values; the std matches the runner's
    # own aggregate run
    client = MlflowClient(tracking_uri)
    exp_id = client.get_experiment_by_name(exp).experiment_id
    tasks = client.search_runs([exp_id], "tags.`harness.kind` = 'task'")
    (agg,) = client.search_runs([exp_id], "tags.`harness.kind` = 'aggregate'")
    assert len(tasks) == 2
    for lang in langs:
        vals = [next(m.value for m in client.get_metric_history(t.info.run_id, f"mlm/loss/{lang}") if m.step == 2)
                for t in tasks]
        mean = sum(vals) / 2
        assert f"{mean:.3f}" in r.stdout
        hist = client.get_metric_history(agg.info.run_id, f"mlm/loss/{lang}/std")
        std = next(m.value for m in hist if m.step == 2)
        assert f"±{std:.3f}" in r.stdout
    (board_run,) = client.search_runs([exp_id], "tags.`harness.kind` = 'leaderboard'")
    assert "leaderboard.html" in {a.path for a in client.list_artifacts(board_run.info.run_id)}
    # what the leaderboard knows of the task and the method it reads from the runs' tags
    assert {t.data.tags["harness.task.headline"] for t in tasks} == {"loss"}
    assert {t.data.tags["harness.task.higher_is_better"] for t in tasks} == {"false"}
    assert {t.data.tags["harness.task.metrics"] for t in tasks} == {"loss,ppl"}
    cells = client.search_runs([exp_id], "tags.`harness.kind` = 'cell'")
    assert len(cells) == 2 and all("harness.method_defaults" in c.data.tags for c in cells)


def test_an_interrupted_render_marks_the_run_failed_and_the_next_one_repairs_it(fake_exp, tracking_uri, lb,
                                                                                  tmp_path, monkeypatch):
    from leaderboard.publish import publish

    tracker = Tracker(tracking_uri)

    def broken(*a, **k):
        raise OSError("artifact store unavailable")

    with monkeypatch.context() as m:
        m.setattr(tracker.client, "log_table", broken)
        with pytest.raises(OSError):
            publish(tracker, lb, tmp_path / "o")
    exp_id = tracker.client.get_experiment_by_name(fake_exp).experiment_id
    (run,) = tracker.client.search_runs([exp_id], "tags.`harness.kind` = 'leaderboard'")
    assert run.info.status == "FAILED" and "artifact store unavailable" in run.data.tags["harness.error"]
    again = publish(tracker, lb, tmp_path / "o")
    run = tracker.client.get_run(again.run_id)
    assert again.run_id == run.info.run_id and run.info.status == "FINISHED"
    assert "harness.error" not in run.data.tags
