"""The transplant measure's references: the bits per byte of a derived world's held-out text for the models a
transplanted model is measured against.

A derived world (``harness world derive``) is a transplant: the user's source model given another tokenizer (the
target tokenizer). Its ``clm`` (decoder) and ``mlm-bpb`` (encoder) boards say how much of the source's language
modelling the transplanted model keeps, beside two references, each scored by the task's own code (the same
held-out sentences, the same ``max_length`` cut rule, the same bytes):

* ``ceiling``: the source model with its OWN tokenizer (the model as it was before the transplant);
* ``donor``: the donor with the target tokenizer, where the world has a donor of the task's objective (a causal
  LM for ``clm``, a masked LM for ``mlm-bpb``).

The rule: references are computed for derived worlds only (a built world's sources are the benchmark's own, and
their boards stay as they were), for the tasks of :data:`REFERENCE_TASKS`. Each is computed once per (world,
model, tokenizer, task settings, language), not per cell: a product (:class:`harness.core.cache.ProductCache`, kind
:data:`PRODUCT`), then logged once to the experiment's reference run (``harness.kind = reference``, one per world,
source, task and settings), whose ``references/<role>_<lang>.json`` artifacts the leaderboard reads
(:mod:`leaderboard.retained`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.core.hashing import hash_obj
from harness.core.record import Kind, is_marked, reference_identity

REFERENCE_TASKS = {"clm": "clm", "mlm-bpb": "mlm"}  # task -> the objective its models have
PRODUCT = "bpb-reference"
ARTIFACTS = "references"
ROLES = ("ceiling", "donor")
FILE = "reference.json"


def applies(world: Any, task: str) -> bool:
    """Whether ``task`` on ``world`` has references: a derived world (a transplant) and a bits-per-byte task."""
    return getattr(world, "base", None) is not None and task in REFERENCE_TASKS


def reference_models(world: Any, source: str, task: str) -> list[dict[str, Any]]:
    """The references of ``task`` for ``source`` in ``world``: each role's model folder, tokenizer folder and
    identities (the ceiling always; the donor where the world has one of the task's objective)."""
    from harness.core.objective import objective_of_dir

    entry = world.manifest.get("sources", {}).get(source, {})
    out = [{"role": "ceiling", "model": world.source_dir(source), "tokenizer": world.source_dir(source),
            "identity": hash_obj(entry), "tokenizer_identity": "own"}]
    donor = world.donor_dir
    if donor is not None and objective_of_dir(donor) == REFERENCE_TASKS[task]:
        out.append({"role": "donor", "model": donor, "tokenizer": world.target_tokenizer_dir,
                    "identity": str(world.manifest.get("donor", {}).get("identity") or hash_obj(
                        world.manifest.get("donor"))),
                    "tokenizer_identity": hash_obj(world.manifest.get("target_tokenizer"))})
    return out


def settings_identity(task: str, settings: Any) -> dict[str, Any]:
    """What moves a reference's numbers beside its model: the task and its settings (profile, sentence cap, task
    params, precision)."""
    return {"task": task, "profile": settings.profile, "max_sentences": settings.max_sentences,
            "params": dict(settings.params or {}), "precision": settings.precision}


def product_inputs(world: Any, ref: dict[str, Any], task: str, settings: Any, lang: str) -> dict[str, Any]:
    return {"measure": PRODUCT, "role": ref["role"], "model": ref["identity"], "tokenizer": ref["tokenizer_identity"],
            "world": world.hash, "lang": lang, **settings_identity(task, settings)}


def compute_references(world: Any, source: str, task_name: str, task: Any, settings: Any, languages: list[str],
                       cache: Any = None) -> dict[str, dict[str, dict[str, Any]]]:
    """``{role: {lang: {scores, items, counts, hyperparameters, model, tokenizer}}}``: each reference's score of
    each language, from the product cache where it was computed before (each model is loaded only when a language
    of it is missing)."""
    from harness.core.cache import ProductCache

    cache = cache or ProductCache()
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for ref in reference_models(world, source, task_name):
        loaded: list[Any] = []

        def build(tmp: Path, lang: str, ref: dict[str, Any] = ref, loaded: list[Any] = loaded) -> dict[str, Any]:
            if not loaded:
                loaded.extend(_load(ref, settings.device))
            res = task.evaluate(loaded[0], loaded[1], world, [lang], settings)
            doc = {"role": ref["role"], "lang": lang, "model": ref["identity"], "tokenizer": ref["tokenizer_identity"],
                   "scores": {m: per[lang] for m, per in res.scores.items() if lang in per},
                   "items": {m: per[lang].to_dict() for m, per in res.items.items() if lang in per},
                   "counts": res.extras.get("counts", {}).get(lang, {}),
                   "hyperparameters": res.extras.get("hyperparameters", {})}
            (tmp / FILE).write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
            return {}

        for lang in languages:
            prod = cache.get_or_build(PRODUCT, product_inputs(world, ref, task_name, settings, lang),
                                      lambda tmp, lang=lang: build(tmp, lang))
            out.setdefault(ref["role"], {})[lang] = json.loads((prod.path / FILE).read_text(encoding="utf-8"))
    return out


def _load(ref: dict[str, Any], device: str) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    from harness.initialize import load_model

    return load_model(ref["model"], device=device), AutoTokenizer.from_pretrained(ref["tokenizer"])


def reference_tags(world: Any, source: str, settings: Any, task: str) -> dict[str, str]:
    """The descriptive tags of a reference run (the leaderboard matches a board's rows by them)."""
    ident = settings_identity(task, settings)
    return {"world": world.name, "world_hash": world.hash, "source": source, "task": task,
            "profile": str(settings.profile), "max_sentences": str(ident["max_sentences"]),
            "params": json.dumps(ident["params"], sort_keys=True), "precision": str(settings.precision)}


def log_references(record: Any, experiment_id: str, world: Any, source: str, task_name: str, task: Any,
                   settings: Any, languages: list[str], say: Any = None) -> list[str]:
    """The references of ``task_name`` on ``languages`` computed (or found) and logged to the experiment's reference
    run, each (role, language) once; the languages logged now."""
    key = hash_obj({"world": world.hash, "source": source, "models": [
        (r["role"], r["identity"], r["tokenizer_identity"]) for r in reference_models(world, source, task_name)],
        **settings_identity(task_name, settings)})
    tr, ident = record.tracker, reference_identity(key, task_name)
    roles = [r["role"] for r in reference_models(world, source, task_name)]
    found = tr.find_runs(experiment_id, ident)
    missing = [lang for lang in languages
               if not found or not all(is_marked(found[0], marker(role, lang)) for role in roles)]
    if not missing:
        return []
    run_id, _ = tr.get_or_create_run(experiment_id, ident, f"reference {task_name}")
    tr.set_tags(run_id, reference_tags(world, source, settings, task_name))
    refs = compute_references(world, source, task_name, task, settings, missing)
    for role, per in refs.items():
        for lang, doc in per.items():
            tr.log_dict(run_id, doc, f"{ARTIFACTS}/{role}_{lang}.json")
            tr.mark_done(run_id, marker(role, lang))
    if say is not None:
        shown = "; ".join(f"{role} bpb avg {sum(d['scores']['bpb'] for d in per.values()) / len(per):.4f}"
                          for role, per in refs.items() if per)
        say(f"  {task_name} references ({', '.join(refs)}, {len(missing)} language(s)): {shown}")
    tr.finish(run_id)
    return missing


def marker(role: str, lang: str) -> str:
    return f"reference.{role}.{lang}"


__all__ = ["ARTIFACTS", "Kind", "PRODUCT", "REFERENCE_TASKS", "ROLES", "applies", "compute_references",
           "log_references", "reference_models"]
