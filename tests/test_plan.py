from harness.config import make_config
from harness.plan import PAPER_ESTIMATES, estimate_rows, make_plan, world_for_planning


def test_plan_counts_cells_and_estimates_from_the_profile(synthetic_world):
    cfg = make_config({"world": "synthetic", "methods": "random,ofa,focus", "tasks": "mlm,ner",
                       "dims": "100,full", "seeds": "1,2", "profile": "paper", "device": "cuda"})
    plan = make_plan(cfg, world_for_planning("synthetic"))
    # random and ofa at two dims x two seeds; focus only at full dims
    assert len(plan.cells) == 2 * 2 * 2 + 2
    assert any("focus" in s and "100" in s for s in plan.skipped)
    rows = estimate_rows(cfg, plan)
    cpt_h = 4000 / 1000 * PAPER_ESTIMATES["cpt_per_1k_steps"]
    evals = 2 * (PAPER_ESTIMATES["task"]["mlm"] + PAPER_ESTIMATES["task"]["ner"])  # step 0 and final
    for r in rows:
        method = r["cell"].split(" | ")[0]
        assert r["gpus"] == 1 and r["cpus"] == 8
        assert r["total_h"] == PAPER_ESTIMATES["init"][method] + cpt_h + evals


def test_plan_cli_prints_the_paper_grid(run_cli):
    r = run_cli("plan", "--world", "synthetic", "--grid", "paper", check=True)
    assert "GPU-hours" in r.stdout and "cells" in r.stdout
    assert "hyperofa" in r.stdout or "random" in r.stdout


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
    assert sum(r["total_h"] for r in estimate_rows(cfg, plan)) > 500
