"""Bad inputs: each ends with one clear line on stderr (the problem and what to do), exit status 2, no traceback,
and nothing on disk changed (no MLflow store, no output folder, no world built).

The CLI runs as a subprocess in a fresh, private home; every case fails before a world is built or a model loaded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests._bad_input_cases import CASES

REPO = Path(__file__).resolve().parents[1]



def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2(case, tmp_path):
    name, args, files, words = case
    tmp = tmp_path / "work"
    tmp.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    for rel, text in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    subs = {"{tmp}": str(tmp), "{busy_port}": str(busy.getsockname()[1]), "{free_port}": str(_free_port())}
    argv = []
    for a in args:
        for k, v in subs.items():
            a = a.replace(k, v)
        argv.append(a)
    if name.endswith("home-is-file"):
        home.rmdir()
        home.write_text("not a folder")
    if name in ("home-unwritable", "run-tracking-sqlite-read-only-folder"):
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        (home if name == "home-unwritable" else tmp / "ro").chmod(0o500)
    if name in ("run-tracking-file-store-refused", "run-tracking-file-proc"):
        if not hasattr(pytest.importorskip("mlflow.environment_variables"), "MLFLOW_ALLOW_FILE_STORE"):
            pytest.skip("this MLflow opens a file store without MLFLOW_ALLOW_FILE_STORE")
    if argv and argv[0] in ("run", "plan", "leaderboard", "compare", "init") and not name.startswith("home-"):
        home.rmdir()  # a refused run, leaderboard, comparison or initialization makes no harness home
    env = {k: v for k, v in os.environ.items()
           if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME", "MLFLOW_ALLOW_FILE_STORE"}}
    env.update(HARNESS_HOME=str(home), HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1", COLUMNS="80",
               CUDA_VISIBLE_DEVICES="")
    if name.endswith("-allowed"):
        env["MLFLOW_ALLOW_FILE_STORE"] = "true"
    before = _snapshot(tmp_path)
    try:
        proc = subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, env=env,
                              timeout=300, cwd=REPO)
    finally:
        busy.close()
        if name == "home-unwritable":
            home.chmod(0o700)
        if name == "run-tracking-sqlite-read-only-folder":
            (tmp / "ro").chmod(0o700)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, f"{argv} -> {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    assert lines[0].startswith("error:"), lines[0]
    for w in words:
        assert w.lower() in lines[0].lower(), f"{w!r} not in {lines[0]!r}"
    after = _snapshot(tmp_path)
    after.pop("hf", None)
    assert after == before, f"disk changed: {sorted(set(after) ^ set(before))}"


# the leaderboard's filters, checked against what the store holds: (id, arguments, words the error line must hold)
BOARD_CASES: list[tuple[str, list[str], list[str]]] = [
    ("task-typo", ["--task", "sr-tt"], ["--task 'sr-tt'", "did you mean 'sr-t'", "holds sr-t"]),
    ("task-absent", ["--task", "ner"], ["--task 'ner'", "holds sr-t"]),
    ("step-absent", ["--step", "7"], ["--step 7", "step(s) 0, 10", "final, delta or all"]),
    ("step-absent-for-task", ["--world", "fakeworld", "--task", "sr-t", "--step", "11"],
     ["world 'fakeworld', task 'sr-t'", "0, 10"]),
    ("world-typo", ["--world", "fakewrld"], ["--world 'fakewrld'", "did you mean 'fakeworld'"]),
    ("experiment-typo", ["--experiment", "lb-fak"], ["--experiment 'lb-fak'", "did you mean 'lb-fake'"]),
    ("metric-typo", ["--metric", "acc@5"], ["--metric 'acc@5'", "'acc@10'"]),
    ("metric-of-another-task", ["--task", "sr-t", "--metric", "f1"], ["--metric 'f1'", "task 'sr-t'", "acc@1"]),
]


@pytest.fixture(scope="module")
def fake_store(tmp_path_factory) -> Path:
    from tests._leaderboard_runs import fake_experiment

    folder = tmp_path_factory.mktemp("store")
    fake_experiment(f"sqlite:///{folder / 'm.db'}")
    return folder


@pytest.mark.parametrize("case", BOARD_CASES, ids=[c[0] for c in BOARD_CASES])
def test_leaderboard_filter_not_in_store(case, fake_store, tmp_path):
    """A filter the store holds nothing of is one line with a suggestion, exit 2, before any table is printed or
    any file written (the store and the home are as they were: no home is made)."""
    name, args, words = case
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME"}}
    env.update(HARNESS_HOME=str(home), OMP_NUM_THREADS="1", COLUMNS="80")
    before = _snapshot(fake_store)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "leaderboard", "--tracking-uri",
                           f"sqlite:///{fake_store / 'm.db'}", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, f"{args} -> {proc.returncode}\n{proc.stderr}"
    assert proc.stdout == "" and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("error:"), lines[0]
    for w in words:
        assert w.lower() in lines[0].lower(), f"{w!r} not in {lines[0]!r}"
    assert _snapshot(fake_store) == before and not home.exists()


def test_leaderboard_of_a_store_not_made_yet_makes_none(tmp_path):
    """A tracking URI of a database that does not exist yet: one line, exit 2, and no database made (MLflow would
    make an empty one on opening it)."""
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME"}}
    env.update(HARNESS_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1", COLUMNS="80")
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "leaderboard", "--tracking-uri",
                           f"sqlite:///{tmp_path / 'm.db'}"], capture_output=True, text=True, env=env, timeout=300,
                          cwd=REPO)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "no results yet" in lines[0] and "m.db" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_value_given_twice_is_one_cell_said_in_one_line(tmp_path):
    """``--seeds 1,1``, ``--dims full,full``, ``--methods random,random``, ``--langs X,X`` plan each cell once (they
    planned two cells of one identity, computed side by side), each said in one line on stderr; no home is made."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME"}}
    env.update(HARNESS_HOME=str(home), OMP_NUM_THREADS="1", COLUMNS="200", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "plan", "--world", "synthetic", "--methods",
                           "random,random", "--tasks", "mlm,mlm", "--seeds", "2,1,2", "--dims", "full,none,16,16",
                           "--langs", "qab_Latn,qab_Latn"], capture_output=True, text=True, env=env, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "given more than once" in ln]
    assert said == ["note: --methods: random given more than once, kept once (random)",
                    "note: --tasks: mlm given more than once, kept once (mlm)",
                    "note: --langs: qab_Latn given more than once, kept once (qab_Latn)",
                    "note: --dims: 16, full given more than once, kept once (full,16)",
                    "note: --seeds: 2 given more than once, kept once (2,1)"], proc.stderr
    cells = [ln for ln in proc.stdout.splitlines() if "| seed " in ln]
    assert len(cells) == 4 and len(set(cells)) == 4, proc.stdout  # random x {full, 16} x seeds {1, 2}
    assert not home.exists()


def test_a_config_files_duplicates_are_kept_once_and_the_cells_are_distinct(synthetic_world):
    from harness.config import make_config
    from harness.spec import resolve

    said: list[str] = []
    cfg = make_config({"world": "synthetic", "methods": ["random"], "tasks": ["mlm"], "seeds": [3, 3, 1],
                       "dims": ["full", "full"], "device": "cpu"}, said=said)
    assert cfg.seeds == [3, 1] and cfg.dims == ["full"]
    assert said == ["config key 'dims': full given more than once, kept once (full)",
                    "config key 'seeds': 3 given more than once, kept once (3,1)"]
    keys = [k.key for k in resolve(cfg, synthetic_world).cells.values()]
    assert len(keys) == len(set(keys)) == 2


def test_enough_cases():
    assert len(CASES) >= 40


def test_debug_shows_the_traceback(tmp_path):
    env = {**os.environ, "HARNESS_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "--debug", "run", "--world", "synthtic"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "UnknownNameError" in proc.stderr


def test_sound_config_tables_pass():
    """What the table checks let through: declared names and values, the surgery options every method takes, a
    method or task the run does not use, every tagging and MLM setting, a known CPT setting."""
    from harness.commands.common import check_config_tables
    from harness.config import make_config

    cfg = make_config(overrides={
        "world": "synthetic", "methods": ["random"], "tasks": ["mlm"],
        "method_params": {"ofa": {"k": 5, "temperature": 0.2, "bias": "zero"}, "random": {"untied_output": "zero"}},
        "task_params": {"ner": {"epochs": 1, "seed": 3, "train_language": "eng_Latn"}, "sr-t": {"layer": 8},
                        "mlm": {"max_sentences": 5}},
        "cpt": {"steps": 2, "lr": 1e-4}})
    check_config_tables(cfg)


def test_leaderboard_filters_in_store_pass(fake_store, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME"}}
    env.update(HARNESS_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1", COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "leaderboard", "--tracking-uri",
                           f"sqlite:///{fake_store / 'm.db'}", "--experiment", "lb-fake", "--world", "fakeworld",
                           "--task", "sr-t", "--step", "0", "--metric", "acc@1", "--no-write"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "acc@1" in proc.stdout and "alpha" in proc.stdout


def test_a_stopped_run_prints_its_line_and_nothing_after(synthetic_world, tmp_path):
    """SIGTERM while four cells run two at a time (one queued): the stop line is the last thing on stderr (no
    InvalidStateError of the pool's manager thread, no KeyError of a restarted resource tracker), exit 143."""
    import time

    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", "HARNESS_FAULT_SIGNAL": "TERM",
           "HARNESS_FAULT_AT": "tasks.mlm:MLMLoss.evaluate", "HARNESS_FAULT_MARKER": str(tmp_path / "fired")}
    env.pop("MLFLOW_TRACKING_URI", None)
    err = tmp_path / "stderr.txt"
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--world", "synthetic", "--methods",
                                 "random,fvt,mean-cov,random-map", "--tasks", "mlm", "--workers", "2", "--experiment",
                                 "stopped-quietly", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                                stdout=subprocess.DEVNULL, stderr=f, env=env, cwd=REPO)
        rc = proc.wait(timeout=600)
    time.sleep(2)  # anything the helpers of the stopped run would still print
    lines = [ln for ln in err.read_text().splitlines() if ln.strip()]
    assert rc == 143, "\n".join(lines[-30:])
    assert lines[-1].startswith("stopped by SIGTERM: workers stopped"), "\n".join(lines[-30:])
    assert not [ln for ln in lines if "Traceback" in ln or "Error" in ln or "resource_tracker" in ln], lines


def test_what_the_synthetic_world_declares_is_what_its_build_writes(synthetic_world):
    """The checks before a build read the synthetic world's declaration (its generator's tables); once built, the
    built world's own files (the hidden size from the source model's config.json). Both say the same."""
    from harness.plan import plan_cells
    from harness.worlds import WORLDS, declared_world
    from harness.worlds.base import World
    from harness.worlds.synthetic import TASK_NAMES

    sketch = WORLDS.get("synthetic").describe()
    assert sorted(sketch.languages) == sorted(synthetic_world.languages) and sketch.pivot == synthetic_world.pivot
    assert sketch.sources == synthetic_world.sources and sketch.default_source == synthetic_world.default_source
    assert sketch.hidden_size("src") == synthetic_world.hidden_size("src") == 64
    assert sorted(TASK_NAMES) == synthetic_world.tasks_available()
    for task in TASK_NAMES:
        assert sketch.task_languages(task) == synthetic_world.task_languages(task)
    for kind in ("word_vectors", "target_text", "cpt_text", "dictionary"):
        assert sketch.has_resource(kind) == synthetic_world.has_resource(kind)
    assert isinstance(declared_world("synthetic"), World)  # built here: its manifest and language table are read
    from harness.config import make_config

    cfg = make_config(overrides={"world": "synthetic", "methods": ["random", "focus"], "dims": [32, "full"]})
    assert plan_cells(cfg, sketch) == plan_cells(cfg, synthetic_world)


@pytest.mark.parametrize("argv, words", [
    (["plan", "--profile", "paper", "--device", "cuda", "--methods", "random,ofa", "--source", "all", "--dims",
      "100,full"], ["random | multi | dim 100", "ofa | mono | dim full", "GPU-hours"]),
    (["world", "info", "bible"], ["not built here", "source mono (default): masked LM", "hidden size 384",
                                  "source multi: masked LM", "source smollm2: LlamaForCausalLM, objective clm",
                                  "not an OSI-approved", "queries"]),
], ids=["plan-paper-bible", "world-info-bible"])
def test_an_unbuilt_world_is_described_from_its_declaration(argv, words, tmp_path):
    """``harness plan`` and ``harness world info`` of the bible world, not built here: what its builder declares
    (languages, sources and their hidden sizes, each task's languages), exit 0, and nothing built or written (no
    home is made; the build would fetch hundreds of MB)."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME"}}
    env.update(HARNESS_HOME=str(home), OMP_NUM_THREADS="1", COLUMNS="200", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    for w in words:
        assert w in proc.stdout, f"{w!r} not in\n{proc.stdout}"
    assert not home.exists(), sorted(str(p) for p in home.rglob("*"))


def test_the_bible_declaration_is_what_plan_and_run_check_against():
    """The bible builder's declaration (read before any build) names every source's hidden size, and its plan
    sketch every task; a factorized dimension at the hidden size leaves no cell, one below it a cell."""
    from harness.config import make_config
    from harness.plan import plan_cells
    from harness.worlds import WORLDS

    builder = WORLDS.get("bible")
    declared, described = builder.declare(), builder.describe()
    assert {s: declared.hidden_size(s) for s in declared.sources} == {"mono": 384, "multi": 384, "smollm2": 576, "gemma3": 640}
    assert sorted(described.tasks) == ["mlm", "ner", "pos", "sr-b", "sr-t"]
    assert described.pivot not in described.task_languages("sr-b") and len(described.task_languages("mlm")) == 24
    cfg = make_config(overrides={"world": "bible", "methods": ["random"], "tasks": ["mlm"], "dims": [383]})
    assert {c.dim for c in plan_cells(cfg, declared)[0]} == {383}


# -- cache commands never make a home ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv, rc, words", [
    (["cache", "du"], 0, ["no harness home"]),
    (["cache", "du", "--json"], 0, ["no harness home"]),
    (["cache", "prune"], 0, ["no harness home"]),
    (["cache", "prune", "--dry-run"], 0, ["no harness home"]),
    (["cache", "verify"], 0, ["no harness home"]),
    (["cache", "prune", "--older-than", "7x"], 2, ["--older-than", "7d"]),
], ids=["du", "du-json", "prune", "prune-dry-run", "verify", "prune-bad-age"])
def test_cache_commands_without_a_home_make_none(argv, rc, words, tmp_path):
    """``harness cache du|prune|verify`` in a home that does not exist: one line saying so (or the bad input's),
    and no home made."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME"}}
    env.update(HARNESS_HOME=str(home), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=120, cwd=REPO)
    out = proc.stdout + proc.stderr
    assert proc.returncode == rc, out
    assert all(w in out for w in words), out
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out
    assert not home.exists(), sorted(str(p) for p in home.rglob("*"))


def test_a_bare_prune_says_what_it_removes_before_it_does(tmp_path):
    """A bare ``harness cache prune`` names the count and size it is about to remove on its first line, before
    the removal (the table and the bytes freed come after)."""
    home = tmp_path / "home"
    for key in ("a1", "b2"):
        d = home / "products" / "init" / key
        d.mkdir(parents=True)
        (d / "w.bin").write_bytes(b"\0" * 2048)
        (d / "_DONE.json").write_text('{"kind": "init", "created": 0}')
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "HARNESS_HOME"}}
    env.update(HARNESS_HOME=str(home), OMP_NUM_THREADS="1", COLUMNS="120")
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "cache", "prune"], capture_output=True, text=True,
                          env=env, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("removing 2 item(s), 4.") and "KB" in lines[0], proc.stdout
    assert lines[-1].startswith("freed 4.") and "in 2 item(s)" in lines[-1]
    assert not (home / "products" / "init" / "a1").exists()


# -- decoder sources: combinations refused before anything is written ------------------------------------------
DECODER_CASES: list[tuple[str, list[str], dict[str, str], list[str]]] = [
    ("run-mlm-task-on-a-decoder", ["run", "--world", "synthetic", "--source", "dec", "--methods", "random",
                                   "--tasks", "sr-t,mlm"], {}, ["--tasks mlm", "'dec'", "causal LM", "clm"]),
    ("run-clm-task-on-an-encoder", ["run", "--world", "synthetic", "--source", "src", "--methods", "random",
                                    "--tasks", "clm"], {}, ["--tasks clm", "'src'", "masked LM", "'mlm'"]),
]


@pytest.mark.parametrize("case", DECODER_CASES, ids=[c[0] for c in DECODER_CASES])
def test_a_decoder_combination_is_one_line_exit_2(case, tmp_path):
    test_bad_input_is_one_line_exit_2(case, tmp_path)


def test_a_task_from_all_that_a_source_cannot_take_is_skipped(synthetic_world):
    from harness.config import make_config
    from harness.plan import make_plan

    plan = make_plan(make_config(overrides={"world": "synthetic", "source": "dec", "methods": ["random"],
                                            "tasks": ["all"]}), synthetic_world)
    assert "clm" in plan.tasks and "mlm" not in plan.tasks and "sr-t" in plan.tasks
    assert any("task 'mlm'" in s and "'dec'" in s for s in plan.skipped)
    plan = make_plan(make_config(overrides={"world": "synthetic", "methods": ["random"], "tasks": ["all"]}),
                     synthetic_world)
    assert "mlm" in plan.tasks and "clm" not in plan.tasks
    # a named task on every source: the sources it cannot score are skipped, the others run it
    plan = make_plan(make_config(overrides={"world": "synthetic", "source": "all", "methods": ["random"],
                                            "tasks": ["mlm", "sr-t"]}), synthetic_world)
    assert {c.source for c in plan.cells} == {"src"} and plan.tasks == ["mlm", "sr-t"]
    assert any(s.startswith("source 'dec' skipped: task 'mlm'") for s in plan.skipped)


def test_a_source_declared_since_the_world_was_built_is_named_with_what_to_do(synthetic_world):
    """A world built by an earlier version, before one of the sources its builder declares today (a bible world
    built before its decoders): the plan refuses the source in one line that says so and what to do, not that the
    world has no such source; an unknown source keeps its own line."""
    import dataclasses

    from harness.config import make_config
    from harness.core.errors import ConfigError
    from harness.plan import make_plan

    sources = {k: v for k, v in synthetic_world.manifest["sources"].items() if k != "dec"}
    world = dataclasses.replace(synthetic_world, manifest={**synthetic_world.manifest, "sources": sources})
    world.builder = synthetic_world.builder  # as loading the world sets it (harness.worlds)
    cfg = make_config({"world": "synthetic", "source": "dec", "methods": "random", "tasks": "sr-t"})
    with pytest.raises(ConfigError, match=r"world 'synthetic' at .* was built by an earlier version, before its "
                                          r"source model 'dec'; it has: src\. `harness world build synthetic "
                                          r"--add-sources` adds 'dec' to it, keeping the world's identity"):
        make_plan(cfg, world)
    with pytest.raises(ConfigError, match="has no source model 'nope'; it has: src"):
        make_plan(make_config({"world": "synthetic", "source": "nope", "methods": "random", "tasks": "sr-t"}), world)
    # an encoder (its MLM head is part of the world's identity) cannot be added: the world is built again
    sources = {k: v for k, v in synthetic_world.manifest["sources"].items() if k != "src"}
    world = dataclasses.replace(synthetic_world, manifest={**synthetic_world.manifest, "sources": sources,
                                                           "default_source": "dec"})
    world.builder = synthetic_world.builder
    with pytest.raises(ConfigError, match=r"before its source model 'src'; it has: dec\. `harness world build "
                                          r"synthetic --force` builds it again with 'src'"):
        make_plan(make_config({"world": "synthetic", "source": "src", "methods": "random", "tasks": "sr-t"}), world)


def test_a_method_that_cannot_serve_an_untied_head_is_refused_by_the_plan(synthetic_world):
    """An untied decoder (declared ``tied: false``) and a method declaring ``serves_untied_output = False``: named,
    the run is refused; with ``all`` its cells are skipped; with ``untied_output = "method"`` they run."""
    import dataclasses

    from harness.config import make_config
    from harness.core.errors import ConfigError
    from harness.core.registry import METHODS
    from harness.plan import make_plan

    class InputOnly:
        name, description, requires, overlap_rule = "input-only-plan", "test", frozenset(), "ofa"
        supports_factorized, serves_untied_output = False, False

    sources = {**synthetic_world.manifest["sources"], "dec": {**synthetic_world.manifest["sources"]["dec"],
                                                              "tied": False}}
    world = dataclasses.replace(synthetic_world, manifest={**synthetic_world.manifest, "sources": sources})
    METHODS.register("input-only-plan", InputOnly)
    try:
        def plan(methods, params=None, source="dec"):
            return make_plan(make_config(overrides={"world": "synthetic", "source": source, "methods": methods,
                                                    "tasks": ["sr-t"], "method_params": params or {}}), world)

        with pytest.raises(ConfigError, match="--methods input-only-plan: source 'dec' has an untied output"):
            plan(["random", "input-only-plan"])
        assert [c.method for c in plan(["random", "input-only-plan"],
                                       {"input-only-plan": {"untied_output": "method"}}).cells] == \
            ["random", "input-only-plan"]
        everything = plan(["all"])
        assert "input-only-plan" not in {c.method for c in everything.cells}
        assert any("input-only-plan" in s for s in everything.skipped)
        assert "input-only-plan" in {c.method for c in plan(["all"], source="src").cells}  # a tied source
    finally:
        METHODS.unregister("input-only-plan")


class _FakeFetcher:
    """Pins of the decoders' packages, extracted from folders written by the test (no download)."""

    def __init__(self, root, members: dict[str, bytes]):
        from harness.worlds.bible.fetch import PINS

        self.root, self.pins = root, dict(PINS)
        for member, data in members.items():
            (root / member).parent.mkdir(parents=True, exist_ok=True)
            (root / member).write_bytes(data)

    def extract(self, name, patterns):
        return self.root


@pytest.mark.parametrize("decoder", ["smollm2", "gemma3"])
def test_a_converted_source_whose_sha256_is_not_its_packages_is_refused(decoder, tmp_path):
    """The GGUF a decoder is converted from is checked against the sha256 its package states (Gemma's SHA256SUMS,
    the SmolLM2 wheel's RECORD) before anything is converted or written: one line naming the decoder, both digests
    and what to do; the world's source folder is not made and the work folder is left empty."""
    import base64
    import hashlib

    from harness.core.errors import MissingResourceError
    from harness.worlds.bible.decoders import DECODERS, build_decoder

    d = DECODERS[decoder]
    chunks = {member: f"chunk {i} of {d.gguf}".encode() for i, (_, member) in enumerate(d.chunks)}
    whole = b"".join(chunks.values())

    def statement(data: bytes) -> bytes:
        digest = hashlib.sha256(data).digest()
        if d.stated_by[1].endswith("RECORD"):
            b64 = base64.urlsafe_b64encode(digest).decode().rstrip("=")
            return f"{d.chunks[0][1]},sha256={b64},{len(data)}\nother,,\n".encode()
        return f"{digest.hex()}  {d.gguf}\n".encode()

    # the package states the digest of other bytes: refused
    fetcher = _FakeFetcher(tmp_path / "pkg", {**chunks, d.stated_by[1]: statement(whole + b"x")})
    out, work = tmp_path / "world" / "sources" / decoder, tmp_path / "world" / ".decoders-work"
    with pytest.raises(MissingResourceError) as err:
        build_decoder(d, fetcher, out, work)
    msg = str(err.value)
    assert f"decoder {decoder}" in msg and hashlib.sha256(whole).hexdigest() in msg
    assert hashlib.sha256(whole + b"x").hexdigest() in msg and "download cache" in msg and "\n" not in msg
    assert not out.exists() and not any(work.rglob("*.gguf"))
    # the stated digest of the same bytes passes the check (the conversion then reads the file as a GGUF)
    (tmp_path / "pkg" / d.stated_by[1]).write_bytes(statement(whole))
    from harness.worlds.bible.decoders import assemble

    gguf, digest = assemble(d, [tmp_path / "pkg" / m for m in chunks], tmp_path / "pkg" / d.stated_by[1],
                            tmp_path / "w2")
    assert gguf.read_bytes() == whole and digest == hashlib.sha256(whole).hexdigest()
