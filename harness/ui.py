"""``harness ui``: the MLflow UI bound to 127.0.0.1, one worker, job execution off (fast start, no orphans).

It prints where the results are: for each experiment, its current leaderboard page (the ``leaderboard.html``
artifact of its leaderboard run) and its runs table opened on each saved results view: one per task (one run per
method with ``step0/avg``, ``final/avg`` ... as columns, best first in the task's direction) and one of every task
(see :mod:`leaderboard.publish`); ``--open`` opens the most recently rendered leaderboard (or, before any, the runs
table) in a browser.

While the server runs it watches the store and prints the URLs again whenever they change (a new experiment, a
leaderboard rendered for the first time or again): the server itself reads the store on every request, but a runs
table opened without a saved view shows no metric columns, and before ``harness leaderboard`` there is no view to
print.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from harness.core.paths import default_artifact_root, default_tracking_uri


def server_command(tracking_uri: str, port: int) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
            "--default-artifact-root", default_artifact_root().as_uri(), "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1"]


def start_server(tracking_uri: str | None = None, port: int = 5000, timeout: float = 90.0) -> subprocess.Popen:
    """Start the server in the background and wait until /health answers."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(server_command(uri, port), env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError(f"mlflow server did not answer on 127.0.0.1:{port} within {timeout:.0f}s")


def stop_server(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def check_port(port: int) -> None:
    """The port must be valid and free on 127.0.0.1 before the server starts (its own error is a traceback)."""
    import socket

    from harness.core.errors import HarnessError

    if not 0 < port < 65536:
        raise HarnessError(f"--port {port} is not a TCP port; give one between 1 and 65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise HarnessError(f"port {port} on 127.0.0.1 is not free ({exc.strerror}); "
                               f"pass another --port or stop what uses it") from None


WATCH_SECONDS = 3.0  # how often `harness ui` looks for new results while it serves


@dataclass
class Links:
    experiment: str
    experiment_id: str
    runs: str  # the runs table (on the saved view of every task's results when there is one)
    leaderboard: str | None = None  # the leaderboard page in the UI
    leaderboard_file: str | None = None  # the same page on disk, when the run says where
    rendered: str = ""  # when the leaderboard was last rendered (ISO time), for "the current one"
    views: list[tuple[str, str]] = field(default_factory=list)  # (name, URL) of each task's results view

    def state(self) -> tuple[Any, ...]:
        """What the printed lines show: they are printed again when it changes."""
        return self.runs, self.leaderboard, self.rendered, tuple(self.views)


def saved_views(tags: dict[str, str]) -> dict[str, str]:
    """key -> name of the experiment's saved results views (``harness-results-<task>``, ``harness-results``), from
    its ``mlflow.sharedViewState.*`` tags (a plain state saved before views had names: named by its key)."""
    from harness.core.tracking import RESULTS_VIEW, SHARED_VIEW_PREFIX

    out = {}
    for tag_key, value in tags.items():
        key = tag_key[len(SHARED_VIEW_PREFIX):]
        if not tag_key.startswith(SHARED_VIEW_PREFIX) or not key.startswith(RESULTS_VIEW):
            continue
        try:
            name = json.loads(value).get("name") or key
        except (ValueError, AttributeError):
            name = key
        out[key] = str(name)
    return out


def links(tracking_uri: str, base: str) -> list[Links]:
    """The runs-table and leaderboard URLs of every active experiment that has runs, newest leaderboard first."""
    from mlflow.tracking import MlflowClient

    from harness.core.record import Kind, kind_filter, tag
    from harness.core.tracking import (
        EXPERIMENT_KIND,
        EXPERIMENT_KIND_TAG,
        RESULTS_VIEW,
        artifact_url,
        runs_table_url,
    )

    client = MlflowClient(tracking_uri)
    out = []
    for exp in client.search_experiments():
        has_runs = bool(client.search_runs([exp.experiment_id], max_results=1))
        if exp.name == "Default" and not has_runs:
            continue
        if has_runs and EXPERIMENT_KIND_TAG not in (exp.tags or {}):  # an experiment from before the tag
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        views = saved_views(exp.tags or {})
        item = Links(exp.name, exp.experiment_id,
                     runs_table_url(base, exp.experiment_id, RESULTS_VIEW if RESULTS_VIEW in views else None))
        item.views = [(name, runs_table_url(base, exp.experiment_id, key))
                      for key, name in sorted(views.items()) if key != RESULTS_VIEW]
        boards = client.search_runs([exp.experiment_id], filter_string=kind_filter(Kind.LEADERBOARD),
                                    max_results=1, order_by=["attributes.start_time DESC"])
        if boards:
            run = boards[0]
            item.leaderboard = artifact_url(base, exp.experiment_id, run.info.run_id, "leaderboard.html")
            item.rendered = run.data.tags.get(tag("rendered_at"), "")
        out.append(item)
    return sorted(out, key=lambda x: (x.rendered, x.experiment), reverse=True)


def print_experiment(x: Links) -> None:
    """One experiment's URLs: its leaderboard page, each task's results view, the view of every task."""
    print(f"  {x.experiment}")
    if x.leaderboard:
        print(f"    leaderboard: {x.leaderboard}")
    else:
        print("    leaderboard: none yet (`harness leaderboard` renders it; its URLs are printed here then)")
    if x.views:
        print("    results by task, best first:")
        for name, url in x.views:
            print(f"      {name}: {url}")
        print(f"    all tasks: {x.runs}")
    else:
        print(f"    runs table: {x.runs}")


def print_links(items: list[Links], base: str) -> str | None:
    """Print the URLs; returns the one to open (the current leaderboard, else the first runs table)."""
    print(f"MLflow UI at {base}")
    if not items:
        print("  no experiment yet: run `harness run ...` first (its URLs are printed here then)")
        return None
    for x in items:
        print_experiment(x)
    current = next((x for x in items if x.leaderboard), None)
    if current is not None:
        print(f"current leaderboard ({current.experiment}, rendered {current.rendered or '?'}): "
              f"{current.leaderboard}")
        return current.leaderboard
    return items[0].runs


def watch(proc: subprocess.Popen, tracking_uri: str, base: str, seen: dict[str, tuple[Any, ...]],
          interval: float = WATCH_SECONDS) -> None:
    """Until the server exits: every ``interval`` seconds, print the URLs of each experiment whose results changed
    since they were last printed (``seen``: experiment -> :meth:`Links.state`, updated) and stayed the same for one
    interval (a leaderboard being logged saves its run, then its results runs, then their views)."""
    last: dict[str, tuple[Any, ...]] = {}
    while True:
        try:
            proc.wait(timeout=interval)
            return
        except subprocess.TimeoutExpired:
            pass
        try:
            items = links(tracking_uri, base)
        except Exception:  # noqa: BLE001 - a store busy with a write (locked) is read again next time
            continue
        changed = [x for x in items if seen.get(x.experiment) != x.state() == last.get(x.experiment)]
        last = {x.experiment: x.state() for x in items}
        if not changed:
            continue
        print(f"new results ({time.strftime('%H:%M:%S')}):")
        for x in changed:
            print_experiment(x)
            seen[x.experiment] = x.state()
        print(flush=True)


def serve(tracking_uri: str | None = None, port: int = 5000, open_browser: bool = False) -> int:
    from harness.core.tracking import Tracker, check_tracking_uri

    check_port(port)
    tracking_uri = check_tracking_uri(tracking_uri)
    Tracker(tracking_uri)  # the store exists (created when absent) before the server reads it
    proc = start_server(tracking_uri, port)
    url = f"http://127.0.0.1:{port}"
    items = links(tracking_uri, url)
    target = print_links(items, url)
    print(f"(server pid {proc.pid}; Ctrl-C stops it; new results are printed here as they are logged)", flush=True)
    seen = {x.experiment: x.state() for x in items}
    if open_browser:
        import webbrowser

        webbrowser.open(target or url)
    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM (a `timeout`, a service manager) stops the server too

    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        watch(proc, tracking_uri, url, seen)
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(proc)
        signal.signal(signal.SIGTERM, previous)
    return 0
