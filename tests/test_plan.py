import json

import pytest

from harness import throughput
from harness.config import make_config
from harness.core.errors import ConfigError
from harness.plan import PAPER_ESTIMATES, estimate_rows, make_plan, world_for_planning
from harness.spec import resolve

H100 = throughput.measurement("h100")


def test_plan_counts_cells_and_estimates_from_the_profile(synthetic_world):
    cfg = make_config({"world": "synthetic", "methods": "random,ofa,focus", "tasks": "mlm,ner",
                       "dims": "32,full", "seeds": "1,2", "profile": "paper", "device": "cuda"})
    plan = make_plan(cfg, world_for_planning("synthetic"))
    # random and ofa at two dims x two seeds; focus only at full dims
    assert len(plan.cells) == 2 * 2 * 2 + 2
    assert any("focus" in s and "32" in s for s in plan.skipped)
    # no world given to the rates: the CPT of the measured model on the measured GPU
    rows = estimate_rows(resolve(cfg, world_for_planning("synthetic"), probe=False))
    evals = 2 * (PAPER_ESTIMATES["task"]["mlm"] + PAPER_ESTIMATES["task"]["ner"])  # step 0 and final
    # the paper profile's steps x effective batch x block, the block fitted to the synthetic source's 128 positions
    tokens = 4000 * 512 * 128
    # a factorized embedding (vocab x 32 coordinates + a 32 x hidden primitive) has fewer parameters: same MFU
    v, h, n = H100["vocab_size"], H100["hidden_size"], H100["params"]
    n_32 = n - v * h + v * 32 + 32 * h
    for r in rows:
        method, _, dim, _ = r["cell"].split(" | ")
        assert r["gpus"] == 1 and r["cpus"] == 8 and r["gpu"] == "h100"
        rate = H100["tokens_per_s"] * (1 if dim == "dim full" else n / n_32)
        assert r["cpt_h"] == pytest.approx(tokens / rate / 3600)
        assert r["total_h"] == pytest.approx(PAPER_ESTIMATES["init"][method] + r["cpt_h"] + evals)
    # 4,000 steps of 512 x 128 (the block CPT runs with on this world) at the 143.8k tokens/s measured on an H100:
    # a quarter of the papers' 2 GPU-hours of 512 x 512 (the glot500 world below)
    assert next(r for r in rows if "dim full" in r["cell"])["cpt_h"] == pytest.approx(2.03 / 4, abs=0.01)


def test_the_throughput_file_holds_a_measured_gpu_with_its_command_and_model():
    assert H100 is not None and H100["tokens_per_s"] == 143_754 and H100["date"] and H100["torch"]
    assert H100["command"].startswith("python benchmarks/bench_cpt.py")
    assert throughput.mfu(H100) == pytest.approx(0.344, abs=0.0005)  # 6 N tokens/s / 989 TFLOP/s
    # its N is the XLM-R base shape's with the Glot500-m vocabulary, counted
    from transformers import XLMRobertaConfig

    cfg = XLMRobertaConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                           max_position_embeddings=514)
    assert throughput.mlm_parameters(cfg, H100["vocab_size"]) == H100["params"]


def test_a_card_never_measured_is_sized_from_its_peak_at_the_measured_mfu():
    a100 = throughput.cpt_rate("a100")
    assert not a100.measured and "never measured on a100" in a100.basis and "312" in a100.basis
    assert a100.tokens_per_s == pytest.approx(H100["tokens_per_s"] * 312 / 989)
    mfu = 6 * a100.params * a100.tokens_per_s / 312e12
    assert mfu == pytest.approx(throughput.mfu(H100))
    h100 = throughput.cpt_rate()  # the default: the kind measured
    assert h100.gpu == "h100" and h100.measured and h100.tokens_per_s == H100["tokens_per_s"]
    assert throughput.cpt_rate("h100", params=H100["params"] // 2).tokens_per_s == pytest.approx(
        2 * H100["tokens_per_s"], rel=1e-6)
    assert [throughput.kind_of(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB",
                                            "NVIDIA A10", "NVIDIA L4", "NVIDIA L40S", "Tesla T4")] == [
        "h100", "h100-pcie", "a100", "a10", "l4", "l40s", None]


def test_record_adds_a_measurement_and_replaces_the_same_one(tmp_path):
    path = tmp_path / "throughput.json"
    path.write_text(throughput.DATA.read_text())
    row = {**H100, "gpu": "a100", "card": "NVIDIA A100-SXM4-80GB", "tokens_per_s": 50_000.0, "date": "2027-01-01"}
    throughput.record(row, path)
    throughput.record({**row, "tokens_per_s": 60_000.0}, path)
    data = json.loads(path.read_text())
    assert [r["gpu"] for r in data["measured"]] == ["h100", "a100"]
    rate = throughput.cpt_rate("a100", data=data)
    assert rate.measured and rate.tokens_per_s == 60_000.0
    assert throughput.cpt_rate(data=data).gpu == "a100"  # the default is the latest measurement


def test_model_parameters_of_a_built_world_count_its_source_model_with_the_target_vocabulary(synthetic_world):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    source = synthetic_world.default_source
    model = AutoModelForMaskedLM.from_pretrained(synthetic_world.source_dir(source))
    model.resize_token_embeddings(len(AutoTokenizer.from_pretrained(synthetic_world.target_tokenizer_dir)))
    n, why = throughput.model_parameters(synthetic_world, source, None)
    assert n == sum(p.numel() for p in model.parameters()) and "tokens" in why
    h, v = model.config.hidden_size, model.config.vocab_size
    assert throughput.model_parameters(synthetic_world, source, 16)[0] == n - v * h + v * 16 + 16 * h


def test_plan_cli_prints_the_paper_grid(run_cli):
    r = run_cli("plan", "--world", "synthetic", "--grid", "paper", "--dims", "full", check=True)
    assert "GPU-hours" in r.stdout and "cells" in r.stdout
    assert "hyperofa" in r.stdout or "random" in r.stdout
    assert "CPT sized for one h100" in r.stdout and "measured: 143,754 tokens/s" in r.stdout
    r = run_cli("plan", "--world", "synthetic", "--grid", "paper", "--dims", "full", "--gpu", "l4", check=True)
    assert "CPT sized for one l4" in r.stdout and "never measured on l4" in r.stdout and "121.0 TFLOP/s" in r.stdout
    with pytest.raises(ConfigError, match="unknown GPU kind 'b900'.*known: a10, a100"):  # exit status 2, one line
        throughput.cpt_rate("b900")


def test_plan_describes_the_glot500_world_without_its_inputs():
    from harness.worlds import world_dir

    assert not (world_dir("glot500") / "manifest.json").exists()
    cfg = make_config({"world": "glot500", "methods": "random,ofa,hyperofa,focus", "source": "all",
                       "dims": "100,200,400,full", "seeds": "1,2,3", "profile": "paper", "device": "cuda",
                       "tasks": "sr-b,sr-t,ner,pos,mlm"})
    world = world_for_planning("glot500")
    assert set(world.sources) == {"xlm-roberta-base", "roberta-base"}
    assert len(world.task_languages("sr-b")) == 322 and len(world.task_languages("sr-t")) == 98
    plan = make_plan(cfg, world)
    # 3 factorized-capable methods x 4 dims + focus at full, x 2 sources x 3 seeds
    assert len(plan.cells) == (3 * 4 + 1) * 2 * 3
    rows = estimate_rows(resolve(cfg, world, probe=False))  # not built here: the measured model's N, on an H100
    assert all(r["cpt_h"] == pytest.approx(2.03, abs=0.01) for r in rows if "dim full" in r["cell"])
    assert all(r["cpt_h"] < 2.03 for r in rows if "dim full" not in r["cell"])  # a factorized embedding: fewer N
    assert sum(r["total_h"] for r in rows) > 200


CPU_PLAN = ("plan", "--world", "synthetic", "--methods", "all", "--tasks", "sr-t,ner")


def test_cpu_plan_is_the_same_before_and_after_the_world_is_built(run_cli, synthetic_world, tmp_path):
    """On the cpu profile the estimate comes from the shape the world's builder declares, so a plan of the
    synthetic world says the same in a home where it is not built as in one where it is, to the digit."""
    import os
    import subprocess
    import sys

    from harness.plan import cpu_rows
    from harness.worlds import WORLDS
    from tests.conftest import REPO

    cfg = make_config({"world": "synthetic", "methods": "all", "tasks": "sr-t,ner"})
    sketch = WORLDS.get("synthetic").describe()
    before = cpu_rows(resolve(cfg, sketch, probe=False), 2)
    after = cpu_rows(resolve(cfg, synthetic_world, probe=False), 2)
    assert before == after and len(before) >= 10
    built = run_cli(*CPU_PLAN, check=True).stdout
    env = {**os.environ, "HARNESS_HOME": str(tmp_path / "fresh"), "OMP_NUM_THREADS": "1"}
    fresh = subprocess.run([sys.executable, "-m", "harness.cli", *CPU_PLAN], capture_output=True, text=True,
                           env=env, cwd=REPO, timeout=300)
    assert fresh.returncode == 0, fresh.stderr
    assert not (tmp_path / "fresh" / "worlds").exists()  # nothing was built
    assert fresh.stdout == built
    # it speaks of the machine: minutes and core-hours, no GPU-hours; languages, CPT steps, evaluated steps
    assert "GPU" not in built and "min of cells" in built and "core-hours" in built
    assert "sr-t: 4 language(s): qab_Latn" in built and "ner: 5 language(s)" in built
    assert "CPT: 10 step(s) of 8 x 64 tokens; tasks evaluated at step(s) 0; held-out MLM loss at step(s) 0, 10" \
        in built
    assert "target_vocab 900 (declared by world 'synthetic'" in built


def test_the_cpu_plan_names_the_held_out_diagnostic_of_the_sources_objective(run_cli, synthetic_world):
    """A decoder's cells are followed by the held-out causal-LM loss, not the MLM loss an encoder's are."""
    line = "CPT: 10 step(s) of 8 x 64 tokens; tasks evaluated at step(s) 0; "
    dec = run_cli("plan", "--world", "synthetic", "--source", "dec", "--methods", "random", "--tasks", "sr-t",
                  check=True).stdout
    assert line + "held-out causal-LM loss at step(s) 0, 10" in dec
    both = run_cli("plan", "--world", "synthetic", "--source", "all", "--methods", "random", "--tasks", "sr-t",
                   check=True).stdout
    assert line + "held-out loss (CLM of the decoder sources, MLM of the encoder sources) at step(s) 0, 10" in both


def test_cpu_estimates_scale_with_the_declared_shape_from_the_measured_figures():
    """The bible world's mono source is the reference model: its cells cost what the main job measured; the
    synthetic world's model is nil beside it: its cells cost what the synthetic run measured."""
    from harness.throughput import cpu_cost, cpu_figures

    ref = cpu_figures()["reference"]["seconds"]
    fixed = cpu_figures()["fixed"]
    bible = cpu_cost("bible", "mono")
    assert bible.shape == cpu_figures()["reference"]["shape"]
    assert bible.task("ner") == pytest.approx(ref["task"]["ner"]) and bible.cpt(10, 8, 64) == pytest.approx(ref["cpt"])
    assert bible.init("focus", True) == pytest.approx(522) and bible.init("focus", False) == pytest.approx(32.4)
    assert bible.task("pos") == bible.task("ner") and bible.cpt(0, 8, 64) == 0
    assert bible.cpt(20, 8, 64) - bible.cpt(10, 8, 64) == pytest.approx(ref["cpt"] - fixed["cpt"])
    synthetic = cpu_cost("synthetic")
    assert fixed["task"]["ner"] < synthetic.task("ner") < 1.1 * fixed["task"]["ner"]  # its model: 0.3 % of the work
    assert synthetic.init("wechsel", True) == pytest.approx(fixed["init_first"]["wechsel"], rel=0.02)


@pytest.mark.slow
def test_cpu_estimate_is_within_2x_of_a_measured_synthetic_run(run_cli, synthetic_world, tracking_uri):
    """The synthetic world's main job, run here: the sum of its cells' wall times as the runs recorded them, and
    their span from the first start to the last end, against the plan's core-seconds and wall time."""
    from mlflow.tracking import MlflowClient

    from harness.plan import cpu_rows

    run_cli("run", "--world", "synthetic", "--methods", "all", "--tasks", "sr-t,ner", "--experiment",
            "plan-vs-run", check=True)
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("plan-vs-run")
    cells = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("harness.kind") == "cell"]
    spans = [(r.info.start_time / 1000, r.info.end_time / 1000) for r in cells]
    measured_sum = sum(e - s for s, e in spans)
    measured_wall = max(e for _, e in spans) - min(s for s, _ in spans)
    cfg = make_config({"world": "synthetic", "methods": "all", "tasks": "sr-t,ner"})
    rows = cpu_rows(resolve(cfg, synthetic_world, probe=False), 2)
    assert len(rows) == len(cells)
    est_sum, est_wall = sum(r["total_s"] for r in rows), max(r["ends_s"] for r in rows)
    assert 0.5 < est_sum / measured_sum < 2, (est_sum, measured_sum)
    assert 0.5 < est_wall / measured_wall < 2, (est_wall, measured_wall)


def test_a_decoders_cells_are_scaled_from_the_measured_decoder_not_the_encoder():
    """A decoder source's cells cost what the decoder job measured at its reference decoder's shape (CPT, SR-T,
    HyperOFA's first seed, and what every cell pays: the held-out causal-LM loss on every position), not the
    encoder's figures scaled up, which left them at about 0.4 of what they took; a task or a first seed the
    decoder reference did not time is the encoder's figure at this shape times what the timed tasks show."""
    from harness.throughput import CpuCost, cpu_cost, cpu_figures

    figures = cpu_figures()
    dec = figures["reference_clm"]
    smollm2 = cpu_cost("bible", "smollm2")
    assert smollm2.figures["reference_objective"] == "clm" and smollm2.shape == dec["shape"]
    seconds = dec["seconds"]
    assert smollm2.cpt(10, 8, 64) == pytest.approx(seconds["cpt"])
    assert smollm2.task("sr-t") == pytest.approx(seconds["task"]["sr-t"])
    assert smollm2.cell() == pytest.approx(seconds["cell"])
    assert smollm2.init("hyperofa", True) == pytest.approx(seconds["init_first"]["hyperofa"])
    assert smollm2.init("ofa", False) == pytest.approx(seconds["init_other"])
    encoder_scaled = CpuCost(smollm2.shape, smollm2.shape_from, figures)  # the old estimate
    assert smollm2.cpt(10, 8, 64) > 1.5 * encoder_scaled.cpt(10, 8, 64)
    factor = seconds["task"]["sr-t"] / encoder_scaled.task("sr-t")
    assert smollm2.task("ner") == pytest.approx(encoder_scaled.task("ner") * factor)
    assert smollm2.init("focus", True) == pytest.approx(encoder_scaled.init("focus", True))
    gemma3 = cpu_cost("bible", "gemma3")  # another decoder: scaled from the measured one by its shape
    assert gemma3.figures["reference_objective"] == "clm" and gemma3.shape["hidden_size"] == 640
    assert gemma3.cpt(10, 8, 64) != pytest.approx(seconds["cpt"])
    mono = cpu_cost("bible", "mono")  # the encoders' estimates are unchanged
    assert mono.figures["reference_objective"] == "mlm" and mono.cpt(10, 8, 64) == pytest.approx(
        figures["reference"]["seconds"]["cpt"])


def test_the_cpu_plan_of_a_decoder_names_the_decoder_reference(run_cli):
    out = run_cli("plan", "--world", "bible", "--source", "smollm2", "--methods", "random", "--tasks", "sr-t",
                  check=True).stdout
    flat = " ".join(out.split())
    assert "its cells scaled from the decoder reference" in flat and "a decoder's:" in flat
    enc = " ".join(run_cli("plan", "--world", "bible", "--methods", "random", "--tasks", "sr-t", check=True).stdout.split())
    assert "decoder reference" not in enc
