"""The leaderboard where researchers browse: the MLflow UI (served on 127.0.0.1) and the static HTML page, loaded in
headless Chromium. Screenshots are saved under ``tests/output/browser/`` (or ``$HARNESS_TEST_OUTPUT/browser``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.ui import start_server, stop_server
from tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _output_dir() -> Path:
    root = Path(os.environ.get("HARNESS_TEST_OUTPUT") or REPO / "tests" / "output")
    out = root / "browser"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _ensure_chromium() -> str:
    """Debian's chromium; installed with apt-get when missing (apt-get update first if the package is unknown)."""
    if CHROMIUM.exists():
        return str(CHROMIUM)
    if shutil.which("apt-get") is None:
        pytest.skip("chromium is missing and apt-get is not available: install Debian's `chromium` package")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    r = subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True, text=True, env=env,
                       timeout=900)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env, timeout=600)
        r = subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True, text=True, env=env,
                           timeout=900)
    if not CHROMIUM.exists():
        pytest.skip(f"could not install chromium with apt-get (run it as root): {r.stderr[-500:]}")
    return str(CHROMIUM)


def _chromium(binary: str, profile: Path, url: str, *, dump: bool = False, screenshot: Path | None = None,
              size: str = "1400,1000", budget_ms: int = 30000) -> str:
    args = [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
            f"--virtual-time-budget={budget_ms}"]
    if dump:
        args.append("--dump-dom")
    if screenshot is not None:
        args.append(f"--screenshot={screenshot}")
    r = subprocess.run([*args, url], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.status == 200
        return r.read()


@pytest.mark.slow
def test_leaderboard_in_the_mlflow_ui_and_as_a_static_page(run_cli, tracking_uri, tmp_path):
    chromium = _ensure_chromium()
    shots = _output_dir()
    exp = "t-browser"
    run_cli("run", "--world", "synthetic", "--methods", "random,ofa", "--tasks", "mlm", "--seeds", "1,2",
            "--cpt-steps", "4", "--experiment", exp, check=True)
    r = run_cli("leaderboard", "--experiment", exp, check=True)
    assert "ofa d=full" in r.stdout and "random d=full" in r.stdout and "qad_Cyrl" in r.stdout
    page = Path(re.search(r"^HTML: (.+)$", r.stdout, re.M).group(1).strip())
    assert page.is_file() and page.parent.name == exp

    client = MlflowClient(tracking_uri)
    exp_id = client.get_experiment_by_name(exp).experiment_id
    (board_run,) = client.search_runs([exp_id], "tags.`harness.kind` = 'leaderboard'")
    run_id = board_run.info.run_id
    table = "tables/mlm__loss__final__cpu.json"

    port = _free_port()
    proc = start_server(tracking_uri, port)
    base = f"http://127.0.0.1:{port}"
    try:
        # REST: the artifacts are listed and served
        listed = json.loads(_get(f"{base}/api/2.0/mlflow/artifacts/list?run_id={run_id}"))
        assert {"leaderboard.html", "leaderboard.md", "leaderboard.csv", "tables"} <= {
            f["path"] for f in listed["files"]}
        tables = json.loads(_get(f"{base}/api/2.0/mlflow/artifacts/list?run_id={run_id}&path=tables"))
        assert table in {f["path"] for f in tables["files"]}
        q = urllib.parse.urlencode({"path": "leaderboard.html", "run_uuid": run_id})
        served = _get(f"{base}/get-artifact?{q}").decode()
        assert served == page.read_text(encoding="utf-8")
        q = urllib.parse.urlencode({"path": table, "run_uuid": run_id})
        doc = json.loads(_get(f"{base}/get-artifact?{q}"))
        assert {"row", "qaa_Latn", "qae_Grek", "avg", "mean_rank"} <= set(doc["columns"])
        assert sorted(row[0] for row in doc["data"]) == ["ofa d=full", "random d=full"]
        got = json.loads(_get(f"{base}/api/2.0/mlflow/runs/get?run_id={run_id}"))
        tags = {t["key"]: t["value"] for t in got["run"]["data"]["tags"]}
        assert tags["harness.kind"] == "leaderboard"
        assert {"path": table, "type": "table"} in json.loads(tags["mlflow.loggedArtifacts"])

        # the UI (a JS app): the run's artifact tree, the table view, the page in the artifact viewer
        run_url = f"{base}/#/experiments/{exp_id}/runs/{run_id}"
        dom = _chromium(chromium, tmp_path / "p1", f"{run_url}/artifacts", dump=True)
        assert "leaderboard.html" in dom and "leaderboard.csv" in dom and "tables" in dom
        dom = _chromium(chromium, tmp_path / "p2", f"{run_url}/artifactPath/{table}", dump=True)
        assert "ofa d=full" in dom and "random d=full" in dom and "qab_Latn" in dom
        for name, url in (("ui-leaderboard-page.png", f"{run_url}/artifactPath/leaderboard.html"),
                          ("ui-table.png", f"{run_url}/artifactPath/{table}"),
                          ("ui-run-overview.png", run_url)):
            shot = shots / name
            shot.unlink(missing_ok=True)
            _chromium(chromium, tmp_path / "p3", url, screenshot=shot)
            assert shot.is_file() and _png_size(shot) == (1400, 1000) and shot.stat().st_size > 20_000
    finally:
        stop_server(proc)
    assert proc.poll() is not None

    # the static page, from disk with the network unused: the inline JS runs, tables and charts are there
    dom = _chromium(chromium, tmp_path / "p4", page.as_uri(), dump=True, budget_ms=5000)
    assert 'data-sortable="ready"' in dom
    assert dom.count("<svg") >= 3 and "ofa d=full" in dom and "held-out MLM loss" in dom
    shot = shots / "static-page.png"
    shot.unlink(missing_ok=True)
    _chromium(chromium, tmp_path / "p5", page.as_uri(), screenshot=shot, size="1400,2600", budget_ms=5000)
    assert _png_size(shot) == (1400, 2600) and shot.stat().st_size > 50_000


DOCS_IMAGES = REPO / "docs" / "images"


@pytest.mark.slow
def test_the_experiment_opens_on_the_runs_table_with_the_results(run_cli, tracking_uri, tmp_path):
    """The page `harness ui` prints: the runs table of the results runs, with their metric values on the first
    page; the experiment's own page is the runs table (a model-training experiment), not the GenAI overview.
    ``HARNESS_DOCS_SCREENSHOTS=1`` also writes the screenshots to ``docs/images/`` (docs/browsing.md shows them)."""
    from harness.core.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, experiment_url, run_url
    from harness.ui import links

    chromium = _ensure_chromium()
    shots = _output_dir()
    exp = "t-browse-results"
    run_cli("run", "--world", "synthetic", "--methods", "random,ofa,fvt", "--tasks", "sr-t,mlm", "--cpt-steps", "2",
            "--experiment", exp, check=True)
    run_cli("leaderboard", "--experiment", exp, "--bootstrap", "0", check=True)
    client = MlflowClient(tracking_uri)
    e = client.get_experiment_by_name(exp)
    assert e.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    results = client.search_runs([e.experiment_id], "tags.`harness.kind` = 'result'")
    assert sorted(r.info.run_name for r in results) == sorted(
        f"{task} · {m} d=full" for task in ("mlm", "sr-t") for m in ("fvt", "ofa", "random"))

    port = _free_port()
    proc = start_server(tracking_uri, port)
    base = f"http://127.0.0.1:{port}"
    try:
        (item,) = [x for x in links(tracking_uri, base) if x.experiment == exp]
        assert "viewStateShareKey=" in item.runs and item.leaderboard
        dom = _chromium(chromium, tmp_path / "r1", item.runs, dump=True)
        # the first page: every results run, the metric columns, and each run's final/avg value
        assert "final/avg" in dom and "step0/avg" in dom
        for r in results:
            assert r.info.run_name in dom, r.info.run_name
            value = r.data.metrics["final/avg"]
            assert str(value)[:6] in dom, (r.info.run_name, value)  # the UI shows the value, cut with an ellipsis
        # the experiment's own page is the runs table, not the GenAI overview ("Traces")
        dom = _chromium(chromium, tmp_path / "r2", experiment_url(base, e.experiment_id), dump=True)
        assert "Run Name" in dom and "random-full-s1" in dom and "No data available" not in dom
        # one results run: its metrics (charts of the per-language values), its artifacts
        ofa = next(r for r in results if r.info.run_name == "sr-t · ofa d=full")
        overview = run_url(base, e.experiment_id, ofa.info.run_id)
        dom = _chromium(chromium, tmp_path / "r3", overview, dump=True)
        per_language = sorted(k for k in ofa.data.metrics if k.startswith("final/") and "_" in k.split("/")[1]
                              and not k.endswith(("avg_common", "mean_rank")))
        assert per_language and "final/avg" in dom and "step0/avg" in dom and per_language[0] in dom
        pages = {"ui-results-runs.png": (item.runs, "1400,900"),
                 "ui-results-run.png": (overview, "1400,1700"),
                 "ui-results-leaderboard.png": (item.leaderboard, "1400,1000")}
        for name, (url, size) in pages.items():
            shot = shots / name
            shot.unlink(missing_ok=True)
            _chromium(chromium, tmp_path / f"s-{name}", url, screenshot=shot, size=size)
            assert shot.is_file() and _png_size(shot) == tuple(int(x) for x in size.split(","))
            assert shot.stat().st_size > 20_000
            if os.environ.get("HARNESS_DOCS_SCREENSHOTS") == "1":
                DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shot, DOCS_IMAGES / name)
    finally:
        stop_server(proc)


def _copy_store(db: Path, dest: Path) -> str:
    """A private copy of a home's tracking store and its artifacts (the original is only read), with every
    artifact location pointed at the copy. Returns its tracking URI."""
    import sqlite3

    home = db.parent
    dest.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    dst = sqlite3.connect(dest / "mlflow.db")
    src.backup(dst)
    src.close()
    if (home / "mlartifacts").is_dir():
        shutil.copytree(home / "mlartifacts", dest / "mlartifacts", symlinks=True)
    old, new = (home / "mlartifacts").as_uri(), (dest / "mlartifacts").as_uri()
    dst.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (old, new))
    dst.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (old, new))
    dst.commit()
    dst.close()
    return f"sqlite:///{dest / 'mlflow.db'}"


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("HARNESS_BROWSER_STORE"), reason="set HARNESS_BROWSER_STORE to a home's mlflow.db")
def test_a_real_store_opens_on_its_results(run_cli, tmp_path):
    """The same checks on a copy of a real home's store (``HARNESS_BROWSER_STORE=~/.cache/harness/mlflow.db``,
    read only; ``HARNESS_BROWSER_EXPERIMENT``, default ``bible/mono``): its leaderboard is rendered into the copy,
    and the first page of the runs table shows every results run with its metric value."""
    from harness.core.tracking import run_url
    from harness.ui import links

    chromium = _ensure_chromium()
    shots = _output_dir()
    exp = os.environ.get("HARNESS_BROWSER_EXPERIMENT", "bible/mono")
    uri = _copy_store(Path(os.environ["HARNESS_BROWSER_STORE"]).expanduser(), tmp_path / "home")
    run_cli("leaderboard", "--experiment", exp, "--tracking-uri", uri, "--bootstrap", "200", check=True,
            env={"HARNESS_HOME": str(tmp_path / "home")})
    client = MlflowClient(uri)
    e = client.get_experiment_by_name(exp)
    results = client.search_runs([e.experiment_id], "tags.`harness.kind` = 'result'")
    assert results
    port = _free_port()
    proc = start_server(uri, port)
    base = f"http://127.0.0.1:{port}"
    try:
        (item,) = [x for x in links(uri, base) if x.experiment == exp]
        dom = _chromium(chromium, tmp_path / "b1", item.runs, dump=True, budget_ms=60000)
        assert "final/avg" in dom
        first_page = sorted(results, key=lambda r: -r.data.metrics.get("final/avg", 0))[:10]
        for r in first_page:
            assert r.info.run_name in dom, r.info.run_name
            assert str(r.data.metrics["final/avg"])[:6] in dom, r.info.run_name
        best = first_page[0]
        pages = {"real-results-runs.png": (item.runs, "1400,1000"),
                 "real-results-run.png": (run_url(base, e.experiment_id, best.info.run_id), "1400,2200")}
        for name, (url, size) in pages.items():
            shot = shots / name
            shot.unlink(missing_ok=True)
            _chromium(chromium, tmp_path / f"s-{name}", url, screenshot=shot, size=size, budget_ms=60000)
            assert shot.is_file() and shot.stat().st_size > 20_000
            if os.environ.get("HARNESS_DOCS_SCREENSHOTS") == "1":
                DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shot, DOCS_IMAGES / name)
    finally:
        stop_server(proc)
