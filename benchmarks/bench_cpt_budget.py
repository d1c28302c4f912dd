"""How many CPT steps move the held-out MLM loss of random initialization on this machine?

    python benchmarks/bench_cpt_budget.py [--steps 200] [--checkpoints 10,25,50,100] [--world bible]
                                          [--method random] [--langs a,b]

Runs ``harness run --methods random --tasks mlm`` under the ``cpu`` profile's CPT settings with evaluations at
the checkpoints (a separate MLflow experiment, so the default board is not touched; initialization and the world
come from the cache), then prints the held-out MLM loss curve (the ``mlm`` task: fixed masks, every language's
held-out verses, averaged over languages), its drop from step 0, and the wall time. The smallest budget whose drop
is clearly larger than the spread between languages' drops is the one to choose.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", default="bible")
    ap.add_argument("--method", default="random")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--checkpoints", default="10,25,50,100")
    ap.add_argument("--langs", default=None)
    ap.add_argument("--experiment", default="bench-cpt-budget")
    args = ap.parse_args()

    from mlflow.tracking import MlflowClient

    from harness.core.paths import default_tracking_uri

    cmd = [sys.executable, "-m", "harness.cli", "run", "--world", args.world, "--methods", args.method,
           "--tasks", "mlm", "--cpt-steps", str(args.steps), "--cpt-checkpoints", args.checkpoints,
           "--experiment", args.experiment, "--workers", "1"]
    if args.langs:
        cmd += ["--langs", args.langs]
    t0 = time.time()
    subprocess.run(cmd, check=True, env={**os.environ})
    wall = time.time() - t0

    client = MlflowClient(os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri())
    exp = client.get_experiment_by_name(args.experiment)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`harness.kind` = 'task' and "
                              f"tags.`harness.method` = '{args.method}' and tags.`harness.task` = 'mlm'")
    if not runs:
        sys.exit("no mlm task run found")
    run = runs[0]
    langs = sorted(k.split("/")[-1] for k in run.data.metrics if k.startswith("mlm/loss/") and not k.endswith("avg"))
    per: dict[int, dict[str, float]] = {}
    for lang in langs:
        for m in client.get_metric_history(run.info.run_id, f"mlm/loss/{lang}"):
            per.setdefault(m.step, {})[lang] = m.value
    steps = sorted(per)
    base = per[steps[0]]
    print(f"\n{args.method} on {args.world}: CPT under the cpu profile (8 x 64 tokens per step), "
          f"{len(langs)} languages, run took {wall:.0f} s in all")
    print(f"{'step':>6} {'loss avg':>9} {'drop avg':>9} {'drop sd':>8} {'langs lower':>12}")
    for s in steps:
        drops = [base[x] - per[s][x] for x in langs if x in per[s]]
        avg = statistics.fmean(per[s].values())
        sd = statistics.stdev(drops) if len(drops) > 1 else 0.0
        lower = sum(d > 0 for d in drops)
        print(f"{s:>6} {avg:>9.4f} {statistics.fmean(drops):>9.4f} {sd:>8.4f} {lower:>6}/{len(drops)}")
    curve = client.get_metric_history(run.data.tags.get("harness.parent") or run.data.tags["mlflow.parentRunId"],
                                      "cpt/train_loss")
    if curve:
        pts = sorted((m.step, m.value) for m in curve)
        print("train loss:", ", ".join(f"{s}:{v:.2f}" for s, v in pts[:: max(1, len(pts) // 10)]))


if __name__ == "__main__":
    main()
