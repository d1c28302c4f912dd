"""The leaderboard where researchers browse: the MLflow UI (served on 127.0.0.1) and the static HTML page, loaded in
headless Chromium. Screenshots are saved under ``tests/output/browser/`` (or ``$HARNESS_TEST_OUTPUT/browser``)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
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


def _keep(shot: Path, docs: bool = False) -> None:
    """A screenshot of the test: a PNG of some size, its path printed; one that docs/browsing.md shows (``docs``) is
    also copied to ``docs/images/`` with ``HARNESS_DOCS_SCREENSHOTS=1``."""
    assert shot.is_file() and shot.stat().st_size > 20_000 and _png_size(shot)[0] > 0
    print(f"screenshot: {shot}")
    if docs and os.environ.get("HARNESS_DOCS_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOCS_IMAGES / shot.name)


class Page:
    """Headless Chromium driven over the DevTools protocol (a websocket, through aiohttp): load a page of the
    MLflow UI (a JS app), wait until it shows something, read it, click as a person does, take screenshots."""

    def __init__(self, binary: str, profile: Path, size: tuple[int, int] = (1400, 1000)):
        aiohttp = pytest.importorskip("aiohttp")
        profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
                                      "--remote-debugging-port=0", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.time() + 60
        while not (port_file.is_file() and port_file.read_text().count("\n") >= 1):
            assert time.time() < deadline and self.proc.poll() is None, "chromium did not start"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self.loop = asyncio.new_event_loop()
        self.n = 0

        async def connect():
            self.session = aiohttp.ClientSession()
            async with self.session.get(f"http://127.0.0.1:{port}/json") as r:
                target = next(t for t in await r.json() if t["type"] == "page")
            return await self.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)

        self.ws = self.loop.run_until_complete(connect())
        self.size = size

    def call(self, method: str, **params):
        async def go():
            self.n += 1
            await self.ws.send_json({"id": self.n, "method": method, "params": params})
            while True:
                msg = await self.ws.receive_json()
                if msg.get("id") == self.n:
                    assert "error" not in msg, msg["error"]
                    return msg.get("result", {})

        return self.loop.run_until_complete(asyncio.wait_for(go(), 120))

    def eval(self, js: str):
        got = self.call("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in got, got["exceptionDetails"]
        return got["result"].get("value")

    def wait(self, js: str, what: str, timeout: float = 90):
        """The value of ``js`` once it is truthy (the page rendered ``what``)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if value := self.eval(js):
                return value
            time.sleep(0.3)
        raise AssertionError(f"the page never showed {what}: {self.eval('location.href')}\n"
                             f"{self.eval('document.body.innerText')[:3000]}")

    def goto(self, url: str, until: str, what: str):
        self.call("Page.navigate", url=url)
        time.sleep(0.5)  # a navigation within the app (only the URL's #part changes) keeps the old page a moment
        return self.wait(until, what)

    def text(self) -> str:
        return self.eval("document.body.innerText")

    def click(self, element_js: str) -> None:
        """Mouse down and up at the middle of the element (menus open on the pointer, not on .click())."""
        x, y = self.wait(f"(() => {{ const e = {element_js}; if (!e) return null; e.scrollIntoView({{block: 'center'}});"
                         " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()",
                         element_js)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def close_assistant(self) -> None:
        """Close the assistant panel MLflow opens on a first visit (it covers a third of the table)."""
        js = (f"[...document.querySelectorAll('button[aria-label=\"Close\"]')].find(b => "
              f"b.getBoundingClientRect().x > {self.size[0] * 0.7})")
        if self.eval(f"Boolean({js})"):
            self.click(js)
            time.sleep(0.5)

    def screenshot(self, path: Path) -> Path:
        path.unlink(missing_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        self.loop.run_until_complete(self.session.close())
        self.loop.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


RUN_NAMES = ("[...document.querySelectorAll('a')].filter(a => a.innerText.includes(' · '))"
             ".sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top).map(a => a.innerText)")
HEADERS = "[...document.querySelectorAll('[role=columnheader]')].map(h => h.innerText.trim()).filter(Boolean)"
IFRAME = "document.querySelector('iframe.mlflow-html-iframe')"


def _check_task_view(page: Page, url: str, results: list, task: str, *, columns: list[str],
                     absent: list[str] = ()) -> list[str]:
    """A task's saved view: only its results runs, top to bottom by ``final/avg`` in its direction (mlm's loss:
    ascending), with ``columns`` (metrics) shown and ``absent`` not. Returns the run names in table order."""
    mine = [r for r in results if r.data.params["task"] == task]
    ascending = mine[0].data.params["higher_is_better"] == "False"
    want = [r.info.run_name for r in sorted(mine, key=lambda r: r.data.metrics["final/avg"], reverse=not ascending)]
    got = page.goto(url, f"(() => {{ const n = {RUN_NAMES}; return n.length === {len(want)} ? n : null; }})()",
                    f"the {len(want)} results runs of {task}")
    assert got == want, (task, "ascending" if ascending else "descending", got, want)
    headers = page.wait(f"(() => {{ const h = {HEADERS}; return h.includes('final/avg') ? h : null; }})()",
                        "the metric columns")
    assert set(columns) <= set(headers) and not set(absent) & set(headers), (task, headers)
    text = page.text()
    for r in mine:
        assert str(r.data.metrics["final/avg"])[:6] in text, (r.info.run_name, r.data.metrics["final/avg"])
    return got


def _check_leaderboard_link(page: Page, leaderboard: str, experiment: str) -> None:
    """The page shows a link to the leaderboard page (in its description); the URL it opens (a person's click) shows
    leaderboard.html in the artifact viewer, the page itself in its frame."""
    href = page.wait("[...document.querySelectorAll('a')].map(a => a.href)"
                     ".find(h => h.includes('/artifactPath/leaderboard.html'))", "a link to the leaderboard")
    assert href == leaderboard, (href, leaderboard)
    page.goto(href, f"Boolean({IFRAME} && {IFRAME}.src)", "the leaderboard page's frame")
    html = page.eval(f"fetch({IFRAME}.src).then(r => r.text())")
    assert f"<title>Leaderboard · {experiment}</title>" in html and "data-sortable" in html


@pytest.mark.slow
def test_the_experiment_opens_on_the_runs_table_with_the_results(run_cli, tracking_uri, tmp_path):
    """The pages `harness ui` prints, after a job whose tasks were evaluated after CPT: one view per task with its
    results runs best first in the task's direction, every headline column there (``delta/avg`` too), the values on
    the first page; the experiment's own page is the runs table (a model-training experiment), not the GenAI
    overview; its description and a results run's link to the leaderboard page."""
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
    assert all("delta/avg" in r.data.metrics for r in results)

    port = _free_port()
    proc = start_server(tracking_uri, port)
    base = f"http://127.0.0.1:{port}"
    page = Page(chromium, tmp_path / "r1")
    try:
        (item,) = [x for x in links(tracking_uri, base) if x.experiment == exp]
        assert "viewStateShareKey=harness-results" in item.runs and item.leaderboard
        views = dict(item.views)
        assert list(views) == ["mlm · loss, lower is better", "sr-t · acc@10, higher is better"]
        page.goto(experiment_url(base, e.experiment_id), "document.body.innerText.includes('random-full-s1')",
                  "the experiment's runs table")
        assert "Run Name" in page.text() and "No data available" not in page.text()  # not the GenAI overview
        page.close_assistant()
        every = ["step0/avg", "final/avg", "delta/avg", "final/mean_rank"]
        for name, url in views.items():
            task = name.split(" · ")[0]
            _check_task_view(page, url, results, task, columns=every)
            _keep(page.screenshot(shots / f"ui-results-runs-{task}.png"), docs=task == "mlm")
        # one results run: its metrics (the per-language values), its description's link to the leaderboard
        ofa = next(r for r in results if r.info.run_name == "sr-t · ofa d=full")
        per_language = sorted(k for k in ofa.data.metrics if k.startswith("final/") and "_" in k.split("/")[1]
                              and not k.endswith(("avg_common", "mean_rank")))
        page.goto(run_url(base, e.experiment_id, ofa.info.run_id), "document.body.innerText.includes('step0/avg')",
                  "the results run's metrics")
        assert per_language and "final/avg" in page.text() and per_language[0] in page.text()
        _keep(page.screenshot(shots / "ui-results-run.png"), docs=True)
        _check_leaderboard_link(page, item.leaderboard, exp)
        _keep(page.screenshot(shots / "ui-results-leaderboard.png"), docs=True)
    finally:
        page.close()
        stop_server(proc)


def _lines(stream, into: list[str]) -> None:
    for line in stream:
        into.append(line.rstrip("\n"))


def _printed(out: list[str]) -> list[tuple[str, dict[str, str]]]:
    """What `harness ui` printed, block by block: (experiment, {label: URL}), in order (a block again when the
    experiment's URLs changed)."""
    blocks: list[tuple[str, dict[str, str]]] = []
    for line in list(out):
        if re.match(r"^  \S", line):
            blocks.append((line.strip(), {}))
        elif blocks and (m := re.match(r"^\s{4,}(.+?): (http\S+)$", line)):
            blocks[-1][1][m.group(1)] = m.group(2)
        elif not line.startswith("    "):
            blocks.append(("", {}))  # a line of its own ends the block
    return blocks


@pytest.mark.slow
def test_a_ui_started_before_the_results_shows_them_by_task(run_cli, tracking_uri, harness_home, tmp_path):
    """`harness ui` started after a job of the cpu profile (the tasks evaluated at step 0 only) and before its first
    leaderboard: once `harness leaderboard` runs, the UI prints one URL per task without a restart, and they open
    (in the browser that had the experiment open before) views of that task's runs in its direction (mlm's loss
    ascending) with the columns the profile has (no ``delta/avg``: not measured). The experiment's description and a
    results run's description link to the leaderboard page, and the runs table's **Views** menu lists the views."""
    import threading

    from harness.core.tracking import experiment_url, run_url

    chromium = _ensure_chromium()
    shots = _output_dir()
    exp = "t-browse-live"
    run_cli("run", "--world", "synthetic", "--methods", "random,ofa", "--tasks", "sr-t,mlm", "--experiment", exp,
            check=True)
    port = _free_port()
    env = {**os.environ, "HARNESS_HOME": str(harness_home), "MLFLOW_TRACKING_URI": tracking_uri}
    ui = subprocess.Popen([sys.executable, "-m", "harness.cli", "ui", "--port", str(port)], env=env, cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out: list[str] = []
    threading.Thread(target=_lines, args=(ui.stdout, out), daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    page = None

    def printed(label: str, timeout: float = 120) -> dict[str, str]:
        """The last URLs `harness ui` printed for the experiment, once they include ``label``."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, urls in reversed(_printed(out)):
                if name == exp and label in urls:
                    return urls
            assert ui.poll() is None, "\n".join(out)
            time.sleep(0.2)
        raise AssertionError(f"harness ui never printed {label!r} for {exp}:\n" + "\n".join(out))

    try:
        assert "leaderboard" not in printed("runs table")  # before the leaderboard: the runs table, no views
        client = MlflowClient(tracking_uri)
        exp_id = client.get_experiment_by_name(exp).experiment_id
        page = Page(chromium, tmp_path / "live")
        page.goto(experiment_url(base, exp_id), "document.body.innerText.includes('random-full-s1')",
                  "the experiment's cell runs")
        assert " · " not in "".join(page.eval(RUN_NAMES))  # no results runs yet
        page.close_assistant()

        run_cli("leaderboard", "--experiment", exp, "--bootstrap", "0", check=True)
        urls = printed("sr-t · acc@10, higher is better")
        mlm, srt, leaderboard = urls["mlm · loss, lower is better"], urls["sr-t · acc@10, higher is better"], \
            urls["leaderboard"]
        assert ui.poll() is None and any(line.startswith("new results") for line in out)  # no restart
        results = client.search_runs([exp_id], "tags.`harness.kind` = 'result'")
        assert len(results) == 4 and all("delta/avg" not in r.data.metrics for r in results)
        cpu = ["step0/avg", "final/avg", "final/mean_rank"]
        _check_task_view(page, mlm, results, "mlm", columns=cpu, absent=["delta/avg"])
        _keep(page.screenshot(shots / "ui-live-mlm.png"))
        _check_task_view(page, srt, results, "sr-t", columns=cpu, absent=["delta/avg"])
        _keep(page.screenshot(shots / "ui-live-sr-t.png"))
        # the experiment's description (above the runs table) links to the leaderboard and to each view
        links_ = page.eval("[...document.querySelectorAll('a')].map(a => a.href)")
        assert mlm in links_ and srt in links_
        page.click("[...document.querySelectorAll('button')].find(b => ['Views', "
                   "'sr-t · acc@10, higher is better'].includes(b.innerText.trim()))")
        menu = page.wait("(() => { const m = [...document.querySelectorAll('[role=menuitem]')].map(i => i.innerText);"
                         " return m.length > 1 ? m : null; })()", "the Views menu")
        assert {"mlm · loss, lower is better", "sr-t · acc@10, higher is better"} <= set(menu), menu
        _keep(page.screenshot(shots / "ui-live-views-menu.png"), docs=True)
        page.call("Input.dispatchKeyEvent", type="keyDown", key="Escape", code="Escape", windowsVirtualKeyCode=27)
        _check_leaderboard_link(page, leaderboard, exp)
        _keep(page.screenshot(shots / "ui-live-leaderboard.png"))
        # a results run's description links to the leaderboard page too
        mlm_ofa = next(r for r in results if r.info.run_name == "mlm · ofa d=full")
        page.goto(run_url(base, exp_id, mlm_ofa.info.run_id), "document.body.innerText.includes('Description')",
                  "the results run's page")
        assert "evaluated at step 0 only" in page.text()
        _keep(page.screenshot(shots / "ui-live-run.png"))
        _check_leaderboard_link(page, leaderboard, exp)
    finally:
        if page is not None:
            page.close()
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGTERM)  # `harness ui` stops its server on SIGTERM
            ui.wait(timeout=30)


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
    and each task's view shows every results run of the task, best first in its direction, with its metric value."""
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
    page = Page(chromium, tmp_path / "b1")
    try:
        (item,) = [x for x in links(uri, base) if x.experiment == exp]
        tasks = sorted({r.data.params["task"] for r in results})
        assert [name.split(" · ")[0] for name, _ in item.views] == tasks
        page.goto(item.runs, "document.body.innerText.includes('final/avg')", "the runs table")
        page.close_assistant()
        for name, url in item.views:
            task = name.split(" · ")[0]
            order = _check_task_view(page, url, results, task, columns=["step0/avg", "final/avg", "final/mean_rank"])
            _keep(page.screenshot(shots / f"real-results-runs-{task}.png"))
        best = next(r for r in results if r.info.run_name == order[0])
        page.goto(run_url(base, e.experiment_id, best.info.run_id), "document.body.innerText.includes('step0/avg')",
                  "the results run's metrics")
        _keep(page.screenshot(shots / "real-results-run.png"), docs=True)
    finally:
        page.close()
        stop_server(proc)
