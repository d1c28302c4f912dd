"""Start-up time of the ``harness`` command: how long a command that trains nothing takes from launch to exit.

Each command is started N times as a fresh ``python`` process (the way the console script starts it:
``from harness.cli import main``), with the code of this checkout first on ``PYTHONPATH`` and, unless ``--home`` is
given, an empty temporary ``HARNESS_HOME`` (so no built world or MLflow store changes what the command does). The
table shows the median, the fastest and the slowest wall time, and whether ``torch`` was imported (read from
``python -X importtime`` in one extra run).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_startup.py [--runs N] [--home] [--repo PATH]`` (``--repo``: time
another checkout's code, e.g. a worktree of an older commit, with this script).

``--run``: the silences of ``harness run`` instead. In an empty temporary home (or ``--home``) the world is built
first (untimed), then the job (``--job``, default ``--world synthetic --methods random,ofa --tasks sr-t``) runs
twice: the first time it computes its cells, the second time it has nothing to do. For each, with stdout and stderr
piped into one stream, the table gives the seconds to the first line, the longest silence between two lines (and
the line that ended it), the lines, the total wall time and the CPU time of the whole process tree (which a loaded
machine does not inflate as it does the wall time); the machine's load average is printed with it.
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
COMMANDS = {
    "harness list": ["list"],
    "harness leaderboard --help": ["leaderboard", "--help"],
    "harness --help": ["--help"],
}
LAUNCH = "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))"


def _env(repo: Path, home: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    env["COLUMNS"] = "200"
    if home is not None:
        env["HARNESS_HOME"] = home
    return env


def time_once(argv: list[str], env: dict[str, str], repo: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", LAUNCH, *argv], env=env, cwd=repo, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"`harness {' '.join(argv)}` failed ({proc.returncode}):\n{proc.stderr}")
    return took


def imports_torch(argv: list[str], env: dict[str, str], repo: Path) -> bool:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", LAUNCH, *argv], env=env, cwd=repo,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return any(line.rsplit("|", 1)[-1].strip() == "torch" for line in proc.stderr.splitlines())


def silences(argv: list[str], env: dict[str, str], repo: Path) -> dict[str, object]:
    """One ``harness`` command with stdout and stderr in one pipe: seconds to its first line, the longest gap
    between two lines (and the line after it), lines, wall and CPU seconds, exit status."""
    t0 = time.monotonic()
    before = os.times()
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, *argv], env=env, cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    first = None
    last = t0
    gap, after, lines = 0.0, "", 0
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.monotonic()
        if first is None:
            first = now - t0
        elif now - last > gap:
            gap, after = now - last, line.strip()
        last = now
        lines += 1
    rc = proc.wait()
    wall = time.monotonic() - t0
    spent = os.times()
    cpu = (spent.children_user - before.children_user) + (spent.children_system - before.children_system)
    return {"first": first or wall, "gap": gap, "after": after, "lines": lines, "wall": wall, "cpu": cpu, "rc": rc}


def run_silences(args: argparse.Namespace) -> int:
    job = ["run", *args.job.split()]
    world = job[job.index("--world") + 1] if "--world" in job else "bible"
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(args.repo.resolve(), None if args.home else tmp)
        built = subprocess.run([sys.executable, "-c", LAUNCH, "world", "build", world], env=env, cwd=args.repo,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if built.returncode != 0:
            raise SystemExit(f"`harness world build {world}` failed ({built.returncode}):\n{built.stderr}")
        rows = [("run", silences(job, env, args.repo)), ("the same again (nothing to do)", silences(job, env, args.repo))]
    print(f"silences of `harness {' '.join(job)}` (python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end)")
    print(f"{'':<32} {'first line s':>12} {'longest gap s':>13} {'lines':>6} {'wall s':>7} {'CPU s':>6}  "
          f"the line after the longest gap")
    for label, r in rows:
        print(f"{label:<32} {r['first']:>12.2f} {r['gap']:>13.2f} {r['lines']:>6} {r['wall']:>7.2f} {r['cpu']:>6.1f}  "
              f"{r['after'][:100]}" + ("" if r["rc"] == 0 else f"  (exit {r['rc']})"))
    return 0 if all(r["rc"] == 0 for _, r in rows) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per command (default 7); the median is reported")
    ap.add_argument("--home", action="store_true", help="use the current HARNESS_HOME instead of an empty one")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose code is timed (default: this one)")
    ap.add_argument("--run", action="store_true", help="the silences of `harness run` and of its no-op rerun")
    ap.add_argument("--job", default="--world synthetic --methods random,ofa --tasks sr-t",
                    help="the arguments of `harness run` for --run (default: %(default)s)")
    args = ap.parse_args()
    if args.run:
        return run_silences(args)
    repo = args.repo.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(repo, None if args.home else tmp)
        rows = []
        for label, argv in COMMANDS.items():
            time_once(argv, env, repo)  # warm the file cache: every run after it reads the same bytes from memory
            times = [time_once(argv, env, repo) for _ in range(args.runs)]
            rows.append((label, statistics.median(times), min(times), max(times), imports_torch(argv, env, repo)))
    print(f"start-up time, {args.runs} runs each (python {sys.version.split()[0]}, {repo})")
    print(f"{'command':<30} {'median s':>9} {'min s':>7} {'max s':>7}  imports torch")
    for label, med, lo, hi, torch in rows:
        print(f"{label:<30} {med:>9.2f} {lo:>7.2f} {hi:>7.2f}  {'yes' if torch else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
