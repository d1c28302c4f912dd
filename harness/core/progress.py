"""Progress of long steps: rich bars on an interactive terminal, plain lines when the output is piped.

Every long step (world build, fastText training, initialization, task evaluation, CPT, leaderboard) reports through
this module, so that a run whose output goes to a log file, a CI job or ``| tee`` shows its progress from the first
second: a line when a step starts, a line at every tenth of the way (and at least every ``heartbeat`` seconds while
it advances or, from a thread of its own, while its count does not move), and a line with the elapsed time when it
ends.

- :func:`Progress` is a drop-in for ``rich.progress.Progress`` (``add_task``, ``update``, ``advance``,
  ``remove_task``): the rich bar on a terminal, a :class:`PlainProgress` otherwise.
- :func:`track` is one step as a context manager that yields ``advance(n)``.
- :func:`activity` is one step whose progress cannot be measured (fastText's training): start, a heartbeat line
  every ``heartbeat`` seconds while piped, end.
- :func:`callbacks` adapts either kind of progress to the ``progress(label, total) -> advance(n)`` callback that
  :func:`harness.initialize.initialize_model` and the methods take.

``HARNESS_PROGRESS`` overrides the choice: ``bars`` (rich bars), ``lines`` (plain lines) or ``off`` (nothing);
``HARNESS_PROGRESS_INTERVAL`` is the least number of seconds between two percentage lines of one step (default 2;
0 prints every tenth).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

MODES = ("bars", "lines", "off")
STEP_PERCENT = 10  # a plain line at every tenth of the way ...
MIN_INTERVAL_S = 2.0  # ... unless the last line of that step is younger than this (quick steps: start and end)
HEARTBEAT_S = 4.0  # ... and at least this often while a step advances or runs: no silence over 5 s
STARTUP_HEARTBEAT_S = HEARTBEAT_S  # a start-up step of a run (a store opened, a world loaded) says it still runs
_prefix = ""  # put before every plain line of this process (a worker's cell label)


def log_console() -> Any:
    """The console for progress and logs: stderr; lines are never wrapped when stderr is not a terminal (a log
    file, a pipe, CI), so that a line can be searched for as it was written."""
    import sys

    from rich.console import Console

    return Console(stderr=True, soft_wrap=not sys.stderr.isatty())


def set_prefix(prefix: str) -> None:
    """Every later plain line of this process starts with ``prefix`` (cells side by side in worker processes)."""
    global _prefix
    _prefix = prefix


def _min_interval() -> float:
    try:
        return max(0.0, float(os.environ.get("HARNESS_PROGRESS_INTERVAL", MIN_INTERVAL_S)))
    except ValueError:
        return MIN_INTERVAL_S


def mode(console: Any = None) -> str:
    """``bars`` on an interactive terminal, ``lines`` otherwise; ``HARNESS_PROGRESS`` overrides."""
    forced = os.environ.get("HARNESS_PROGRESS", "").strip().lower()
    if forced in MODES:
        return forced
    if console is not None:
        return "bars" if console.is_terminal else "lines"
    stream = sys.stderr
    try:
        return "bars" if stream.isatty() else "lines"
    except (AttributeError, ValueError):
        return "lines"


def _clock(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s"


def _count(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.1f}"


@dataclass
class _Task:
    description: str  # the name the step started with; every line of the step begins with it
    total: float | None
    detail: str = ""  # a later description (the cell being run, the current loss), shown after the numbers
    completed: float = 0.0
    started: float = field(default_factory=time.monotonic)
    last_line: float = field(default_factory=time.monotonic)
    last_tenth: int = 0
    finished: bool = False


class PlainProgress:
    """The part of ``rich.progress.Progress`` the harness uses, printing plain lines to ``file``.

    ``start`` when a task is added; ``NN% (done/total, elapsed)`` each time a tenth of the way is crossed (at
    most one line per ``min_interval`` seconds) or ``heartbeat`` seconds have passed since the last line; ``still
    running (done/total, elapsed)`` from a thread of its own when a task's count has not moved for ``heartbeat``
    seconds (a slow batch, a set-up, a launch: no silence over 5 s); ``done in <elapsed>`` when it completes or is
    removed (``stopped at`` when it ends short of its total). A step keeps
    the name it started with; a later description (rich's ``update(description=...)``) follows the numbers."""

    def __init__(self, file: TextIO | None = None, *, prefix: str | None = None, heartbeat: float = HEARTBEAT_S,
                 step_percent: int = STEP_PERCENT, min_interval: float | None = None, enabled: bool = True):
        self._file = file
        self.prefix = prefix
        self.min_interval = _min_interval() if min_interval is None else min_interval
        self.heartbeat = heartbeat
        self.step_percent = max(1, int(step_percent))
        self.enabled = enabled
        self._tasks: dict[int, _Task] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()  # one line written at a time
        self._state = threading.RLock()  # a task's lines and its end, in order (the heartbeat's thread too)
        self._ticker: threading.Thread | None = None

    # -- context ------------------------------------------------------------------------------------------
    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        for tid in list(self._tasks):
            self._end(tid, interrupted=exc[0] is not None)

    def start(self) -> None:  # rich API
        pass

    def stop(self) -> None:  # rich API
        self.__exit__(None, None, None)

    @property
    def task_ids(self) -> list[int]:
        return list(self._tasks)

    # -- output -------------------------------------------------------------------------------------------
    def print(self, message: str) -> None:
        if not self.enabled:
            return
        f = self._file if self._file is not None else sys.stderr
        with self._lock:
            f.write(f"{_prefix if self.prefix is None else self.prefix}{message}\n")
            f.flush()

    log = print

    def _line(self, t: _Task, now: float) -> None:
        detail = f" · {t.detail}" if t.detail else ""
        if t.total:
            pct = int(100 * min(t.completed / t.total, 1.0))
            self.print(f"{t.description}: {pct}% ({_count(t.completed)}/{_count(t.total)}, "
                       f"{_clock(now - t.started)}){detail}")
        else:
            self.print(f"{t.description}: {_count(t.completed)} done ({_clock(now - t.started)}){detail}")
        t.last_line = now

    # -- heartbeat ----------------------------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        """A thread that says ``still running`` for every task without a line for ``heartbeat`` seconds (a count
        that does not move: a slow batch, a set-up, a launch); it ends when no task is left, and starts again with
        the next task."""
        if not self.enabled or not self.heartbeat or self.heartbeat <= 0:
            return
        with self._state:
            if self._ticker is not None:
                return
            self._ticker = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
            self._ticker.start()

    def _beat(self) -> None:
        tick = min(0.5, self.heartbeat / 4)
        while True:
            time.sleep(tick)
            with self._state:
                if not self._tasks:
                    self._ticker = None
                    return
                now = time.monotonic()
                for t in list(self._tasks.values()):
                    if not t.finished and now - t.last_line >= self.heartbeat:
                        self._still(t, now)

    def _still(self, t: _Task, now: float) -> None:
        detail = f" · {t.detail}" if t.detail else ""
        size = f"{_count(t.completed)}/{_count(t.total)}, " if t.total else ""
        self.print(f"{t.description}: still running ({size}{_clock(now - t.started)}){detail}")
        t.last_line = now

    def _end(self, tid: int, interrupted: bool = False) -> None:
        with self._state:
            self._end_locked(tid, interrupted)

    def _end_locked(self, tid: int, interrupted: bool) -> None:
        t = self._tasks.pop(tid, None)
        if t is None or t.finished:
            return
        t.finished = True
        elapsed = _clock(time.monotonic() - t.started)
        size = f" {_count(t.completed)}/{_count(t.total)}" if t.total else ""
        detail = f" · {t.detail}" if t.detail else ""
        if interrupted or (t.total and t.completed < t.total):
            self.print(f"{t.description}: stopped at{size} after {elapsed}{detail}")
        else:
            self.print(f"{t.description}: done{size} in {elapsed}{detail}")

    # -- rich's API ---------------------------------------------------------------------------------------
    def add_task(self, description: str, start: bool = True, total: float | None = 100.0, completed: float = 0,
                 visible: bool = True, **fields: Any) -> int:
        tid = next(self._ids)
        t = _Task(str(description).strip(), None if total is None else float(total), float(completed))
        t.last_tenth = self._tenth(t)
        with self._state:
            self._tasks[tid] = t
            size = f" ({_count(t.total)})" if t.total else ""
            self.print(f"{t.description}: start{size}")
        self._start_heartbeat()
        return tid

    def _tenth(self, t: _Task) -> int:
        if not t.total:
            return 0
        return int(100 * min(t.completed / t.total, 1.0)) // self.step_percent

    def update(self, task_id: int, *, total: float | None = None, completed: float | None = None,
               advance: float | None = None, description: str | None = None, visible: bool | None = None,
               refresh: bool = False, **fields: Any) -> None:
        t = self._tasks.get(task_id)
        if t is None:
            return
        if description is not None:
            d = str(description).strip()
            t.detail = "" if d == t.description else d
        if total is not None:
            t.total = float(total)
        if completed is not None:
            t.completed = float(completed)
        if advance is not None:
            t.completed += float(advance)
        now = time.monotonic()
        tenth = self._tenth(t)
        if t.total and t.completed >= t.total:
            self._end(task_id)
            return
        with self._state:
            if t.finished:
                return
            if (tenth > t.last_tenth and now - t.last_line >= self.min_interval) or \
                    now - t.last_line >= self.heartbeat:
                t.last_tenth = max(tenth, t.last_tenth)
                self._line(t, now)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def remove_task(self, task_id: int) -> None:
        self._end(task_id)

    def start_task(self, task_id: int) -> None:
        pass

    def stop_task(self, task_id: int) -> None:
        pass

    def reset(self, task_id: int, **kwargs: Any) -> None:
        t = self._tasks.get(task_id)
        if t is not None:
            t.completed = 0.0
            t.started = time.monotonic()
            t.last_tenth = 0
            self.update(task_id, **kwargs)


class _Silent(PlainProgress):
    def __init__(self) -> None:
        super().__init__(enabled=False)


def Progress(*columns: Any, console: Any = None, transient: bool = False, prefix: str | None = None,  # noqa: N802
             **kwargs: Any) -> Any:
    """``rich.progress.Progress(*columns, console=..., transient=...)`` on an interactive terminal, a
    :class:`PlainProgress` writing to the console's file (stderr by default) when the output is piped."""

    console = console if console is not None else log_console()
    m = mode(console)
    if m == "off":
        return _Silent()
    if m == "lines":
        return PlainProgress(console.file, prefix=prefix)
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    columns = columns or (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return RichProgress(*columns, console=console, transient=transient, **kwargs)


@contextlib.contextmanager
def track(description: str, total: int | float | None, *, console: Any = None,
          transient: bool = True) -> Iterator[Callable[[float], None]]:
    """One long step: yields ``advance(n)``; a bar on a terminal, plain lines (start, every tenth, end) when piped."""
    with Progress(console=console, transient=transient) as prog:
        tid = prog.add_task(description, total=total)
        try:
            yield lambda n=1: prog.advance(tid, n)
        except BaseException:
            if isinstance(prog, PlainProgress):
                prog._end(tid, interrupted=True)
            raise
        else:
            if isinstance(prog, PlainProgress):
                prog.remove_task(tid)


@contextlib.contextmanager
def activity(description: str, *, console: Any = None, heartbeat: float = HEARTBEAT_S,
             file: TextIO | None = None) -> Iterator[None]:
    """A long step whose progress cannot be counted: ``start``, ``still running (elapsed)`` every ``heartbeat``
    seconds and ``done in <elapsed>`` when piped; nothing of its own on a terminal (the enclosing bar shows)."""

    console = console if console is not None else log_console()
    if mode(console) != "lines":  # a terminal shows the enclosing step's bar; a second live display would garble it
        yield
        return
    out = PlainProgress(file if file is not None else console.file)
    t0 = time.monotonic()
    out.print(f"{description}: start")
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(heartbeat):
            out.print(f"{description}: still running ({_clock(time.monotonic() - t0)})")

    ticker = threading.Thread(target=beat, name="progress-heartbeat", daemon=True)
    ticker.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        stop.set()
        ticker.join()
        elapsed = _clock(time.monotonic() - t0)
        out.print(f"{description}: done in {elapsed}" if ok else f"{description}: stopped after {elapsed}")


@contextlib.contextmanager
def stage(description: str, *, console: Any = None,
          heartbeat: float | None = None) -> Iterator[Callable[[str], None]]:
    """One named stage of a longer job (a world build's): a line when it starts and a line when it ends with its
    elapsed time, on a terminal and piped alike (short stages have no bar); yields ``note(text)``, whose last text
    (counts, sizes) is printed with the end line. ``heartbeat``: a ``still running (elapsed)`` line every that many
    seconds while it lasts (a start-up step that is quick on an idle machine and may take long on a loaded one)."""
    console = console if console is not None else log_console()
    out = PlainProgress(console.file)
    t0 = time.monotonic()
    said = [""]
    out.print(f"{description}: start")
    ok = False
    try:
        with still_running(description, heartbeat, out=out):
            yield lambda text: said.__setitem__(0, text)
        ok = True
    finally:
        tail = f" ({said[0]})" if said[0] else ""
        elapsed = _clock(time.monotonic() - t0)
        out.print(f"{description}: done in {elapsed}{tail}" if ok else f"{description}: stopped after {elapsed}")


@contextlib.contextmanager
def still_running(description: str, every: float | None, *, console: Any = None, out: PlainProgress | None = None,
                  since: float | None = None) -> Iterator[None]:
    """A ``<description>: still running (elapsed)`` line every ``every`` seconds while the block runs (None or 0:
    nothing), for a step whose start and end other lines say; ``since``: when the step started (``time.monotonic()``;
    default now), which the elapsed time and the first line count from."""
    if not every:
        yield
        return
    if out is None:
        out = PlainProgress((console if console is not None else log_console()).file)
    t0 = time.monotonic() if since is None else since
    stop = threading.Event()

    def beat() -> None:
        wait = max(0.0, every - (time.monotonic() - t0))
        while not stop.wait(wait):
            out.print(f"{description}: still running ({_clock(time.monotonic() - t0)})")
            wait = every

    ticker = threading.Thread(target=beat, name="progress-still-running", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()


class callbacks:  # noqa: N801 - used as the function it was: ``callbacks(prog)(label, total) -> advance``
    """Adapt a running progress (rich's or :class:`PlainProgress`) to ``progress(label, total) -> advance(n)``;
    each label gets its own task, removed when it completes. A task its caller never completes (a loop skipped
    because its result was cached) is removed by :meth:`close` -- or at the end of a ``with`` block -- so that no
    heartbeat keeps saying it still runs."""

    def __init__(self, prog: Any):
        self.prog = prog
        self.open: list[Any] = []

    def __call__(self, label: str, total: int) -> Callable[[int], None]:
        prog, total = self.prog, max(int(total), 1)
        tid = prog.add_task(f"  {label}", total=total)
        self.open.append(tid)
        done = [0.0]

        def advance(n: int = 1) -> None:
            if tid not in prog.task_ids:
                return
            done[0] += n
            prog.advance(tid, n)
            if done[0] >= total and tid in prog.task_ids:
                prog.remove_task(tid)

        return advance

    def close(self) -> None:
        for tid in self.open:
            if tid in self.prog.task_ids:
                self.prog.remove_task(tid)
        self.open.clear()

    def __enter__(self) -> callbacks:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["PlainProgress", "Progress", "activity", "callbacks", "mode", "set_prefix", "stage", "still_running",
           "track"]
