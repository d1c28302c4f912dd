"""The default precision does not depend on the CPU's instruction set; bf16 on a CPU is a named setting; the board's
header names the precision of evaluation and CPT; resolving ``auto`` for a CUDA device opens no CUDA context."""

from __future__ import annotations

import types

import pytest

from harness.core import precision
from harness.core.errors import ConfigError


def _report(monkeypatch, native: bool) -> None:
    """Make this process (and the ones it starts) see a CPU with, or without, native bf16."""
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "fpu sse2 avx512f avx512_bf16 amx_bf16" if native else "fpu sse2")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)


@pytest.mark.parametrize("profile", ["cpu", "paper"])
def test_the_default_resolution_is_the_same_whatever_the_cpu_reports(monkeypatch, profile):
    from harness.config import make_config

    seen = set()
    for native in (True, False):
        _report(monkeypatch, native)
        cfg = make_config(overrides={"profile": profile})
        seen.add((precision.resolve_precision("auto", "cpu"), precision.run_precisions(cfg, "cpu")))
    assert seen == {("fp32", ("fp32", "fp32"))}


def test_cpu_flags_come_from_the_environment_when_set(monkeypatch):
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "fpu,avx512_bf16")
    assert precision.cpu_has_native_bf16()
    monkeypatch.setenv(precision.CPU_FLAGS_ENV, "")
    assert not precision.cpu_has_native_bf16()


def test_bf16_on_a_cpu_is_a_named_setting(monkeypatch):
    from harness.config import make_config

    _report(monkeypatch, False)  # named, it is used even where the CPU would emulate it
    assert precision.run_precisions(make_config(overrides={"precision": "bf16"}), "cpu") == ("bf16", "bf16")
    # [cpt] precision names CPT's alone
    cfg = make_config(file_values={"cpt": {"precision": "bf16"}})
    assert precision.run_precisions(cfg, "cpu") == ("bf16", "fp32")
    cfg = make_config(file_values={"cpt": {"precision": "fp32"}}, overrides={"precision": "bf16"})
    assert precision.run_precisions(cfg, "cpu") == ("fp32", "bf16")
    with pytest.raises(ConfigError, match="config key 'precision'"):
        make_config(overrides={"precision": "bf17"})
    with pytest.raises(ConfigError, match="fp16 needs a CUDA device"):
        precision.run_precisions(make_config(overrides={"precision": "fp16"}), "cpu")


@pytest.mark.parametrize(("capability", "expected"), [((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 5), "fp32")])
def test_auto_on_cuda_reads_the_capability_without_a_cuda_context(monkeypatch, capability, expected):
    import torch

    def no_context(*a, **k):
        raise AssertionError("resolving the precision created a CUDA context")

    precision.cuda_has_native_bf16.cache_clear()
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    for name in ("is_bf16_supported", "current_device", "get_device_properties", "get_device_capability", "init"):
        monkeypatch.setattr(torch.cuda, name, no_context)
    monkeypatch.setattr(precision, "_nvml_min_capability", lambda: capability)
    try:
        assert precision.resolve_precision("auto", "cuda") == expected
        assert precision.resolve_precision("auto", "cuda:0") == expected
    finally:
        precision.cuda_has_native_bf16.cache_clear()


def test_the_board_header_names_the_precision_of_evaluation_and_cpt():
    from leaderboard.model import Board, Entry, Leaderboard, Row
    from leaderboard.render_html import board_html
    from leaderboard.render_markdown import board_md
    from leaderboard.render_terminal import render_text
    from leaderboard.tables import precision_label

    def cell(ev: str, cpt: str):
        return types.SimpleNamespace(params={"eval_precision": ev, "cpt.precision": cpt})

    assert precision_label([cell("fp32", "fp32")] * 2) == "evaluation fp32, CPT fp32"
    assert precision_label([cell("fp32", "fp32"), cell("bf16", "fp32")]) == "evaluation bf16 / fp32, CPT fp32"
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
    """One cell (random, sr-t, the synthetic world's one seed), run in this process once on a CPU made to report
    bf16 support and once on one made to report none: the same board, whose header says fp32."""
    from harness.config import make_config
    from harness.core.tracking import Tracker
    from harness.runner import Runner

    boards = []
    for name, native in (("prec-native", True), ("prec-none", False)):
        _report(monkeypatch, native)
        cfg = make_config(overrides={"world": "synthetic", "methods": ["random"], "tasks": ["sr-t"],
                                     "experiment": name, "tracking_uri": tracking_uri, "workers": 1})
        res = Runner(cfg, synthetic_world, Tracker(tracking_uri)).run()
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
