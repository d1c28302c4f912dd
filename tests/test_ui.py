import json
import socket
import urllib.request

from harness.ui import server_command, start_server, stop_server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_command_binds_loopback_with_one_worker():
    cmd = server_command("sqlite:///x.db", 5123)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--workers") + 1] == "1"
    assert cmd[cmd.index("--port") + 1] == "5123"


def test_ui_serves_the_tracking_store_and_stops(tracking_uri):
    port = _free_port()
    proc = start_server(tracking_uri, port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search",
                                     data=json.dumps({"max_results": 1000}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            names = [e["name"] for e in json.loads(r.read())["experiments"]]
        assert "Default" in names
    finally:
        stop_server(proc)
    assert proc.poll() is not None
