"""The ``harness`` process and the processes it starts live and die together.

Every place that starts a worker uses this module:

* a worker calls :func:`die_with_parent` first thing: on Linux the kernel sends it SIGKILL the moment its parent
  dies (``prctl(PR_SET_PDEATHSIG)``), whatever killed the parent (SIGKILL, the OOM killer, a closed terminal); a
  watchdog thread that notices the parent pid change is the fallback elsewhere. A worker therefore never writes
  into the harness home after its parent is gone. (Pool workers, CPT ranks, fastText training children.)
* a command started as a subprocess goes through :func:`child_command`, a small trampoline that sets the same
  signal and then ``exec``\\ s the command (torchrun's launcher).
* ``harness run`` turns SIGINT and SIGTERM into :class:`Stopped` (:func:`stop_on_signals`); the run stops its
  workers (:func:`stop_processes`, :func:`stop_children`), marks the MLflow runs of unfinished cells KILLED
  (:func:`mark_stopped_runs`) and exits with 128 + the signal number (130, 143).

For the fault tests, :func:`install_fault_hook` makes a process signal the ``harness`` process at a named point
(``HARNESS_FAULT_AT=module:qualname[@n][/after]``: before, or after, the n-th call of that function in this process;
``HARNESS_FAULT_SIGNAL``: KILL (default), TERM or INT; ``HARNESS_FAULT_MARKER``: a file that makes it fire once).
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


class Stopped(KeyboardInterrupt):
    """The run was asked to stop (SIGINT or SIGTERM); ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


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
    """``cmd`` started through the trampoline (``python -m harness.core.lifecycle PID -- cmd``), which arms the
    parent-death signal and then becomes ``cmd`` (the signal survives ``exec``)."""
    return [sys.executable, "-m", "harness.core.lifecycle", str(os.getpid()), "--", *cmd]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (dead, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def children(pid: int | None = None) -> list[int]:
    """The direct children of ``pid`` (default: this process), from /proc (empty where there is none)."""
    pid = os.getpid() if pid is None else pid
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(e))
    return out


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_pids(pids: Iterable[int], timeout: float = 5.0) -> None:
    """SIGTERM to ``pids``, SIGKILL to those still alive after ``timeout`` seconds."""
    pids = [p for p in pids if p != os.getpid()]
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    _signal_all([p for p in pids if pid_alive(p)], signal.SIGKILL)


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


def stop_children(timeout: float = 5.0) -> None:
    """Stop every child process of this one (workers, launchers, training children)."""
    stop_pids(children(), timeout)


# -- SIGINT / SIGTERM stop a run -----------------------------------------------------------------------------
def stop_on_signals() -> None:
    """From now on SIGINT and SIGTERM raise :class:`Stopped` in the main thread; a second signal while the run is
    stopping ends the process at once (see :func:`stopping`)."""

    def handler(signum: int, frame: Any) -> None:
        raise Stopped(signum)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def stopping() -> None:
    """The run is cleaning up after :class:`Stopped`: another SIGINT/SIGTERM exits at once (128 + signal)."""

    def handler(signum: int, frame: Any) -> None:
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def mark_stopped_runs(tracker: Any, experiment_ids: list[str], why: str) -> int:
    """The MLflow runs of the cells this process (or its workers, now stopped) left unfinished become KILLED:
    runs still RUNNING whose process is this one or gone, and runs this process marked FAILED on the interrupt
    itself. Returns how many."""
    import socket

    from harness.core.record import tag

    if not experiment_ids:
        return 0
    me, host = str(os.getpid()), socket.gethostname()
    n = 0
    runs = [r for status in ("RUNNING", "FAILED") for r in tracker.client.search_runs(
        experiment_ids, filter_string=f"attributes.status = '{status}'", max_results=5000)]
    for run in runs:
        tags = run.data.tags
        pid, run_host = tags.get(tag("pid"), ""), tags.get(tag("host"))
        if run_host != host or not pid.isdigit():
            continue
        if run.info.status == "RUNNING":
            if pid != me and pid_alive(int(pid)):
                continue
        elif pid != me or tags.get(tag("error")) != "interrupted":
            continue
        tracker.client.set_tag(run.info.run_id, tag("error"), why)
        tracker.client.set_terminated(run.info.run_id, status="KILLED")
        n += 1
    return n


def clean_stop(stop: Stopped, runner: Any | None) -> int:
    """What ``harness run`` does after :class:`Stopped`: stop every child process, mark the MLflow runs of the
    unfinished cells KILLED, print one line; returns the exit status (128 + the signal number).

    Nothing is printed after that line: the helper processes of :mod:`multiprocessing` (its resource tracker, its
    fork server) are not stopped with the workers, since they end by themselves when this process does, once they
    have released what the pool held (stopped first, the tracker was started again by the pool's clean-up and then
    reported every semaphore it had never seen, one traceback each), and what the threads of a stopped pool raise
    while it falls apart is not reported (:func:`quiet_threads`)."""
    stopping()
    quiet_threads()
    helpers = multiprocessing_helpers()
    stop_pids([pid for pid in children() if pid not in helpers])
    n = 0
    if runner is not None:
        client = runner.tracker.client
        exps = (client.get_experiment_by_name(runner.experiment_name(s))
                for s in sorted({c.source for c in runner.plan.cells}))
        n = mark_stopped_runs(runner.tracker, [e.experiment_id for e in exps if e is not None],
                              f"stopped by {stop.name}")
    sys.stderr.write(f"stopped by {stop.name}: workers stopped, {n} unfinished MLflow run(s) marked KILLED; "
                     f"finished products are kept, run the same command to resume\n")
    sys.stderr.flush()
    return stop.exit_code


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


# -- fault hooks (tests) -------------------------------------------------------------------------------------
def fault_after(stage: str) -> None:
    """``HARNESS_FAULT_AFTER=<stage>`` kills this process (SIGKILL) right after the runner's stage of that name
    (``init``, ``step0``, ``cpt``, ``finished``); with ``HARNESS_FAULT_MARKER=<file>`` only the first time (the
    file records that it fired), so a retry survives."""
    if os.environ.get("HARNESS_FAULT_AFTER") != stage or not _first_time():
        return
    sys.stderr.write(f"HARNESS_FAULT_AFTER={stage}: killing the process\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


_POISONED: list[str] = []  # the simulated device of this process failed (HARNESS_FAULT_DEVICE)


def device_fault(method: str) -> None:
    """``HARNESS_FAULT_DEVICE=<method>`` simulates a poisoned accelerator: the first cell of that method raises the
    error a CUDA device-side assert raises, and every later cell of the same process raises it too, as a real
    CUDA context does once it has failed. (With ``HARNESS_FAULT_MARKER`` only once across processes.)"""
    if _POISONED:
        raise RuntimeError(f"CUDA error: device-side assert triggered (simulated: the device of this process "
                           f"failed in an earlier cell, {_POISONED[0]})")
    if os.environ.get("HARNESS_FAULT_DEVICE") == method and _first_time():
        _POISONED.append(method)
        raise RuntimeError("CUDA error: device-side assert triggered (simulated)")


def _first_time() -> bool:
    """False when ``HARNESS_FAULT_MARKER`` names a file that exists (the fault fired before); else creates it."""
    marker = os.environ.get("HARNESS_FAULT_MARKER")
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
    return True


def _fire(sig: int) -> None:
    if not _first_time():
        return
    main = int(os.environ.get(MAIN_PID_ENV) or os.getpid())
    sys.stderr.write(f"HARNESS_FAULT_AT={os.environ.get('HARNESS_FAULT_AT')}: "
                     f"{signal.Signals(sig).name} to the harness process\n")
    sys.stderr.flush()
    try:
        os.kill(main, sig)
    except ProcessLookupError:
        pass
    if main != os.getpid():  # a worker: it must end with its parent, not go on
        time.sleep(60)
        os._exit(99)


def install_fault_hook() -> None:
    """Wrap the function named by ``HARNESS_FAULT_AT`` (a testing hook; nothing happens when it is unset)."""
    spec = os.environ.get("HARNESS_FAULT_AT")
    if not spec or getattr(install_fault_hook, "_installed", None) == spec:
        return
    import functools
    import importlib

    target, _, rest = spec.partition("@")
    nth, _, when = rest.partition("/")
    nth_call = int(nth or 1)
    module_name, _, qualname = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    original = getattr(owner, parts[-1])
    if isinstance(original, staticmethod | classmethod):
        raise ValueError(f"HARNESS_FAULT_AT: {spec}: static and class methods are not supported")
    sig = getattr(signal, "SIG" + os.environ.get("HARNESS_FAULT_SIGNAL", "KILL").upper())
    calls = [0]

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        hit = calls[0] == nth_call
        if hit and when != "after":
            _fire(sig)
        out = original(*args, **kwargs)
        if hit and when == "after":
            _fire(sig)
        return out

    setattr(owner, parts[-1], wrapper)
    install_fault_hook._installed = spec  # type: ignore[attr-defined]


def _trampoline(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m harness.core.lifecycle PARENT_PID -- COMMAND ...\n")
        return 2
    parent = int(argv[0])
    _prctl_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:
        return 1
    os.execvp(argv[2], argv[2:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(_trampoline(sys.argv[1:]))
