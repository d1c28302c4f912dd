"""What a person sees of a run: progress and logs on stderr from the first second (world builds included, each
stage named with its counts and elapsed time), never wrapped when piped; the results on stdout, as a compact
table per task with each row's average ± its spread over seeds and the claims' one-line summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def test_a_world_build_says_each_stage_as_it_goes(tmp_path):
    env = {**os.environ, "HARNESS_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "world", "build", "synthetic"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # the first line comes before any stage's work is done
    _, rest = proc.communicate(timeout=600)
    assert proc.returncode == 0
    assert first.startswith("world synthetic: sentences: start"), first
    lines = (first + rest).splitlines()
    for stage in ("sentences", "resources", "tokenizers", "source model MLM pre-training"):
        assert any(x.startswith(f"world synthetic: {stage}") and ": done" in x for x in lines), (stage, lines)
    assert any("5 languages x 1500 training" in x for x in lines)  # counts with the stage
    assert any("done 120/120 in" in x for x in lines)  # the pre-training's steps and elapsed time


def test_results_on_stdout_progress_on_stderr_nothing_wrapped(run_cli, synthetic_world, harness_home):
    proc = run_cli("run", "--world", "synthetic", "--methods", "random,ofa", "--seeds", "1,2", "--tasks", "sr-t,mlm",
                   "--cpt-steps", "0", "--experiment", "t-output", "--workers", "1", check=True)
    out, err = proc.stdout, proc.stderr
    # a first board, marked partial, as soon as one cell of every method is done (every method's first seed goes
    # first: here the second of four), then the full board at the end
    assert ": 2 of 4 cells done; every method has a cell done" in out.partition("partial board")[2], out
    _, partial, out = out.split("average over languages ± sd over seeds")
    assert "±" not in next(x for x in partial.splitlines() if "ofa d=full" in x)  # one seed of ofa so far
    out = "average over languages ± sd over seeds" + out
    # stdout: the results table, nothing else of the run
    assert "average over languages ± sd over seeds" in out
    for row in ("ofa d=full", "random d=full"):
        line = next(x for x in out.splitlines() if row in x)
        assert "±" in line and "(2 seeds)" in line, line
    assert "sr-t acc@10" in out and "mlm loss" in out
    assert "claims:" in out and "tested claim" in out
    assert not any(x.lstrip().startswith(("init ", "cells:")) for x in out.splitlines())  # no progress line
    # stderr: progress and logs, one line per message however long
    init_lines = [x.strip() for x in err.splitlines() if x.lstrip().startswith("init ofa | src | dim full | seed 1:")]
    assert init_lines[0].endswith(": start"), init_lines
    assert any(": done in " in x and "'unk'" in x and x.endswith("}") for x in init_lines), init_lines
    assert "browse: `harness leaderboard` (terminal table) or `harness ui` (MLflow UI on 127.0.0.1)" in err
    # the same command again, with nothing left to compute: its board once, no partial one, the same numbers, the
    # intervals taken from the home's memo of them (they are the same intervals)
    memo = harness_home / "cache" / "boards" / "intervals.json"
    assert memo.is_file() and json.loads(memo.read_text())
    again = run_cli("run", "--world", "synthetic", "--methods", "random,ofa", "--seeds", "1,2", "--tasks",
                    "sr-t,mlm", "--cpt-steps", "0", "--experiment", "t-output", "--workers", "1", check=True)
    assert "partial board" not in again.stdout
    assert again.stdout.count("average over languages ± sd over seeds") == 1
    marker = "average over languages ± sd over seeds"
    assert again.stdout.split(marker, 1)[1] == out.split(marker, 1)[1]


def test_rows_not_of_this_command_or_of_older_code_are_marked_on_stdout(fake_exp, tracking_uri):
    """The results table marks a row computed by older code of its method, a row of earlier runs of the
    experiment (none of its cells is the command's) and a row that averages the command's seeds with earlier ones,
    and says under the table what each mark means."""
    import io

    from mlflow.tracking import MlflowClient
    from rich.console import Console

    from leaderboard.collect import collect_experiment
    from leaderboard.summary import render, row_origins, summaries
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    data = collect_experiment(client, client.get_experiment_by_name(fake_exp))
    cell = {(c.method, c.seed, c.profile): c.run_id for c in data.cells.values()}
    ours = {cell[("alpha", "1", "cpu")], cell[("alpha", "2", "cpu")], cell[("beta", "1", "cpu")]}
    older = {cell[("beta", "2", "cpu")]: ["methods/beta.py"]}  # beta's seed 2 ran an older version of its code
    tables = summaries(build_leaderboard(data, bootstrap=0), ["sr-t"], row_origins(data, ours, older))
    out = io.StringIO()
    for table in tables:
        render(table, Console(file=out, width=200, color_system=None))
    cpu, paper = out.getvalue().split("profile paper")
    rows = {x.split("│")[1].strip() for x in cpu.splitlines() if x.startswith("│")}
    assert rows == {"alpha d=full", "beta d=full [older code] [seed 2 earlier]", "gamma d=full [earlier run]"}, rows
    assert "[older code]: computed by an older version of the method's code (beta: methods/beta.py changed " \
           "since); `--rerun stale` runs those cells again" in cpu
    assert "[earlier run]: from earlier runs of this experiment, not this command's cells" in cpu
    assert "[seeds ... earlier]: the row averages this command's seeds with those seeds of earlier runs" in cpu
    assert "alpha d=full [earlier run]" in paper  # the other profile's alpha: no cell of this command
    assert "[older code]" not in paper


def test_a_long_row_label_never_wraps_at_160_columns():
    """A row label too long for a 160-column terminal beside its columns is shortened in the middle of its name,
    its marks whole at its end: every row stays on one line (a wrapped ``[earlier run]`` read as a row of its
    own)."""
    import io

    from rich.console import Console

    from leaderboard.summary import SummaryTable, label_fit, render

    long = ("focus d=full (overlap=casefold, specials=role) src=xlm-roberta-base-extended cpt=10 "
            "cpt.precision=fp32 cpt.lr=5e-05 eval=bf16 kernels=native [earlier run]")
    tasks = [("sr-t", "acc@10 ↑", "step 0"), ("ner", "f1 ↑", "step 0"), ("pos", "acc ↑", "step 0")]
    table = SummaryTable("exp", "cpu", tasks, [long, "random"])
    for label in table.rows:
        for task, _, step in tasks:
            table.cells[(label, f"{task} · {step}")] = "0.512 ± 0.013 (3 seeds)"
    out = io.StringIO()
    render(table, Console(file=out, width=160, color_system=None))
    lines = out.getvalue().splitlines()
    body = [x for x in lines if x.startswith("│")]
    assert len(body) == 2 and max(len(x) for x in lines) <= 160, lines  # one line a row, none wider
    shown = body[0].split("│")[1].strip()
    assert shown.endswith("… kernels=native [earlier run]"[-16:]) and "…" in shown and shown.startswith("focus d=")
    assert label_fit("ofa d=full [earlier run]", 40) == "ofa d=full [earlier run]"  # whole where it fits
