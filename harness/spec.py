"""A run's settings, resolved once: :class:`RunSpec`.

The command line, the config file, the profile, the device, the precisions, the fit to the source models, the
plan of cells and the executor's choice are resolved here, in the ``harness`` process, into one immutable object.
Every later stage reads it: the runner, each cell (:mod:`harness.cell`), the executors, the seed aggregates, the
results table. Worker processes receive it pickled and never resolve anything again; ``harness plan`` resolves it
without probing the machine (``probe=False``: ``auto`` plans for a GPU, nothing is asked of CUDA).

A cell's identity (the hash its MLflow runs are found by) and its products' keys are computed here too, once per
cell, from the resolved settings: a home resumes only while they stay what they were
(``tests/test_golden_keys.py``).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from harness.core.hashing import hash_obj
from harness.core.kernels import NATIVE as NATIVE_KERNELS
from harness.core.positions import usable_positions
from harness.core.precision import DEFAULT_EVAL_PRECISION
from harness.cpt_spec import CptSpec
from harness.plan import Cell, Plan

INIT_VERSION = 3  # bump when the initialization path changes its output for the same inputs (each bump's reason:
# docs/reliability.md, "What moves a key")
# DEFAULT_EVAL_PRECISION (fp32) and NATIVE_KERNELS (the label of a cell whose identity holds none) are left out of
# a cell's identity, so that a home's keys hold whichever of them it was made under. A process labels its kernels
# by measuring them (harness.core.kernels: avx2, or native:<fingerprint>)
# bump when continued pre-training (harness/cpt*.py, the surgery it trains) or the evaluation (tasks/, harness/
# evaluation.py, a profile's caps) changes its numbers for the same inputs, as INIT_VERSION for the initialization:
# a cell's identity holds each only once it is above 0, so the homes made before keep their keys
CPT_VERSION = 0
EVAL_VERSION = 0
INIT_INPUTS = ("world", "source", "method", "params", "dim", "seed", "init_version")
@dataclass(frozen=True)
class CellKeys:
    """What a cell is found by: its identity, its hash, its products' keys."""

    identity: dict[str, Any]
    key: str
    init_key: str
    cpt_key: str | None


@dataclass(frozen=True)
class RunSpec:
    """Every setting of a run, resolved (:func:`resolve`)."""

    cfg: Any  # the RunConfig as given (read, never changed)
    world: str
    world_hash: str
    device: str  # resolved: ``auto`` is cpu or cuda here (a plan: cuda)
    eval_precision: str
    cpu_kernels: str  # the cells' CPU kernels, measured (harness.core.kernels): ``avx2`` or ``native:<8 hex>``
    cpt: CptSpec
    fitted: dict[str, str]
    plan: Plan
    heldout_languages: tuple[str, ...]
    method_params: dict[str, dict[str, Any]]
    method_code: dict[str, dict[str, str]]
    eval_max_sentences: int | None
    heldout_max_sentences: int | None
    cpt_devices: int
    cpus_per_cell: int
    threads: int  # the torch threads each cell computes with (:func:`cell_threads`)
    cells: dict[Cell, CellKeys]
    executor: Any  # where the cells run (:class:`harness.executors.ExecutorChoice`; None in a plan)

    # -- what the stages ask of it ------------------------------------------------------------------------
    @property
    def profile(self) -> str:
        return self.cfg.profile

    def experiment(self, source: str) -> str:
        return self.cfg.experiment or f"{self.world}/{source}"

    def experiments(self) -> list[str]:
        return sorted({self.experiment(c.source) for c in self.plan.cells})

    @property
    def cpu_bf16(self) -> bool:
        """Whether the cells compute in bf16 on the CPU (:func:`cpu_bf16`): their kernels' label then holds the
        bf16 kernels'."""
        return cpu_bf16(self.device, self.eval_precision, str(self.cpt.get("precision", "fp32")))

    @property
    def numerics(self) -> dict[str, str]:
        """:func:`identity_numerics` of the run."""
        return identity_numerics(self.eval_precision, self.cpu_kernels, accelerator_label(self.device),
                                 self.threads if self.threads < self.cpus_per_cell else None)

    def keys(self, cell: Cell) -> CellKeys:
        return self.cells[cell]

    def code_key(self, method: str) -> str:
        return hash_obj(self.method_code[method])

    def init_inputs(self, cell: Cell) -> dict[str, Any]:
        """What a cell's init product is keyed by: its identity without the profile and CPT settings, and the
        digest of its method's code (an edited method builds its products again)."""
        return init_inputs(self.cells[cell].identity, self.code_key(cell.method))

    @functools.cached_property
    def _product_cells(self) -> Counter:
        return Counter(k for keys in self.cells.values() for k in {keys.init_key, keys.cpt_key} if k)

    def shared(self, product_key: str) -> bool:
        """Whether more than one cell of the run is keyed to the product ``product_key``."""
        return self._product_cells[product_key] > 1

    def resources(self) -> dict[str, float]:
        """The CPUs and GPUs one cell asks of a cluster: the profile's CPUs; one GPU per CPT device on a GPU."""
        gpus = float(self.cpt_devices) if self.device.startswith("cuda") else 0.0
        return {"num_cpus": float(self.cpus_per_cell), "num_gpus": gpus}


def init_inputs(ident: dict[str, Any], code: str | None = None) -> dict[str, Any]:
    kernels = {k: ident[k] for k in ("cpu_kernels", "accelerator", "threads") if k in ident}  # (an init computes
    # with them)
    own = {"source_identity": ident["source_identity"]} if "source_identity" in ident else {}  # (a decoder's)
    return {**{k: ident[k] for k in INIT_INPUTS}, **kernels, **own, **({"code": code} if code else {})}


def cpu_bf16(device: str, *precisions: str) -> bool:
    """Whether a run on ``device`` with its resolved ``precisions`` (evaluation, CPT) computes in bf16 on the CPU
    (a CPU device, the accelerator's emulation included): its oneDNN bf16 kernels are then part of its kernels'
    label (:func:`harness.core.kernels.cpu_kernels`)."""
    return not str(device).startswith(("cuda", "mps")) and "bf16" in precisions


def identity_numerics(eval_precision: str, cpu_kernels: str, accelerator: str | None = None,
                      threads: int | None = None) -> dict[str, Any]:
    """What a cell's numbers were computed with, as its identity holds it: the evaluation precision away from
    fp32, the CPU kernels' measured label (:mod:`harness.core.kernels`: ``avx2``, ``native:<fingerprint>``), the
    accelerator whose branches it takes (:func:`accelerator_label`; none on a plain CPU), the torch threads a cell
    computes with where they are fewer than its profile's CPUs (:func:`cell_threads`; a parallel sum splits by
    thread), so the homes made before any of them was part of it keep their keys."""
    return {**({"eval_precision": eval_precision} if eval_precision != DEFAULT_EVAL_PRECISION else {}),
            **({"cpu_kernels": cpu_kernels} if cpu_kernels != NATIVE_KERNELS else {}),
            **({"accelerator": accelerator} if accelerator else {}),
            **({"threads": int(threads)} if threads else {})}


def cell_threads(cpus_per_cell: int, executor: Any) -> int:
    """The torch threads every cell of a run computes with (:func:`harness.runner.cell_threads` sets exactly
    these, in the harness process, a pool worker or Ray): the profile's CPUs a cell, or fewer where the machine
    has fewer cores for each of the cells side by side (the local executor's ``workers``, at most), or the harness
    process is held to fewer (``OMP_NUM_THREADS``); on Ray, or in a plan, the profile's."""
    if executor is None or getattr(executor, "backend", "local") == "ray":
        return cpus_per_cell
    import os

    from harness.core.hosts import available_cpus

    cores = available_cpus() // max(1, int(executor.workers))
    held = os.environ.get("OMP_NUM_THREADS", "").strip()
    if held.isdigit() and int(held) > 0:
        cores = min(cores, int(held))
    return max(1, min(cpus_per_cell, cores))


def accelerator_label(device: str) -> str | None:
    """The accelerator a run on ``device`` computes with, as its cells' identity names it: ``cuda`` or ``mps`` (its
    kernels, attention and batch search are not a CPU's), ``emulated`` for a CPU that takes the accelerator's
    branches (:data:`harness.core.devices.EMULATE_ENV`); None on a plain CPU (no key of a CPU cell moves)."""
    from harness.core.devices import emulating, is_accelerator

    if is_accelerator(device):
        return str(device).split(":")[0]
    return "emulated" if emulating() else None


def cell_identity(spec_fields: dict[str, Any], cell: Cell) -> dict[str, Any]:
    """A cell's identity: what its numbers depend on. The evaluation precision enters it only away from fp32, the
    CPU kernels' measured label (:mod:`harness.core.kernels`) always, so the homes made before either was part of
    it keep their keys (the pinned set's label, ``avx2``, is the one they carry)."""
    ident = {"world": spec_fields["world_hash"], "source": cell.source, "method": cell.method,
             "params": spec_fields["method_params"][cell.method], "dim": cell.dim, "seed": cell.seed,
             "profile": spec_fields["profile"], "cpt": spec_fields["cpt"].product(), "init_version": INIT_VERSION,
             **({"cpt_version": CPT_VERSION} if CPT_VERSION else {}),
             **({"eval_version": EVAL_VERSION} if EVAL_VERSION else {})}
    own = spec_fields.get("source_identity", {}).get(cell.source)  # a source outside the world's hash (a decoder)
    tasks = spec_fields.get("task_params") or {}  # the tasks' protocol as given (none: no key moves)
    return {**ident, **({"source_identity": own} if own else {}), **({"task_params": tasks} if tasks else {}),
            **identity_numerics(spec_fields["eval_precision"], spec_fields["cpu_kernels"],
                                spec_fields.get("accelerator"), spec_fields.get("fewer_threads"))}


def product_keys(ident: dict[str, Any], code: str | None) -> tuple[str, str | None]:
    """(init product key, CPT product key or None without CPT), known before either is built."""
    from harness.core.cache import cpt_product_key

    init_key = hash_obj(init_inputs(ident, code))
    if int(ident["cpt"]["steps"]) <= 0:
        return init_key, None
    settings = {**ident["cpt"], "version": ident["cpt_version"]} if "cpt_version" in ident else ident["cpt"]
    return init_key, cpt_product_key(init_key, settings, ident["seed"])


def resolve(cfg: Any, world: Any, *, probe: bool = True) -> RunSpec:
    """The run's :class:`RunSpec` on ``world`` (built, or a declaration when ``probe`` is False: ``harness plan``
    asks nothing of the machine, and ``auto`` plans for a GPU)."""
    from harness.config import resolve_device
    from harness.core.kernels import cpu_kernels, planned_kernels
    from harness.core.precision import run_precisions
    from harness.core.registry import method_code
    from harness.plan import make_plan

    prof, plan = profile_of(cfg), make_plan(cfg, world)
    device = resolve_device(cfg.device) if probe else ("cuda" if cfg.device == "auto" else cfg.device)
    methods = sorted({c.method for c in plan.cells})
    code = {m: {**method_code(m), **library_code()} for m in methods} if probe else {}
    settings, params = cpt_settings(cfg, prof), {m: method_params(cfg, m, prof) for m in methods}
    settings["precision"], eval_precision = run_precisions(cfg, device, prof, resolve=probe)
    settings, fitted = fit_cpt(settings, world, sorted({c.source for c in plan.cells}))
    cpt = CptSpec(settings)
    fields = {"world_hash": world.hash, "profile": cfg.profile, "cpt": cpt, "eval_precision": eval_precision,
              "method_params": params, "accelerator": accelerator_label(device),
              "task_params": {t: dict(p) for t, p in sorted(cfg.task_params.items()) if p},
              # measured where the cells run; a plan (for a cluster, maybe) asks nothing of this machine
              "cpu_kernels": cpu_kernels(cpu_bf16(device, eval_precision, str(settings.get("precision", "fp32"))))
              if probe else planned_kernels(),
              "source_identity": {s: h for s in {c.source for c in plan.cells} if (h := _source_identity(world, s))}}
    cpus = cell_cpus(prof)
    executor = _executor(cfg, device, cpt.devices, cpus) if probe else None
    threads = cell_threads(cpus, executor)
    fields["fewer_threads"] = threads if threads < cpus else None
    return RunSpec(cfg=cfg, world=world.name, world_hash=world.hash,
                   device=device, eval_precision=eval_precision, cpu_kernels=fields["cpu_kernels"], cpt=cpt, fitted=fitted, plan=plan,
                   heldout_languages=tuple(_heldout_languages(cfg, world, cpt)), method_params=params,
                   method_code=code, eval_max_sentences=prof.get("eval_max_sentences"),
                   heldout_max_sentences=prof.get("heldout_max_sentences"), cpt_devices=cpt.devices,
                   cpus_per_cell=cpus, threads=threads, cells=_cells(plan, fields, code), executor=executor)


NUMERIC_LIBRARIES = ("torch", "transformers", "tokenizers", "fasttext", "numpy")


def library_code() -> dict[str, str]:
    """The versions of the libraries that compute a cell's numbers (``{"lib:torch": "2.13.0", ...}``), recorded with
    its method's code: a finished cell computed with other versions is named stale as one of older method code is
    (``--rerun stale`` computes it again), and its init product is keyed by them."""
    from importlib.metadata import PackageNotFoundError, version

    from harness.core.versions import library_versions

    have = library_versions()
    out = {}
    for lib in NUMERIC_LIBRARIES:
        if lib in have:
            out[f"lib:{lib}"] = have[lib]
            continue
        try:
            out[f"lib:{lib}"] = version(lib)
        except PackageNotFoundError:
            out[f"lib:{lib}"] = "absent"
    return out


def _source_identity(world: Any, source: str) -> str | None:
    get = getattr(world, "source_identity", None)  # (a world object of a test may not have it)
    return get(source) if get is not None else None


def _cells(plan: Plan, fields: dict[str, Any], code: dict[str, dict[str, str]]) -> dict[Cell, CellKeys]:
    """Each cell's identity and keys (the products' keys need the method's code: none in a plan)."""
    idents = {cell: cell_identity(fields, cell) for cell in plan.cells}
    cells = {}
    for cell, ident in idents.items():
        init_key, cpt_key = product_keys(ident, hash_obj(code[cell.method]) if code else None)
        cells[cell] = CellKeys(ident, hash_obj(ident), init_key, cpt_key)
    return cells


def profile_of(cfg: Any) -> dict[str, Any]:
    """The run's profile (its name is checked with the run's settings: :mod:`harness.config`)."""
    from harness.core.profiles import profile

    return profile(cfg.profile)


def cpt_settings(cfg: Any, prof: dict[str, Any]) -> dict[str, Any]:
    """The run's CPT settings: the profile's ``prof``, the ``[cpt]`` table over them, then the flags."""
    from harness.core.errors import ConfigError
    from harness.core.profiles import PROFILES

    s = dict(prof["cpt"])
    # beside the profiles' own: the batch search switch, the language sampling (harness.corpus)
    known = {k for p in PROFILES.values() for k in p["cpt"]} | {"auto_batch", "language_sampling", "sampling_alpha"}
    unknown = sorted(set(cfg.cpt) - known)
    if unknown:
        raise ConfigError(f"config key 'cpt': unknown setting(s) {', '.join(map(repr, unknown))}; known: "
                          f"{', '.join(sorted(known))}")
    if not isinstance(cfg.cpt.get("eval_tasks", True), bool):
        raise ConfigError(f"config key 'cpt.eval_tasks': expected true or false, got {cfg.cpt['eval_tasks']!r}")
    s.update(cfg.cpt)
    if cfg.cpt_steps is not None:
        s["steps"] = cfg.cpt_steps
    s["checkpoints"] = sorted(set(cfg.cpt_checkpoints) | set(s.get("checkpoints") or []))
    # whether the tasks are evaluated again after CPT: the profile says (the cpu profile's CPT is a smoke test, so
    # only the held-out MLM loss is measured after it), unless the run names a CPT budget of its own
    if "eval_tasks" not in cfg.cpt and (cfg.cpt_steps is not None or cfg.cpt_checkpoints or "steps" in cfg.cpt):
        s["eval_tasks"] = True
    s["eval_tasks"] = bool(s.get("eval_tasks", True))
    return s


def cell_cpus(prof: dict[str, Any]) -> int:
    """The CPUs the profile ``prof`` gives one cell (at least 1)."""
    return max(1, int(prof.get("resources", {}).get("num_cpus", 1)))


def method_params(cfg: Any, method: str, prof: dict[str, Any]) -> dict[str, Any]:
    """A method's parameters in a run: the profile's settings for it (``prof``), overridden by the run's
    ``method_params`` (the one place they are merged: ``harness run``, ``harness plan`` and ``harness init``)."""
    return {**prof.get("method_params", {}).get(method, {}), **cfg.method_params.get(method, {})}


def cpt_devices(cfg: Any) -> int:
    """The GPUs one cell's CPT spans (``[cpt] devices`` / ``--cpt-devices``, else the profile's)."""
    return CptSpec(cpt_settings(cfg, profile_of(cfg))).devices


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v  # (not NaN)


def _cpt_rules() -> dict[str, tuple[str, Any]]:
    """What each ``[cpt]`` setting takes: (what to say, a check of a value)."""
    from harness.core.precision import PRECISIONS
    from harness.corpus import SAMPLING

    def count(least: int) -> tuple[str, Any]:
        return (f"an integer >= {least}", lambda v: _is_int(v) and v >= least)

    def optional(rule: tuple[str, Any]) -> tuple[str, Any]:
        return (f"{rule[0]} (or null: the default)", lambda v: v is None or rule[1](v))

    return {
        "steps": count(0), "warmup_steps": count(0), "effective_batch": count(1), "per_device_batch": count(1),
        "block_size": count(2), "devices": count(1), "save_every": optional(count(0)),
        "max_sentences_per_language": optional(count(1)),
        "lr": ("a number > 0", lambda v: _is_number(v) and v > 0),
        "weight_decay": ("a number >= 0", lambda v: _is_number(v) and v >= 0),
        "mlm_probability": ("a number between 0 and 1 (exclusive)", lambda v: _is_number(v) and 0 < v < 1),
        "sampling_alpha": ("a number in (0, 1]", lambda v: _is_number(v) and 0 < v <= 1),
        "checkpoints": ("a list of integers >= 1", lambda v: isinstance(v, list) and all(_is_int(c) and c >= 1
                                                                                        for c in v)),
        "eval_tasks": ("true or false", lambda v: isinstance(v, bool)),
        "auto_batch": ("true or false", lambda v: isinstance(v, bool)),
        "precision": (f"one of {', '.join(PRECISIONS)}", lambda v: isinstance(v, str) and v.lower() in PRECISIONS),
        "language_sampling": (f"one of {', '.join(SAMPLING)}", lambda v: v in SAMPLING),
    }


def cpt_value_problem(key: str, value: Any) -> str | None:
    """What the ``[cpt]`` setting ``key`` takes, when ``value`` is not such a value (None: it is, or the setting
    is not one the harness checks the value of)."""
    rule = _cpt_rules().get(key)
    return None if rule is None or rule[1](value) else rule[0]


def check_cpt_table(cfg: Any, settings: dict[str, Any]) -> None:
    """What the merged CPT settings (``settings``: :func:`cpt_settings`) allow to be checked before
    anything is written: every value of the ``[cpt]`` table (:func:`cpt_value_problem`: ``precision`` a
    precision's name, ``language_sampling`` one of the samplings, the sizes and rates in range), the checkpoints
    within the steps, and the effective batch split over the devices one cell's CPT spans (else torchrun starts,
    and every rank fails on it)."""
    from harness.core.errors import ConfigError

    for key, value in (cfg.cpt or {}).items():
        if key == "devices" and "cpt_devices" in getattr(cfg, "_flags", ()):
            continue  # --cpt-devices: checked where the flag is read
        wrong = cpt_value_problem(key, value)
        if wrong:
            raise ConfigError(f"config key 'cpt.{key}': expected {wrong}, got {value!r}; fix it in the [cpt] table "
                              f"of the config file")
    steps = int(settings.get("steps") or 0)
    outside = [c for c in settings.get("checkpoints") or [] if not 0 < int(c) <= steps]
    if outside:  # else dropped without a word: CPT stops at its last step
        given = "--cpt-steps" if cfg.cpt_steps is not None else "[cpt] steps" if "steps" in (cfg.cpt or {}) else \
            f"the {cfg.profile} profile's CPT steps"
        raise ConfigError(f"--cpt-checkpoints {','.join(map(str, outside))} not within 1..{steps} ({given}: "
                          f"{steps}); give checkpoints between 1 and the CPT steps, or more --cpt-steps")
    n = CptSpec(settings).devices
    if n > 1 and steps > 0:
        from harness.cpt_batch import batch_layout

        effective, per_device = int(settings["effective_batch"]), int(settings["per_device_batch"])
        try:
            batch_layout(effective, per_device, n)
        except ConfigError:
            fits = [d for d in range(1, n) if effective % d == 0]
            raise ConfigError(f"--cpt-devices {n}: the effective batch {effective} cannot be split over {n} "
                              f"device(s) (at most {per_device} sequences per device); give a number of devices "
                              f"that divides it (e.g. {fits[-1]}), or [cpt] effective_batch a multiple of {n}"
                              ) from None


def check_precisions(cfg: Any) -> None:
    """The run's precisions (``--precision``, ``[cpt] precision``, else the profile's) resolved for the device
    the run will use, before anything is written: fp16 on a CPU is refused here, not once the home, the store and
    the world exist (:func:`harness.core.precision.run_precisions`)."""
    from harness.config import resolve_device
    from harness.core.errors import ConfigError
    from harness.core.precision import resolve_precision, run_precisions

    device = resolve_device(cfg.device)
    given = (("--precision", cfg.precision), ("config key 'cpt.precision'", (cfg.cpt or {}).get("precision")))
    for name, value in given:
        if value is not None:
            try:
                resolve_precision(value, device)
            except ConfigError as exc:
                raise ConfigError(f"{name} {value}: {exc}") from None
    run_precisions(cfg, device, profile_of(cfg))


def _executor(cfg: Any, device: str, cpt_devices: int, cpus_per_cell: int) -> Any:
    from harness.core.devices import compute_device
    from harness.executors import choose

    return choose(cfg, compute_device(device), cpt_devices, cpus_per_cell)


# -- settings fitted to the source model ------------------------------------------------------------------
# A profile names sizes for a family of models (the ``paper`` profile's CPT blocks of 512 tokens for XLM-R); a
# world's source model may take fewer positions (the synthetic world's 128). The harness **clamps** such a setting
# to what the model takes, rather than refusing the run: the profile stays usable on every world, the clamped value
# is part of the cells' identity (it is the value CPT runs with), it is printed when the run starts, logged on every
# cell run as a ``fitted.<setting>`` parameter that names the requested value, the used one and why, and named
# under every board the run's rows appear on. A setting the model does not bound is never touched. (The tasks' own
# maximum lengths are fitted where the model is at hand, ``tasks.data.max_input_length``, and logged with the
# task's protocol, ``<task>.max_length``.)
def source_positions(world: Any, source: str) -> int | None:
    """The longest input the source model takes, from its ``config.json`` (None when the world has no folder)."""
    path = world.source_dir(source) / "config.json"
    if not path.is_file():
        return None
    return usable_positions(json.loads(path.read_text()))


def fit_cpt(cpt: dict[str, Any], world: Any, sources: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``cpt`` with its block size clamped to the shortest input among ``sources``' models, and
    ``{"cpt.block_size": "512 -> 128: ..."}`` for every setting changed."""
    limits = {s: n for s in sources if (n := source_positions(world, s)) is not None}
    fitted, notes = dict(cpt), {}
    if not limits:
        return fitted, notes
    source = min(limits, key=lambda s: (limits[s], s))
    limit = limits[source]
    block = int(cpt["block_size"])
    if block > limit:
        fitted["block_size"] = limit
        notes["cpt.block_size"] = f"{block} -> {limit}: source model {source!r} takes {limit} positions"
    return fitted, notes


def _heldout_languages(cfg: Any, world: Any, cpt: CptSpec) -> list[str]:
    """The languages of the held-out MLM diagnostic: every language of the MLM task, whatever ``--langs`` says.
    It is a figure of the cell's CPT (one value a step, logged once), not of an evaluation: a run on a subset of
    the languages and a later one on all of them must find the same value."""
    if cpt.steps <= 0:
        return []
    from harness.plan import task_languages

    return task_languages("mlm", world)
