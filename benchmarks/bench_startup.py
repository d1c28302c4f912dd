"""Start-up time of the ``harness`` command: how long a command that trains nothing takes from launch to exit.

Each command is started N times as a fresh ``python`` process (the way the console script starts it:
``from harness.cli import main``), with the code of this checkout first on ``PYTHONPATH`` and, unless ``--home`` is
given, an empty temporary ``HARNESS_HOME`` (so no built world or MLflow store changes what the command does). The
table shows the median, the fastest and the slowest wall time, and whether ``torch`` was imported (read from
``python -X importtime`` in one extra run).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_startup.py [--runs N] [--home] [--repo PATH]`` (``--repo``: time
another checkout's code, e.g. a worktree of an older commit, with this script).
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per command (default 7); the median is reported")
    ap.add_argument("--home", action="store_true", help="use the current HARNESS_HOME instead of an empty one")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose code is timed (default: this one)")
    args = ap.parse_args()
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
