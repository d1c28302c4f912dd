"""A run stops cleanly: ``harness run`` turns SIGINT and SIGTERM into :class:`Stopped` (:func:`stop_on_signals`);
the run stops its workers (:mod:`harness.core.processes`), marks the MLflow runs of unfinished cells KILLED
(:func:`mark_stopped_runs`) and exits with 128 + the signal number (130, 143).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from harness.core.processes import children, multiprocessing_helpers, pid_alive, quiet_threads, stop_pids


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
    itself. Returns how many. A worker killed in the middle of a write leaves a journal that the store view's
    read-only connection cannot roll back: its reads then go to MLflow's client, which recovers the store
    (:mod:`harness.core.store_view`); a store that cannot be written raises
    :class:`harness.core.store_open.StoreUnavailable`."""
    import socket

    from harness.core.record import tag

    if not experiment_ids:
        return 0
    me, host = str(os.getpid()), socket.gethostname()
    n = 0
    runs = [r for status in ("RUNNING", "FAILED") for r in tracker.reader.search_runs(
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
    marked = "no unfinished MLflow run to mark"
    if runner is not None:
        from harness.core.errors import HarnessError

        try:
            n = mark_stopped_runs(runner.tracker, runner.experiment_ids(), f"stopped by {stop.name}")
            marked = f"{n} unfinished MLflow run(s) marked KILLED"
        except HarnessError as exc:  # the store cannot be written now (held, full): the next start marks them
            marked = f"the unfinished MLflow runs are marked KILLED by the next start ({exc})"
    sys.stderr.write(f"stopped by {stop.name}: workers stopped, {marked}; "
                     f"finished products are kept, run the same command to resume\n")
    sys.stderr.flush()
    return stop.exit_code
