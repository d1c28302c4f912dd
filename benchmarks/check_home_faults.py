"""A finished main job's home under the run store's faults: nothing lost, the same board after.

Given the harness home of a finished main job (README command 1), this script

1. records every finished run of the store (its status, end time, params, tags and latest metrics) and runs the main
   job's command again (``harness run --methods all --tasks sr-t,ner``: every cell is skipped), keeping the board it
   prints and timing it (the no-op rerun);
2. kills a writer in the middle of a store transaction: a process opens the store and, inside one transaction
   with a one-page cache, rewrites every row of the ``latest_metrics`` table and fills a new table with 1 MB (SQLite
   spills the changed pages into the file, and the journal holds the only copy of the old ones); it is SIGKILLed
   before its commit, leaving a hot journal -- the fault that once made the next command delete the store with every run in it; then runs
   ``harness leaderboard`` (which must keep everything; SQLite rolls the journal back);
3. holds SQLite's exclusive lock on the store from another process for 60 s and runs the main job's command again
   while it is held (the command waits, saying so every 5 s, then goes on);
4. checks that every finished run is as it was, the store passes ``PRAGMA integrity_check``, and both reruns printed
   the same board as the first (timing lines aside).

Nothing is written to the store but what SQLite rolls back: the killed writer's transaction never commits. Run it on
the main job's home after the job finished, on an otherwise idle machine:

    OMP_NUM_THREADS=1 python benchmarks/check_home_faults.py --home ~/.cache/harness [--harness .venv/bin/harness]

It prints one line per step and a verdict, and exits 1 when anything was lost or a board differs.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

JOB = ["run", "--methods", "all", "--tasks", "sr-t,ner"]
# lines whose text moves between two identical runs: timings, dates, paths of this invocation
MOVING = re.compile(r"\d+(\.\d+)?\s*(s|ms|min)\b|elapsed|took|seconds|\d{4}-\d\d-\d\dT|waiting for tracking store|"
                    r"still running|: start$|: done")


def finished_runs(db: Path) -> dict[str, tuple]:
    """{run id: (status, end time, params, tags, latest metrics)} of every FINISHED run."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out = {}
        for rid, status, end in con.execute("SELECT run_uuid, status, end_time FROM runs WHERE status = 'FINISHED'"):
            params = tuple(sorted(con.execute("SELECT key, value FROM params WHERE run_uuid = ?", (rid,))))
            tags = tuple(sorted(con.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (rid,))))
            metrics = tuple(sorted(con.execute("SELECT key, value, step FROM latest_metrics WHERE run_uuid = ?",
                                               (rid,))))
            out[rid] = (status, end, params, tags, metrics)
        return out
    finally:
        con.close()


def integrity(db: Path) -> str:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def hot_journal(db: Path) -> bool:
    """Whether the store has a hot journal: a read-only connection cannot read it (it would have to roll back)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        con.execute("SELECT count(*) FROM runs").fetchone()
        return False
    except sqlite3.OperationalError as exc:
        if "readonly" not in str(exc):
            raise
        return True
    finally:
        con.close()


def killed_writer(db: Path) -> None:
    """A writer SIGKILLed inside a transaction that rewrote every row of ``latest_metrics`` and filled a new table
    (never committed: SQLite rolls all of it back, the new table included)."""
    code = ("import os, signal, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('pragma cache_size=1'); c.execute('begin immediate'); "
            "c.execute('update latest_metrics set value = value + 1'); "
            "c.execute('create table check_spill(v text)'); "
            "c.executemany('insert into check_spill values (?)', [('x' * 200,)] * 5000); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    rc = subprocess.run([sys.executable, "-c", code, str(db)]).returncode
    if rc != -signal.SIGKILL:
        raise SystemExit(f"the writer was not killed (exit {rc})")
    if not hot_journal(db):
        raise SystemExit("the killed writer left no hot journal (nothing to check)")


def hold(db: Path, seconds: float) -> subprocess.Popen:
    code = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('begin exclusive'); print('held', flush=True); time.sleep(float(sys.argv[2])); "
            "c.execute('commit')")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "held":
        raise SystemExit("the lock holder did not take the lock")
    return proc


def harness(cmd: list[str], home: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "HARNESS_HOME": str(home), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.perf_counter()
    proc = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=1800)
    return proc, time.perf_counter() - t0


def board(stdout: str) -> list[str]:
    """The board a command printed: its stdout without the lines whose text moves between identical runs."""
    return [ln.rstrip() for ln in stdout.splitlines() if ln.strip() and not MOVING.search(ln)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="the harness home of a finished main job")
    ap.add_argument("--harness", default=str(Path(sys.executable).with_name("harness")),
                    help="the harness command (default: beside this Python)")
    ap.add_argument("--lock-s", type=float, default=60.0, help="how long the other process holds the store")
    ap.add_argument("--job", default=" ".join(JOB), help="the main job's command line after `harness` (default: "
                    "README command 1's)")
    args = ap.parse_args(argv)
    job = args.job.split()
    home = args.home.expanduser().resolve()
    db = home / "mlflow.db"
    if not db.is_file():
        raise SystemExit(f"{db}: no run store in this home")
    cmd = [args.harness]
    before = finished_runs(db)
    cells = sum(1 for *_, tags, _m in before.values() if ("harness.kind", "cell") in tags)
    print(f"home {home}: {len(before)} finished runs ({cells} cells); store {db.stat().st_size / 1e6:.1f} MB")

    stamp = time.strftime('%Y%m%dT%H%M%S')
    backup = next(p for n in range(1000) if not (p := db.with_name(f"{db.name}.before-check-{stamp}"
                                                                   + (f"-{n}" if n else ""))).exists())
    src, dst = sqlite3.connect(db), sqlite3.connect(backup)
    with dst:
        src.backup(dst)  # a consistent copy, kept: the check writes nothing that SQLite does not roll back
    src.close()
    dst.close()
    print(f"a copy of the store before the check: {backup}")

    first, took = harness(cmd, home, *job)
    if first.returncode != 0:
        raise SystemExit(f"the main job's command failed ({first.returncode}): {first.stderr[-2000:]}")
    ref = board(first.stdout)
    print(f"1. no-op rerun of the main job: {took:.2f} s, exit {first.returncode}, a board of {len(ref)} lines")

    killed_writer(db)
    print(f"2. writer SIGKILLed inside a transaction over latest_metrics: hot journal "
          f"{db.with_name(db.name + '-journal').stat().st_size / 1e3:.0f} kB")
    lb, took = harness(cmd, home, "leaderboard", "--no-log")
    kept = finished_runs(db) == before
    print(f"   harness leaderboard: exit {lb.returncode} in {took:.1f} s; journal left hot: {hot_journal(db)}; "
          f"every finished run kept: {kept}")

    holder = hold(db, args.lock_s)
    second, took = harness(cmd, home, *job)
    holder.wait(timeout=args.lock_s + 60)
    waits = [ln for ln in second.stderr.splitlines() if ln.startswith("waiting for tracking store")]
    print(f"3. the main job's command under a {args.lock_s:.0f} s lock of the store: exit {second.returncode} in "
          f"{took:.1f} s, {len(waits)} waiting lines")

    after = finished_runs(db)
    lost = [rid for rid in before if rid not in after]
    changed = [rid for rid in before if rid in after and after[rid] != before[rid]]
    same = board(second.stdout) == ref
    check = integrity(db)
    print(f"4. finished runs: {len(before)} before, {len(after)} after; lost {len(lost)}, changed {len(changed)}; "
          f"integrity {check}; the same board after the faults: {same}")
    if not same:
        import difflib

        print("\n".join(difflib.unified_diff(ref, board(second.stdout), "before", "after", lineterm="")))
    ok = (not lost and not changed and kept and same and check == "ok" and lb.returncode == 0
          and second.returncode == 0 and not hot_journal(db))
    print("verdict: " + ("nothing lost, the same board" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
