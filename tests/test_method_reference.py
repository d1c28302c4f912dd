"""What each method was checked against: every built-in method declares its reference (or says that none was
compared, and what its tests check instead), every test it names exists, the runner logs the line as a tag, and the
Markdown and HTML boards show it beside the row ("not recorded" for runs logged before the tag)."""

from __future__ import annotations

import json
import re

import pytest
from mlflow.tracking import MlflowClient

from harness.core.registry import METHODS
from methods import BUILTIN
from methods.base import NO_REFERENCE, NOT_DECLARED, REFERENCE_SEPARATOR, Reference, reference_line
from tests.conftest import REPO


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_builtin_method_declares_its_reference(name):
    cls = METHODS.get(name)
    ref = cls.__dict__.get("reference")  # on the class itself: a variant does not inherit its parent's
    assert isinstance(ref, Reference), f"{name} declares no reference"
    assert ref.compared and ref.tests
    if ref.implementation is not None:
        # a package at a version, or a repository at a commit
        assert re.fullmatch(r"[\w.-]+ \d[\w.]*|[\w.-]+/[\w.-]+@[0-9a-f]{7,40}", ref.implementation), ref
    line = ref.line()
    assert line.count(REFERENCE_SEPARATOR) == 2 and "\n" not in line and len(line) <= 5000
    assert line.startswith(ref.implementation or NO_REFERENCE)


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_test_a_reference_names_exists(name):
    ref = METHODS.get(name).reference
    for test in ref.tests:
        path, _, function = test.partition("::")
        file = REPO / path
        assert file.is_file(), f"{name}: {path} does not exist"
        if function:
            assert re.search(rf"^def {re.escape(function)}\(", file.read_text(), re.M), f"{name}: no {test}"
        if ref.implementation is not None:  # the test is about that implementation
            assert ref.implementation.split("@")[0].split(" ")[0] in file.read_text(), (name, test)


# reference code run where the fixture was made (not in CI): repository -> the fixture that names its commit
FIXTURE_REFERENCES = {"konstantinjdobler/token-distillation": "tests/parity/fixtures/tokdist.json",
                      "gucci-j/llm-cva": "tests/parity/fixtures/clp_synthetic.json"}


def test_the_declared_versions_are_the_ones_compared():
    """The packages are the parity environment's pins; the commits, the ones the OFA fixtures were made from."""
    run_sh = (REPO / "tests" / "parity" / "run.sh").read_text()
    meta = json.loads((REPO / "tests" / "fixtures" / "reference" / "ofa" / "meta.json").read_text())["reference"]
    seen = 0
    for name in BUILTIN:
        impl = METHODS.get(name).reference.implementation
        if impl is None:
            continue
        seen += 1
        if "@" in impl:
            repo, commit = impl.split("@")
            if repo in FIXTURE_REFERENCES:  # a parity fixture names the commit its reference code was at
                fixture = json.loads((REPO / FIXTURE_REFERENCES[repo]).read_text())["reference"]
                assert fixture.startswith(f"{repo} {commit}"), (name, impl, fixture)
                continue
            assert meta[repo].startswith(commit), (name, impl, meta)
        else:
            package, version = impl.split(" ")
            assert f"{package}=={version}" in run_sh, (name, impl)
    assert seen >= 6  # ofa, hyperofa, focus, wechsel, tiktotok, tokdist (and the methods compared since)


def test_a_reference_is_one_line_of_three_fields():
    ref = Reference("pkg 1.0", "rows equal", ("tests/a.py", "tests/b.py::test_x"))
    assert ref.line() == "pkg 1.0 · rows equal · tests/a.py, tests/b.py::test_x"
    assert Reference(None, "statistics", ("tests/a.py",)).line().startswith(NO_REFERENCE + REFERENCE_SEPARATOR)
    for bad in (("pkg", "a · b", ("t.py",)), ("pkg", "rows\nequal", ("t.py",)), ("pkg", "", ("t.py",)),
                ("pkg", "rows", ()), ("", "rows", ("t.py",))):
        with pytest.raises(ValueError):
            Reference(*bad)


def test_the_runner_tags_each_cell_with_its_method_s_line():
    from harness.cell import method_tags

    for name in BUILTIN:
        cls = METHODS.get(name)
        assert method_tags(cls)["method_reference"] == cls.reference.line() == reference_line(cls)

    class Outside:  # a method that declares nothing (the contract does not ask for it)
        defaults = {"k": 1}

    assert method_tags(Outside) == {"method_defaults": '{"k": "1"}', "method_reference": NOT_DECLARED}


def test_the_leaderboard_reads_the_line_as_methods_write_it():
    """The leaderboard imports no method: its constants are the same words."""
    from leaderboard import references

    assert (references.NO_REFERENCE, references.NOT_DECLARED, references.SEPARATOR) == (
        NO_REFERENCE, NOT_DECLARED, REFERENCE_SEPARATOR)
    focus, random = METHODS.get("focus").reference.line(), METHODS.get("random").reference.line()
    assert references.kind(focus) == "checked" and references.short(focus) == "deepfocus 1.0.1"
    assert references.kind(random) == "none" and references.short(random) == "none"
    for line in (NOT_DECLARED, references.NOT_RECORDED, None):
        assert references.kind(line) == "unknown"
    assert references.short(None) == references.NOT_RECORDED
    assert references.short(references.reference_of([])) == references.NOT_RECORDED


# -- on the boards ---------------------------------------------------------------------------------------------
CHECKED, NONE = "ofa", "random"  # alpha's runs carry OFA's line, beta's random's, gamma's none (logged before)


@pytest.fixture(scope="module")
def board(tracking_uri):
    """A leaderboard of runs written as the runner writes them, with the ``harness.method_reference`` tag on
    alpha's and beta's cell runs and not on gamma's."""
    from leaderboard.collect import collect_experiment
    from leaderboard.references import TAG
    from leaderboard.tables import build_leaderboard
    from tests._leaderboard_runs import make_cell

    client = MlflowClient(tracking_uri)
    name = "lb-references"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    lines = {"alpha": METHODS.get(CHECKED).reference.line(), "beta": METHODS.get(NONE).reference.line()}
    if not client.search_runs([exp_id], max_results=1):
        for method, seed in (("alpha", 1), ("alpha", 2), ("beta", 1), ("gamma", 1)):
            parent, _ = make_cell(client, exp_id, method, seed)
            if method in lines:
                client.set_tag(parent, f"harness.{TAG}", lines[method])
    data = collect_experiment(client, client.get_experiment_by_name(name))
    return build_leaderboard(data, bootstrap=0), lines, data


def test_the_run_record_reads_the_tag(tracking_uri):
    from leaderboard.collect import collect_experiment
    from leaderboard.references import TAG, cell_reference
    from tests._leaderboard_runs import make_cell

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("lb-references-read")
    exp_id = exp.experiment_id if exp else client.create_experiment("lb-references-read")
    if not client.search_runs([exp_id], max_results=1):
        tagged, _ = make_cell(client, exp_id, "alpha", 1)
        client.set_tag(tagged, f"harness.{TAG}", "pkg 1.0 · rows equal · tests/x.py")
        make_cell(client, exp_id, "beta", 1)
    cells = collect_experiment(client, client.get_experiment(exp_id)).cells.values()
    assert {c.method: cell_reference(c) for c in cells} == {"alpha": "pkg 1.0 · rows equal · tests/x.py",
                                                            "beta": "not recorded"}


def test_markdown_shows_each_row_s_reference(board):
    from leaderboard.render_markdown import leaderboard_md
    from tests._leaderboard_runs import _board

    lb, lines, _ = board
    md = leaderboard_md(lb)
    table = [line for line in md.splitlines() if line.startswith("| row | checked against |")]
    assert table, "no board with the column"
    b = _board(lb)
    body = "\n".join(_board_lines(md, b.title))
    assert re.search(r"^\| alpha d=full \| ✓ cisnlp/ofa@73fce73 \| ", body, re.M), body
    assert re.search(r"^\| beta d=full \| ○ none \| ", body, re.M), body
    assert re.search(r"^\| gamma d=full \| \? not recorded \| ", body, re.M), body
    # the whole line of each row in its settings, and the legend once at the top
    settings = md.split("## Settings of each row")[1]
    for label, line in (("alpha d=full", lines["alpha"]), ("beta d=full", lines["beta"])):
        row = next(r for r in settings.splitlines() if r.startswith(f"| {label} |"))
        assert row.rstrip(" |").endswith(line), row
    assert next(r for r in settings.splitlines() if r.startswith("| gamma d=full |")).endswith("| not recorded |")
    assert ("✓ checked against a reference implementation; ○ no reference implementation compared; ? not recorded "
            "(runs logged before they carried it) or not declared by the method" in md)


def _board_lines(md: str, title: str) -> list[str]:
    out, inside = [], False
    for line in md.splitlines():
        if line.startswith("#### "):
            inside = line == f"#### {title}"
        elif inside:
            out.append(line)
    return out


def test_html_shows_each_row_s_reference_beside_it(board):
    from leaderboard.html_charts import esc
    from leaderboard.render_html import leaderboard_html

    lb, lines, _ = board
    page = leaderboard_html(lb)
    for label, line, kind, mark in (("alpha d=full", lines["alpha"], "checked", "✓"),
                                    ("beta d=full", lines["beta"], "none", "○")):
        cell = re.search(rf'<td data-v="{re.escape(esc(label))}" class="label" title="[^"]*">{re.escape(esc(label))}'
                         rf'<span class="ref ref-{kind}" title="checked against: {re.escape(esc(line))}">{mark}'
                         r"</span></td>", page)
        assert cell, label
        assert esc(line) in cell.group(0)
    assert re.search(r'<td data-v="gamma d=full" class="label" title="seeds 1 · checked against: not recorded">'
                     r'gamma d=full<span class="ref ref-unknown" title="checked against: not recorded">\?</span></td>',
                     page)
    # the legend beside each board, and the whole line in the settings table
    assert "Beside a row's name, what its method was checked against: ✓ checked against a reference " in page
    settings = page.split('<h2 id="settings">')[1]
    assert esc(lines["alpha"]) in settings and esc(lines["beta"]) in settings and "not recorded" in settings


def test_hand_made_boards_show_no_reference_column():
    """A board without runs behind it (no variants) renders as before: no column, no marker, no legend."""
    from leaderboard.render_html import board_html
    from leaderboard.render_markdown import board_md
    from leaderboard.tables import Board, Entry, Leaderboard, Row

    b = Board("e", "ner", "f1", "cpu", True, "step", 0, ["fra_Latn"], [Row("a", {"fra_Latn": Entry([0.2], ["1"])})])
    assert "checked against" not in "\n".join(board_md(b)) and "checked against" not in "\n".join(board_md(b, {}))
    page = board_html(Leaderboard("e", [b], [], {}, []), b)
    assert 'class="ref' not in page and "checked against" not in page
