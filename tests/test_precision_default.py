"""The default precision does not depend on the CPU's instruction set; bf16 on a CPU is a named setting; the board's
header names the precision of evaluation and CPT; resolving ``auto`` for a CUDA device opens no CUDA context, and
reads the compute capability through NVML (here a library of NVML's calls built for the test)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest
import torch

from harness.core import precision
from harness.core.errors import ConfigError


def _precisions(cfg) -> tuple[str, str]:
    """(CPT, evaluation) precision of ``cfg`` on the CPU, as a run resolves them."""
    from harness.core.precision import run_precisions
    from harness.spec import profile_of

    return run_precisions(cfg, "cpu", profile_of(cfg))


def _report(monkeypatch, native: bool) -> None:
    """Make every reader of the CPU's bf16 support say yes (or no): /proc/cpuinfo's flags as the harness reads them
    (``HARNESS_CPU_FLAGS``, also seen by the processes this one starts), torch's CPU capability checks and oneDNN's
    bf16 check. A default that read any of them would then differ between the two reports."""
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "fpu sse2 avx512f avx512_bf16 amx_bf16" if native else "fpu sse2")
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported", "_is_avx512_supported"):
        monkeypatch.setattr(torch.cpu, name, lambda n=native: n)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512" if native else "DEFAULT")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)
    # the premise: each reader says what this report makes it say (else the comparison proves nothing)
    assert precision.cpu_has_native_bf16() is native
    assert torch.cpu._is_avx512_bf16_supported() is native and torch.ops.mkldnn._is_mkldnn_bf16_supported() is native


@pytest.mark.parametrize("profile", ["cpu", "paper"])
@pytest.mark.parametrize("given", [None, "auto"])
def test_the_default_resolution_is_the_same_whatever_the_cpu_reports(monkeypatch, profile, given):
    from harness.config import make_config

    seen = set()
    for native in (True, False):
        _report(monkeypatch, native)
        cfg = make_config(overrides={"profile": profile, **({"precision": given} if given else {})})
        seen.add((precision.resolve_precision("auto", "cpu"), _precisions(cfg)))
    assert seen == {("fp32", ("fp32", "fp32"))}


def test_cpu_flags_come_from_the_environment_when_set(monkeypatch):
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "fpu,avx512_bf16")
    assert precision.cpu_has_native_bf16()
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "")
    assert not precision.cpu_has_native_bf16()


def test_bf16_on_a_cpu_is_a_named_setting(monkeypatch):
    from harness.config import make_config

    _report(monkeypatch, False)  # named, it is used even where the CPU would emulate it
    assert _precisions(make_config(overrides={"precision": "bf16"})) == ("bf16", "bf16")
    # [cpt] precision names CPT's alone
    cfg = make_config(file_values={"cpt": {"precision": "bf16"}})
    assert _precisions(cfg) == ("bf16", "fp32")
    cfg = make_config(file_values={"cpt": {"precision": "fp32"}}, overrides={"precision": "bf16"})
    assert _precisions(cfg) == ("fp32", "bf16")
    with pytest.raises(ConfigError, match="--precision: expected one of"):  # (a flag: named as the flag)
        make_config(overrides={"precision": "bf17"})
    with pytest.raises(ConfigError, match="fp16 needs a CUDA device"):
        _precisions(make_config(overrides={"precision": "fp16"}))


def test_the_board_header_names_the_precision_of_evaluation_and_cpt():
    from leaderboard.model import Board, Entry, Leaderboard, Row
    from leaderboard.render_html import board_html
    from leaderboard.render_markdown import board_md
    from leaderboard.render_terminal import render_text
    from leaderboard.tables import precision_label

    def cell(ev: str, cpt: str, kernels: str = "avx2"):
        return types.SimpleNamespace(params={"eval_precision": ev, "cpt.precision": cpt, "cpu_kernels": kernels})

    assert precision_label([cell("fp32", "fp32")] * 2) == "evaluation fp32, CPT fp32, CPU kernels avx2"
    assert precision_label([cell("fp32", "fp32"), cell("bf16", "fp32")]) == \
        "evaluation bf16 / fp32, CPT fp32, CPU kernels avx2"
    # a cell logged before the kernels were pinned computed with the CPU's own
    assert precision_label([types.SimpleNamespace(params={"eval_precision": "fp32", "cpt.precision": "fp32"})]) == \
        "evaluation fp32, CPT fp32, CPU kernels native"
    assert precision_label([types.SimpleNamespace(params={})]) == ""
    b = Board("e", "sr-t", "acc@10", "cpu", True, "step", 0, [], [Row("a", {"x_Latn": Entry([0.5], ["1"])})],
              precision="evaluation fp32, CPT bf16")
    head = "e · sr-t · acc@10 · step 0 · profile cpu · evaluation fp32, CPT bf16"
    assert head in render_text([b]).replace("\n", " ")
    assert f"#### {head}" in "\n".join(board_md(b))
    assert head in board_html(Leaderboard("e", [b], [], {}, []), b)


def _boards(tracking_uri: str, experiment: str) -> list:
    """Every board of an experiment as (title without the experiment, {row: {language: seed values}})."""
    from mlflow.tracking import MlflowClient

    from leaderboard.collect import collect_experiment
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    lb = build_leaderboard(collect_experiment(client, client.get_experiment_by_name(experiment)), bootstrap=0)
    return sorted((b.title.replace(experiment, "EXP", 1),
                   {r.label: {lang: e.values for lang, e in r.entries.items()} for r in b.rows}) for b in lb.boards)


def test_the_default_run_gives_the_same_board_whatever_the_cpu_reports(monkeypatch, synthetic_world, tracking_uri):
    """One cell (random, sr-t, the synthetic world's one seed) with ``auto`` precision, run in this process once on a
    CPU made to report bf16 support through every reader and once on one made to report none: the same board, whose
    header says fp32."""
    from harness.config import make_config
    from harness.core.tracking import Tracker
    from harness.runner import Runner
    from harness.spec import resolve

    boards = []
    for name, native in (("prec-native", True), ("prec-none", False)):
        _report(monkeypatch, native)
        # the cell in this process (else torch's readers would not be the reported ones); ``auto`` named for both
        # passes, as the profile names it for CPT
        cfg = make_config(overrides={"world": "synthetic", "methods": ["random"], "tasks": ["sr-t"],
                                     "experiment": name, "tracking_uri": tracking_uri, "workers": 1,
                                     "isolate_cells": False, "precision": "auto"})
        res = Runner(resolve(cfg, synthetic_world), synthetic_world, Tracker(tracking_uri)).run()
        assert len(res["cells"]) == 1 and not res["failed"]
        boards.append(_boards(tracking_uri, name))
    assert boards[0] and boards[0] == boards[1]
    assert all("evaluation fp32, CPT fp32" in title for title, _ in boards[0])


def test_the_precision_benchmark_prints_its_table_with_the_cpu(monkeypatch, capsys):
    """benchmarks/bench_precision.py at a tiny size: one table naming the CPU and whether it computes bf16
    natively, and fp32 and bf16 seconds for each pass."""
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("bench_precision", REPO / "benchmarks" / "bench_precision.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # type: ignore[union-attr]
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "fpu avx512_bf16")
    bench.main(["--hidden", "16", "--layers", "1", "--heads", "2", "--ffn", "32", "--vocab", "300", "--tokens", "8",
                "--repeats", "1"])
    out = capsys.readouterr().out
    assert out.startswith(f"CPU: {precision.cpu_name()} · native bf16: yes (avx512_bf16)")
    rows = [line.split() for line in out.splitlines() if line.startswith(("encode", "mlm loss", "CPT step"))]
    assert len(rows) == 3 and all(r[-2].endswith("x") and float(r[-2][:-1]) > 0 for r in rows)


# -- NVML: the reader itself, against a library that exports NVML's calls ------------------------------------------
FAKE_NVML = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* NVML's calls as the harness uses them; the GPUs' compute capabilities come from FAKE_NVML_CAPS ("8.6,7.5"),
   the return code of nvmlInit_v2 from FAKE_NVML_INIT. */
static int caps[16][2];
static int count_caps(void) {
    const char *s = getenv("FAKE_NVML_CAPS");
    int n = 0;
    while (s && *s && n < 16) {
        if (sscanf(s, "%d.%d", &caps[n][0], &caps[n][1]) != 2) break;
        n++;
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}
int nvmlInit_v2(void) { const char *r = getenv("FAKE_NVML_INIT"); return r ? atoi(r) : 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = (unsigned int)count_caps(); return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    if ((int)index >= count_caps()) return 2;
    *handle = (void *)(size_t)(index + 1);
    return 0;
}
int nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) {
    size_t i = (size_t)handle - 1;
    *major = caps[i][0];
    *minor = caps[i][1];
    return 0;
}
"""

# run in a process whose LD_LIBRARY_PATH finds the built library first: a CUDA machine (torch told so), no CUDA
# context allowed; the fallback (a child process asking torch) is recorded instead of run. One line of JSON for each
# case of argv[1] ([caps, init] pairs), the library reading its environment at each call.
_PROBE = """
import json, os, sys, torch
from harness.core import precision
def no_context(*a, **k):
    raise AssertionError("resolving the precision created a CUDA context")
torch.version.hip = None
torch.cuda.is_available = lambda: True
torch.cuda.is_initialized = lambda: False
for name in ("is_bf16_supported", "current_device", "get_device_properties", "get_device_capability", "init"):
    setattr(torch.cuda, name, no_context)
for caps, init in json.loads(sys.argv[1]):
    os.environ["FAKE_NVML_CAPS"], os.environ["FAKE_NVML_INIT"] = caps, str(init)
    precision.cuda_has_native_bf16.cache_clear()
    asked = []
    precision._child_says_bf16 = lambda: asked.append("child") or False
    cap = precision._nvml_min_capability()
    auto = [precision.resolve_precision("auto", d) for d in ("cuda", "cuda:0")]
    print(json.dumps({"cap": cap, "auto": auto, "cpu": precision.resolve_precision("auto", "cpu"),
                      "fallback": asked}))
"""


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory):
    """A folder holding libnvidia-ml.so.1 built from FAKE_NVML."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the NVML library of the test")
    folder = tmp_path_factory.mktemp("nvml")
    (folder / "nvml.c").write_text(FAKE_NVML)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "libnvidia-ml.so.1"), str(folder / "nvml.c")],
                   check=True, capture_output=True)
    return folder


def _probe(folder, cases: list) -> list[dict]:
    env = {**os.environ, "LD_LIBRARY_PATH": f"{folder}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(cases)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.strip().splitlines()]


def test_auto_on_cuda_reads_the_capability_through_nvml_without_a_cuda_context(fake_nvml):
    cases = [("9.0", [9, 0], "bf16"), ("8.0", [8, 0], "bf16"), ("7.5", [7, 5], "fp32"), ("7.0", [7, 0], "fp32"),
             # a node of mixed GPUs: bf16 only when every one computes it natively
             ("8.6,7.5", [7, 5], "fp32"), ("7.5,9.0", [7, 5], "fp32"), ("9.0,8.0", [8, 0], "bf16")]
    got = _probe(fake_nvml, [[caps, 0] for caps, _, _ in cases])
    assert got == [{"cap": cap, "auto": [want, want], "cpu": "fp32", "fallback": []} for _, cap, want in cases]


def test_where_nvml_lists_no_gpu_or_fails_a_child_process_asks_torch(fake_nvml):
    no_gpu, failed = _probe(fake_nvml, [["", 0], ["9.0", 999]])  # 999: NVML_ERROR_UNKNOWN
    assert no_gpu == failed == {"cap": None, "auto": ["fp32", "fp32"], "cpu": "fp32", "fallback": ["child"]}
