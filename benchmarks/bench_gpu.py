"""The GPU path in one command (``bash benchmarks/bench_gpu.sh``): every check of the harness on an accelerator,
each in a process of its own with its share of a time budget, one table.

1. the synthetic world, every method and task, on ``--device``, under the ``cpu`` profile;
2. the same under the ``paper`` profile for the methods whose paper settings take a GPU's time (``--paper-methods``:
   Random and OFA's CPT, HyperOFA's paper-size hypernetwork, FOCUS; the others are named as not run) on SR-T and the
   MLM loss, ``--paper-cpt-steps`` CPT steps (CPT blocks fitted to the source model, the per-device batch searched,
   each cell in a process of its own) and HyperOFA's epochs capped by ``--paper-hn-epochs``;
3. the CPT table (``bench_cpt.py``: ``run_cpt`` beside the stock HF path, lever by lever, then as ``harness run``
   calls it, at twice the per-device batch, and in a spawned cell; each row warm-up steps then a few timed
   optimizer steps: tokens/s, MFU, memory);
4. OFA's and HyperOFA's whole initialization on Glot500-shaped inputs at ``--glot500-scale`` (every count of the
   Glot500 setting multiplied by it, stated in the part's title), and the paper-size hypernetwork's pairs/s;
5. the decoders' causal CPT (``bench_cpt.py --shape smollm2,gemma3``: the bible world's two decoder sources at the
   target vocabulary, the stock path, the defaults and a spawned cell each, tokens/s and MFU);
6. the node (``check_gpu_node.py``): the branches only CUDA takes (the NVML read of the compute capability and
   the answer without NVML, ``empty_cache`` before a torchrun launch, a process pinned to each GPU computing there,
   two GPUs where the node has them) and its CPU side (the kernel label measured pinned and native, the CPU stages
   of paper-profile cells pinned and native).

Every part writes as it goes: a run part prints a line for each cell as it finishes (from the run's MLflow store),
the CPT and initialization parts print each table row as it finishes and keep their JSON up to date, so a part
stopped at the end of its share keeps what it measured; its row in the table says it was stopped, and which cells
it had not reached. Torch runs ``--threads`` threads in the benchmarks (default: every core).

Sizes: the default is sized for 8 minutes on one H100 (``--budget`` 420 s for the parts, the rest for starting
and for stopping a part past its share; the CPT rows 10 timed steps after 3, ``torch.compile``'s rows left out:
``bench_cpt.py`` alone runs them; spawned cells at per-device batches 64 and 128 beside the default 32),
``--quick`` for 4 (``--budget`` 190 s: two methods in the run parts, the default and spawned-cell CPT rows, the
Glot500 inputs at a smaller scale, the decoders' spawned cells only), ``--small`` for a CPU (a test runs ``--device
cpu --small``: one method in each run part, the paper profile's effective CPT batch cut to 16, the tiny CPT shapes,
Glot500 x 0.002 and the tiny hypernetwork preset). On a CPU the parts take the
accelerator's branches (``HARNESS_EMULATE_ACCELERATOR=1``: cells in spawned processes, loader workers, the batch
search...), so the CPU run checks the paths a GPU run takes. Everything goes under ``--out`` (a fresh harness home,
logs, the parts' JSON), so the machine's own home is never touched.

    bash benchmarks/bench_gpu.sh                          # cuda, full sizes, 8 minutes on one H100
    bash benchmarks/bench_gpu.sh --quick                  # cuda, 4 minutes
    bash benchmarks/bench_gpu.sh --device cpu --small     # the same checks, small, on a CPU, emulating a GPU
    bash benchmarks/bench_gpu.sh --figures                # cuda, 8 minutes: the figures that set the GPU defaults

``--figures`` runs four parts instead: the paper profile end to end (part 2 with ``--paper-cpt-steps`` 20: every
cell's wall time and the CPT batch layout it chose), ``bench_cpt.py`` in spawned cells at the paper's 512 x 512
(per-device 32 with and without ``torch.compile``, its compile time and net gain over 4,000 steps; 64; 128) with
``--record`` (it writes ``harness/throughput.json`` in the checkout: copy it out with the results), then parts 5
and 6.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TASKS = "sr-b,sr-t,ner,pos,mlm"
PAPER_METHODS = "random,ofa,hyperofa,focus"
NOISE = ("Loading weights", "Writing model shards", "Warning", "warnings.warn", "INFO ")


def _cell_runs(home: Path, experiment: str) -> list[tuple[str, str, float | None, str, str]]:
    """``[(run name, status, seconds, method, CPT batch layout)]`` of the cell runs of an experiment in the home's
    MLflow store; the layout ``per-device x accumulation`` as the cell's CPT logged it ("" before its CPT)."""
    db = home / "mlflow.db"
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            return con.execute(
                "SELECT r.name, r.status, (r.end_time - r.start_time) / 1000.0, (SELECT m.value FROM tags m WHERE "
                "m.run_uuid = r.run_uuid AND m.key = 'harness.method'), (SELECT CAST(CAST(b.value AS INTEGER) AS TEXT) "
                "|| ' x ' || CAST(CAST(g.value AS INTEGER) AS TEXT) FROM latest_metrics b JOIN latest_metrics g ON "
                "g.run_uuid = b.run_uuid AND g.key = 'cpt/grad_accumulation' WHERE b.run_uuid = r.run_uuid AND "
                "b.key = 'cpt/per_device_batch') FROM runs r JOIN experiments e "
                "ON r.experiment_id = e.experiment_id JOIN tags t ON t.run_uuid = r.run_uuid WHERE e.name = ? AND "
                "t.key = 'harness.kind' AND t.value = 'cell' AND r.lifecycle_stage = 'active' "
                "ORDER BY r.start_time", (experiment,)).fetchall()
    except sqlite3.Error:  # being written: asked again at the next poll
        return []


def _cells(home: Path, experiment: str) -> dict[str, int]:
    """{status: number of cell runs} of an experiment."""
    counts: dict[str, int] = {}
    for _, status, *_ in _cell_runs(home, experiment):
        counts[status] = counts.get(status, 0) + 1
    return counts


def _stop(proc: subprocess.Popen) -> None:
    """Stop the part's process and the processes it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run(cmd: list[str], log: Path, env: dict[str, str], timeout: float, echo: Any, poll: Any = None
         ) -> tuple[int | str, float]:
    """Run ``cmd`` for at most ``timeout`` seconds, its output to ``log`` and each line to ``echo`` as it comes;
    ``poll()`` every two seconds meanwhile. A part past its time is stopped (its process group)."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1, start_new_session=True)

        def read() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                out.write(line)
                out.flush()
                echo(line.rstrip("\n"))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        rc: int | str | None = None
        while rc is None:
            try:
                rc = proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                if time.perf_counter() - t0 > max(timeout, 1):
                    _stop(proc)
                    rc = "stopped at its share"
            if poll:
                poll()
        reader.join(timeout=5)
    return rc, time.perf_counter() - t0


def _table_line(line: str) -> bool:
    return bool(line.strip()) and not any(n in line for n in NOISE) and not line.startswith(("[", "  warn"))


def parts(a: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    py = sys.executable
    cfg = out / "paper.toml"
    small, quick = a.small, a.quick
    # on a CPU (--small) the paper profile's effective CPT batch of 512 blocks is cut to 16: two steps of 512 take
    # minutes there, and the path (batch search, accumulation, spawned loader workers) is the same
    cfg.write_text(f"[method_params.hyperofa]\nepochs = {a.paper_hn_epochs}\n"
                   + ("[cpt]\neffective_batch = 16\nper_device_batch = 16\n" if small else ""))
    cpu_methods = "random" if small else "random,ofa" if quick else "all"
    cpu_tasks = "sr-t,mlm" if small or quick else TASKS
    paper_methods = a.paper_methods or ("ofa" if small else "random,ofa" if quick else PAPER_METHODS)
    threads = ["--threads", str(a.threads)]
    cpt = ["--quick"] if small or quick else []
    cpt += ["--shape", "tiny", "--warmup", "1", "--timed", "4", "--batch", "8", "--seq", "64"] if small else []
    cpt += ["--warmup", "3", "--timed", "10"] if not small else []
    # left out for time: torch.compile's row (its compile alone takes a minute), and under --quick the stock path
    cpt += ["--skip", "torch.compile"] if not (small or quick) else ["--skip", "stock"] if quick else []
    cpt += ["--batches", "64,128"] if not (small or quick) else []
    # the decoders: the stock path, the defaults and a spawned cell, with the fused cross-entropy (every position is
    # predicted) (--quick: the spawned cell alone)
    dec = ["--shape", "tiny-causal" if small else "smollm2,gemma3", "--only", "spawned cell (" if quick else
           "stock,calls it on this device,spawned cell (,spawned cell, + fused"]
    dec += ["--warmup", "1", "--timed", "4", "--batch", "8", "--seq", "64"] if small else ["--warmup", "3",
                                                                                          "--timed", "10"]
    node = ["--device", a.device, "--json", str(out / "node.json"), "--out", str(out / "node")]
    node += ["--small", "--methods", "ofa"] if small else ["--methods", "ofa"] if quick else []
    scale = a.glot500_scale or (0.002 if small else 0.05 if quick else 0.25)
    init = ["--scale", str(scale), "--max-epochs", "1" if small else "2" if quick else "5", "--hn-paper",
            "--hn-scale", str(min(scale, 0.002 if small else 0.02))]
    init += ["--hn-preset", "tiny", "--hn-batch", "8"] if small else []  # the paper-size network takes minutes on a CPU
    every = [
        {"name": f"synthetic world, cpu profile ({cpu_methods}; {cpu_tasks})", "share": 0.18,
         "experiment": "check/cpu",
         "methods": cpu_methods,
         "cmd": [py, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", cpu_methods, "--tasks",
                 cpu_tasks, "--device", a.device, "--experiment", "check/cpu"]},
        {"name": f"synthetic world, paper profile ({paper_methods}; sr-t,mlm; {a.paper_cpt_steps} CPT steps"
                 + (", effective batch 16)" if small else ")"),
         "share": 0.22, "experiment": "check/paper", "methods": paper_methods,
         "cmd": [py, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", paper_methods, "--tasks",
                 "sr-t,mlm", "--device", a.device, "--profile", "paper", "--cpt-steps", str(a.paper_cpt_steps),
                 "--config", str(cfg), "--experiment", "check/paper"]},
        {"name": "CPT: run_cpt beside the stock HF path, lever by lever; in a spawned cell", "share": 0.3,
         "json": "cpt.json",
         "cmd": [py, "benchmarks/bench_cpt.py", "--device", a.device, "--json", str(out / "cpt.json"), *threads,
                 *cpt]},
        {"name": f"OFA and HyperOFA on Glot500-shaped inputs at scale {scale} (every count x {scale}); the "
                 + ("tiny hypernetwork preset" if small else "paper-size hypernetwork"), "share": 0.12,
         "json": "init.json",
         "cmd": [py, "benchmarks/bench_glot500_init.py", "--device", a.device, *init, *threads,
                 "--json", str(out / "init.json")]},
        {"name": "decoder CPT: " + ("a tiny causal LM" if small else "SmolLM2 and Gemma 3 at the target vocabulary")
                 + ", causal, in a spawned cell", "share": 0.1, "json": "decoders.json",
         "cmd": [py, "benchmarks/bench_cpt.py", "--device", a.device, "--json", str(out / "decoders.json"),
                 *threads, *dec]},
        {"name": "the node: CUDA's own branches, the CPU kernels pinned and native", "share": 0.08,
         "json": "node.json", "cmd": [py, "benchmarks/check_gpu_node.py", *node]},
    ]
    if not a.figures:
        return every
    # --figures: the paper profile end to end; CPT in spawned cells at the paper's shape, per-device 32, 64 and 128,
    # with torch.compile beside it, the spawned cell's row recorded for harness plan; the decoders; the node
    sweep = (["--shape", "tiny", "--warmup", "1", "--timed", "4", "--batch", "4", "--seq", "64", "--batches", "8,16"]
             if small else ["--warmup", "3", "--timed", "20", "--batch", "32", "--seq", "512", "--batches", "64,128"])
    first, more = sweep[sweep.index("--batch") + 1], sweep[sweep.index("--batches") + 1].replace(",", ", ")
    cpt_sweep = {"name": f"CPT at {'the tiny' if small else 'the paper'}'s shape in spawned cells: per-device batch "
                         f"{first} (with and without torch.compile), {more}; recorded", "share": 0.3,
                 "json": "cpt.json",
                 "cmd": [py, "benchmarks/bench_cpt.py", "--device", a.device, "--json", str(out / "cpt.json"),
                         *threads, "--only", "spawned", *sweep, "--record"]}
    return [{**every[1], "share": 0.45}, cpt_sweep, {**every[4], "share": 0.13}, {**every[5], "share": 0.12}]


def _methods(spec: str) -> list[str]:
    try:
        from harness.core.registry import METHODS

        return METHODS.resolve_list(spec)
    except Exception:  # noqa: BLE001 - only used to name the cells not reached
        return [m for m in spec.split(",") if m and m != "all"]


def summary(part: dict[str, Any], rc: int | str, out: Path, home: Path) -> str:
    if "experiment" in part:
        runs = _cell_runs(home, part["experiment"])
        counts = _cells(home, part["experiment"])
        text = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no cell logged"
        ended = [f"{name} {secs:.0f} s" + (f" (CPT batch {layout})" if layout else "")
                 for name, status, secs, _, layout in runs if status != "RUNNING" and secs]
        if ended:
            text += f" ({', '.join(ended)})"
        seen = {run[3] for run in runs}
        missing = [m for m in _methods(part["methods"]) if m not in seen]
        if missing:
            text += f"; not reached: {', '.join(missing)}"
        if part.get("not_run"):
            text += f"; not run in this check: {', '.join(part['not_run'])}"
        return f"cells: {text}"
    path = out / part["json"]
    if not path.is_file():
        return "no result written"
    data = json.loads(path.read_text())
    if part["json"] in ("cpt.json", "decoders.json"):
        tables = data.get("tables") or [data]
        said = []
        for table in tables:
            rows = [r for r in table["rows"] if "tok_s" in r]
            named = f"{table['meta']['shape']}: " if len(tables) > 1 or part["json"] == "decoders.json" else ""
            if not rows:
                said.append(f"{named}no row ran")
                continue
            for r in rows:
                mfu = f", MFU {100 * r['mfu']:.1f} %" if r.get("mfu") else ""
                if r["row"].startswith(("stock", "run_cpt as", "the same in a spawned", "a spawned cell at")):
                    said.append(f"{named}{r['row'].split(' (')[0]} {r['per_device']} x {r['accumulation']} "
                                 f"{r['tok_s']:,.0f} tok/s{mfu}")
            if rows[0]["row"].startswith("stock") and len(rows) > 1:
                said.append(f"{named}{rows[-1]['tok_s'] / rows[0]['tok_s']:.2f}x the stock path")
            for c in table["meta"].get("compile") or []:
                said.append(f"{named}torch.compile {c['compile_s']:.0f} s to compile, net {c['net_s']:+,.0f} s "
                            f"over 4,000 paper steps")
        return "; ".join(said)
    if part["json"] == "node.json":
        return node_summary(data)
    said = []
    for method, steps in sorted(data.get("methods", {}).items()):
        whole = [r for r in steps if str(r.get("step", "")).startswith("whole")]
        if whole:
            peak = whole[0].get("cuda_peak_mb") or whole[0].get("peak_rss_mb")
            said.append(f"{method} {whole[0]['seconds']:.1f} s" + (f", peak {peak:,.0f} MB" if peak else ""))
        elif steps:
            said.append(f"{method} stopped after {len(steps)} steps ({', '.join(r['id'] for r in steps)})")
    hn = data.get("hn_paper") or {}
    if hn.get("pairs_per_s") is not None:
        said.append(f"paper hypernetwork {hn['pairs_per_s']:,.0f} pairs/s, {hn.get('epochs')} epochs "
                    f"(stopped early: {hn.get('stopped_early')})")
    gen = (data.get("header") or {}).get("generation_seconds")
    if gen is not None:
        said.append(f"inputs made in {gen:.1f} s")
    return "; ".join(said) or "see its table"


def node_summary(data: dict[str, Any]) -> str:
    """One line of check_gpu_node.py's checks."""
    said = []
    nvml = data.get("nvml") or {}
    if nvml:
        w, wo = nvml.get("with_nvml") or {}, nvml.get("without_nvml") or {}
        said.append(f"NVML capability {w.get('nvml_capability')}, bf16 {w.get('native_bf16')} (without NVML: "
                    f"{wo.get('native_bf16')}), no CUDA context made: "
                    f"{not w.get('cuda_context_made') and not wo.get('cuda_context_made')}")
    cache = data.get("empty_cache") or {}
    if "reserved_after_gib" in cache:
        said.append(f"empty_cache {cache['reserved_before_gib']:.1f} -> {cache['reserved_after_gib']:.1f} GiB reserved")
    pinned = data.get("pinned")
    if isinstance(pinned, list):
        said.append("pinned: " + ", ".join(f"slot {r.get('slot')} on {r.get('computed_on')}" for r in pinned))
    two = data.get("two_gpus") or {}
    if two:
        said.append("two GPUs: " + ("not run" if "not_run" in two else ", ".join(
            f"{k} exit {v.get('exit')}" for k, v in two.items() if isinstance(v, dict))))
    kern = data.get("kernels") or {}
    if kern:
        said.append(f"CPU {((kern.get('avx2') or {}).get('cpu'))}: label pinned {(kern.get('avx2') or {}).get('label')}"
                    f", native {(kern.get('native') or {}).get('label')}")
    stages = data.get("cpu_stages") or {}
    if stages:
        def total(k: str) -> float:
            return sum(sum(v for key, v in c.items() if key.endswith("seconds") and key != "init/wall_seconds"
                           and isinstance(v, (int, float))) for c in (stages.get(k) or {}).get("cells", []))
        said.append(f"CPU stages pinned {total('avx2'):.1f} s, native {total('native'):.1f} s, same SR-T: "
                    f"{stages.get('same_sr_t')}")
    failed = [k for k, v in data.items() if isinstance(v, dict) and "failed" in v]
    if failed:
        said.append(f"failed: {', '.join(failed)}")
    return "; ".join(said) or "no check ended"


def with_repo_path(env: dict[str, str]) -> str:
    """PYTHONPATH for a part's process: this checkout first, then what the caller had (a node where the wheelhouse
    was installed with ``--target DIR`` finds the harness's dependencies through it)."""
    return os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])


def part_env(home: Path, device: str) -> dict[str, str]:
    """The environment of every part: a fresh harness home, offline, progress as lines, the checkout importable."""
    env = {**os.environ, "HARNESS_HOME": str(home), "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "HARNESS_PROGRESS": "lines", "PYTHONPATH": with_repo_path(dict(os.environ)),
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    if not device.startswith("cuda"):
        env["HARNESS_EMULATE_ACCELERATOR"] = "1"  # the CPU takes every branch a GPU run takes
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the harness's GPU checks in one command, one table")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--small", action="store_true", help="small sizes: runs on a CPU in minutes")
    ap.add_argument("--quick", action="store_true", help="fits 4 minutes on one H100 (budget 210 s)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for all parts together (default 420; --quick 190; --small 1200): a part past its "
                         "share is stopped, which takes up to 15 s more")
    ap.add_argument("--out", type=Path, default=None, help="folder for the home, logs and results (default: temp)")
    ap.add_argument("--paper-methods", default=None, help=f"methods of part 2 (default {PAPER_METHODS})")
    ap.add_argument("--paper-cpt-steps", type=int, default=None, help="CPT steps under the paper profile")
    ap.add_argument("--paper-hn-epochs", type=int, default=20, help="HyperOFA's epochs under the paper profile")
    ap.add_argument("--glot500-scale", type=float, default=None, help="scale of part 4's inputs (1.0 = Glot500)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: every core)")
    ap.add_argument("--only", default="", help="comma-separated part numbers to run (1-6; 1-4 with --figures)")
    ap.add_argument("--figures", action="store_true",
                    help="the figures that set the GPU defaults, in 8 minutes on one H100 (budget 480 s): the paper "
                         "profile end to end (20 CPT steps), CPT in spawned cells at per-device 32/64/128 and with "
                         "torch.compile (recorded to harness/throughput.json), the decoders' CPT, the node's checks")
    a = ap.parse_args(argv)
    if a.paper_cpt_steps is None:
        a.paper_cpt_steps = 2 if a.small else 20 if a.figures else 5 if a.quick else 10
    budget = a.budget or (1200.0 if a.small else 480.0 if a.figures else 190.0 if a.quick else 420.0)
    out = (a.out or Path(tempfile.mkdtemp(prefix="bench-gpu-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    home = out / "home"
    env = part_env(home, a.device)
    every = parts(a, out)
    chosen = [int(x) for x in a.only.split(",") if x] or list(range(1, len(every) + 1))
    todo = [(i, p) for i, p in enumerate(every, 1) if i in chosen]
    for _, part in todo:  # the methods the paper-profile part leaves out, named in its row
        if part.get("experiment") == "check/paper" and "all" not in part["methods"]:
            named = set(_methods(part["methods"]))
            part["not_run"] = [m for m in _methods("all") if m not in named]
    started = time.perf_counter()
    device = a.device
    if device.startswith("cuda"):
        try:
            import torch

            device = f"{device} ({torch.cuda.get_device_name()})"
        except Exception:  # noqa: BLE001 - the name is a courtesy
            pass
    mode = (" (small sizes, accelerator branches emulated)" if a.small else " (quick)" if a.quick else "") + (
        ", the figures that set the GPU defaults" if a.figures else "")
    print(f"GPU path checks on {device}{mode}, budget {budget:.0f} s, {a.threads} torch threads, results under "
          f"{out}", flush=True)
    rows = []
    for n, (i, part) in enumerate(todo):
        # the time left, shared among the parts still to run: what a part leaves unused goes to the later ones
        left = budget - (time.perf_counter() - started)
        share = left * part["share"] / sum(p["share"] for _, p in todo[n:])
        log = out / f"part{i}.log"
        print(f"\n[{i}/{len(every)}] {part['name']} (at most {share:.0f} s; log {log})", flush=True)
        seen: dict[str, str] = {}
        t0 = time.perf_counter()

        def poll(part: dict = part, seen: dict = seen, t0: float = t0) -> None:
            if "experiment" not in part:
                return
            for name, status, secs, _, layout in _cell_runs(home, part["experiment"]):
                if status != "RUNNING" and seen.get(name) != status:
                    seen[name] = status
                    took = (f", {secs:.0f} s" if secs else "") + (f", CPT batch {layout}" if layout else "")
                    print(f"  cell {name}: {status.lower()}{took} ({time.perf_counter() - t0:.0f} s into the part)",
                          flush=True)

        def echo(line: str, part: dict = part) -> None:
            if "json" in part and _table_line(line):
                print(line, flush=True)

        rc, seconds = _run(part["cmd"], log, env, share, echo, poll)
        text = summary(part, rc, out, home)
        rows.append((i, part["name"], rc, seconds, text))
        print(f"[{i}/{len(every)}] exit {rc} after {seconds:.0f} s: {text}", flush=True)
    print(f"\nGPU path checks on {device}{mode}, budget {budget:.0f} s, results under {out}")
    print("| # | check | exit | seconds | result |")
    print("| ---: | --- | --- | ---: | --- |")
    for i, name, rc, seconds, text in rows:
        print(f"| {i} | {name} | {rc} | {seconds:.0f} | {text} |")
    return 0 if all(rc == 0 for _, _, rc, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
