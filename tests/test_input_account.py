"""The account of a cell's inputs (:mod:`harness.inputs`) against the code: every input the code has is in it, and
every input it puts in a key moves that key.

The inputs are enumerated from the code itself: RunConfig's fields (the config-file keys), the options of
``harness run`` (and of ``harness``), the ``[cpt]`` keys a run accepts, RunSpec's fields and the environment
variables the harness, the methods, the tasks and the leaderboard read (``os.environ[...]``, ``os.environ.get``,
``.setdefault``, ``.pop``, ``in os.environ``, ``os.getenv``, by a string literal, a module's constant, or a loop over
a module's collection of names). A new one that is not in the account fails here: a new flag cannot silently reuse
a cell computed without it. For every input the account puts in a key, a property test (hypothesis) changes it to
another valid value and checks that the key it names changes (the cell's, or its init product's); specs are
resolved on the synthetic world, nothing is run.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.inputs import ACCOUNT, COVERAGE, COVERAGE_FIELDS, DERIVED, GAP, INERT, KEY, entry, of
from tests._input_scan import (
    cpt_keys,
    environment_reads,
    run_config_fields,
    run_options,
    run_spec_fields,
    scan_environment,
)

# the inputs that move numbers and are in no key, no coverage and not inert today (harness/inputs.py says what each
# moves and the fix proposed): a new gap is a change of this list, and so is a fixed one
KNOWN_GAPS: set[str] = set()
FAST = settings(max_examples=10, deadline=None)


# -- every input is in the account --------------------------------------------------------------------------
def test_every_run_setting_is_accounted():
    missing = [f for f in run_config_fields() if f not in ACCOUNT]
    assert not missing, f"RunConfig settings (config keys, flags) not in harness/inputs.py: {missing}"


def test_every_option_of_harness_run_is_accounted():
    fields = set(run_config_fields())
    missing = [flag for flag, dest in run_options().items() if (dest if dest in fields else flag) not in ACCOUNT]
    assert not missing, f"options of `harness run` not in harness/inputs.py: {missing}"


def test_every_cpt_key_is_accounted():
    missing = sorted(k for k in cpt_keys() if f"cpt.{k}" not in ACCOUNT)
    assert not missing, f"[cpt] keys not in harness/inputs.py: {missing}"


def test_every_field_of_the_resolved_run_is_accounted():
    missing = [f for f in run_spec_fields() if f"spec.{f}" not in ACCOUNT]
    assert not missing, f"RunSpec fields not in harness/inputs.py: {missing}"


def test_every_environment_variable_read_is_accounted():
    found, unnamed = environment_reads()
    assert not unnamed, f"environment reads whose variable the scan cannot name (name it by a constant): {unnamed}"
    assert {"HARNESS_HOME", "HARNESS_CPU_KERNELS", "MKL_CBWR", "HARNESS_EMULATE_ACCELERATOR"} <= set(found)
    missing = {v: sorted(f) for v, f in sorted(found.items()) if entry(f"env:{v}") is None}
    assert not missing, f"environment variables read but not in harness/inputs.py: {missing}"


def test_the_scan_names_each_way_of_reading_a_variable():
    sources = {"a.py": textwrap.dedent('''
        import os
        OWN = "V_CONST"
        NAMES = ("V_LOOP1", "V_LOOP2")
        TABLE = {"V_ITEMS": "1"}
        os.environ["V_SUB"]; os.environ.get("V_GET"); os.environ.setdefault("V_DEFAULT", "1")
        os.environ.pop("V_POP", None); os.getenv("V_GETENV"); "V_IN" in os.environ; os.environ.get(OWN)
        os.environ.get(other.SHARED)
        {k: os.environ[k] for k in NAMES if k in os.environ}
        all(os.environ.get(k) == v for k, v in TABLE.items())
        os.environ.get(mystery)
        '''), "other.py": 'SHARED = "V_SHARED"\n'}
    found, unnamed = scan_environment(sources)
    assert set(found) == {"V_SUB", "V_GET", "V_DEFAULT", "V_POP", "V_GETENV", "V_IN", "V_CONST", "V_SHARED",
                          "V_LOOP1", "V_LOOP2", "V_ITEMS"}
    assert [u.split(": ", 1)[1] for u in unnamed] == ["os.environ.get(mystery)"]


def test_the_account_names_only_inputs_the_code_has():
    """An entry for a setting, a ``[cpt]`` key, a RunSpec field or a flag that no longer exists is stale."""
    fields, flags = set(run_config_fields()), set(run_options())
    keys, spec = {f"cpt.{k}" for k in cpt_keys()}, {f"spec.{f}" for f in run_spec_fields()}
    stale = [n for n in ACCOUNT if not (n in fields or n in flags or n in keys or n in spec or ":" in n)]
    assert not stale, f"entries of harness/inputs.py for inputs the code no longer has: {stale}"


def test_the_gaps_are_the_known_ones():
    assert {e.name for e in of(GAP)} == KNOWN_GAPS


def test_every_entry_says_where_or_why():
    for e in ACCOUNT.values():
        assert e.why.strip(), e
        assert (e.where if e.category in (KEY, COVERAGE, DERIVED) else not e.where), e
        assert e.category != INERT or len(e.why) <= 120, f"{e.name}: an inert input's reason is one short line"
    assert {e.where for e in of(COVERAGE)} == set(COVERAGE_FIELDS)
    assert {e.name: e.where for e in of(COVERAGE)} == {
        "tasks": "tasks", "langs": "languages", "cpt.eval_tasks": "steps"}


def test_the_key_fields_named_are_the_identitys(synthetic_world):
    """Each key input names a field the identity (or the init product's inputs) has."""
    from harness.spec import init_inputs

    spec = _spec(synthetic_world, probe=True, source="all", precision="bf16",
                 cpt={"language_sampling": "smoothed", "sampling_alpha": 0.5})
    idents = [k.identity for k in spec.cells.values()]
    fields = {f for ident in idents for f in ident} | {f"cpt.{k}" for k in idents[0]["cpt"]}
    fields |= {f"init:{f}" for f in init_inputs(idents[0], "code")}
    # the fields a cell's identity has only where they are given: the accelerator, the tasks' parameters, fewer
    # threads than the profile's CPUs
    fields |= set(_key_of(synthetic_world, device="cuda").identity)
    fields |= set(_key_of(synthetic_world, task_params={"sr-t": {"layer": 2}}).identity)
    fields |= set(_fewer_threads_key(synthetic_world, cores=2).identity)
    with mock.patch("harness.spec.CPT_VERSION", 1), mock.patch("harness.spec.EVAL_VERSION", 1):
        fields |= set(_key_of(synthetic_world).identity)
    unknown = [(e.name, e.where) for e in of(KEY) if e.where not in fields]
    assert not unknown, f"key inputs naming a field the identity does not have: {unknown}"


# -- every key input moves its key (hypothesis) ------------------------------------------------------------------
BASE = {"world": "synthetic", "device": "cpu", "tasks": ["sr-t"], "methods": ["random"], "seeds": [1],
        "source": "src"}


def _spec(world: Any, probe: bool = False, **overrides: Any) -> Any:
    """The resolved run of ``overrides`` over :data:`BASE` on ``world``, its values checked as a run checks them."""
    from harness.commands.common import check_config_tables
    from harness.config import make_config
    from harness.spec import resolve

    cfg = make_config(overrides={**BASE, **overrides})
    check_config_tables(cfg)
    return resolve(cfg, world, probe=probe)


def _key_of(world: Any, probe: bool = False, **overrides: Any) -> Any:
    """The keys of the one cell of the run ``overrides``."""
    spec = _spec(world, probe=probe, **overrides)
    assert len(spec.cells) == 1, spec.plan.cells
    return next(iter(spec.cells.values()))


def _keys_apart(spec: Any) -> None:
    keys = [k.key for k in spec.cells.values()]
    assert len(keys) >= 2 and len(set(keys)) == len(keys), spec.plan.cells


_PLANNED: dict[str, list[str]] = {}


def _planned_methods(world: Any) -> list[str]:
    """The methods a run of every method plans on ``world`` (resolved once)."""
    if world.hash not in _PLANNED:
        _PLANNED[world.hash] = sorted({c.method for c in _spec(world, methods=["all"]).plan.cells})
    return _PLANNED[world.hash]


@FAST
@given(data=st.data())
def test_methods_have_keys_apart(synthetic_world, data):
    methods = data.draw(st.lists(st.sampled_from(_planned_methods(synthetic_world)), min_size=2, max_size=4,
                                 unique=True))
    _keys_apart(_spec(synthetic_world, methods=methods))


@FAST
@given(seeds=st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=4, unique=True))
def test_seeds_have_keys_apart(synthetic_world, seeds):
    _keys_apart(_spec(synthetic_world, seeds=seeds))


@FAST
@given(data=st.data())
def test_dims_have_keys_apart(synthetic_world, data):
    import json

    hidden = json.loads((synthetic_world.source_dir("src") / "config.json").read_text())["hidden_size"]
    dims = data.draw(st.lists(st.one_of(st.just("full"), st.integers(1, hidden - 1)), min_size=2, max_size=4,
                              unique=True))
    _keys_apart(_spec(synthetic_world, dims=dims))


@FAST
@given(seed=st.integers(0, 2**32 - 1))
def test_sources_have_keys_apart(synthetic_world, seed):
    """Two sources, the decoder with its own identity and without (then only the source's name tells them)."""
    def fold(m: dict[str, Any]) -> None:
        m["sources"]["dec"].pop("own_identity")

    for world in (synthetic_world, _with_manifest(synthetic_world, fold)):
        spec = _spec(world, source="all", seeds=[seed])
        assert {c.source for c in spec.plan.cells} == {"src", "dec"}
        _keys_apart(spec)


def _with_manifest(world: Any, change: Any) -> Any:
    import copy

    manifest = copy.deepcopy(world.manifest)
    change(manifest)
    return dataclasses.replace(world, manifest=manifest)


@FAST
@given(field=st.sampled_from(["name", "version", "notes", "generator seed"]), value=st.integers(0, 10**9))
def test_the_worlds_manifest_moves_the_key(synthetic_world, field, value):
    """The world's identity: its name, version, notes, or the generator's inputs the target is built from."""
    def change(m: dict[str, Any]) -> None:
        if field == "generator seed":
            m["inputs"][0]["params"]["seed"] = m["inputs"][0]["params"]["seed"] + 1 + value
        else:
            m[field] = f"{m[field]}-{value}"

    other = _with_manifest(synthetic_world, change)
    assert other.hash != synthetic_world.hash
    assert _key_of(other).key != _key_of(synthetic_world).key


@FAST
@given(digest=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
def test_a_decoders_own_identity_moves_its_key_alone(synthetic_world, digest):
    def change(m: dict[str, Any]) -> None:
        m["sources"]["dec"]["sha256"] = digest

    other = _with_manifest(synthetic_world, change)
    if other.manifest == synthetic_world.manifest:
        return
    assert other.hash == synthetic_world.hash  # the world's hash leaves a source of its own identity out
    assert _key_of(other, source="dec").key != _key_of(synthetic_world, source="dec").key
    assert _key_of(other, source="src").key == _key_of(synthetic_world, source="src").key


def _two(strategy: Any) -> Any:
    """Two values of ``strategy`` that differ (as their hash sees them)."""
    from harness.core.hashing import stable_json

    return st.lists(strategy, min_size=2, max_size=2, unique_by=stable_json)


@FAST
@given(steps=_two(st.integers(0, 10**5)))
def test_the_cpt_steps_flag_moves_the_key(synthetic_world, steps):
    a, b = (_key_of(synthetic_world, cpt_steps=s) for s in steps)
    assert a.key != b.key and a.init_key == b.init_key


@FAST
@given(checkpoints=_two(st.frozensets(st.integers(1, 1000), max_size=4)))
def test_the_cpt_checkpoints_flag_moves_the_key(synthetic_world, checkpoints):
    a, b = (_key_of(synthetic_world, cpt_steps=1000, cpt_checkpoints=sorted(c)) for c in checkpoints)
    assert a.key != b.key


@FAST
@given(field=st.sampled_from(["eval_max_sentences", "heldout_max_sentences", "resources"]),
       value=st.integers(1, 10**6))
def test_the_profile_moves_the_key(synthetic_world, field, value):
    """The profile's name carries what only it sets (its sentence caps, its CPUs per cell: RunSpec's fields of the
    profile): a profile that differs from the cpu profile in one of them alone, under another name, is another
    key; and the paper profile's cells are not the cpu profile's."""
    from harness.core.profiles import PROFILES

    variant = {**PROFILES["cpu"], field: {"num_cpus": value} if field == "resources" else value}
    with mock.patch.dict(PROFILES, {"cpu-variant": variant}):
        other = _spec(synthetic_world, profile="cpu-variant")
    cpu, paper = (_spec(synthetic_world, profile=p) for p in ("cpu", "paper"))
    assert other.cpt == cpu.cpt and other.method_params == cpu.method_params
    keys = [next(iter(s.cells.values())).key for s in (cpu, other, paper)]
    assert len(set(keys)) == 3


@FAST
@given(precisions=st.lists(st.sampled_from(["fp32", "bf16", "auto"]), min_size=2, max_size=2),
       cpt=st.sampled_from([None, "fp32", "bf16"]))
def test_the_precision_moves_the_key_where_it_resolves_otherwise(synthetic_world, precisions, cpt):
    """--precision, as the run resolves it on the CPU (auto: fp32): the evaluation's precision, and CPT's unless
    ``[cpt] precision`` sets it (the kernels' label held: it is tested on its own)."""
    table = {"precision": cpt} if cpt else {}
    with mock.patch("harness.core.kernels.cpu_kernels", lambda bf16=False: "avx2"):
        specs = [_spec(synthetic_world, probe=True, precision=p, cpt=table) for p in precisions]
    resolved = [(s.eval_precision, s.cpt["precision"]) for s in specs]
    keys = [next(iter(s.cells.values())).key for s in specs]
    assert (keys[0] == keys[1]) == (resolved[0] == resolved[1]), (precisions, cpt, resolved)


CPT_VALUES = {
    "steps": st.integers(0, 10**5),
    "lr": st.floats(1e-12, 10.0),
    "effective_batch": st.integers(1, 4096),
    "per_device_batch": st.integers(1, 4096),
    "block_size": st.integers(2, 128),  # (the synthetic source takes 128 positions: more is fitted to them)
    "mlm_probability": st.floats(0.0, 1.0, exclude_min=True, exclude_max=True),
    "warmup_steps": st.integers(0, 10**4),
    "weight_decay": st.floats(0.0, 10.0),
    "checkpoints": st.lists(st.integers(1, 10**5), max_size=4, unique=True).map(sorted),
    "max_sentences_per_language": st.one_of(st.none(), st.integers(1, 10**6)),
    "precision": st.sampled_from(["fp32", "bf16"]),
    "save_every": st.one_of(st.none(), st.integers(0, 10**4)),
    "language_sampling": st.sampled_from(["shuffled", "smoothed"]),
    "sampling_alpha": st.floats(0.0, 1.0, exclude_min=True),
}


@pytest.mark.parametrize("name", sorted(CPT_VALUES))
@FAST
@given(data=st.data())
def test_each_cpt_setting_moves_the_key(synthetic_world, name, data):
    a, b = data.draw(_two(CPT_VALUES[name]))
    budget = {"steps": 10**5} if name == "checkpoints" else {}  # the checkpoints within the steps
    ka, kb = (_key_of(synthetic_world, cpt={**budget, name: v}) for v in (a, b))
    assert ka.key != kb.key, (name, a, b)


@FAST
@given(params=_two(st.fixed_dictionaries({"k": st.integers(1, 1000)},
                                         optional={"temperature": st.floats(1e-6, 100.0)})))
def test_method_params_move_the_key(synthetic_world, params):
    """The method's parameters as resolved (the profile's, overridden by the run's)."""
    specs = [_spec(synthetic_world, methods=["ofa"], method_params={"ofa": p}) for p in params]
    (a, b), resolved = ([next(iter(s.cells.values())) for s in specs], [s.method_params["ofa"] for s in specs])
    assert (a.key == b.key) == (resolved[0] == resolved[1]), (params, resolved)
    assert (a.init_key == b.init_key) == (a.key == b.key)


@FAST
@given(limits=_two(st.integers(2, 2048)))
def test_the_block_size_fitted_to_the_source_is_keyed(synthetic_world, limits):
    """The paper profile's 512-token blocks, clamped to what the source model takes: the clamped value is keyed."""
    keys = []
    for limit in limits:
        with mock.patch("harness.spec.source_positions", lambda world, source, n=limit: n):
            keys.append(_key_of(synthetic_world, profile="paper"))
    fitted = [min(512, n) for n in limits]
    assert [k.identity["cpt"]["block_size"] for k in keys] == fitted
    assert (keys[0].key == keys[1].key) == (fitted[0] == fitted[1])


LABELS = st.one_of(st.sampled_from(["avx2", "avx2-onednn"]),
                   st.text(alphabet="0123456789abcdef", min_size=8, max_size=8).map(lambda h: f"native:{h}"))


@FAST
@given(labels=_two(LABELS))
def test_the_cpu_kernels_label_moves_the_key(synthetic_world, labels):
    """What the kernel variables choose reaches the key through the label measured where the run resolves."""
    keys = []
    for label in labels:
        with mock.patch("harness.core.kernels.cpu_kernels", lambda bf16=False, x=label: x):
            keys.append(_key_of(synthetic_world, probe=True))
    assert keys[0].key != keys[1].key and keys[0].init_key != keys[1].init_key


@FAST
@given(codes=_two(st.dictionaries(st.sampled_from(["methods/random_init.py", "methods/shared.py"]),
                                  st.text(alphabet="0123456789abcdef", min_size=16, max_size=16), min_size=1)))
def test_the_method_code_moves_the_init_products_key(synthetic_world, codes):
    """The method's code keys its products (the cell's key stays: a finished cell of other code is named stale)."""
    from harness.core.hashing import hash_obj
    from harness.spec import product_keys

    ident = _key_of(synthetic_world).identity
    (init_a, cpt_a), (init_b, cpt_b) = (product_keys(ident, hash_obj(c)) for c in codes)
    assert init_a != init_b and cpt_a != cpt_b


@FAST
@given(versions=_two(st.fixed_dictionaries({"lib:torch": st.sampled_from(["2.13.0", "2.14.0", "3.0.0"]),
                                            "lib:numpy": st.sampled_from(["2.2.6", "2.3.0"])})))
def test_the_libraries_versions_key_the_init_product_and_name_a_cell_stale(synthetic_world, versions):
    from harness.core.declarations import changed_files

    a, b = versions
    with mock.patch("harness.spec.library_code", return_value=a):
        key_a = _key_of(synthetic_world, probe=True)
    with mock.patch("harness.spec.library_code", return_value=b):
        key_b = _key_of(synthetic_world, probe=True)
    assert key_a.key == key_b.key and key_a.init_key != key_b.init_key
    method = {"methods/random_init.py": "0" * 16}
    assert changed_files({**method, **a}, {**method, **b}) == sorted(k for k in a if a[k] != b[k])
    assert changed_files(method, {**method, **b}) == []  # recorded before the libraries were


@FAST
@given(name=st.sampled_from(["CPT_VERSION", "EVAL_VERSION"]), version=st.integers(1, 10**6))
def test_the_cpt_and_evaluation_versions_move_the_key(synthetic_world, name, version):
    """Bumped from 0, each moves the key (CPT's its product's too); at 0, neither is in the identity."""
    from harness import spec as spec_module

    before = _key_of(synthetic_world, cpt_steps=2)
    assert "cpt_version" not in before.identity and "eval_version" not in before.identity
    with mock.patch.object(spec_module, name, version):
        after = _key_of(synthetic_world, cpt_steps=2)
    assert after.key != before.key and after.init_key == before.init_key
    assert (after.cpt_key != before.cpt_key) == (name == "CPT_VERSION")


@FAST
@given(version=st.integers(0, 10**6))
def test_init_version_moves_the_key(synthetic_world, version):
    from harness import spec as spec_module

    before = _key_of(synthetic_world)
    if version == spec_module.INIT_VERSION:
        return
    with mock.patch.object(spec_module, "INIT_VERSION", version):
        after = _key_of(synthetic_world)
    assert after.key != before.key and after.init_key != before.init_key


@FAST
@given(device=st.sampled_from(["cuda", "cuda:1", "mps"]), emulated=st.booleans())
def test_the_accelerator_moves_the_key(synthetic_world, device, emulated):
    """A cell computed on an accelerator, or on a CPU taking its branches, is not a plain CPU cell (at the same
    precision); a plain CPU cell's key carries no accelerator."""
    with mock.patch.dict(os.environ, {"HARNESS_EMULATE_ACCELERATOR": "1" if emulated else ""}):
        cpu = _key_of(synthetic_world, device="cpu", precision="fp32")
        acc = _key_of(synthetic_world, device=device, precision="fp32")
    assert acc.key != cpu.key and acc.init_key != cpu.init_key
    assert ("accelerator" in cpu.identity) == emulated
    assert "accelerator" not in _key_of(synthetic_world, device="cpu", precision="fp32").identity


@FAST
@given(layer=st.integers(0, 3), epochs=st.integers(1, 9))
def test_task_params_move_the_key(synthetic_world, layer, epochs):
    plain = _key_of(synthetic_world)
    a = _key_of(synthetic_world, task_params={"sr-t": {"layer": layer}})
    b = _key_of(synthetic_world, task_params={"sr-t": {"layer": layer}, "ner": {"epochs": epochs}})
    assert len({plain.key, a.key, b.key}) == 3 and plain.init_key == a.init_key == b.init_key
    assert _key_of(synthetic_world, task_params={"sr-t": {}}).key == plain.key  # none given: no key moves


def _fewer_threads_key(world: Any, cores: int, held: str = "", workers: int | None = None) -> Any:
    """The keys of a paper-profile cell (8 CPUs a cell) on a machine of ``cores`` cores (``held``: the harness
    process's OMP_NUM_THREADS; ``workers``: cells side by side)."""
    with mock.patch("harness.core.hosts.available_cpus", return_value=cores), \
            mock.patch("harness.executors.available_cpus", return_value=cores), \
            mock.patch.dict(os.environ, {"OMP_NUM_THREADS": held}):
        return _key_of(world, probe=True, profile="paper", **({"workers": workers} if workers else {}))


@FAST
@given(cores=st.integers(1, 64), held=st.sampled_from(["", "1", "2", "4", "16"]), workers=st.sampled_from([None, 1, 2]))
def test_fewer_threads_than_the_profiles_cpus_move_the_key(synthetic_world, cores, held, workers):
    from harness.spec import cell_threads

    got = _fewer_threads_key(synthetic_world, cores, held, workers)
    full = _fewer_threads_key(synthetic_world, 64)
    assert "threads" not in full.identity
    side = workers or max(1, cores // 8)
    threads = max(1, min(8, cores // side, int(held) if held else 64))
    assert (got.key == full.key) == (threads == 8)
    assert got.identity.get("threads", 8) == threads
    assert cell_threads(8, None) == 8  # a plan, or Ray: the profile's


KERNEL_VARIABLES = ("spec.cpu_kernels", "env:HARNESS_CPU_KERNELS", "env:HARNESS_CPU_KERNELS_PINNED", "env:MKL_*",
                    "env:ATEN_*", "env:OPENBLAS_*", "env:ONEDNN_*", "env:DNNL_*", "env:GOTO*", "env:LD_PRELOAD",
                    "env:LD_LIBRARY_PATH", "env:DYLD_LIBRARY_PATH")
KEY_TESTS = {
    "methods": test_methods_have_keys_apart,
    "seeds": test_seeds_have_keys_apart,
    "dims": test_dims_have_keys_apart,
    "source": test_sources_have_keys_apart,
    **dict.fromkeys(("world", "spec.world", "spec.world_hash", "identity:world", "identity:target",
                     "env:HARNESS_GLOT500_SPEC"), test_the_worlds_manifest_moves_the_key),
    "identity:source": test_a_decoders_own_identity_moves_its_key_alone,
    "cpt_steps": test_the_cpt_steps_flag_moves_the_key,
    "cpt_checkpoints": test_the_cpt_checkpoints_flag_moves_the_key,
    **dict.fromkeys(("profile", "spec.eval_max_sentences", "spec.heldout_max_sentences", "spec.cpus_per_cell"),
                    test_the_profile_moves_the_key),
    **dict.fromkeys(("precision", "spec.eval_precision"), test_the_precision_moves_the_key_where_it_resolves_otherwise),
    **{f"cpt.{k}": test_each_cpt_setting_moves_the_key for k in CPT_VALUES},
    **dict.fromkeys(("method_params", "spec.method_params"), test_method_params_move_the_key),
    "spec.fitted": test_the_block_size_fitted_to_the_source_is_keyed,
    **dict.fromkeys(KERNEL_VARIABLES, test_the_cpu_kernels_label_moves_the_key),
    **dict.fromkeys(("spec.method_code", "code:method"), test_the_method_code_moves_the_init_products_key),
    "code:libraries": test_the_libraries_versions_key_the_init_product_and_name_a_cell_stale,
    "code:INIT_VERSION": test_init_version_moves_the_key,
    "code:tasks": test_the_cpt_and_evaluation_versions_move_the_key,
    "code:harness": test_the_cpt_and_evaluation_versions_move_the_key,
    **dict.fromkeys(("device", "spec.device", "env:HARNESS_EMULATE_ACCELERATOR"), test_the_accelerator_moves_the_key),
    "task_params": test_task_params_move_the_key,
    **dict.fromkeys(("workers", "env:OMP_NUM_THREADS", "spec.threads"),
                    test_fewer_threads_than_the_profiles_cpus_move_the_key),
}


def test_every_key_input_has_a_property_test():
    assert set(KEY_TESTS) == {e.name for e in of(KEY)}, "a key input without its property test, or a test of none"
    for name, test in KEY_TESTS.items():
        assert hasattr(test, "hypothesis"), f"{name}: {test.__name__} is not a property test"


def test_a_derived_entry_names_parts_the_account_has():
    for e in of(DERIVED):
        parts = [p.strip() for p in e.where.split(",")]
        for part in parts:
            if part == "RunConfig":
                assert set(run_config_fields()) <= set(ACCOUNT)
            elif part.endswith("*"):
                assert any(n.startswith(part[:-1]) and n != e.name for n in ACCOUNT), (e.name, part)
            else:
                assert part in ACCOUNT, (e.name, part)
