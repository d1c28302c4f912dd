"""``benchmarks/bench_gpu.sh`` runs its checks on a CPU at small sizes, taking the accelerator's branches, and every
part writes what it measured as it goes; a part past its share is stopped with what it printed kept."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_bench_gpu_runs_on_the_cpu_under_emulation(tmp_path):
    out = tmp_path / "bench"
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", "benchmarks/bench_gpu.sh", "--device", "cpu", "--small", "--threads", "1",
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    text = proc.stdout
    assert proc.returncode == 0, text[-3000:] + proc.stderr[-3000:]
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert all(r.split("|")[3].strip() == "0" for r in rows), rows
    assert "cells: 1 finished" in rows[0] and "cells: 1 finished" in rows[1]
    assert "(CPT batch 16 x 1)" in rows[1]  # the paper-profile cell's wall time and the batch layout it chose
    assert "run_cpt as `harness run` calls it" in rows[2] and "spawned cell" in rows[2]
    assert "ofa" in rows[3] and "hyperofa" in rows[3] and "pairs/s" in rows[3]
    assert "tiny-causal: stock HF path" in rows[4] and "tiny-causal: the same in a spawned cell 8 x 1" in rows[4]
    assert "tiny-causal: the same in a spawned cell, + fused cross-entropy 8 x 1" in rows[4]
    assert "no CUDA context made: True" in rows[5] and "pinned: slot 0" in rows[5] and "same SR-T: True" in rows[5]
    # each part printed as it went: a cell's line, a CPT row, an initialization step before the part's end
    lines = text.splitlines()
    end = {i: next(n for n, line in enumerate(lines) if line.startswith(f"[{i}/6] exit")) for i in range(1, 7)}
    assert any(line.startswith("  cell random-full-s1: finished") for line in lines[:end[1]])
    assert any(line.startswith("  cell ofa-full-s1: finished") for line in lines[end[1]:end[2]])
    assert any(line.startswith("| stock HF path") for line in lines[end[2]:end[3]])
    assert any(line.startswith("  ofa: subword vectors, source:") for line in lines[end[3]:end[4]])
    assert any("tiny-causal shape" in line and "clm CPT" in line for line in lines[end[4]:end[5]])
    assert any(line.startswith("  kernels (") for line in lines[end[5]:end[6]])
    # the decoder's CPT ran causal in a spawned cell of its own; the node's checks ran in processes of their own,
    # none of which made a CUDA context, and the CPU-stage cells ran under both kernel settings
    decoders = json.loads((out / "decoders.json").read_text())
    assert decoders["meta"]["objective"] == "clm" and decoders["meta"]["shape"] == "tiny-causal"
    spawned = next(r for r in decoders["rows"] if r["spawned"])
    assert spawned["started_by"] == "spawn" and spawned["tok_s"] > 0 and spawned["steps_done"] == 5
    node = json.loads((out / "node.json").read_text())
    assert node["nvml"]["without_nvml"]["cuda_context_made"] is False
    assert node["pinned"][0]["CUDA_VISIBLE_DEVICES"] == "0"
    stages = node["cpu_stages"]
    assert [c["status"] for k in ("avx2", "native") for c in stages[k]["cells"]] == ["FINISHED", "FINISHED"]
    assert all(c["init/seconds"] > 0 and c["cpt/seconds"] > 0 and c["sr-t/seconds"] > 0
               for k in ("avx2", "native") for c in stages[k]["cells"])
    # the accelerator's branches: the spawned cell's CPT ran in a process of its own started by spawn (its command
    # line says so), whose training had loader workers that ran as processes, for the steps it was asked
    cpt = json.loads((out / "cpt.json").read_text())
    assert cpt["meta"]["emulating"] == "1" and cpt["meta"]["threads"] == 1
    spawned = next(r for r in cpt["rows"] if r["spawned"])
    assert spawned["started_by"] == "spawn" and spawned["own_process"] and spawned["tok_s"] > 0
    assert spawned["loader_workers"] == 2 and spawned["loader_processes"] >= 2
    assert spawned["steps_done"] == cpt["meta"]["warmup"] + cpt["meta"]["timed"] == 1 + 4
    assert spawned["steps_timed"] == 4 and spawned["accumulation"] == 1
    assert (out / "home" / "mlflow.db").is_file()
    assert "worker process" in (out / "part1.log").read_text()  # the cell ran in a spawned process


def _cpt_rows(tmp_path, emulate: bool) -> list[dict]:
    """bench_cpt.py's in-process defaults row and spawned cell's row on the CPU, tiny (1 + 2 steps)."""
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
           **({"HARNESS_EMULATE_ACCELERATOR": "1"} if emulate else {})}
    out = tmp_path / f"cpt-{int(emulate)}.json"
    proc = subprocess.run([sys.executable, "benchmarks/bench_cpt.py", "--device", "cpu", "--only",
                           "calls it on this device,spawned cell (", "--warmup", "1", "--timed", "2", "--batch", "4",
                           "--seq", "32", "--threads", "1", "--json", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["spawned"] for r in rows] == [False, True] and all("tok_s" in r for r in rows), rows
    return rows


def test_the_spawned_cells_row_reports_what_its_process_did(tmp_path):
    """What the CPT rows say of their process and training is measured there, not their settings read back: the
    spawned cell's process was started by spawn (its own command line), the loader's workers ran as child
    processes of the training process, and the steps were taken; without the accelerator's branches, no loader
    workers ran."""
    in_process, spawned = _cpt_rows(tmp_path, emulate=True)
    assert spawned["started_by"] == "spawn" and spawned["own_process"]
    assert "started_by" not in in_process
    for row in (in_process, spawned):
        assert row["loader_workers"] == 2 and row["loader_processes"] >= 2 and row["steps_done"] == 3, row
    plain = _cpt_rows(tmp_path, emulate=False)
    assert all(r["loader_workers"] == 0 and r["loader_processes"] == 0 and r["steps_done"] == 3 for r in plain)


def test_a_part_past_its_share_is_stopped_and_keeps_what_it_printed(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_gpu

    child = tmp_path / "child.pid"
    script = ("import os, subprocess, sys, time\n"
              f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(child)!r}, 'w').write(str(p.pid))\n"
              "print('| row 1 |', flush=True)\n"
              "time.sleep(60)\n")
    seen: list[str] = []
    rc, seconds = bench_gpu._run([sys.executable, "-c", script], tmp_path / "part.log", {"PATH": "/usr/bin:/bin"},
                                 8, seen.append)
    assert rc == "stopped at its share" and seconds < 30
    assert seen == ["| row 1 |"] and "| row 1 |" in (tmp_path / "part.log").read_text()
    pid = int(child.read_text())
    import os

    try:  # the process the part started is stopped with it (its process group)
        os.kill(pid, 0)
        alive = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout
        assert alive.strip().startswith("Z") or not alive.strip()
    except ProcessLookupError:
        pass


def test_bench_cpt_rows_end_with_the_defaults_twice_the_batch_and_a_spawned_cell():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_cpt

    from harness.core.precision import resolve_precision
    from harness.cpt import cpt_speed

    rows = bench_cpt.row_configs("cuda", 32, [64, 128])
    names = [r[0] for r in rows]
    assert names[0].startswith("stock HF path") and names[-7:] == [
        bench_cpt.DEFAULTS_ROW, "the same at per-device batch 64", bench_cpt.SPAWNED_ROW,
        bench_cpt.SPAWNED_COMPILE_ROW, bench_cpt.SPAWNED_FUSED_ROW, "a spawned cell at per-device batch 64",
        "a spawned cell at per-device batch 128"]
    # the precision harness run resolves for the card (run_cpt takes it resolved: bf16 on a card of compute
    # capability 8.0 or more, fp32 where there is none)
    defaults = {**cpt_speed({}, "cuda"), "precision": resolve_precision("auto", "cuda")}
    assert [r[1:] for r in rows[-7:]] == [(defaults, 32, False), (defaults, 64, False), (defaults, 32, True),
                                          ({**defaults, "compile": True}, 32, True),
                                          ({**defaults, "fused_ce": True}, 32, True), (defaults, 64, True),
                                          (defaults, 128, True)]
    # every lever run_cpt has is a row, each on top of the ones before
    levers = {n: r[1] for n, r in zip(names, rows, strict=True)}
    assert levers["+ fused cross-entropy, chunked over the positions"]["fused_ce"]
    assert levers["+ loader prefetch of 8 batches a worker"]["prefetch_factor"] == 8
    assert levers["+ torch.compile"]["fused_ce"] and levers["+ torch.compile"]["compile"]
    # --only spawned takes the spawned cell, the same with torch.compile and the batch rows; --quick not the rest
    assert [n for n in names if "spawned" in n] == names[-5:]
    assert [n for n in names if any(q in n for q in bench_cpt.QUICK)] == [names[0], bench_cpt.DEFAULTS_ROW,
                                                                          bench_cpt.SPAWNED_ROW]
    assert rows[0][1]["dataloader_workers"] == 0 and not rows[0][1]["masked_head"]
    if "persistent_workers" in defaults:  # the lever row, on top of the loader workers' row
        i = names.index("+ loader workers kept across epochs")
        assert rows[i][1]["persistent_workers"] and not rows[i - 1][1]["persistent_workers"]


def test_bench_cpt_records_the_spawned_cells_throughput_for_plans(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_cpt

    from harness import throughput

    path = tmp_path / "throughput.json"
    path.write_text(throughput.DATA.read_text())
    monkeypatch.setattr(throughput, "DATA", path)
    meta = {"gpu": "NVIDIA A100-SXM4-80GB", "device": "cuda", "shape": "base", "params": 394_524_921, "seq": 512,
            "warmup": 5, "timed": 20, "torch": "2.11.0+cu130"}
    rows = [{"row": bench_cpt.DEFAULTS_ROW, "tok_s": 40_000.0, "mfu": 0.3, "per_device": 32, "accumulation": 1,
             "spawned": False},
            {"row": bench_cpt.SPAWNED_ROW, "tok_s": 41_000.0, "mfu": 0.31, "per_device": 32, "accumulation": 1,
             "spawned": True}]
    assert "recorded 41,000 tokens/s on a100" in bench_cpt.record(rows, meta, ["--device", "cuda", "--record"])
    rate = throughput.cpt_rate("a100")
    assert rate.measured and rate.tokens_per_s == 41_000 and "spawned cell" in rate.basis
    assert "--record" in throughput.measurement("a100")["command"]
    said = bench_cpt.record(rows, {**meta, "gpu": None, "device": "cpu"}, [])
    assert said.startswith("not recorded") and len(json.loads(path.read_text())["measured"]) == 2


def test_bench_gpu_sizes_its_parts_for_8_and_4_minutes(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import argparse

    import bench_gpu

    def args(**kw):
        base = {"device": "cuda", "small": False, "quick": False, "paper_methods": None, "paper_cpt_steps": 10,
                "paper_hn_epochs": 20, "glot500_scale": None, "threads": 16, "figures": False}
        return argparse.Namespace(**{**base, **kw})

    full = bench_gpu.parts(args(), tmp_path)
    assert sum(p["share"] for p in full) == pytest.approx(1.0) and len(full) == 6
    assert full[1]["methods"] == "random,ofa,hyperofa,focus" and "--tasks" in full[1]["cmd"]
    assert "--threads" in full[2]["cmd"] and "16" in full[2]["cmd"] and "--quick" not in full[2]["cmd"]
    assert "--scale" in full[3]["cmd"] and "scale 0.25 (every count x 0.25)" in full[3]["name"]
    quick = bench_gpu.parts(args(quick=True, paper_cpt_steps=5), tmp_path)
    assert "--quick" in quick[2]["cmd"] and quick[1]["methods"] == "random,ofa" and quick[0]["methods"] == "random,ofa"
    assert quick[2]["cmd"][quick[2]["cmd"].index("--skip") + 1] == "stock"
    assert full[2]["cmd"][full[2]["cmd"].index("--skip") + 1] == "torch.compile"
    assert full[2]["cmd"][full[2]["cmd"].index("--batches") + 1] == "64,128" and "--batches" not in quick[2]["cmd"]
    # the decoders at their real shapes; the node's checks
    assert full[4]["cmd"][full[4]["cmd"].index("--shape") + 1] == "smollm2,gemma3"
    assert quick[4]["cmd"][quick[4]["cmd"].index("--only") + 1] == "spawned cell ("
    assert full[5]["cmd"][1] == "benchmarks/check_gpu_node.py" and full[5]["json"] == "node.json"


def test_bench_gpu_figures_are_the_paper_profile_the_batch_sweep_the_decoders_and_the_node(tmp_path, monkeypatch):
    """``--figures``: the paper profile end to end with the four methods and 20 CPT steps, CPT in spawned cells at
    the paper's 512-token blocks and per-device batch 32 (with and without compile), 64 and 128, recorded for
    ``harness plan``; then the decoders' part and the node's part."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_gpu

    captured = {}
    real = bench_gpu.parts
    monkeypatch.setattr(bench_gpu, "parts", lambda a, out: captured.setdefault("parts", real(a, out)))
    assert bench_gpu.main(["--figures", "--out", str(tmp_path), "--only", "0"]) == 0  # the parts made, none run
    figures = captured["parts"]
    assert len(figures) == 4
    assert sum(p["share"] for p in figures) == pytest.approx(1.0)
    paper, sweep, decoders, node = figures
    assert paper["methods"] == "random,ofa,hyperofa,focus" and paper["cmd"][paper["cmd"].index("--cpt-steps") + 1] == "20"
    assert "--profile" in paper["cmd"] and paper["cmd"][paper["cmd"].index("--tasks") + 1] == "sr-t,mlm"
    cmd = sweep["cmd"]
    assert cmd[cmd.index("--only") + 1] == "spawned" and cmd[cmd.index("--batches") + 1] == "64,128"
    assert cmd[cmd.index("--batch") + 1] == "32" and cmd[cmd.index("--seq") + 1] == "512" and "--record" in cmd
    assert decoders["json"] == "decoders.json" and node["json"] == "node.json"


def test_compile_is_weighed_net_of_its_compile_time_over_the_papers_steps():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_cpt

    rows = [{"row": "+ loss logged every 10 steps", "tok_s": 100_000.0, "warmup_s": 5.0},
            {"row": "+ torch.compile", "tok_s": 125_000.0, "warmup_s": 65.0},
            {"row": bench_cpt.SPAWNED_ROW, "tok_s": 100_000.0, "warmup_s": 6.0},
            {"row": bench_cpt.SPAWNED_COMPILE_ROW, "tok_s": 101_000.0, "warmup_s": 126.0}]
    lever, spawned = bench_cpt.compile_net(rows)
    # 4,000 steps of 512 x 512 tokens: 10,485.76 s at 100k tokens/s, 8,388.608 s at 125k
    assert lever["compile_s"] == pytest.approx(60.0) and lever["saved_s"] == pytest.approx(2097.152)
    assert lever["net_s"] == pytest.approx(2037.152) and lever["beside"] == "+ loss logged every 10 steps"
    assert spawned["beside"] == bench_cpt.SPAWNED_ROW and spawned["compile_s"] == pytest.approx(120.0)
    assert spawned["net_s"] == pytest.approx(4_000 * 512 * 512 * (1 / 100_000 - 1 / 101_000) - 120.0)
    assert spawned["net_s"] < 0  # a 1 % gain (104 s saved) does not pay for 120 s of compiling
    skipped = [rows[0], {"row": "+ torch.compile", "skipped": "torch.compile is measured on a GPU"}]
    assert bench_cpt.compile_net(skipped) == []


def test_the_decoder_shapes_are_the_bible_worlds_decoders_at_the_target_vocabulary():
    """The declared configurations give the published models' parameter counts at their own vocabularies (SmolLM2-135M
    134,515,008; Gemma 3 270M 268,098,176: the counts of the bible world's converted folders), the shapes the
    world declares, and at the target vocabulary a tied table of 122,776 rows."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_cpt
    import torch
    from transformers import AutoModelForCausalLM

    from harness.worlds.bible.decoders import DECODERS

    published = {"smollm2": 134_515_008, "gemma3": 268_098_176}
    for shape, count in published.items():
        cfg = bench_cpt.decoder_config(shape)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        table = model.get_input_embeddings().weight
        assert table.shape == (bench_cpt.TARGET_VOCAB, DECODERS[shape].hidden_size)
        assert model.get_output_embeddings().weight is table
        assert type(model).__name__ == DECODERS[shape].architecture
        assert cfg.num_hidden_layers == DECODERS[shape].num_layers
        own = sum(p.numel() for p in model.parameters()) + (DECODERS[shape].vocab_size - table.shape[0]) * table.shape[1]
        assert own == count, shape


def test_the_parts_find_the_checkout_first_and_the_callers_path_after(tmp_path, monkeypatch):
    """On a node where the wheelhouse was installed with ``--target /tmp/site`` and PYTHONPATH names it, a part's
    process must still find mlflow and the rest there, with this checkout first."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_gpu

    monkeypatch.setenv("PYTHONPATH", "/tmp/site:/opt/more")
    monkeypatch.delenv("HARNESS_EMULATE_ACCELERATOR", raising=False)
    env = bench_gpu.part_env(tmp_path / "home", "cuda")
    assert env["PYTHONPATH"].split(":") == [str(REPO), "/tmp/site", "/opt/more"]
    assert env["HARNESS_HOME"] == str(tmp_path / "home") and "HARNESS_EMULATE_ACCELERATOR" not in env
    monkeypatch.delenv("PYTHONPATH")
    env = bench_gpu.part_env(tmp_path / "home", "cpu")
    assert env["PYTHONPATH"] == str(REPO) and env["HARNESS_EMULATE_ACCELERATOR"] == "1"


def test_the_node_check_runs_cells_side_by_side_and_a_cpt_over_two_gpus_on_an_emulated_node_of_two(tmp_path):
    """``check_gpu_node.py``'s two-GPU branch (taken only on a node of several GPUs) on a CPU emulating two: a
    process pinned to each slot, two cells side by side on their own slots, one cell's CPT over two ranks."""
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
           "HARNESS_EMULATE_ACCELERATOR": "1", "HARNESS_EMULATE_GPUS": "2"}
    out = tmp_path / "node"
    proc = subprocess.run([sys.executable, "benchmarks/check_gpu_node.py", "--device", "cpu", "--only",
                           "pinned,two_gpus", "--json", str(tmp_path / "node.json"), "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    node = json.loads((tmp_path / "node.json").read_text())
    assert [(r["slot"], r["CUDA_VISIBLE_DEVICES"]) for r in node["pinned"]] == [("0", "0"), ("1", "1")]
    two = node["two_gpus"]
    assert two["side_by_side"]["exit"] == 0 and sorted(two["side_by_side"]["cells"]) == [
        ["ofa-full-s1", "FINISHED"], ["random-full-s1", "FINISHED"]]
    assert two["torchrun_two_gpus"]["exit"] == 0 and two["torchrun_two_gpus"]["cells"] == [
        ["random-full-s1", "FINISHED"]]
    assert "2 worker process(es) starting" in (out / "side_by_side.log").read_text()
    assert "CPT on 2 processes (torchrun)" in (out / "torchrun_two_gpus.log").read_text()
