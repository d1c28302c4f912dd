"""``harness ui``: the MLflow UI bound to 127.0.0.1, one worker, job execution off (fast start, no orphans)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

from harness.paths import default_artifact_root, default_tracking_uri


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

    from harness.errors import HarnessError

    if not 0 < port < 65536:
        raise HarnessError(f"--port {port} is not a TCP port; give one between 1 and 65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise HarnessError(f"port {port} on 127.0.0.1 is not free ({exc.strerror}); "
                               f"pass another --port or stop what uses it") from None


def serve(tracking_uri: str | None = None, port: int = 5000, open_browser: bool = False) -> int:
    from harness.tracking import check_tracking_uri

    check_port(port)
    tracking_uri = check_tracking_uri(tracking_uri)
    proc = start_server(tracking_uri, port)
    url = f"http://127.0.0.1:{port}"
    print(f"MLflow UI at {url} (pid {proc.pid}); Ctrl-C stops it")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(proc)
    return 0
