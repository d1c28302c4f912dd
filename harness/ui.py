"""``harness ui``: the MLflow UI bound to 127.0.0.1, one worker, job execution off (fast start, no orphans).

It prints where the results are: for each experiment, its runs table opened on the saved results view (one run per
method and task with ``step0/avg``, ``final/avg`` ... as sortable columns, see :mod:`leaderboard.publish`) and its
current leaderboard page (the ``leaderboard.html`` artifact of its leaderboard run); ``--open`` opens the most
recently rendered leaderboard (or, before any, the runs table) in a browser.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

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


@dataclass
class Links:
    experiment: str
    experiment_id: str
    runs: str  # the runs table (on the saved results view when there is one)
    leaderboard: str | None = None  # the leaderboard page in the UI
    leaderboard_file: str | None = None  # the same page on disk, when the run says where
    rendered: str = ""  # when the leaderboard was last rendered (ISO time), for "the current one"


def links(tracking_uri: str, base: str) -> list[Links]:
    """The runs-table and leaderboard URLs of every active experiment that has runs, newest leaderboard first."""
    from mlflow.tracking import MlflowClient

    from harness.core.tracking import (
        EXPERIMENT_KIND,
        EXPERIMENT_KIND_TAG,
        RESULTS_VIEW,
        SHARED_VIEW_PREFIX,
        TAG,
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
        view = RESULTS_VIEW if SHARED_VIEW_PREFIX + RESULTS_VIEW in (exp.tags or {}) else None
        item = Links(exp.name, exp.experiment_id, runs_table_url(base, exp.experiment_id, view))
        boards = client.search_runs([exp.experiment_id], filter_string=f"tags.`{TAG}kind` = 'leaderboard'",
                                    max_results=1, order_by=["attributes.start_time DESC"])
        if boards:
            run = boards[0]
            item.leaderboard = artifact_url(base, exp.experiment_id, run.info.run_id, "leaderboard.html")
            item.rendered = run.data.tags.get(f"{TAG}rendered_at", "")
        out.append(item)
    return sorted(out, key=lambda x: (x.rendered, x.experiment), reverse=True)


def print_links(items: list[Links], base: str) -> str | None:
    """Print the URLs; returns the one to open (the current leaderboard, else the first runs table)."""
    print(f"MLflow UI at {base}")
    if not items:
        print("  no experiment yet: run `harness run ...` first")
        return None
    for x in items:
        print(f"  {x.experiment}")
        print(f"    runs table:  {x.runs}")
        if x.leaderboard:
            print(f"    leaderboard: {x.leaderboard}")
        else:
            print("    leaderboard: none yet (`harness leaderboard` renders it)")
    current = next((x for x in items if x.leaderboard), None)
    if current is not None:
        print(f"current leaderboard ({current.experiment}, rendered {current.rendered or '?'}): "
              f"{current.leaderboard}")
        return current.leaderboard
    return items[0].runs


def serve(tracking_uri: str | None = None, port: int = 5000, open_browser: bool = False) -> int:
    from harness.core.tracking import Tracker, check_tracking_uri

    check_port(port)
    tracking_uri = check_tracking_uri(tracking_uri)
    Tracker(tracking_uri)  # the store exists (created when absent) before the server reads it
    proc = start_server(tracking_uri, port)
    url = f"http://127.0.0.1:{port}"
    target = print_links(links(tracking_uri, url), url)
    print(f"(server pid {proc.pid}; Ctrl-C stops it)", flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(target or url)
    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM (a `timeout`, a service manager) stops the server too

    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(proc)
        signal.signal(signal.SIGTERM, previous)
    return 0
