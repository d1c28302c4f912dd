"""The ``harness`` process and the processes it starts live and die together (nothing here knows of a run or
its record: methods that start processes use it too).

* a worker calls :func:`die_with_parent` first thing: on Linux the kernel sends it SIGKILL the moment its parent
  dies (``prctl(PR_SET_PDEATHSIG)``), whatever killed the parent (SIGKILL, the OOM killer, a closed terminal); a
  watchdog thread that notices the parent pid change is the fallback elsewhere. A worker therefore never writes
  into the harness home after its parent is gone. (Pool workers, CPT ranks, fastText training children.)
* a command started as a subprocess goes through :func:`child_command`, a small trampoline that sets the same
  signal and then ``exec``\\ s the command (torchrun's launcher).
* a stopped run stops its workers (:func:`stop_processes`): :mod:`harness.core.lifecycle`.

Whether a process lives, its children, and signalling them go through psutil (imported at the first such call, not
at start-up): a process is named with its start time, so a pid the system gave to another process since is never
signalled, and the same calls hold on every platform psutil supports.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

PR_SET_PDEATHSIG = 1
MAIN_PID_ENV = "HARNESS_MAIN_PID"


# -- workers die with their parent ---------------------------------------------------------------------------
def _prctl_pdeathsig(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int | None = None, poll_s: float = 0.5) -> None:
    """End this process (SIGKILL) as soon as its parent dies: the kernel's parent-death signal where there is one,
    and a daemon thread that watches the parent pid. ``parent_pid``: the parent this process was started by (if it
    is already gone when this runs, the process ends now)."""
    expected = os.getppid() if parent_pid is None else int(parent_pid)
    _prctl_pdeathsig(signal.SIGKILL)
    if os.getppid() != expected:  # the parent died before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != expected:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="harness-parent-watchdog", daemon=True).start()


def child_command(cmd: list[str]) -> list[str]:
    """``cmd`` started through the trampoline (``python -m harness.core.processes PID -- cmd``), which arms the
    parent-death signal and then becomes ``cmd`` (the signal survives ``exec``)."""
    return [sys.executable, "-m", "harness.core.processes", str(os.getpid()), "--", *cmd]


def _process(pid: int) -> Any:
    """psutil's handle of ``pid`` (it remembers the start time), or None when there is no such process."""
    import psutil

    try:
        return psutil.Process(int(pid))
    except (psutil.NoSuchProcess, ValueError):
        return None


def _running(proc: Any) -> bool:
    """Whether the process behind ``proc`` still runs: the same process (not one that took its pid since) and not
    a zombie (dead, not yet reaped)."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's process: it exists
        return True


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (dead, not yet reaped)."""
    proc = _process(pid)
    return proc is not None and _running(proc)


def children(pid: int | None = None) -> list[int]:
    """The direct children of ``pid`` (default: this process); empty where there is none."""
    import psutil

    proc = _process(os.getpid() if pid is None else pid)
    if proc is None:
        return []
    try:
        return [c.pid for c in proc.children(recursive=False)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _signal_all(procs: Iterable[Any], sig: int) -> None:
    import psutil

    for proc in procs:
        try:
            proc.send_signal(sig)  # (psutil refuses a pid that another process took since)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def stop_pids(pids: Iterable[int], timeout: float = 5.0) -> None:
    """SIGTERM to ``pids``, SIGKILL to those still alive after ``timeout`` seconds. (A child is not reaped here:
    whoever started it still waits for it.)"""
    procs = [p for p in (_process(pid) for pid in pids if pid != os.getpid()) if p is not None]
    _signal_all(procs, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_running(p) for p in procs):
        time.sleep(0.05)
    _signal_all([p for p in procs if _running(p)], signal.SIGKILL)


def stop_processes(procs: Iterable[Any], timeout: float = 5.0) -> None:
    """Stop ``multiprocessing`` processes: terminate, then kill after ``timeout``; join them."""
    procs = [p for p in procs if p is not None]
    for p in procs:
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(2)
        except (OSError, ValueError, AssertionError, AttributeError):
            pass


def multiprocessing_helpers() -> set[int]:
    """The pids of this process's :mod:`multiprocessing` helpers (resource tracker, fork server) where started."""
    pids = set()
    for module, holder, attr in (("multiprocessing.resource_tracker", "_resource_tracker", "_pid"),
                                 ("multiprocessing.forkserver", "_forkserver", "_forkserver_pid")):
        pid = getattr(getattr(sys.modules.get(module), holder, None), attr, None)
        if isinstance(pid, int):
            pids.add(pid)
    return pids


def quiet_threads() -> None:
    """From now on an exception that ends a thread is not printed: the process is stopping, and the threads of a
    process pool whose workers were stopped fail on the way out (a future cancelled and then failed,
    ``InvalidStateError``; a pipe already closed) with nothing the user can act on."""
    threading.excepthook = lambda args: None


def _trampoline(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m harness.core.processes PARENT_PID -- COMMAND ...\n")
        return 2
    parent = int(argv[0])
    _prctl_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:
        return 1
    os.execvp(argv[2], argv[2:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(_trampoline(sys.argv[1:]))
