"""Where the main job's time goes: per method, per seed, per phase, from the runs in MLflow.

The main job is README command 1, ``harness run --methods all --tasks sr-t,ner`` on the default world (the
``bible`` world, its default source, the ``cpu`` profile, three seeds). This script reads an experiment's cell runs
and prints, per method, the initialization time (first seed and the others: the first pays for the per-world
products that later seeds and methods share, such as fastText models and subword vectors), each task's evaluation
time at step 0 and after CPT, CPT itself and the cell's wall time; then the totals: the job's wall time (first cell
start to last cell end), the sum of the cells' wall times (about the core-seconds of one-thread cells) and what
that sum means for one to eight parallel cells.

With ``--run HOME`` it first runs the main job itself in that (fresh) harness home, timing the world build and the
run separately, so the whole of README command 1 but the package install is measured:

    OMP_NUM_THREADS=1 python benchmarks/bench_main_job.py                       # the default experiment
    OMP_NUM_THREADS=1 python benchmarks/bench_main_job.py --experiment bible/mono-3seeds
    OMP_NUM_THREADS=1 python benchmarks/bench_main_job.py --run /tmp/fresh-home   # cold: world build included
    python benchmarks/bench_main_job.py --fresh-clone /tmp/fresh   # README command 1 verbatim, install included
    OMP_NUM_THREADS=1 python benchmarks/bench_main_job.py --run HOME --experiment bible/smollm2 \
        --job "--source smollm2 --methods random,ofa,hyperofa --tasks sr-t,ner,clm"   # another job (a decoder's)

``--fresh-clone DIR`` clones this checkout's HEAD into ``DIR/repo`` and runs README command 1 exactly as the README
writes it there (its install part, then its ``harness run`` part, each timed) with ``HARNESS_HOME=DIR/home``: the
number the README states for command 1.

When it runs the command itself (``--run``, ``--fresh-clone``) it also reports when the first board came: the run
prints a partial board as the first seeds of the methods come in (at most every 10 minutes, harness.runner.
PartialBoards); the script watches the command's stdout (passing it through) and gives the time of the first
board from the cells' start (the earliest cell run's start in MLflow) and from the command's start.

Times measured while other work shares the machine are longer than on a quiet one; the script says how many cores
the machine has and the load average when it ran.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

README_COMMAND = ["run", "--methods", "all", "--tasks", "sr-t,ner"]


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


FIRST_BOARD: dict[str, float] = {}  # "command start" and "first board": epoch seconds, of the watched run


def run_watching(cmd: list[str], **kwargs: object) -> int:
    """Run ``cmd`` with its stdout passed through, noting when it started and when it printed its first board
    (its first "partial board" line, else its final board's first line) in :data:`FIRST_BOARD`."""
    FIRST_BOARD.clear()
    FIRST_BOARD["command start"] = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if "first board" not in FIRST_BOARD and ("partial board" in line or "average over languages" in line):
            FIRST_BOARD["first board"] = time.time()
    return proc.wait()


def run_main_job(home: Path, job: list[str] | None = None) -> dict[str, float]:
    """README command 1 (or ``job``, the arguments of another ``harness run``) in ``home`` (world build, then the
    run); the wall time of each part."""
    env = {**os.environ, "HARNESS_HOME": str(home), "OMP_NUM_THREADS": "1"}
    times = {}
    for name, args in (("world build", ["world", "build", "bible"]), ("run", job or README_COMMAND)):
        t0 = time.time()
        returncode = run_watching([sys.executable, "-m", "harness.cli", *args], env=env)
        times[name] = time.time() - t0
        if returncode != 0:
            raise SystemExit(f"`harness {' '.join(args)}` failed with exit status {returncode}")
    return times


REPO = Path(__file__).resolve().parents[1]


WORLD_BUILD_ONLY = {"worlds", "products", "downloads", "build-envs"}  # what `harness world build` leaves in a home


def _empty_folder(folder: Path, flag: str, built: bool = False) -> None:
    """Create ``folder``; refuse one that holds anything (the measurement needs a fresh home or clone); with
    ``built``, a home that holds only what a world build leaves (no store, no runs, no cache) is taken too."""
    held = {p.name for p in folder.iterdir()} if folder.exists() else set()
    if held and not (built and held <= WORLD_BUILD_ONLY):
        raise SystemExit(f"{flag} {folder}: give an empty or new folder"
                         + (" (or a home holding a world build only)" if built else ""))
    folder.mkdir(parents=True, exist_ok=True)


def readme_command_1() -> tuple[str, str]:
    """README command 1, split where its ``harness run`` starts: (the install, the run)."""
    import re

    block = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), flags=re.S)[0].strip()
    install, sep, run = block.partition(" && .venv/bin/harness run")
    if not sep:
        raise SystemExit("README command 1 has no `&& .venv/bin/harness run` part")
    return install, ".venv/bin/harness run" + run


def run_fresh_clone(folder: Path) -> dict[str, float]:
    """Clone this checkout's HEAD into ``folder/repo`` and run README command 1 there, verbatim, in the harness
    home ``folder/home``; the wall time of its install and of its run (world build included)."""
    _empty_folder(folder, "--fresh-clone")
    subprocess.run(["git", "clone", "-q", str(REPO), str(folder / "repo")], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["HARNESS_HOME"] = str(folder / "home")
    os.environ["HARNESS_HOME"] = env["HARNESS_HOME"]  # the breakdown reads that home's store
    times = {}
    for name, cmd in zip(("install", "run (world build included)"), readme_command_1(), strict=True):
        t0 = time.time()
        returncode = run_watching(["bash", "-c", cmd], cwd=folder / "repo", env=env)
        times[name] = time.time() - t0
        if returncode != 0:
            raise SystemExit(f"README command 1 failed in its {name} part with exit status {returncode}")
    return times


def breakdown(tracking_uri: str, experiment: str, first_board: float | None = None) -> tuple[Table, Table]:
    """The per-method table and the totals; ``first_board`` (epoch seconds): when the watched run printed its
    first board, given from the cells' start (the earliest cell run's start)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise SystemExit(f"no experiment {experiment!r} at {tracking_uri}")
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    cells = [r for r in runs if r.data.tags.get("harness.kind") == "cell"]
    if not cells:
        raise SystemExit(f"experiment {experiment!r} has no cell runs")
    tasks_of = defaultdict(list)
    for r in runs:
        if r.data.tags.get("harness.kind") == "task":
            tasks_of[r.data.tags.get("mlflow.parentRunId")].append(r)

    by_method: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    task_names: set[str] = set()
    starts, ends, walls = [], [], []
    for cell in sorted(cells, key=lambda r: r.info.start_time):
        method = cell.data.params.get("method") or cell.data.tags.get("method") or cell.info.run_name
        d = by_method[method]
        d["seeds"].append(1)
        # the time this cell spent on its initialization (older runs: the product's computation time)
        init_s = cell.data.metrics.get("init/wall_seconds", cell.data.metrics.get("init/seconds"))
        if init_s is not None:
            d["init first" if len(d["seeds"]) == 1 else "init later"].append(init_s)
        if cell.data.metrics.get("cpt/seconds") is not None:
            d["cpt"].append(cell.data.metrics["cpt/seconds"])
        starts.append(cell.info.start_time)
        if cell.info.end_time and cell.info.status == "FINISHED":  # (a KILLED or FAILED cell ended unfinished)
            wall = (cell.info.end_time - cell.info.start_time) / 1000
            d["wall"].append(wall)
            walls.append(wall)
            ends.append(cell.info.end_time)
        for t in tasks_of.get(cell.info.run_id, []):
            name = t.info.run_name
            task_names.add(name)
            key = next((k for k in t.data.metrics if k.endswith("/seconds")), None)
            if key is None:
                continue
            for m in client.get_metric_history(t.info.run_id, key):
                d[f"{name} @0" if m.step == 0 else f"{name} @N"].append(m.value)

    cols = ["init first", "init later", *[f"{t} @{s}" for t in sorted(task_names) for s in ("0", "N")], "cpt",
            "wall"]
    table = Table(title=f"{experiment}: seconds per cell (mean over seeds)")
    table.add_column("method")
    table.add_column("cells", justify="right")
    for c in cols:
        table.add_column(c, justify="right")
    for method in sorted(by_method, key=lambda m: -sum(by_method[m]["wall"])):
        d = by_method[method]
        table.add_row(method, str(len(d["seeds"])), *[_fmt(_mean(d[c])) for c in cols])

    total = Table(title="totals")
    total.add_column("what")
    total.add_column("value", justify="right")
    span = (max(ends) - min(starts)) / 1000 if starts and ends else 0.0
    cell_sum = sum(walls)
    total.add_row("cells (finished)", f"{len(walls)} of {len(cells)}")
    if first_board is not None and starts:
        total.add_row("first board, from the cells' start", f"{(first_board - min(starts) / 1000) / 60:.1f} min")
    total.add_row("job wall time, first cell start to last cell end", f"{span / 60:.1f} min")
    total.add_row("sum of the cells' wall times", f"{cell_sum / 60:.1f} min")
    for workers in (1, 2, 4, 8):
        total.add_row(f"  / {workers} parallel cell(s), with no contention", f"{cell_sum / workers / 60:.1f} min")
    phase = defaultdict(float)
    for d in by_method.values():
        for c in cols[:-1]:
            phase[c.split(" @")[0] if "@" in c else ("init" if c.startswith("init") else c)] += sum(d[c])
    for name, secs in sorted(phase.items(), key=lambda kv: -kv[1]):
        total.add_row(f"phase {name} (summed over cells)", f"{secs / 60:.1f} min ({secs / max(cell_sum, 1e-9):.0%})")
    # what no faster initialization can remove: each cell's evaluations, CPT, held-out MLM loss, model loading
    # and writing, spread over every core of this machine
    rest = cell_sum - phase.get("init", 0.0)
    cores = os.cpu_count() or 1
    total.add_row("sum of the cells' wall times outside initialization", f"{rest / 60:.1f} min "
                  f"({rest / max(len(walls), 1):.0f} s per cell)")
    total.add_row(f"  / {cores} cores: the cells' floor if every initialization took no time",
                  f"{rest / cores / 60:.1f} min")
    return table, total


def _can_report() -> None:
    """Refuse, before a job of hours, a Python that cannot read its runs afterwards (the report imports the harness
    and MLflow): run this script with the project's environment (``.venv/bin/python``)."""
    import importlib.util

    repo = str(Path(__file__).resolve().parents[1])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    missing = [m for m in ("harness", "mlflow", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"this Python ({sys.executable}) lacks {', '.join(missing)}, which the report reads the "
                         f"runs with; run the script with the project's environment, e.g. .venv/bin/python")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="bible/mono", help="MLflow experiment (default: the main job's)")
    ap.add_argument("--tracking-uri", default=None, help="default: the harness home's store")
    ap.add_argument("--run", type=Path, default=None, metavar="HOME",
                    help="first run README command 1 in this fresh harness home (world build included)")
    ap.add_argument("--job", default=None, metavar="ARGS",
                    help="with --run: the arguments of another `harness run` instead of README command 1's (e.g. "
                         "\"--source smollm2 --methods random,ofa --tasks sr-t,clm\"; give --experiment too); the "
                         "home may then hold a world build only, whose time the build log gives")
    ap.add_argument("--fresh-clone", type=Path, default=None, metavar="DIR",
                    help="clone this checkout into DIR and run README command 1 there verbatim (install included)")
    args = ap.parse_args()
    console = Console(width=200)
    _can_report()
    cold = None
    if args.fresh_clone is not None:
        cold = run_fresh_clone(args.fresh_clone)
    elif args.run is not None:
        job = ["run", *shlex.split(args.job)] if args.job else None
        if job is not None and args.experiment == ap.get_default("experiment"):
            raise SystemExit("--job: name its experiment with --experiment (e.g. bible/smollm2)")
        _empty_folder(args.run, "--run", built=job is not None)
        os.environ["HARNESS_HOME"] = str(args.run)
        cold = run_main_job(args.run, job)
    for name, secs in (cold or {}).items():  # said at once: a report that fails later loses none of them
        console.print(f"measured: {name}: {secs / 60:.1f} min")
    from harness.core.paths import default_tracking_uri

    uri = args.tracking_uri or default_tracking_uri()
    table, total = breakdown(uri, args.experiment, FIRST_BOARD.get("first board"))
    if "first board" in FIRST_BOARD:
        total.add_row("first board, from the start of `harness run`",
                      f"{(FIRST_BOARD['first board'] - FIRST_BOARD['command start']) / 60:.1f} min")
    if cold:
        for name, secs in cold.items():
            total.add_row(f"measured: {name}", f"{secs / 60:.1f} min")
        what = ("README command 1" if "install" in cold else "README command 1 without the install"
                if not args.job else f"harness run {args.job}")
        total.add_row(f"measured: {what}", f"{sum(cold.values()) / 60:.1f} min")
    console.print(table)
    console.print(total)
    load = os.getloadavg()
    console.print(f"{os.cpu_count()} cores; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
                  f"(1 / 5 / 15 min) when this ran")


if __name__ == "__main__":
    main()
