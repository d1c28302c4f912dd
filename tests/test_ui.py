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


class _Server:
    """A stand-in for the server process: ``wait`` times out ``ticks`` times, then the server has exited."""

    def __init__(self, ticks: int):
        self.ticks = ticks

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        if self.ticks:
            self.ticks -= 1
            raise subprocess.TimeoutExpired("mlflow", timeout)
        return 0


def test_ui_prints_new_results_while_it_serves(monkeypatch, capsys):
    """A UI started before the first leaderboard prints the results' URLs once they exist, without a restart: once,
    when they stop changing (not while the leaderboard is half logged, nor again while they stay the same); a store
    that cannot be read for a moment is read again."""
    import harness.ui as ui

    base = "http://127.0.0.1:5999"
    before = ui.Links("syn", "1", f"{base}/#/experiments/1/runs")
    after = ui.Links("syn", "1", f"{base}/#/experiments/1/runs?viewStateShareKey=harness-results",
                     leaderboard=f"{base}/#/experiments/1/runs/r1/artifactPath/leaderboard.html", rendered="t1",
                     views=[("mlm · loss, lower is better", f"{base}/#/experiments/1/runs?viewStateShareKey=x-mlm")])
    half = ui.Links("syn", "1", before.runs, leaderboard=after.leaderboard, rendered="t1")  # views not saved yet
    answers = iter([[before], OSError("database is locked"), [half], [after], [after], [after]])

    def fake_links(uri: str, b: str) -> list:
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got

    monkeypatch.setattr(ui, "links", fake_links)
    seen = {"syn": before.state()}
    ui.watch(_Server(ticks=6), "sqlite:///x.db", base, seen, interval=0)
    out = capsys.readouterr().out
    assert out.count("new results") == 1 and out.count("syn") == 1
    assert f"mlm · loss, lower is better: {base}/#/experiments/1/runs?viewStateShareKey=x-mlm" in out
    assert f"leaderboard: {after.leaderboard}" in out and f"all tasks: {after.runs}" in out
    assert seen["syn"] == after.state()
