"""Progress of long steps when the output is piped: plain lines (start, every tenth, end with the elapsed time)
from the first second, through the real CLI on a small synthetic job and on the helper itself."""

from __future__ import annotations

import io
import re
import threading

import pytest

from harness.core import progress as hp

START = re.compile(r"^(?:\[[^\]]*\] )?(?P<what>.+): start(?: \((?P<total>[\d.]+)\))?$")
PCT = re.compile(r"^(?:\[[^\]]*\] )?(?P<what>.+?): (?P<pct>\d+)% \((?P<done>[\d.]+)/(?P<total>[\d.]+), [\dhms.]+\)"
                 r"(?: · (?P<detail>.+))?$")
DONE = re.compile(r"^(?:\[[^\]]*\] )?(?P<what>.+?): done(?: [\d.]+/[\d.]+)? in [\dhms.]+(?: · (?P<detail>.+))?$")


def _plain(**kw) -> tuple[hp.PlainProgress, io.StringIO]:
    buf = io.StringIO()
    return hp.PlainProgress(buf, **kw), buf


def test_plain_progress_prints_start_every_tenth_and_the_end():
    prog, buf = _plain(min_interval=0, prefix="")
    with prog:
        tid = prog.add_task("encoding", total=20)
        for _ in range(20):
            prog.advance(tid, 1)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "encoding: start (20)"
    pcts = [int(PCT.match(x)["pct"]) for x in lines if PCT.match(x)]
    assert pcts == [10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert DONE.match(lines[-1]) and lines[-1].startswith("encoding: done 20/20 in ")
    assert len(lines) == 11  # nothing after the end, nothing twice


def test_quick_steps_print_start_and_end_only_and_a_short_step_says_so():
    prog, buf = _plain(min_interval=3600, prefix="")
    with prog:
        tid = prog.add_task("fast", total=100)
        prog.update(tid, completed=100)
        short = prog.add_task("cut", total=10)
        prog.advance(short, 3)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "fast: start (100)" and lines[1].startswith("fast: done 100/100 in ")
    assert lines[2] == "cut: start (10)" and lines[3].startswith("cut: stopped at 3/10 after ")
    assert len(lines) == 4


def test_rich_compatible_calls_and_the_callbacks_adapter():
    prog, buf = _plain(min_interval=0, prefix="[x] ")
    with prog:
        start = hp.callbacks(prog)
        advance = start("FOCUS: sparsemax", 4)
        for _ in range(4):
            advance(1)
        advance(1)  # after the end: ignored
        assert prog.task_ids == []
        tid = prog.add_task("CPT", total=4)
        prog.update(tid, completed=2, description="CPT loss 5.000")
        prog.remove_task(tid)
    lines = buf.getvalue().splitlines()
    assert all(x.startswith("[x] ") for x in lines)
    assert lines[0] == "[x] FOCUS: sparsemax: start (4)"
    assert any(x.startswith("[x] FOCUS: sparsemax: done 4/4 in ") for x in lines)
    # a step keeps its name; a new description follows the numbers
    assert re.search(r"^\[x\] CPT: 50% \(2/4, [\d.]+s\) · CPT loss 5\.000$", buf.getvalue(), re.M)
    assert lines[-1].startswith("[x] CPT: stopped at 2/4 after ") and lines[-1].endswith(" · CPT loss 5.000")


def test_a_bar_its_caller_never_advances_ends_with_its_stage():
    """A loop skipped because its result was cached never advances its bar: when the stage that opened it ends
    (``with callbacks(prog)``), the bar ends, and the heartbeat does not go on saying it still runs (it did, for the
    rest of the worker's life, under the next cells' names)."""
    import time

    prog, buf = _plain(min_interval=0, heartbeat=0.05)
    with prog:
        with hp.callbacks(prog) as bars:
            bars("HyperOFA: source word sets", 175745)  # cached: never advanced
            done = bars("HyperOFA: training", 2)
            done(2)
        assert prog.task_ids == []
        time.sleep(0.3)
        prog.add_task("next cell", total=None)
    lines = buf.getvalue().splitlines()
    ended = next(i for i, x in enumerate(lines) if x.startswith("HyperOFA: source word sets: stopped at 0/175745"))
    assert not [x for x in lines[ended + 1:] if "word sets" in x]


def test_activity_prints_heartbeats_while_it_runs():
    buf = io.StringIO()
    beat = threading.Event()

    class Watch(io.StringIO):
        def write(self, s: str) -> int:
            if "still running" in s:
                beat.set()
            return buf.write(s)

    with hp.activity("fastText focus-tokens: training", heartbeat=0.01, file=Watch(),
                     console=_FakeConsole(terminal=False)):
        assert beat.wait(60), "no heartbeat line while the step ran"
    lines = buf.getvalue().splitlines()
    assert lines[0] == "fastText focus-tokens: training: start"
    assert "fastText focus-tokens: training: still running (" in lines[1]
    assert lines[-1].startswith("fastText focus-tokens: training: done in ")


def test_activity_that_fails_says_it_stopped():
    buf = io.StringIO()
    with pytest.raises(RuntimeError), hp.activity("step", file=buf, console=_FakeConsole(terminal=False)):
        raise RuntimeError("boom")
    assert buf.getvalue().splitlines()[-1].startswith("step: stopped after ")


class _FakeConsole:
    def __init__(self, terminal: bool):
        self.is_terminal = terminal
        self.file = io.StringIO()


def test_mode_follows_the_terminal_and_the_environment(monkeypatch):
    monkeypatch.delenv("HARNESS_PROGRESS", raising=False)
    assert hp.mode(_FakeConsole(True)) == "bars"
    assert hp.mode(_FakeConsole(False)) == "lines"
    assert isinstance(hp.Progress(console=_FakeConsole(False)), hp.PlainProgress)
    from rich.console import Console
    from rich.progress import Progress as RichProgress

    tty = Console(file=io.StringIO(), force_terminal=True)
    assert isinstance(hp.Progress(console=tty), RichProgress)
    monkeypatch.setenv("HARNESS_PROGRESS", "lines")
    assert isinstance(hp.Progress(console=tty), hp.PlainProgress)
    monkeypatch.setenv("HARNESS_PROGRESS", "off")
    quiet = hp.Progress(console=_FakeConsole(False))
    with quiet:
        quiet.advance(quiet.add_task("x", total=2), 2)
    assert quiet.enabled is False


def test_task_data_progress_prints_lines_when_piped(monkeypatch, capsys):
    """tasks.data.progress (every task evaluation's loop) was silent when stderr was not a terminal."""
    from tasks.data import progress

    monkeypatch.setenv("HARNESS_PROGRESS_INTERVAL", "0")
    monkeypatch.delenv("HARNESS_PROGRESS", raising=False)
    with progress(object(), "sr-t: encoding", 10) as advance:
        for _ in range(10):
            advance(1)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "sr-t: encoding: start (10)"
    assert "sr-t: encoding: 50% (5/10, " in "\n".join(err)
    assert err[-1].startswith("sr-t: encoding: done 10/10 in ")


def test_bible_world_build_progress_prints_lines_when_piped(monkeypatch, capsys):
    from harness.worlds.bible.builder import Progress

    monkeypatch.setenv("HARNESS_PROGRESS_INTERVAL", "0")
    monkeypatch.delenv("HARNESS_PROGRESS", raising=False)
    with Progress(True) as p:
        p.note("bible world: stage fetch")
        t = p.task("fetching inputs", 4)
        for _ in range(4):
            p.advance(t)
        h = p.task("MLM head: mono", 10)
        p.set(h, 5)
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == ["bible world: stage fetch", "fetching inputs: start (4)"]
    assert err[-2] == "MLM head: mono: 50% (5/10, " + err[-2].split(", ", 1)[1]
    assert err[-1].startswith("MLM head: mono: stopped at 5/10 after ")


def test_a_piped_synthetic_run_prints_progress_from_the_start(run_cli, synthetic_world):  # the world built before
    """A small job through the CLI with stdout and stderr piped: progress lines from the first lines of output,
    for the cells, the initialization (FOCUS's fastText model and sparsemax loop), each task evaluation and CPT,
    every step that starts also ends with its elapsed time."""
    proc = run_cli("run", "--world", "synthetic", "--methods", "focus", "--tasks", "sr-t,ner", "--cpt-steps", "2",
                   "--workers", "1", "--experiment", "progress-piped", "--seeds", "7",
                   env={"HARNESS_PROGRESS_INTERVAL": "0", "HARNESS_PROGRESS": ""}, check=True)
    lines = [x for x in proc.stderr.splitlines() if x.strip() and "mlflow" not in x]
    starts = [m["what"] for m in map(START.match, lines) if m]
    dones = [m["what"] for m in map(DONE.match, lines) if m]
    assert lines, proc.stderr
    # the first progress line comes before any result line, within the first few lines
    first = next(i for i, x in enumerate(lines) if START.match(x))
    first_result = next(i for i, x in enumerate(lines) if "@ step 0" in x)
    assert first < first_result and first <= 3, lines[:10]
    for what in ("cells", "fastText focus-tokens: training on", "FOCUS: sparsemax combinations",
                 "sr-t: encoding", "ner: fine-tuning on", "ner: zero-shot test", "CPT"):
        assert any(s.strip().startswith(what) for s in starts), (what, starts)
    assert any(PCT.match(x) for x in lines), "no percentage line"
    # every step that started also ended, under the same name, with its time
    assert sorted(s.strip() for s in starts) == sorted(d.strip() for d in dones), (starts, dones)
    assert any(m["detail"] and m["detail"].startswith("CPT loss ") for m in map(DONE.match, lines) if m)
    assert not any(": stopped " in x for x in lines)
