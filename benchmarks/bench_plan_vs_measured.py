"""Plan against measured: what ``harness plan`` prices each method's initialization at, against the initialization's
own time as the run records it (``init/seconds``: the method's call, less waiting for a shared product and loading
the world's model, :mod:`methods.own_cost`), method by method.

It runs the initializations of every method on a world -- ``harness run --methods all --tasks sr-t --cpt-steps 0``
(the cheapest task; no CPT) in a fresh harness home, the synthetic world by default -- then asks the plan of the
same run (:func:`harness.plan.cpu_rows`: the same cells in the same order, a shared product such as the helper model
on the cell that builds it) and prints, per method, its first seed (which trains what its later seeds and methods
reuse) and its later seeds: plan, measured, and their ratio. A ratio is taken over ``--floor`` seconds at least
(default 0.5 s: ``harness plan`` prints whole seconds, and an initialization under half a second prints as 0): two
figures both under it agree; the table prints both figures as they are.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_plan_vs_measured.py                    # synthetic world
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_plan_vs_measured.py --home H --no-run  # read H's runs
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_plan_vs_measured.py --bible --home ~/.cache/harness

``--bible`` runs on the bible world of ``--home``, which must be built there already (``harness world build bible``
takes long; this script never builds it); its runs go to their own experiment, ``bible/plan-vs-measured``. Exit
status 1 when a method is off by more than ``--within`` (default 2x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bible", action="store_true", help="the bible world (built in --home) instead of synthetic")
    ap.add_argument("--home", type=Path, default=None, help="harness home (default: a fresh temporary one)")
    ap.add_argument("--no-run", action="store_true", help="read the runs already in --home's experiment")
    ap.add_argument("--methods", default="all")
    ap.add_argument("--seeds", default="1,2", help="seeds (the first trains what the later ones reuse)")
    ap.add_argument("--floor", type=float, default=0.5, help="seconds below which two figures agree (default: "
                    "half of the plan's resolution, a whole second)")
    ap.add_argument("--within", type=float, default=2.0, help="the largest ratio taken as agreeing")
    args = ap.parse_args()
    if args.bible and args.home is None:
        ap.error("--bible: give --home, the harness home where the bible world is built")
    if args.no_run and args.home is None:
        ap.error("--no-run: give --home, whose runs to read")
    return args


def refuse(message: str) -> None:
    """A one-line error and exit status 2 (bad input: nothing was run)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def world_of(args: argparse.Namespace) -> str:
    return "bible" if args.bible else "synthetic"


def experiment_of(args: argparse.Namespace) -> str:
    return "bible/plan-vs-measured" if args.bible else "synthetic/plan-vs-measured"


def run_job(args: argparse.Namespace) -> float:
    """The run's initializations in ``args.home``; its wall time."""
    from harness.worlds import world_dir

    if args.bible and not (world_dir("bible") / "manifest.json").is_file():
        refuse(f"--bible: the bible world is not built in {args.home} (this script does not build it): give the "
               f"home where `harness world build bible` ran")
    cmd = [sys.executable, "-m", "harness.cli", "run", "--world", world_of(args), "--methods", args.methods,
           "--tasks", "sr-t", "--cpt-steps", "0", "--seeds", args.seeds, "--experiment", experiment_of(args)]
    env = {**os.environ, "HARNESS_HOME": str(args.home), "OMP_NUM_THREADS": "1"}
    t0 = time.time()
    done = subprocess.run(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    if done.returncode != 0:  # (its cells are recorded as they finish: those are read, and said)
        print(f"warning: `harness {' '.join(cmd[3:])}` exited with status {done.returncode}", file=sys.stderr)
    return time.time() - t0


def measured(experiment: str) -> dict[tuple[str, str, str, int], float]:
    """``{(source, method, dim, seed): init/seconds}`` of the experiment's cell runs."""
    from mlflow.tracking import MlflowClient

    from harness.core.paths import default_tracking_uri

    client = MlflowClient(default_tracking_uri())
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        refuse(f"no experiment {experiment!r} in {os.environ['HARNESS_HOME']}: run this script without --no-run "
               f"first")
    out = {}
    for r in client.search_runs([exp.experiment_id], max_results=5000):
        t, m = r.data.tags, r.data.metrics
        if t.get("harness.kind") == "cell" and "init/seconds" in m:
            out[(t["harness.source"], t["harness.method"], t["harness.dim"], int(t["harness.seed"]))] = \
                m["init/seconds"]
    return out


def planned(args: argparse.Namespace) -> dict[tuple[str, str, str, int], float]:
    """``{(source, method, dim, seed): init seconds}`` of ``harness plan``'s rows for the same run."""
    from harness.config import make_config
    from harness.plan import cpu_rows, world_for_planning
    from harness.spec import resolve

    cfg = make_config({"world": world_of(args), "methods": args.methods, "tasks": "sr-t", "cpt_steps": 0,
                       "seeds": args.seeds})
    spec = resolve(cfg, world_for_planning(cfg.world), probe=False)
    order = {c.label: c for c in spec.plan.cells}
    out = {}
    for row in cpu_rows(spec, 2):
        c = order[row["cell"]]
        out[(c.source, c.method, "full" if c.dim is None else str(c.dim), c.seed)] = row["init_s"]
    return out


def table(plan: dict, got: dict, floor: float) -> list[tuple[str, str, float, float, float]]:
    """``(method, which seeds, plan s, measured s, ratio)`` per method: its first seed, then the median of its
    later seeds (where the run has them)."""
    rows = []
    methods = list(dict.fromkeys(k[1] for k in sorted(plan, key=lambda k: (k[1], k[3]))))
    for method in methods:
        keys = sorted((k for k in plan if k[1] == method and k in got), key=lambda k: k[3])
        if not keys:
            continue
        first = min(k[3] for k in keys)
        for which, ks in (("first seed", [k for k in keys if k[3] == first]),
                          ("later seeds", [k for k in keys if k[3] != first])):
            if ks:
                p, m = statistics.median(plan[k] for k in ks), statistics.median(got[k] for k in ks)
                rows.append((method, which, p, m, max(p, floor) / max(m, floor)))
    return rows


def machine() -> str:
    load = os.getloadavg()
    return (f"{os.cpu_count()} cores; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) when "
            "this printed")


def main() -> int:
    args = parse()
    if args.home is None:
        args.home = Path(tempfile.mkdtemp(prefix="plan-vs-measured-"))
    os.environ["HARNESS_HOME"] = str(args.home)
    sys.path.insert(0, str(REPO))
    wall = None if args.no_run else run_job(args)
    got, plan = measured(experiment_of(args)), planned(args)
    rows = table(plan, got, args.floor)
    print(f"world {world_of(args)}, seeds {args.seeds}, home {args.home}" +
          (f"; the run took {wall:.0f} s" if wall else "") + f"; {machine()}")
    print("| method | seeds | plan s | measured s | plan / measured |\n|---|---|---:|---:|---:|")
    off = []
    for method, which, p, m, ratio in rows:
        print(f"| {method} | {which} | {p:.2f} | {m:.2f} | {ratio:.2f} |")
        if not 1 / args.within <= ratio <= args.within:
            off.append(f"{method} ({which}): {ratio:.2f}")
    print(f"ratios over {args.floor:g} s at least; " + (f"off by more than {args.within:g}x: {', '.join(off)}" if off
                                                         else f"every method within {args.within:g}x"))
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
