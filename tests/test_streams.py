"""Clean streams: MLflow's own INFO lines stay off the harness's output unless --debug; nothing on stderr wraps
when it is piped; board titles break between names, never inside one."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("debug", [False, True])
def test_mlflow_info_lines_only_with_debug(tmp_path, debug):
    """The command line (here one that stops at a bad flag value, after the logging is set up), then a new MLflow
    store, whose creation MLflow announces at INFO: the line shows with --debug only."""
    argv = [*(["--debug"] if debug else []), "leaderboard", "--step", "bogus"]
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    code = (f"from harness.cli import main\ntry:\n    main({argv!r})\nexcept Exception:\n    pass\n"
            f"from harness.core.tracking import Tracker\nTracker({uri!r})\n")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_LOGGING_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300)
    assert (tmp_path / "store.db").is_file(), proc.stderr
    assert ("INFO mlflow" in proc.stderr) == debug, proc.stderr


def test_leaderboard_stderr_does_not_wrap_when_piped(fake_exp, tracking_uri, tmp_path, monkeypatch, capsys):
    """``COLUMNS=40 harness leaderboard 2> log``: the line naming where the tables went is one line, whatever its
    length (stdout's tables still meet the width)."""
    from rich.console import Console

    from leaderboard.publish import run_leaderboard

    monkeypatch.setenv("COLUMNS", "40")
    out = tmp_path / ("a-folder-whose-name-is-longer-than-the-console-is-wide" * 2)
    run_leaderboard(tracking_uri, experiment=fake_exp, out=out, log_run=False, bootstrap=0,
                    console=Console(file=io.StringIO(), width=40))
    lines = capsys.readouterr().err.splitlines()
    assert f"{fake_exp}: " in "\n".join(lines)
    assert any(line.startswith(f"{fake_exp}: ") and line.rstrip().endswith(str(out)) for line in lines), lines


def test_board_titles_break_between_names(monkeypatch):
    """At every width, a board's title (whole, or each part's when the table is split) breaks only between its
    names: each ' · ' segment and each column name a part's title spans stays on one line."""
    from rich.console import Console

    from leaderboard.render_terminal import Col, Grid, fit

    langs = [f"{c * 3}_{s}" for c, s in zip("abcdefghijkl", ["Latn", "Cyrl", "Grek", "Arab"] * 3, strict=False)]
    heads = [*langs, "avg", "rank", "init s", "script: Cyrl (1)", "seen: unseen (4)"]
    title = ("bible/mono · sr-t · acc@10 · step 0 (final) · profile cpu · evaluation fp32, CPT fp32 "
             "(higher is better)")
    grid = Grid(title, Col("row", "left", text=True), [Col(h) for h in heads])
    grid.add("hyperofa d=full", ["0.123"] * len(heads))
    segments = title.split(" · ")
    for width in range(30, 161, 3):
        con = Console(width=width, record=True, file=io.StringIO())
        for t in fit(grid, width):
            con.print(t)
        blocks, cur = [], []
        for line in con.export_text().splitlines():
            if line[:1] in "┏┃┡│└":
                if cur:
                    blocks.append(cur)
                cur = []
            else:
                cur.append(line.rstrip())
        assert blocks, width
        for lines in blocks:  # the title lines above one table
            assert all(len(line) <= width for line in lines), (width, lines)
            for name in [s for s in segments if len(s) + 2 <= width]:  # a name wider than the console: at words
                assert any(name in line for line in lines), (width, name, lines)
            joined = " ".join(lines)
            if "part " in joined:
                span = joined.split(": ", 1)[1] if joined.count("part ") == 1 else ""
                for name in [h for h in heads if h in span]:
                    assert any(name in line for line in lines), (width, name, lines)
