"""Leaderboard test data: runs written with MlflowClient in the runner's exact schema (``make_cell``), the
experiment ``lb-fake`` most leaderboard tests read (its fixtures ``fake_exp`` and ``lb`` are in ``conftest.py``),
and the helpers that build and pick boards."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

from harness.core.record import metric_key

LANGS = ["aaa_Latn", "bbb_Latn", "ccc_Cyrl", "ddd_Grek"]
LANG_META = {
    "aaa_Latn": {"script": "Latn", "seen": True, "resource_level": "high", "text_chars": 900},
    "bbb_Latn": {"script": "Latn", "seen": False, "resource_level": "mid", "text_chars": 500},
    "ccc_Cyrl": {"script": "Cyrl", "seen": False, "resource_level": "low", "text_chars": 300},
    "ddd_Grek": {"script": "Grek", "seen": False, "resource_level": "low", "text_chars": 200},
}
LABELS = {"aaa_Latn": "gold", "bbb_Latn": "gold", "ccc_Cyrl": "gold", "ddd_Grek": "silver"}
N_ITEMS = 50
FINAL = 10
# correct queries (of 50) at the final step, per method, seed and language; None = language not evaluated
HITS = {
    ("alpha", 1): {"aaa_Latn": 40, "bbb_Latn": 30, "ccc_Cyrl": 20, "ddd_Grek": 10},
    ("alpha", 2): {"aaa_Latn": 42, "bbb_Latn": 30, "ccc_Cyrl": 24, "ddd_Grek": 10},
    ("beta", 1): {"aaa_Latn": 35, "bbb_Latn": 30, "ccc_Cyrl": 25, "ddd_Grek": 15},
    ("beta", 2): {"aaa_Latn": 35, "bbb_Latn": 30, "ccc_Cyrl": 27, "ddd_Grek": 13},
    ("gamma", 1): {"aaa_Latn": 45, "bbb_Latn": 5, "ccc_Cyrl": None, "ddd_Grek": 25},
}


def _items(hits: int, salt: int) -> dict:
    """50 queries with exactly ``hits`` correct ones, in a fixed shuffled order."""
    rng = np.random.default_rng(abs(salt))
    num = np.zeros(N_ITEMS)
    num[:hits] = 1.0
    rng.shuffle(num)
    return {"num": num.tolist(), "den": [1.0] * N_ITEMS, "transform": "identity"}


def _log_json(client: MlflowClient, run_id: str, obj: object, path: str) -> None:
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / Path(path).name
        p.write_text(json.dumps(obj))
        sub = str(Path(path).parent)
        client.log_artifact(run_id, str(p), None if sub == "." else sub)


def make_cell(client: MlflowClient, exp_id: str, method: str, seed: int, *, profile: str = "cpu",
              world: str = "fakeworld", source: str = "src", dim: str = "full", task: str = "sr-t",
              hits: dict | None = None, tables: bool = True, items: bool = True, init: dict | None = None,
              final: int = FINAL, params: dict | None = None,
              versions: dict | None = None, task_params: dict | None = None,
              cpt: dict | None = None, parent: str | None = None, task_tags: dict | None = None,
              cell_params: dict | None = None, task_final: int | None = None,
              cpt_steps: int | None = None, objective: str | None = None,
              report: dict | None = None) -> tuple[str, str]:
    """One parent run and its task run, as harness.runner writes them (``cpt``: more CPT settings logged beside
    ``cpt.steps``; ``parent``: a cell run made before, to which this adds a task run; ``task_tags``: the task's
    ``harness.task.*`` tags; ``cell_params``: more params of the cell, e.g. ``eval_precision``; ``cpt_steps``:
    the CPT steps the cell ran when the tasks were evaluated at ``final`` = 0 only; ``objective``: the source's, as
    the cell's surgery records it, where given; ``report``: more of its init report). Scores at step 0 are half the
    final ones."""
    from mlflow.entities import Metric, Param

    ran = final if cpt_steps is None else cpt_steps
    tags = {"harness.kind": "cell", "harness.method": method, "harness.source": source, "harness.dim": dim,
            "harness.seed": str(seed), "harness.profile": profile, "harness.world": world,
            "harness.final_step": str(ran), "harness.task_final_step": str(final),
            "harness.cell": f"{method}-{seed}-{profile}-{source}-{dim}"}
    if parent is None:
        parent = _make_parent(client, exp_id, tags, method, seed, dim, final=ran, params=params, cpt=cpt,
                              versions=versions, init=init, cell_params=cell_params, objective=objective,
                              report=report)
    ttags = {k: v for k, v in tags.items() if k not in ("harness.kind", "harness.final_step",
                                                          "harness.task_final_step")}
    ttags.update({"harness.kind": "task", "harness.task": task, "harness.parent": parent,
                  "mlflow.parentRunId": parent, **{f"harness.task.{k}": v for k, v in (task_tags or {}).items()}})
    trun = client.create_run(exp_id, tags=ttags, run_name=task).info.run_id
    if task_params:  # the task's resolved settings, as the runner logs them
        client.log_batch(trun, params=[Param(f"{task}.{k}", str(v)) for k, v in task_params.items()])
    hits = hits if hits is not None else HITS[(method, seed)]
    for step in sorted({0, final}):
        scores: dict[str, dict[str, float]] = {"acc@10": {}, "acc@1": {}}
        its: dict[str, dict[str, dict]] = {"acc@10": {}, "acc@1": {}}
        for lang, h in hits.items():
            if h is None:
                continue
            k = h if step == final else h // 2
            scores["acc@10"][lang] = k / N_ITEMS
            scores["acc@1"][lang] = (k // 2) / N_ITEMS
            salt = seed * 1000 + sum(map(ord, lang))
            its["acc@10"][lang] = _items(k, salt)
            its["acc@1"][lang] = _items(k // 2, salt + 7)
        metrics = [Metric(metric_key(task, m, lang), v, 0, step) for m, per in scores.items()
                   for lang, v in per.items()]
        metrics += [Metric(metric_key(task, m, "avg"), float(np.mean(list(per.values()))), 0, step)
                    for m, per in scores.items()]
        client.log_batch(trun, metrics=metrics)
        if tables:
            _log_json(client, trun, {"task": task, "step": step, "scores": scores, "averages": {},
                                     "label_source": {lang: LABELS.get(lang, "gold") for lang in scores["acc@10"]},
                                     "extras": {}, "seconds": 0.1}, f"tables/{task}_step{step}.json")
        if items:
            _log_json(client, trun, its, f"items/{task}_step{step}.json")
    client.set_terminated(trun)
    client.set_terminated(parent)
    return parent, trun


def _make_parent(client: MlflowClient, exp_id: str, tags: dict, method: str, seed: int, dim: str, *, final: int,
                 params: dict | None, cpt: dict | None, versions: dict | None, init: dict | None,
                 cell_params: dict | None, objective: str | None = None, report: dict | None = None) -> str:
    from mlflow.entities import Metric, Param

    parent = client.create_run(exp_id, tags=tags, run_name=f"{method}-{dim}-s{seed}").info.run_id
    ps = {"method": method, "seed": str(seed), "world_hash": "abc123", "cpt.steps": str(final), "cpt.lr": "5e-5",
          **{f"method.{k}": str(v) for k, v in (params or {}).items()},
          **{f"cpt.{k}": str(v) for k, v in (cpt or {}).items()},
          **{f"version.{k}": str(v) for k, v in (versions or {}).items()},
          **{k: str(v) for k, v in (cell_params or {}).items()}}
    client.log_batch(parent, params=[Param(k, v) for k, v in ps.items()])
    init = init or {"copied": 100, "method": 50, "random": 10, "unk": 0, "seconds": 1.0 + seed}
    ms = [Metric(f"init/{k}", float(v), 0, 0) for k, v in init.items()]
    ms += [Metric("cpt/train_loss", 5.0 - 0.1 * s - 0.01 * seed, 0, s) for s in range(1, final + 1)]
    ms += [Metric("cpt/heldout_loss", 5.0 - 0.05 * s, 0, s) for s in (0, final)]
    client.log_batch(parent, metrics=ms)
    _log_json(client, parent, {"method": method, "overlap_rule": "ofa", "counts": init, "target_vocab_size": 860,
                               "surgery": {"mode": "extension", "bias_policy": "remap",
                                           **({"objective": objective} if objective else {})},
                               **(report or {})}, "init_report.json")
    _log_json(client, parent, LANG_META, "languages.json")
    return parent


# the main job's shape (README command 1): fourteen methods, three seeds, two tasks, the cpu profile (tasks at step 0,
# ten CPT steps), with the task tags the runner writes
MAIN_METHODS = ("ofa", "wechsel", "hyperofa", "tiktotok", "wechsel+overlap", "random", "fvt", "mean-cov",
                "random-map", "focus", "omp", "clp", "clp+", "tokdist")
MAIN_LANGS = [f"l{j}{k}_Latn" for j, k in zip("abcdefgh", "abcdefgh", strict=True)]
TASK_TAGS = {"sr-t": {"headline": "acc@10", "higher_is_better": "true", "metrics": "acc@10,acc@1"},
             "ner": {"headline": "acc@10", "higher_is_better": "true", "metrics": "acc@10,acc@1"}}


def main_job_experiment(tracking_uri: str, name: str = "main-shaped") -> str:
    """An experiment shaped like the main job: 14 methods x 3 seeds x 2 tasks on 8 languages, one cell run per
    method and seed with its two task runs, the tasks evaluated at step 0 after 10 CPT steps, fp32, pinned
    kernels (as the runner logs them)."""
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment(name)
    for i, method in enumerate(MAIN_METHODS):
        for seed in (1, 2, 3):
            parent = None
            for task in ("sr-t", "ner"):
                hits = {lang: 10 + (3 * i + 5 * j + seed + (7 if task == "ner" else 0)) % 35
                        for j, lang in enumerate(MAIN_LANGS)}
                parent, _ = make_cell(client, exp_id, method, seed, task=task, hits=hits, items=False, tables=False,
                                      parent=parent, task_tags=TASK_TAGS[task], final=0, cpt_steps=10,
                                      cell_params={"eval_precision": "fp32", "cpt.precision": "fp32",
                                                   "cpu_kernels": "avx2"},
                                      cpt={"eval_tasks": "False"})
    return name


# the runs of a mixed home: an fp32 run, a run with `[cpt] precision = "fp32"` and `--precision bf16`, a bf16 run,
# and a `--cpt-steps 2` run beside the profile's 10 (its tasks evaluated after CPT), each as the runner logs it
MIXED = {
    "fp32": ({"eval_precision": "fp32", "cpt.precision": "fp32", "cpu_kernels": "avx2"}, 10, 0),
    "eval-bf16": ({"eval_precision": "bf16", "cpt.precision": "fp32", "cpu_kernels": "avx2"}, 10, 0),
    "bf16": ({"eval_precision": "bf16", "cpt.precision": "bf16", "cpu_kernels": "avx2"}, 10, 0),
    "cpt-2": ({"eval_precision": "fp32", "cpt.precision": "fp32", "cpu_kernels": "avx2"}, 2, 2),
}


def mixed_experiment(tracking_uri: str, name: str = "mixed") -> str:
    """``random`` in each of :data:`MIXED`'s variants and ``ofa`` in fp32, on sr-t, one seed each."""
    client = MlflowClient(tracking_uri)
    exp_id = client.create_experiment(name)
    for method, variants in (("random", list(MIXED)), ("ofa", ["fp32"])):
        for v in variants:
            params, ran, final = MIXED[v]
            cpt = {"eval_tasks": str(final > 0), "precision": params["cpt.precision"]}
            hits = {lang: (30 if method == "ofa" else 20) + j + (1 if v == "bf16" else 0)
                    for j, lang in enumerate(LANGS)}
            make_cell(client, exp_id, method, 1, hits=hits, task_tags=TASK_TAGS["sr-t"], final=final,
                      cpt_steps=ran, cell_params={k: val for k, val in params.items() if k != "cpt.precision"},
                      cpt=cpt)
    return name


def fake_experiment(tracking_uri: str) -> str:
    """Experiment ``lb-fake``: alpha (2 seeds), beta (2 seeds; seed 2 without tables artifact: read from the metric
    histories), gamma (1 seed, no ccc_Cyrl, no items, logs a validation cosine), and alpha in another profile."""
    client = MlflowClient(tracking_uri)
    name = "lb-fake"
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if not client.search_runs([exp_id], max_results=1):
        make_cell(client, exp_id, "alpha", 1)
        make_cell(client, exp_id, "alpha", 2)
        make_cell(client, exp_id, "beta", 1)
        make_cell(client, exp_id, "beta", 2, tables=False)
        make_cell(client, exp_id, "gamma", 1, items=False,
                  init={"copied": 100, "method": 60, "random": 0, "unk": 0, "seconds": 9.0, "val_cosine": 0.75})
        make_cell(client, exp_id, "alpha", 1, profile="paper", hits={lang: 49 for lang in LANGS})
    return name


def _build(tracking_uri: str, name: str, **kw):
    from leaderboard.collect import collect_experiment
    from leaderboard.tables import build_leaderboard

    client = MlflowClient(tracking_uri)
    data = collect_experiment(client, client.get_experiment_by_name(name))
    return build_leaderboard(data, **kw)


def _board(lb, kind="final", metric="acc@10", profile="cpu", step=None):
    return next(b for b in lb.boards if b.kind == kind and b.metric == metric and b.profile == profile
                and (step is None or b.step == step))
