"""How much English fine-tuning does the cpu profile's NER evaluation need?

    OMP_NUM_THREADS=1 python benchmarks/bench_ner_budget.py [--world bible] [--methods ofa,random]
                                                             [--epochs 2,4,6] [--lrs 1e-4,3e-4] [--seeds 1,2]

For each method, the initialized model is built (or taken from the init cache) as ``harness init`` does, then the
``ner`` task of the ``cpu`` profile is run with each number of fine-tuning epochs, each peak learning rate and each
seed (the rest of the
profile unchanged: 512 English training sentences, length-grouped batches of 32, lr 1e-4 decaying linearly to 0,
the best epoch on 200 English dev sentences, 80 test sentences per language). Printed per row: the English dev F1
at every epoch end, the English test F1, the zero-shot average F1 over the world's languages, and the seconds of
fine-tuning and of the whole evaluation. Nothing is cached or logged (a temporary cache), so every row is measured.

The budget to choose is the smallest number of epochs after which the dev F1 has stopped rising and the seeds'
zero-shot averages agree.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", default="bible")
    ap.add_argument("--methods", default="ofa,random")
    ap.add_argument("--epochs", default="2,4,6")
    ap.add_argument("--lrs", default="1e-4", help="peak learning rates (the cpu profile's is 1e-4)")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--json", type=Path, help="also write the rows to this file")
    args = ap.parse_args()

    import torch
    from rich.console import Console
    from rich.table import Table

    from harness.core.precision import resolve_precision
    from harness.core.profiles import profile as get_profile
    from harness.core.registry import TASKS
    from harness.initialize import initialize_model, load_model
    from harness.worlds import get_world
    from tasks.base import TaskSettings

    torch.set_num_threads(1)
    world = get_world(args.world)
    task = TASKS.get("ner")()
    langs = task.languages(world)
    precision = resolve_precision("auto", "cpu")
    rows = []
    with tempfile.TemporaryDirectory() as td:
        for method in args.methods.split(","):
            out = Path(td) / method
            params = dict(get_profile("cpu").get("method_params", {}).get(method, {}))  # as `harness init` does
            initialize_model(world, world.default_source, method, dim=None, seed=1, params=params, out_dir=out,
                             device="cpu", profile="cpu")
            from transformers import AutoTokenizer

            model, tok = load_model(out, device="cpu"), AutoTokenizer.from_pretrained(out)
            budgets = [(int(e), float(lr)) for e in args.epochs.split(",") for lr in args.lrs.split(",")]
            for epochs, lr in budgets:
                for seed in (int(s) for s in args.seeds.split(",")):
                    settings = TaskSettings(profile="cpu", seed=seed, device="cpu", max_sentences=200,
                                            precision=precision, params={"epochs": epochs, "lr": lr})
                    t0 = time.time()
                    res = task.evaluate(model, tok, world, langs, settings)
                    f1 = res.scores["f1"]
                    others = [v for lang, v in f1.items() if lang != world.pivot]
                    row = {"method": method, "epochs": epochs, "lr": lr, "seed": seed,
                           "dev_f1": [round(p["dev_f1"], 3) for p in res.extras["dev_curve"]],
                           "eng_test_f1": round(f1.get(world.pivot, float("nan")), 4),
                           "zero_shot_avg": round(statistics.fmean(others), 4), "avg": round(statistics.fmean(f1.values()), 4),
                           "train_s": round(float(res.extras["train_seconds"]), 1), "eval_s": round(time.time() - t0, 1)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    t = Table(title=f"ner on {args.world}, cpu profile, epochs of English fine-tuning ({precision})")
    for c in ("method", "epochs", "lr", "seed", "dev F1 per epoch", "eng test F1", "zero-shot avg", "avg",
              "fine-tune s", "eval s"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["method"], str(r["epochs"]), f"{r['lr']:g}", str(r["seed"]), " ".join(f"{v:.2f}" for v in r["dev_f1"]),
                  f"{r['eng_test_f1']:.3f}", f"{r['zero_shot_avg']:.3f}", f"{r['avg']:.3f}", str(r["train_s"]),
                  str(r["eval_s"]))
    Console(width=200).print(t)


if __name__ == "__main__":
    main()
