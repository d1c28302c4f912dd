"""What a newcomer meets first, each checked as they would meet it (the CLI as a subprocess, a fresh home): a
plug-in method given parameters it does not declare, the README's plug-in command, ``harness list`` piped, and the
stderr of ``harness leaderboard`` (progress only: no MLflow warning, no download bars); and the README itself: at
most 350 lines, every link resolving, every command and flag one the CLI takes, its figures those measured."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, home: Path, env: dict[str, str] | None = None, columns: str | None = None):
    full = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME", "COLUMNS"}}
    full.update(HARNESS_HOME=str(home), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **(env or {}))
    if columns:
        full["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, env=full,
                          timeout=600, cwd=REPO)


def _readme_plugin(tmp_path: Path) -> dict[str, str]:
    """The README's outside method (``my_methods.MeanInit``, registered as ``mean``), installed into a folder on the
    path through its entry point."""
    text = (REPO / "README.md").read_text()
    code = re.search(r"```python\n(# my_methods\.py.*?)```", text, re.S)
    assert code, "README must hold the outside-method example"
    dist = tmp_path / "plugins" / "my_methods-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[harness.methods]\nmean = my_methods:MeanInit\n")
    (tmp_path / "plugins" / "my_methods.py").write_text(code.group(1))
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), str(REPO)])}


@pytest.mark.parametrize("how", ["init", "run"])
def test_a_plugin_without_params_refuses_the_ones_given(how, tmp_path):
    """The README's plug-in declares no ``params``: ``--params`` (init) or ``[method_params.mean]`` (run) would be
    ignored, so each is refused in one line before anything is built or written."""
    env = _readme_plugin(tmp_path)
    home = tmp_path / "home"
    if how == "init":
        proc = _cli("init", "--world", "synthetic", "--method", "mean", "--params", '{"k": 3}', "--out",
                    str(tmp_path / "out"), home=home, env=env)
        flag = "--params"
    else:
        (tmp_path / "c.toml").write_text("[method_params.mean]\nk = 3\n")
        proc = _cli("run", "--world", "synthetic", "--methods", "mean", "--tasks", "mlm", "--config",
                    str(tmp_path / "c.toml"), home=home, env=env)
        flag = "method_params.mean"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert flag in lines[0] and "declares no parameters" in lines[0] and "'k'" in lines[0], lines[0]
    assert not home.exists() and not (tmp_path / "out").exists()


def test_the_readme_plugin_command_runs_on_the_synthetic_world():
    """The README's command for its plug-in names ``--world synthetic``: without it the run builds the bible world
    (hundreds of MB) before the newcomer sees the method run."""
    text = (REPO / "README.md").read_text()
    commands = re.findall(r"`(harness run [^`]*--methods mean[^`]*)`", text)
    assert commands, "the README must show how to run its plug-in"
    assert all("--world synthetic" in c for c in commands), commands


@pytest.mark.parametrize("columns, width", [(None, 100), ("80", 80)])
def test_list_fits_the_page_when_piped(columns, width, tmp_path):
    """``harness list`` piped: 100 columns (not the 200 of the run's result tables); COLUMNS where it is set."""
    proc = _cli("list", home=tmp_path / "home", columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("┃ name") for ln in lines), proc.stdout
    assert max(len(ln) for ln in lines) <= width, max(lines, key=len)


def test_leaderboard_stderr_holds_no_mlflow_warning_nor_download_bars(tmp_path):
    """A board whose description is longer than a run tag holds (MLflow's 8,000 characters), over a store whose
    artifacts are a local folder (as the harness home's are): the description is cut by the harness at a line's end
    (no MLflow truncation warning), and the cells' init reports are copied without MLflow's download bars."""
    from mlflow.tracking import MlflowClient

    from tests._leaderboard_runs import make_cell

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    exp_id = client.create_experiment("lb-long", artifact_location=(tmp_path / "art").as_uri())
    langs = [f"l{j:02d}_Latn" for j in range(40)]
    for i in range(16):
        make_cell(client, exp_id, f"method-{i:02d}", 1, hits={lang: 5 + (i + j) % 40 for j, lang in enumerate(langs)})
    proc = _cli("leaderboard", "--tracking-uri", uri, "--experiment", "lb-long", "--out", str(tmp_path / "board"),
                "--bootstrap", "0", home=tmp_path / "home", columns="200")
    assert proc.returncode == 0, proc.stderr
    assert "truncated to" not in proc.stderr and "Downloading artifacts" not in proc.stderr, proc.stderr
    (run,) = client.search_runs([exp_id], filter_string="tags.`harness.kind` = 'leaderboard'")
    note = run.data.tags["mlflow.note.content"]
    assert note.endswith("(truncated: see leaderboard.md)") and len(note) <= 8000, len(note)
    results = client.search_runs([exp_id], filter_string="tags.`harness.kind` = 'result'")
    assert results and all(client.list_artifacts(r.info.run_id, "init") for r in results)


# The README itself: short, its links true, its commands and flags those the CLI takes, its figures measured.

README = REPO / "README.md"
PERFORMANCE = REPO / "docs" / "performance.md"
README_MAX_LINES = 350
# the pages the README hands its detail to; their links are checked as the README's are
DOC_PAGES = ["performance.md", "options.md", "running.md", "gpu.md", "methods-and-tasks.md", "boards.md"]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_NUMBER = re.compile(r"(?<![\w.])\d(?:[\d,]*\d)?(?:\.\d+)?(?![\w])")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, no punctuation but ``-`` and ``_``, spaces as ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _section(text: str, title: str) -> str:
    """The text of the ``## title`` section, up to the next ``## ``."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_the_readme_is_at_most_350_lines():
    """A newcomer's page: what the harness is for, the two commands, the main job's time and board, and one short
    section per topic with a link; every detail and every measurement lives under docs/."""
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, more than {README_MAX_LINES}"


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{name}" for name in DOC_PAGES)])
def test_every_relative_link_resolves(page):
    """Every relative link of the README (and of the pages it hands its detail to) names a file that exists, and an
    anchor a heading of that file has."""
    source = REPO / page
    links = _LINK.findall(source.read_text())
    assert links, f"{page} links nowhere"
    broken = []
    for link in links:
        if re.match(r"[a-z]+:", link):  # http:, https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (source.parent / path).resolve() if path else source
        if not target.exists():
            broken.append(f"{link}: no file {target.relative_to(REPO) if target.is_relative_to(REPO) else target}")
        elif anchor and (target.is_dir() or anchor not in _anchors(target)):
            broken.append(f"{link}: no heading with anchor #{anchor}")
    assert not broken, f"{page}:\n" + "\n".join(broken)


def _readme_commands() -> list[str]:
    """Every ``harness`` command the README shows: the lines of its code blocks and its inline code that call it."""
    text = README.read_text()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                part = part.split(" # ", 1)[0].strip()
                if re.match(r"(\.venv/bin/)?harness ", part):
                    found.append(part)
    found += re.findall(r"`((?:\.venv/bin/)?harness [^`]+)`", text)
    return found


def test_every_harness_command_in_the_readme_is_one_the_cli_takes():
    """Each command the README shows parses with the CLI's own parser: no flag renamed or removed, no subcommand
    misspelled."""
    from harness.cli import build_parser

    parser = build_parser()
    todo = [parser]
    while todo:  # `--method` for `--methods` is a misspelling here, not a prefix: no abbreviation, at any depth
        each = todo.pop()
        each.allow_abbrev = False
        todo += _subcommands(each).values()
    commands = _readme_commands()
    assert len(commands) >= 8, commands
    bad = []
    for command in commands:
        argv = shlex.split(command)[1:]
        try:
            parser.parse_args(argv)
        except SystemExit as exit_:
            if exit_.code:
                bad.append(command)
    assert not bad, "README commands the CLI refuses:\n" + "\n".join(bad)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def _run_flags() -> set[str]:
    from harness.cli import build_parser

    return set(_subcommands(build_parser())["run"]._option_string_actions)


def test_the_flags_the_readme_and_the_options_page_name_are_flags_of_harness_run():
    """The README's "Options and profiles" section and the first column of docs/options.md's table name flags of
    ``harness run``, each as it is spelled there; and that table says what every flag of ``harness run`` does."""
    run_flags = _run_flags()
    readme_flags = set(re.findall(r"`(--[a-z][a-z0-9-]*)", _section(README.read_text(), "Options and profiles")))
    table = [ln for ln in (REPO / "docs" / "options.md").read_text().splitlines() if ln.startswith("| `--")]
    table_flags = {f for ln in table for f in re.findall(r"`(--[a-z][a-z0-9-]*)", ln.split(" | ")[0])}
    assert len(readme_flags) >= 10 and len(table_flags) >= 15, (readme_flags, table_flags)
    assert not readme_flags - run_flags, f"the README names flags harness run lacks: {readme_flags - run_flags}"
    assert not table_flags - run_flags, f"docs/options.md names flags harness run lacks: {table_flags - run_flags}"
    untold = {f for f in run_flags if f.startswith("--") and f != "--help"} - table_flags
    assert not untold, f"flags of harness run that docs/options.md's table does not say: {sorted(untold)}"


def test_the_readme_times_and_board_are_those_measured_in_docs_performance():
    """The README's table of the main job's time (three machines) and its board are taken from docs/performance.md:
    every figure they hold is there, and each row of the time table links to where it is measured."""
    text = README.read_text()
    times = _section(text, "What the main job prints, and how long it takes")
    rows = [ln for ln in times.splitlines() if ln.startswith("| ") and not ln.startswith(("| machine", "| ---"))]
    assert len(rows) == 3, rows
    assert [r.split(" | ")[0] for r in rows] == ["| 2-core CPU (the development machine)", "| 8-core CPU",
                                                 "| GPU (one H100)"], rows
    performance = PERFORMANCE.read_text()
    anchors = _anchors(PERFORMANCE)
    for row in rows:
        links = _LINK.findall(row)
        assert links and all(lk.startswith("docs/performance.md#") and lk.split("#")[1] in anchors for lk in links), row
    board = _section(text, "The main job's board")
    figures = set(_NUMBER.findall(" ".join(rows) + board)) - {"1", "2", "3", "8"}
    assert len(figures) > 70, figures
    missing = sorted(f for f in figures if not re.search(rf"(?<![\w.]){re.escape(f)}(?!\w|[.,]\d)", performance))
    assert not missing, f"README figures not in docs/performance.md: {missing}"
