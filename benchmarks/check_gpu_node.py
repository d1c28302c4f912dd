"""What only a GPU node can show: the branches only CUDA takes, and the CPU side of the node, each check in a
process of its own (a CUDA error in one does not stop the others), printed and written to ``--json`` as it ends.

CUDA's branches:

1. **nvml**: the compute capability read through NVML (``harness.core.precision._nvml_min_capability``: no CUDA
   context is made) beside torch's own reading, and ``cuda_has_native_bf16`` with NVML and without it (a process
   where loading ``libnvidia-ml.so.1`` fails, so that the answer comes from the child process it then starts); in
   both, whether the asking process was left without a CUDA context, as it must be (a forked worker could not use
   CUDA otherwise).
2. **empty_cache**: what ``cpt_batch.free_memory`` gives back before a torchrun launch (``train_cell`` calls it once
   the batch is searched, so that the ranks get the memory): the memory torch reserved after a search-sized
   allocation, before and after.
3. **pinned**: a process pinned to each GPU slot (``devices.pin``, as a cell's process is) computes on the device
   ``compute_device("cuda")`` names, and that is the slot's card (its CUDA_VISIBLE_DEVICES, the card's name).
4. **two GPUs** (a node with several): two cells side by side on their own GPUs (``--workers 2``), then one cell's
   CPT over two GPUs through torchrun (``--cpt-devices 2``, NCCL), on the synthetic world; said not run on one GPU.

The CPU side of the node (every harness process pins the CPU kernels, ``harness.core.kernels``):

5. **kernels**: the node's CPU and the kernel label measured with the pin (``avx2``: the default) and without it
   (``native``), each in a fresh process; the pinned label is ``avx2`` only where the node's fingerprint equals the
   golden one, so the line says whether the pin's promise holds there.
6. **cpu stages**: the same paper-profile cells (``--methods``, SR-T and the MLM loss, ``--cpt-steps`` CPT steps on
   ``--device``) run pinned and ``native``, each in a harness home of its own: each cell's initialization,
   CPT and evaluation seconds as the runs logged them, and whether their SR-T averages are equal.

    python benchmarks/check_gpu_node.py --device cuda --json OUT/node.json
    HARNESS_EMULATE_ACCELERATOR=1 python benchmarks/check_gpu_node.py --device cpu --small   # the paths, on a CPU
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import REPO, part_env, with_repo_path  # noqa: E402 - the parts' environment, one definition

NVML = """
import json, torch
from harness.core import precision
cap = precision._nvml_min_capability()
bf16 = precision.cuda_has_native_bf16()
print(json.dumps({"nvml_capability": list(cap) if cap else None, "native_bf16": bf16,
                  "cuda_context_made": torch.cuda.is_initialized()}))
"""
WITHOUT_NVML = """
import ctypes, json
real = ctypes.CDLL
def refuse(name, *a, **k):
    if "nvidia-ml" in str(name):
        raise OSError(f"{name}: refused by the check (no NVML)")
    return real(name, *a, **k)
ctypes.CDLL = refuse
import torch
from harness.core import precision
cap = precision._nvml_min_capability()
bf16 = precision.cuda_has_native_bf16()
print(json.dumps({"nvml_capability": list(cap) if cap else None, "native_bf16": bf16,
                  "cuda_context_made": torch.cuda.is_initialized()}))
"""
TORCH_CAPABILITY = """
import json, torch
print(json.dumps({"torch_capability": list(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None,
                  "cards": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}))
"""
EMPTY_CACHE = """
import json, sys, torch
from harness import cpt_batch
device = sys.argv[1]
if not (device.startswith("cuda") and torch.cuda.is_available()):
    print(json.dumps({"not_run": f"{device}: empty_cache is CUDA's (free_memory collects garbage only here)"}))
    raise SystemExit
x = torch.empty(2 * 2**30, dtype=torch.uint8, device=device)
del x
before = torch.cuda.memory_reserved(device)
cpt_batch.free_memory(device)
after = torch.cuda.memory_reserved(device)
print(json.dumps({"reserved_before_gib": before / 2**30, "reserved_after_gib": after / 2**30}))
"""
PINNED = """
import json, os, sys, torch
from harness.core import devices
devices.pin(sys.argv[1])
dev = devices.compute_device("cuda")
row = {"slot": sys.argv[1], "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": dev}
if torch.cuda.is_available():
    x = torch.arange(4.0, device=dev) * 2
    row.update(computed_on=str(x.device), card=torch.cuda.get_device_name(x.device), sum=float(x.sum()),
               visible=torch.cuda.device_count())
else:
    row["computed_on"] = "no CUDA here: the slot is pinned, nothing computed"
print(json.dumps(row))
"""
LABEL = """
import json
from harness.core import kernels
kernels.pin()
from harness.core import kernels, precision
print(json.dumps({"label": kernels.cpu_kernels(), "label_bf16": kernels.cpu_kernels(True), "pinned": kernels.pin(),
                  "cpu": precision.cpu_name()}))
"""


def _child(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> dict[str, Any]:
    """Run ``code`` in a fresh Python; its last stdout line as JSON, or why there is none."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                              timeout=timeout,
                              env={**os.environ, "PYTHONPATH": with_repo_path(dict(os.environ)), **(env or {})})
    except subprocess.TimeoutExpired:
        return {"failed": f"no answer in {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    try:
        row = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"failed": f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or ['no output'])[-1][:300]}"}
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def _cells(home: Path, experiment: str) -> list[dict[str, Any]]:
    """Each cell run of an experiment: its name, status and the seconds its stages logged, its SR-T average."""
    db = home / "mlflow.db"
    if not db.is_file():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        runs = con.execute(
            "SELECT r.run_uuid, r.name, r.status FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
            "JOIN tags t ON t.run_uuid = r.run_uuid WHERE e.name = ? AND t.key = 'harness.kind' AND "
            "t.value = 'cell' ORDER BY r.name", (experiment,)).fetchall()
        out = []
        for uuid, name, status in runs:
            metrics = dict(con.execute("SELECT key, value FROM latest_metrics WHERE run_uuid = ?", (uuid,)).fetchall())
            kernels = con.execute("SELECT value FROM params WHERE run_uuid = ? AND key = 'cpu_kernels'",
                                  (uuid,)).fetchone()
            row = {"cell": name, "status": status, "kernels": kernels[0] if kernels else None,
                   **{k: metrics.get(k) for k in ("init/seconds", "init/wall_seconds", "cpt/seconds")},
                   "sr-t/avg": next((v for k, v in metrics.items() if k.startswith("sr-t") and k.endswith("avg")),
                                    None)}
            # the tasks' seconds are logged on their task runs (children of the cell)
            for key, value in con.execute(
                    "SELECT m.key, m.value FROM metrics m JOIN tags t ON t.run_uuid = m.run_uuid WHERE t.key = "
                    "'mlflow.parentRunId' AND t.value = ? AND m.key LIKE '%seconds'", (uuid,)).fetchall():
                if not key.startswith(("init/", "cpt/")):
                    row[key] = row.get(key, 0.0) + value
            out.append(row)
    return out


def cpu_stages(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The paper-profile cells pinned and native, each in a home of its own."""
    result: dict[str, Any] = {}
    cfg = out / "cpu-stages.toml"
    cfg.write_text("[method_params.hyperofa]\nepochs = 2\n"
                   + ("[cpt]\neffective_batch = 16\nper_device_batch = 16\n" if a.small else ""))
    for kernels in ("avx2", "native"):
        home = out / f"home-{kernels}"
        env = {**part_env(home, a.device), "HARNESS_CPU_KERNELS": kernels}
        cmd = [sys.executable, "-m", "harness.cli", "run", "--world", "synthetic", "--methods", a.methods, "--tasks",
               "sr-t,mlm", "--device", a.device, "--profile", "paper", "--cpt-steps", str(a.cpt_steps),
               "--config", str(cfg), "--experiment", "check/cpu-stages"]
        t0 = time.perf_counter()
        with open(out / f"cpu-stages-{kernels}.log", "w") as log:
            rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        result[kernels] = {"exit": rc, "seconds": round(time.perf_counter() - t0, 1),
                           "cells": _cells(home, "check/cpu-stages")}
    pinned, native = (result[k]["cells"] for k in ("avx2", "native"))
    same = [p.get("sr-t/avg") == n.get("sr-t/avg") for p, n in zip(pinned, native, strict=False)]
    result["same_sr_t"] = bool(same) and all(same) and len(pinned) == len(native)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", type=Path, default=None, help="write the checks here as each ends")
    ap.add_argument("--out", type=Path, default=None, help="folder for the homes and logs (default: temp)")
    ap.add_argument("--methods", default="ofa,focus", help="methods of the CPU-stage cells (default ofa,focus)")
    ap.add_argument("--cpt-steps", type=int, default=2, help="CPT steps of the CPU-stage cells (default 2)")
    ap.add_argument("--small", action="store_true", help="the CPU-stage cells' CPT batch cut to 16 (for a CPU)")
    ap.add_argument("--only", default="", help="comma-separated checks to run: nvml, empty_cache, pinned, "
                                               "two_gpus, kernels, cpu_stages")
    a = ap.parse_args(argv)
    out = (a.out or Path(tempfile.mkdtemp(prefix="check-gpu-node-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    from harness.core.devices import emulating, gpu_names, gpu_slots

    done: dict[str, Any] = {"device": a.device}
    chosen = [c for c in a.only.split(",") if c]

    def check(name: str, fn: Any) -> None:
        if chosen and name not in chosen:
            return
        t0 = time.perf_counter()
        try:
            done[name] = fn()
        except Exception as exc:  # noqa: BLE001 - the check says why it failed and the others go on
            done[name] = {"failed": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(f"  {name} ({time.perf_counter() - t0:.0f} s): {json.dumps(done[name], default=str)}", flush=True)
        if a.json:
            a.json.write_text(json.dumps(done, indent=1, default=str))

    check("nvml", lambda: {"with_nvml": _child(NVML), "without_nvml": _child(WITHOUT_NVML),
                           "torch": _child(TORCH_CAPABILITY)})
    check("empty_cache", lambda: _child(EMPTY_CACHE, a.device))
    slots = gpu_slots("cuda") if a.device.startswith("cuda") or emulating() else []
    check("pinned", lambda: [_child(PINNED, slot) for slot in slots[:2]] or {"not_run": "no GPU slot"})

    def two_gpus() -> dict[str, Any]:
        n = len(gpu_names())
        if n < 2:
            return {"not_run": f"{n} GPU(s) on this node: two cells side by side and a CPT over two GPUs need two"}
        home = out / "home-two"
        env = part_env(home, a.device)
        base = [sys.executable, "-m", "harness.cli", "run", "--world", "synthetic", "--tasks", "sr-t",
                "--device", a.device, "--cpt-steps", "4", "--seeds", "1"]
        said = {}
        for name, extra in (("side_by_side", ["--methods", "random,ofa", "--workers", "2"]),
                            ("torchrun_two_gpus", ["--methods", "random", "--cpt-devices", "2"])):
            t0 = time.perf_counter()
            with open(out / f"{name}.log", "w") as log:
                rc = subprocess.run([*base, *extra, "--experiment", f"check/{name}"], cwd=REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT).returncode
            said[name] = {"exit": rc, "seconds": round(time.perf_counter() - t0, 1),
                          "cells": [(c["cell"], c["status"]) for c in _cells(home, f"check/{name}")]}
        return said

    check("two_gpus", two_gpus)
    check("kernels", lambda: {k: _child(LABEL, env={"HARNESS_CPU_KERNELS": k}) for k in ("avx2", "native")})
    check("cpu_stages", lambda: cpu_stages(a, out))
    failed = [k for k, v in done.items() if isinstance(v, dict) and "failed" in v]
    print(f"checks written to {a.json or '(no --json)'}; failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
