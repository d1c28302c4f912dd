"""The GPU path in one command (``bash benchmarks/bench_gpu.sh``): every check of the harness on an accelerator,
each in a process of its own with its share of a time budget, then one table.

1. the synthetic world, every method and task, on ``--device``, under the ``cpu`` profile;
2. the same under the ``paper`` profile (CPT blocks fitted to the source model, the per-device batch searched,
   each cell in a process of its own; ``--paper-cpt-steps`` CPT steps and HyperOFA's epochs capped by
   ``--paper-hn-epochs`` so that it fits the budget);
3. the CPT table (``bench_cpt.py``: ``run_cpt`` beside the stock HF path, lever by lever, tokens/s, MFU, memory);
4. OFA's and HyperOFA's whole initialization at Glot500 scale (``bench_glot500_init.py``), and the paper-size
   hypernetwork's pairs/s and epochs to early stopping.

``--small`` shrinks every part so that it runs on a CPU in minutes (three methods under the cpu profile and two
under the paper one, SR-T and the MLM loss only, the tiny CPT shape, the Glot500 scale divided by 500, the paper-size hypernetwork on batches
of 8 for one epoch); a test runs it so. On one H100 the full run is sized for 8 minutes
(``--budget``); a part that runs out of its share is stopped, and the table says so. Everything goes under
``--out`` (a fresh harness home, logs, the parts' JSON), so the machine's own home is never touched.

    bash benchmarks/bench_gpu.sh                          # cuda, full sizes
    bash benchmarks/bench_gpu.sh --device cpu --small     # the same checks, small, on a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = "sr-b,sr-t,ner,pos,mlm"


def _cells(home: Path, experiment: str) -> dict[str, int]:
    """{status: number of cell runs} of an experiment in the home's MLflow store."""
    db = home / "mlflow.db"
    if not db.is_file():
        return {}
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT r.status, count(*) FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
            "JOIN tags t ON t.run_uuid = r.run_uuid WHERE e.name = ? AND t.key = 'harness.kind' "
            "AND t.value = 'cell' AND r.lifecycle_stage = 'active' GROUP BY r.status", (experiment,)).fetchall()
    return dict(rows)


def _run(cmd: list[str], log: Path, env: dict[str, str], timeout: float) -> tuple[int | str, float]:
    t0 = time.perf_counter()
    with open(log, "w") as out:
        try:
            rc: int | str = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                           timeout=max(timeout, 1)).returncode
        except subprocess.TimeoutExpired:
            rc = "timed out"
    return rc, time.perf_counter() - t0


def parts(a: argparse.Namespace, out: Path) -> list[dict]:
    py = sys.executable
    small = a.small
    cfg = out / "paper.toml"
    cfg.write_text(f"[method_params.hyperofa]\nepochs = {a.paper_hn_epochs}\n")
    paper_methods = "random,ofa" if small else "all"
    cpu_methods = "random,ofa,hyperofa" if small else "all"
    tasks = "sr-t,mlm" if small else TASKS
    return [
        {"name": f"synthetic world, cpu profile ({cpu_methods}; {tasks})", "share": 0.2, "experiment": "check/cpu",
         "cmd": [py, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", cpu_methods, "--tasks", tasks,
                 "--device", a.device, "--experiment", "check/cpu"]},
        {"name": f"synthetic world, paper profile ({paper_methods}; {tasks}; {a.paper_cpt_steps} CPT steps)",
         "share": 0.25,
         "experiment": "check/paper",
         "cmd": [py, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", paper_methods, "--tasks",
                 tasks, "--device", a.device, "--profile", "paper", "--cpt-steps", str(a.paper_cpt_steps),
                 "--config", str(cfg), "--experiment", "check/paper"]},
        {"name": "CPT: run_cpt beside the stock HF path, lever by lever", "share": 0.35, "json": "cpt.json",
         "cmd": [py, "benchmarks/bench_cpt.py", "--device", a.device, "--json", str(out / "cpt.json")]
         + (["--shape", "tiny", "--steps", "12", "--warmup", "1", "--batch", "8", "--seq", "64"] if small else [])},
        {"name": "OFA and HyperOFA at Glot500 scale; the paper-size hypernetwork", "share": 0.2, "json": "init.json",
         "cmd": [py, "benchmarks/bench_glot500_init.py", "--device", a.device, "--scale", "0.002" if small else "1.0",
                 "--max-epochs", "1" if small else "30", "--hn-paper", "--json", str(out / "init.json")]
         + (["--hn-scale", "0.002", "--hn-batch", "8"] if small else [])},
    ]


def summary(part: dict, rc: int | str, out: Path, home: Path) -> str:
    if "experiment" in part:
        cells = _cells(home, part["experiment"])
        text = ", ".join(f"{n} {s.lower()}" for s, n in sorted(cells.items())) or "no cell logged"
        return f"cells: {text}"
    path = out / part["json"]
    if not path.is_file():
        return "no result written"
    data = json.loads(path.read_text())
    if part["json"] == "cpt.json":
        rows = [r for r in data["rows"] if "tok_s" in r]
        if not rows:
            return "no row ran"
        best = rows[-1]
        mfu = f", MFU {100 * best['mfu']:.1f} %" if best.get("mfu") else ""
        return (f"stock {rows[0]['tok_s']:,.0f} tok/s -> run_cpt {best['tok_s']:,.0f} tok/s "
                f"({best['tok_s'] / rows[0]['tok_s']:.2f}x{mfu})")
    said = []
    for method, steps in sorted(data.get("methods", {}).items()):
        whole = [r for r in steps if str(r.get("step", "")).startswith("whole")]
        if whole:
            peak = whole[0].get("cuda_peak_mb") or whole[0].get("peak_rss_mb")
            said.append(f"{method} {whole[0]['seconds']:.1f} s" + (f", peak {peak:,.0f} MB" if peak else ""))
    hn = data.get("hn_paper") or {}
    if hn.get("pairs_per_s") is not None:
        said.append(f"paper hypernetwork {hn['pairs_per_s']:,.0f} pairs/s, {hn.get('epochs')} epochs "
                    f"(stopped early: {hn.get('stopped_early')})")
    return "; ".join(said) or "see its table"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the harness's GPU checks in one command, one table")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--small", action="store_true", help="small sizes: runs on a CPU in minutes")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for all parts together (default 480)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the home, logs and results (default: temp)")
    ap.add_argument("--paper-cpt-steps", type=int, default=None, help="CPT steps under the paper profile")
    ap.add_argument("--paper-hn-epochs", type=int, default=20, help="HyperOFA's epochs under the paper profile")
    ap.add_argument("--only", default="", help="comma-separated part numbers to run (1-4)")
    a = ap.parse_args(argv)
    if a.paper_cpt_steps is None:
        a.paper_cpt_steps = 2 if a.small else 20
    out = (a.out or Path(tempfile.mkdtemp(prefix="bench-gpu-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    home = out / "home"
    env = {**os.environ, "HARNESS_HOME": str(home), "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "HARNESS_PROGRESS": "lines", "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    chosen = [int(x) for x in a.only.split(",") if x] or [1, 2, 3, 4]
    todo = [(i, p) for i, p in enumerate(parts(a, out), 1) if i in chosen]
    total_share = sum(p["share"] for _, p in todo)
    started = time.perf_counter()
    rows = []
    for i, part in todo:
        left = a.budget - (time.perf_counter() - started)
        share = a.budget * part["share"] / total_share
        log = out / f"part{i}.log"
        print(f"[{i}/4] {part['name']} (at most {min(share, left):.0f} s; log {log})", file=sys.stderr, flush=True)
        rc, seconds = _run(part["cmd"], log, env, min(share, left) if i != todo[-1][0] else left)
        rows.append((i, part["name"], rc, seconds, summary(part, rc, out, home)))
    device = a.device
    if device.startswith("cuda"):
        try:
            import torch

            device = f"{device} ({torch.cuda.get_device_name()})"
        except Exception:  # noqa: BLE001 - the name is a courtesy
            pass
    print(f"\nGPU path checks on {device}{' (small sizes)' if a.small else ''}, budget {a.budget:.0f} s, "
          f"results under {out}")
    print("| # | check | exit | seconds | result |")
    print("| ---: | --- | --- | ---: | --- |")
    for i, name, rc, seconds, text in rows:
        print(f"| {i} | {name} | {rc} | {seconds:.0f} | {text} |")
    for name in ("cpt", "init"):
        log = out / f"part{3 if name == 'cpt' else 4}.log"
        if log.is_file():
            text = log.read_text().splitlines()
            tables = ([line for line in text if line.startswith(("|", "run_cpt on"))] if name == "cpt"
                      else [line for line in text if line.strip() and not line.startswith(("[", "Loading", "Writing"))])
            if tables:
                print("\n" + "\n".join(tables))
    return 0 if all(rc == 0 for _, _, rc, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
