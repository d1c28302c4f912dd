"""The static HTML leaderboard in a real headless browser (Debian's chromium, driven as tests/test_browser.py does):
every plot renders with its marks, the row names stay in view when a wide table scrolls sideways, a column where every
row scores the same is grey with a note, and the page needs no network."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests._leaderboard_runs import make_cell
from tests.test_browser import _chromium, _ensure_chromium, _output_dir

LANGS = [f"l{i:02d}_Latn" for i in range(20)]  # wider than a 1400-pixel window
TIED = "l07_Latn"  # every method scores 0 there
METHODS = {"random": 0, "ofa": 9, "focus": 5}
INITS = {"random": {"copied": 100, "method": 0, "random": 60, "unk": 0, "seconds": 1.0},
         "ofa": {"copied": 100, "method": 50, "random": 10, "unk": 0, "seconds": 3.0},
         "focus": {"copied": 90, "method": 65, "random": 5, "unk": 0, "seconds": 2.0}}

# Runs in the page after it loads: measures what was drawn and writes it into <pre id="check">.
CHECK = """<script>
window.addEventListener('load', function () {
  var out = {plots: [], sticky: [], ties: [], best: []};
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });  // the folded tables too
  document.querySelectorAll('svg[data-plot]').forEach(function (svg) {
    var r = svg.getBoundingClientRect();
    var marks = Array.from(svg.querySelectorAll('.mark'));
    var drawn = marks.filter(function (m) { var b = m.getBBox(); return b.width > 0 && b.height > 0; });
    out.plots.push({kind: svg.dataset.plot, width: r.width, height: r.height, marks: marks.length,
                    drawn: drawn.length});
  });
  document.querySelectorAll('table.board').forEach(function (t) {
    var wrap = t.parentElement, cell = t.tBodies[0].rows[0].cells[0];
    cell.scrollIntoView({block: 'center', inline: 'nearest'});  // in the viewport, where elementFromPoint looks
    wrap.scrollLeft = 0;
    var before = cell.getBoundingClientRect().left;
    wrap.scrollLeft = wrap.scrollWidth;
    var box = cell.getBoundingClientRect();
    var hit = document.elementFromPoint(box.left + 4, box.top + box.height / 2);
    out.sticky.push({scrollable: wrap.scrollWidth > wrap.clientWidth, scrolled: wrap.scrollLeft,
                     before: before, after: box.left, wrapLeft: wrap.getBoundingClientRect().left,
                     onTop: hit === cell || cell.contains(hit), label: cell.textContent,
                     hit: hit ? hit.outerHTML.slice(0, 80) : null,
                     position: getComputedStyle(cell).position});
  });
  document.querySelectorAll('td.tie').forEach(function (td) { out.ties.push(getComputedStyle(td).backgroundColor); });
  document.querySelectorAll('td.best').forEach(function (td) { out.best.push(getComputedStyle(td).backgroundColor); });
  var pre = document.createElement('pre'); pre.id = 'check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.fixture(scope="module")
def page(tracking_uri, tmp_path_factory) -> Path:
    from leaderboard.collect import collect_experiment
    from leaderboard.render_html import leaderboard_html
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    name = "html-wide"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        for method, k in METHODS.items():
            hits = {lang: 0 if lang == TIED else (5 + 3 * i + 2 * k) % 50 for i, lang in enumerate(LANGS)}
            make_cell(client, exp_id, method, 1, world="htmlworld", hits=hits, init=INITS[method])
    lb = build_leaderboard(collect_experiment(client, client.get_experiment_by_name(name)), bootstrap=50)
    out = tmp_path_factory.mktemp("board-html") / "leaderboard.html"
    out.write_text(leaderboard_html(lb), encoding="utf-8")
    return out


def _check(page: Path, tmp_path: Path) -> dict:
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", CHECK + "</body>"), encoding="utf-8")
    chromium = _ensure_chromium()
    # no network: every request through a proxy that does not exist fails, and the page must not need one
    dom = _chromium(chromium, tmp_path / "profile", probe.as_uri(), dump=True, budget_ms=5000,
                    size="1400,1000").replace("&quot;", '"')
    m = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    return json.loads(m.group(1))


def test_page_offline_every_plot_renders_names_stay_in_view_ties_are_grey(page, tmp_path, monkeypatch):
    import tests.test_browser as tb

    monkeypatch.setattr(tb, "FLAGS", [*tb.FLAGS, "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"])
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", html)
    got = _check(page, tmp_path)

    kinds = {p["kind"] for p in got["plots"]}
    assert {"bars", "delta", "init", "curve"} <= kinds, kinds
    for p in got["plots"]:
        assert p["width"] > 100 and p["height"] > 50, p
        assert p["marks"] > 0 and p["drawn"] == p["marks"], p  # every bar and line has a drawn box
    delta = next(p for p in got["plots"] if p["kind"] == "delta")
    # ofa and focus minus random on every language where both are drawn (a difference of 0 is a hairline)
    assert delta["marks"] == 2 * len(LANGS)
    init = next(p for p in got["plots"] if p["kind"] == "init")
    assert init["marks"] == sum(1 for v in INITS.values() for k in ("copied", "method", "random") if v[k] > 0)

    assert got["sticky"], "no board table"
    for s in got["sticky"]:
        assert s["scrollable"] and s["scrolled"] > 100, s  # the table is wider than the window and scrolled
        assert s["position"] == "sticky" and s["onTop"], s
        assert abs(s["after"] - s["wrapLeft"]) < 2 and abs(s["after"] - s["before"]) < 2, s

    # the all-zero column: grey, never green, with a note; other columns still have their best in green
    assert got["ties"] and set(got["ties"]) == {"rgb(236, 239, 241)"}
    assert got["best"] and "rgb(236, 239, 241)" not in got["best"]
    assert f"no best in {TIED}" in html
    shot = _output_dir() / "board-html.png"
    shot.unlink(missing_ok=True)
    _chromium(_ensure_chromium(), tmp_path / "shot", page.as_uri(), screenshot=shot, size="1400,2400",
              budget_ms=3000)
    assert shot.is_file() and shot.stat().st_size > 30_000


def test_delta_and_init_charts_follow_the_board(page):
    """The numbers behind the two new charts: each method minus random, and the init counts per row."""
    html = page.read_text(encoding="utf-8")
    delta = re.search(r'<svg[^>]*data-plot="delta".*?</svg>', html, re.S).group(0)
    # l00_Latn: ofa (5 + 18) / 50 = 0.46, random 5 / 50 = 0.10 -> +0.360
    assert "ofa d=full · l00_Latn: +0.360 against random" in delta
    assert "random d=full ·" not in delta  # random against itself is not drawn
    init = re.search(r'<svg[^>]*data-plot="init".*?</svg>', html, re.S).group(0)
    assert "ofa d=full: method 50 (31%)" in init and "random d=full: random 60 (38%)" in init
    assert "focus d=full: copied 90 (56%)" in init
