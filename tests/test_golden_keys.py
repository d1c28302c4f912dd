"""Golden values of every key a harness home depends on: a home made by an earlier version resumes, and skips
exactly what it skipped, only while these stay the same.

For {cpu, paper} x {the profile's CPT, ``--cpt-steps``, ``[cpt] block_size``, ``[cpt] auto_batch = false``,
``--cpt-devices 2``} x {the synthetic world, the bible world as it declares itself before it is built}, and every
method with two seeds: each cell's identity hash, its init product's inputs and key, its CPT product's key, the
seed aggregates' group hashes, the task runs' model keys at each evaluated step (as :mod:`harness.evaluation`
hands them to the tasks), the steps a finished cell must
have logged, and the tags and parameters its runs carry (what MLflow keeps immutable: a resumed cell logging
another value fails). The method code's digest is held at a stand-in (an edited method is meant to build its
products again: :mod:`harness.rerun`); the libraries' versions, the thread count and the revision are left out.

The fixture holds the keys of cells computed with each library's own CPU kernels (``native``: every cell before the
kernels were pinned, :mod:`harness.core.kernels`), which the pinned kernels' identity field leaves as they were;
``golden_keys_avx2.json`` holds the keys of the pinned kernels (the default) for the synthetic world's cpu profile;
``golden_keys_decoder.json`` those of the synthetic world's decoder source ``dec`` (its cells' identity holds the
source's own identity), with the pinned kernels, for both profiles.

A seed aggregate's group is the hash of its cells' keys (:func:`harness.aggregate.group_key`): the groups moved once,
when they became so (they had left out the decoder's identity and the initialization's version).

``HARNESS_WRITE_GOLDEN=1 pytest tests/test_golden_keys.py`` writes the fixtures anew (only for a change that is
meant to move a key: say so in its commit).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.core.hashing import hash_obj

FIXTURE = Path(__file__).parent / "fixtures" / "golden_keys.json"
PINNED_FIXTURE = Path(__file__).parent / "fixtures" / "golden_keys_avx2.json"
DECODER_FIXTURE = Path(__file__).parent / "fixtures" / "golden_keys_decoder.json"
CODE = "method-code-digest"  # the stand-in for a method's code digest
TASKS = ["sr-t", "ner", "mlm"]
DECODER_TASKS = ["sr-t", "ner", "clm"]  # (a decoder's held-out loss is clm)
VARIANTS = {
    "default": {},
    "cpt_steps": {"cpt_steps": 25, "cpt_checkpoints": [5]},
    "block_size": {"cpt": {"block_size": 32}},
    "auto_batch_off": {"cpt": {"auto_batch": False}},
    "cpt_devices_2": {"cpt": {"devices": 2}},
}
UNSTABLE_PARAMS = ("version.", "torch_threads", "git_revision", "cpu_kernels")  # (native: the CPU's own)


def _world(name: str, synthetic_world: Any) -> Any:
    """The synthetic world as built; the bible world as declared (with the tasks' languages it declares)."""
    if name == "synthetic":
        return synthetic_world
    from harness.worlds import declared_world

    sketch = declared_world("bible")
    langs = sorted(sketch.languages)
    return dataclasses.replace(sketch, tasks={t: langs for t in TASKS})


def home_keys(overrides: dict[str, Any], world: Any, tasks: list[str] = TASKS) -> dict[str, Any]:
    """Every key of a home for the run ``overrides`` on ``world`` with ``tasks``, computed by the code that runs a
    cell."""
    from unittest import mock

    from harness.aggregate import group_key, seed_groups
    from harness.cell import cell_params, cell_tags
    from harness.config import make_config
    from harness.core.registry import TASKS as TASK_REGISTRY
    from harness.evaluation import task_run_tags
    from harness.spec import init_inputs, product_keys, resolve

    cfg = make_config(overrides={"methods": ["all"], "tasks": tasks, "seeds": [1, 2], "world": world.name,
                                 "device": "cpu", **overrides})
    # on a machine of as many cores as every profile gives a cell: the keys of a machine with fewer name the threads
    # its cells compute with (harness.spec.cell_threads; tests/test_input_account.py)
    with mock.patch("harness.core.hosts.available_cpus", return_value=64), \
            mock.patch.dict(os.environ, {"OMP_NUM_THREADS": ""}):
        spec = resolve(cfg, world)
    out: dict[str, Any] = {"cells": {}, "groups": {}}
    for cell in spec.plan.cells:
        keys = spec.keys(cell)
        ident, key = keys.identity, keys.key
        init_key, cpt_key = product_keys(ident, CODE)
        params = {k: str(v) for k, v in cell_params(spec, cell).items() if not k.startswith(UNSTABLE_PARAMS)}
        tags = cell_tags(spec, cell, {"method.py": CODE}, init_key, cpt_key)
        out["cells"][cell.label] = {
            "key": key, "init_inputs": hash_obj(init_inputs(ident, CODE)), "init_product": init_key,
            "cpt_product": cpt_key, "task_steps": spec.cpt.task_steps(),
            "final_tags": {"final_step": spec.cpt.steps, "task_final_step": spec.cpt.last_task_step()},
            "model_keys": [evaluated_model_key(spec, cell, keys, world, s) for s in spec.cpt.task_steps()],
            # the tags and parameters by their digest (the fixture stays small)
            "task_tags": hash_obj({t: {k: str(v) for k, v in task_run_tags(spec, cell, TASK_REGISTRY.get(t)()).items()}
                                   for t in spec.plan.tasks}),
            "tags": hash_obj({k: str(v) for k, v in tags.items()}), "params": hash_obj(params)}
        # the keys the run computes itself are those of the method code it runs with
        assert (keys.init_key, keys.cpt_key) == product_keys(ident, spec.code_key(cell.method))
    for (source, method, dim), cells in seed_groups(spec.plan.cells).items():
        out["groups"][f"{source}/{method}/{dim}"] = group_key(spec, source, method, dim, cells)
    return out


def evaluated_model_key(spec: Any, cell: Any, keys: Any, world: Any, step: int) -> str:
    """The model key that :mod:`harness.evaluation` hands a task evaluated at ``step`` (the key of its cached
    taggers and scores): taken from the settings its ``_evaluate`` builds for a task that records them, not spelled
    out here."""
    from types import SimpleNamespace
    from unittest import mock

    from harness import evaluation

    seen: list[str] = []

    class Recorder:
        def evaluate(self, model: Any, tokenizer: Any, world: Any, languages: Any, settings: Any) -> None:
            seen.append(settings.model_key)

    run = SimpleNamespace(spec=spec, cell=cell, keys=keys, world=world, device="cpu")
    task = spec.plan.tasks[0]
    with mock.patch.object(evaluation, "harness_home", lambda: Path("/nonexistent-harness-home")):
        evaluation._evaluate(run, Recorder(), task, step, None, None, spec.plan.languages[task])
    assert len(seen) == 1 and isinstance(seen[0], str)
    return seen[0]


def all_keys(synthetic_world: Any) -> dict[str, Any]:
    return {f"{world}/{profile}/{variant}": home_keys({"profile": profile, **overrides},
                                                       _world(world, synthetic_world))
            for world in ("synthetic", "bible") for profile in ("cpu", "paper")
            for variant, overrides in VARIANTS.items()}


@pytest.fixture
def plain_cpu(monkeypatch):
    """No accelerator emulated, no GPU pinned: the keys of a plain CPU run."""
    for var in ("HARNESS_EMULATE_ACCELERATOR", "HARNESS_EMULATE_GPUS", "HARNESS_PINNED_GPUS",
                "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def kernels_of(monkeypatch):
    """Compute as if this process's CPU kernels were labelled ``state`` (``avx2``, or ``native``: the cells computed
    before the kernels entered the identity; a process measures its label, harness.core.kernels)."""
    from harness.core import kernels

    def _as(state: str) -> None:
        monkeypatch.setattr(kernels, "_pinned", state == kernels.PINNED)
        monkeypatch.setattr(kernels, "_labels", {False: state, True: state})

    return _as


# methods registered after the fixtures were written: their cells are new ones (a home made before has none), every
# other cell and seed group is the fixture's, with its key (issue 51: OMP, CLP, CLP+, Token Distillation)
NEW_METHODS = {"omp", "clp", "clp+", "tokdist"}


def assert_only_new_methods_added(got: dict[str, Any], want: dict[str, Any], where: Any) -> None:
    assert not set(want) - set(got), (where, "cells of the fixture no longer planned", sorted(set(want) - set(got)))
    def method(name: str) -> str:  # a cell "method | source | dim | seed", a seed group "source/method/dim"
        return name.split(" | ")[0] if " | " in name else name.split("/")[1]

    added = sorted(name for name in set(got) - set(want) if method(name) not in NEW_METHODS)
    assert not added, (where, "cells of no new method", added)


def golden(fixture: Path, got: dict) -> dict:
    """The keys ``fixture`` pins (written from ``got`` first where HARNESS_WRITE_GOLDEN=1)."""
    if os.environ.get("HARNESS_WRITE_GOLDEN") == "1":
        fixture.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
    return json.loads(fixture.read_text())


def test_every_key_of_a_home_is_what_it_was(synthetic_world, plain_cpu, kernels_of):
    kernels_of("native")
    got = all_keys(synthetic_world)
    want = golden(FIXTURE, got)
    assert sorted(got) == sorted(want)
    for run in want:
        for part in ("cells", "groups"):
            assert_only_new_methods_added(got[run][part], want[run][part], (run, part))
            for name, value in want[run][part].items():
                assert got[run][part][name] == value, (run, part, name)


def test_the_golden_runs_differ_where_their_settings_do(synthetic_world, plain_cpu):
    """The fixture is no constant: each setting of the matrix moves the cells' keys it should move."""
    want = json.loads(FIXTURE.read_text())

    def keys(run: str) -> set[str]:
        return {c["key"] for c in want[run]["cells"].values()}

    for world in ("synthetic", "bible"):
        for profile in ("cpu", "paper"):
            base = keys(f"{world}/{profile}/default")
            assert len(base) == len(want[f"{world}/{profile}/default"]["cells"])  # one key per cell
            for variant in ("cpt_steps", "block_size"):
                assert not base & keys(f"{world}/{profile}/{variant}"), (world, profile, variant)
            # the devices and the batch search change how CPT computes, not what: the same cells, the same groups
            for variant in ("auto_batch_off", "cpt_devices_2"):
                assert keys(f"{world}/{profile}/{variant}") == base, (world, profile, variant)
                assert want[f"{world}/{profile}/{variant}"]["groups"] == want[f"{world}/{profile}/default"]["groups"]
            for variant in ("cpt_steps", "block_size"):  # other cells: other groups
                assert not (set(want[f"{world}/{profile}/{variant}"]["groups"].values())
                            & set(want[f"{world}/{profile}/default"]["groups"].values())), (world, profile, variant)
        assert not keys(f"{world}/cpu/default") & keys(f"{world}/paper/default")


def test_the_pinned_kernels_are_another_identity_and_keep_theirs(synthetic_world, plain_cpu, kernels_of):
    """Cells computed with the pinned CPU kernels (the default) are other cells than the native ones: every cell
    key, init product and CPT product differs, and the seed aggregates' groups with them; their own keys are golden
    too (synthetic world, cpu profile)."""
    kernels_of("avx2")
    pinned = home_keys({"profile": "cpu"}, _world("synthetic", synthetic_world))
    kernels_of("native")
    native = home_keys({"profile": "cpu"}, _world("synthetic", synthetic_world))
    assert sorted(pinned["cells"]) == sorted(native["cells"])
    for label, cell in pinned["cells"].items():
        for part in ("key", "init_inputs", "init_product", "cpt_product"):
            assert cell[part] is None or cell[part] != native["cells"][label][part], (label, part)
    assert not set(pinned["groups"].values()) & set(native["groups"].values())
    if os.environ.get("HARNESS_WRITE_GOLDEN") == "1":
        PINNED_FIXTURE.write_text(json.dumps(pinned, indent=0, sort_keys=True) + "\n")
    want = json.loads(PINNED_FIXTURE.read_text())
    for part in ("cells", "groups"):
        assert_only_new_methods_added(pinned[part], want[part], part)
        assert {k: pinned[part][k] for k in want[part]} == want[part]


DECODER_RUNS = {"cpu/default": {"profile": "cpu"}, "cpu/cpt_steps": {"profile": "cpu", **VARIANTS["cpt_steps"]},
                "paper/default": {"profile": "paper"}}


def decoder_keys(synthetic_world: Any) -> dict[str, Any]:
    from harness.worlds.synthetic import DECODER

    return {run: home_keys({"source": DECODER, **overrides}, synthetic_world, DECODER_TASKS)
            for run, overrides in DECODER_RUNS.items()}


def test_the_decoder_cells_keep_their_keys(synthetic_world, plain_cpu, kernels_of):
    """The synthetic world's decoder source ``dec``, with the pinned kernels: every cell's key, its init product's
    inputs and key, its CPT product's key, its tags, parameters and model keys, and the seed aggregates' groups are
    golden; its cells' identity holds the source's own identity (outside the world's hash), and so do their init
    products' inputs."""
    from harness.config import make_config
    from harness.spec import init_inputs, resolve
    from harness.worlds.synthetic import DECODER

    kernels_of("avx2")
    got = decoder_keys(synthetic_world)
    want = golden(DECODER_FIXTURE, got)
    assert sorted(got) == sorted(want)
    for run in want:
        assert want[run]["cells"] and want[run]["groups"]
        for part in ("cells", "groups"):
            assert_only_new_methods_added(got[run][part], want[run][part], (run, part))
            for name, value in want[run][part].items():
                assert got[run][part][name] == value, (run, part, name)
    assert not {c["key"] for c in want["cpu/default"]["cells"].values()} & \
        {c["key"] for c in want["cpu/cpt_steps"]["cells"].values()}
    own = synthetic_world.source_identity(DECODER)
    assert own and synthetic_world.source_identity("src") is None
    spec = resolve(make_config(overrides={"methods": ["random"], "tasks": DECODER_TASKS, "world": "synthetic",
                                          "source": DECODER, "device": "cpu"}), synthetic_world)
    ident = spec.keys(spec.plan.cells[0]).identity
    assert ident.get("source_identity") == own and init_inputs(ident).get("source_identity") == own


def _groups(spec: Any) -> dict[tuple, str]:
    from harness.aggregate import group_key, seed_groups

    return {variant: group_key(spec, *variant, cells) for variant, cells in seed_groups(spec.plan.cells).items()}


def test_a_seed_aggregate_moves_with_everything_its_cells_keys_cover(synthetic_world, plain_cpu, kernels_of,
                                                                     monkeypatch):
    """A seed aggregate is found by its group: a change that moves its cells' keys (the decoder source's own
    identity, the initialization's version) moves its group, else the aggregate of the earlier cells would be taken
    for the new ones' and never logged again."""
    from harness import spec as spec_module
    from harness.config import make_config
    from harness.spec import resolve
    from harness.worlds.synthetic import DECODER

    kernels_of("avx2")

    def groups(source: str) -> dict[tuple, str]:
        cfg = make_config(overrides={"methods": ["random", "ofa"], "tasks": ["sr-t"], "seeds": [1, 2],
                                     "world": "synthetic", "source": source, "device": "cpu"})
        return _groups(resolve(cfg, synthetic_world))

    dec, src = groups(DECODER), groups("src")
    assert len(dec) == len(src) == 2 and groups(DECODER) == dec  # (computed again: the same)
    real = synthetic_world.source_identity
    with monkeypatch.context() as m:  # the decoder built again otherwise: another identity, the same name
        m.setattr(synthetic_world, "source_identity", lambda s: "0" * 16 if s == DECODER else real(s))
        moved = groups(DECODER)
        assert moved.keys() == dec.keys() and not set(moved.values()) & set(dec.values())
        assert groups("src") == src  # (an encoder's cells are keyed by the world's hash)
    with monkeypatch.context() as m:
        m.setattr(spec_module, "INIT_VERSION", spec_module.INIT_VERSION + 1)
        for source, before in ((DECODER, dec), ("src", src)):
            after = groups(source)
            assert after.keys() == before.keys() and not set(after.values()) & set(before.values()), source
    assert groups(DECODER) == dec and groups("src") == src
