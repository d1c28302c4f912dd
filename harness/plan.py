"""``harness plan``: the cells of a run, what each asks of a cluster, and a GPU-hour estimate, before anything runs.

The estimate is deliberately simple and its figures are stated where they come from, so that users can size a
cluster. Per cell:

    init   the method's own cost (hypernetwork or fastText training, similarity search), from the papers' budgets
    cpt    steps × effective batch × block tokens / the CPT tokens per second measured on a named GPU
           (``harness/throughput.json``; a card never measured: its bf16 peak at the measured MFU)
    eval   (1 + checkpoints + final) evaluations × the per-task cost (tagging fine-tunes a model each time)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config import RunConfig, run_seeds
from harness.core.errors import ConfigError, HarnessError, MissingResourceError
from harness.core.profiles import PROFILES
from harness.core.profiles import profile as get_profile
from harness.core.registry import METHODS, TASKS, dim_refusal


@dataclass(frozen=True)
class Cell:
    source: str
    method: str
    dim: int | None
    seed: int

    @property
    def label(self) -> str:
        d = "full" if self.dim is None else str(self.dim)
        return f"{self.method} | {self.source} | dim {d} | seed {self.seed}"


@dataclass
class Plan:
    cells: list[Cell]
    tasks: list[str]
    languages: dict[str, list[str]]  # task -> languages
    skipped: list[str] = field(default_factory=list)


def cpt_settings(cfg: RunConfig) -> dict[str, Any]:
    s = dict(get_profile(cfg.profile)["cpt"])
    known = {k for prof in PROFILES.values() for k in prof["cpt"]} | {"auto_batch", "language_sampling", "sampling_alpha"}
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


# CPT settings that do not change what CPT computes: the number of devices (the effective batch is fixed) and
# whether the tasks are evaluated after it
_NOT_PRODUCT = frozenset({"devices", "eval_tasks", "auto_batch"})


def without_devices(cpt: dict[str, Any]) -> dict[str, Any]:
    """CPT settings that define the product (and the cell): all but :data:`_NOT_PRODUCT`."""
    return {k: v for k, v in cpt.items() if k not in _NOT_PRODUCT}


def last_task_step(cpt: dict[str, Any]) -> int:
    """The last step at which a cell's tasks are evaluated: the final CPT step, or 0 when CPT is off or the
    tasks are not evaluated after it (``eval_tasks``)."""
    steps = int(cpt["steps"])
    return steps if steps > 0 and cpt.get("eval_tasks", True) else 0


def plan_cells(cfg: RunConfig, world: Any) -> tuple[list[Cell], list[str]]:
    """The cells of a run and why the others were skipped (one phrase per reason), from what a world declares: its
    languages and sources (``--langs``, ``--source`` are checked against them), the resources each method
    requires, each method's support of factorized dimensions, and the source models' hidden sizes (a ``--dims``
    at or above one is refused: :func:`check_dims`). ``world`` is a built :class:`~harness.worlds.base.World` or a
    declaration (:func:`harness.worlds.declared_world`), so ``harness run`` asks this before it builds anything."""
    explicit = cfg.methods != ["all"]
    methods = METHODS.resolve_list(cfg.methods)
    if cfg.langs:
        world.check_languages(cfg.langs)
    sources = world.sources if cfg.source == "all" else [cfg.source or world.default_source]
    for s in sources:
        world.check_source(s)
    check_dims(cfg, world, sources)
    skipped: list[str] = []
    usable = []
    for m in methods:
        cls = METHODS.get(m)
        missing = [r for r in sorted(getattr(cls, "requires", ())) if not world.has_resource(r)]
        if missing:
            msg = f"method {m!r} needs {', '.join(missing)}, which world {world.name!r} does not provide"
            if explicit:
                raise MissingResourceError(msg)
            skipped.append(msg)
            continue
        usable.append(m)
    cells = []
    for source in sources:
        for m in usable:
            cls = METHODS.get(m)
            dims = cfg.dim_values()
            refused = [d for d in dims if dim_refusal(m, cls, d)]
            if refused:
                skipped.append(f"{dim_refusal(m, cls, refused[0])}: dim(s) {', '.join(map(str, refused))} skipped")
                dims = [d for d in dims if d not in refused]
            for dim in dims:
                for seed in run_seeds(cfg, world.name):
                    cells.append(Cell(source, m, dim, seed))
    return cells, sorted(set(skipped))


def check_dims(cfg: RunConfig, world: Any, sources: list[str]) -> None:
    """A factorized dimension must be below the hidden size of every source model of the run (read from its
    ``config.json``, or where the world is not built, from what the world declares; a world that declares none is
    checked once built): at or above it the factorization keeps every dimension and the row is the full one."""
    dims = [d for d in cfg.dim_values() if d is not None]
    if not dims:
        return
    for s in sources:
        hidden = world.hidden_size(s)
        over = [d for d in dims if hidden is not None and d >= hidden]
        if over:
            raise ConfigError(f"--dims {','.join(map(str, over))}: the source model {s!r} of world {world.name!r} "
                              f"has hidden size {hidden}, and a factorized dimension must be smaller; give dims "
                              f"below {hidden}, or full")


def no_cell_left(skipped: list[str]) -> str:
    """The one line of a run whose every cell was skipped: each reason, grouped."""
    why = "; ".join(skipped) if skipped else "the plan holds no cell"
    return f"nothing to run: every cell of the run is skipped: {why}"


def make_plan(cfg: RunConfig, world: Any) -> Plan:
    tasks = TASKS.resolve_list(cfg.tasks)
    cells, skipped = plan_cells(cfg, world)
    languages = {}
    for t in tasks:
        have = TASKS.get(t)().languages(world)
        if not have:
            raise MissingResourceError(f"world {world.name!r} has no data for task {t!r}")
        languages[t] = [lang for lang in have if not cfg.langs or lang in cfg.langs or lang == world.pivot]
    return Plan(cells=cells, tasks=tasks, languages=languages, skipped=skipped)


DEFAULT_INIT_HOURS = 0.5  # a method that declares no estimate


class InitEstimates(Mapping):
    """``{method: GPU-hours of one initialization}``, asked of each method (``cost_estimate(profile)``) when looked
    up; ``"default"`` (and a method that declares none) is :data:`DEFAULT_INIT_HOURS`."""

    def __init__(self, profile: str = "paper"):
        self.profile = profile

    def __getitem__(self, method: str) -> float:
        if method == "default":
            return DEFAULT_INIT_HOURS
        from harness.core.registry import METHODS

        try:
            cls = METHODS.get(method)
        except HarnessError:
            raise KeyError(method) from None
        ask = getattr(cls, "cost_estimate", None)
        return float(ask(self.profile)) if ask is not None else DEFAULT_INIT_HOURS

    def __iter__(self) -> Iterator[str]:
        from harness.core.registry import METHODS

        return iter([*METHODS.names(), "default"])

    def __len__(self) -> int:
        return sum(1 for _ in self)


# GPU-hours on one A100/H100-class GPU for the `paper` profile (xlm-roberta-base / roberta-base size).
# cpt: not here: from the throughput measured on a named GPU (harness/throughput.json, :func:`cpt_rates`).
# init: each method's own estimate (``cost_estimate``, declared on the method class): hyperofa trains one hypernetwork
#      per (source, dim) for 80-470 epochs on 22K-103K pairs (order of an hour); OFA / FOCUS / WECHSEL / Tik-to-Tok
#      fit fastText models or run a kNN search over 400K x 250K (minutes).
# tasks: NER/POS fine-tune 10 epochs on the English training set (~20K / ~12K sentences) and test every language;
#      retrieval encodes <= 500 / 1,000 sentence pairs per language; mlm scores held-out text.
PAPER_ESTIMATES: dict[str, Any] = {
    "init": InitEstimates("paper"),
    "task": {"ner": 0.6, "pos": 0.4, "sr-b": 0.1, "sr-t": 0.05, "mlm": 0.05, "default": 0.3},
}


def planned_device(device: str) -> str:
    """The device a plan sizes a cluster for: the named one; ``auto`` plans for a GPU (the papers' protocol), where
    ``harness run`` resolves ``auto`` on the machine it runs on (:func:`harness.config.resolve_device`)."""
    return "cuda" if device == "auto" else device


def cell_resources(cfg: Any, device: str) -> dict[str, float]:
    """The CPUs and GPUs one cell asks for: the profile's CPUs; one GPU per CPT device when on a GPU."""
    from harness.core.profiles import profile

    res = dict(profile(cfg.profile).get("resources", {"num_cpus": 1}))
    n_gpu = 0.0
    if device.startswith("cuda"):
        n_gpu = float(max(1, int((cfg.cpt or {}).get("devices", profile(cfg.profile)["cpt"].get("devices", 1)))))
    return {"num_cpus": float(res.get("num_cpus", 1)), "num_gpus": n_gpu}


def _product_family(method: str) -> str:
    """The name under which a method caches what its cells share (``cache_name``: ``wechsel+overlap`` trains no
    fastText model of its own, it reads ``wechsel``'s); the method's own name if it declares none."""
    from harness.core.registry import METHODS

    try:
        return str(getattr(METHODS.get(method), "cache_name", None) or method)
    except HarnessError:
        return method


def longest_first(cells: list[Any]) -> list[Any]:
    """The order in which cells are submitted: first one cell of every product family (the cells whose method
    builds what its other seeds, dimensions and variants reuse: fastText models, hypernetworks, word vectors), the
    costliest initializations first; then the others, costliest first (stable otherwise). Workers that take the
    next cell when free then build different shared products side by side instead of one of them waiting on the
    lock of the product the other is building, and the cheap cells fill the gaps at the end."""
    init = PAPER_ESTIMATES["init"]
    seen: set[tuple[str, str]] = set()
    first, rest = [], []
    for c in cells:
        family = (c.source, _product_family(c.method))
        (rest if family in seen else first).append(c)
        seen.add(family)
    cost = {m: init.get(m, init["default"]) for m in {c.method for c in cells}}
    return sorted(first, key=lambda c: -cost[c.method]) + sorted(rest, key=lambda c: -cost[c.method])


def world_for_planning(name: str) -> Any:
    """The built world if it is here; else the builder's description; else a clear error."""
    from harness.worlds import WORLDS, get_world, world_dir

    builder = WORLDS.get(name)
    if (world_dir(name) / "manifest.json").is_file():
        return get_world(name, build=False)
    describe = getattr(builder, "describe", None)
    if describe is None:
        raise ConfigError(f"world {name!r} is not built and cannot be described without building it: "
                          f"run `harness world build {name}` first")
    return describe()


PAPER_GRID = {"methods": ["all"], "source": "all", "dims": [100, 200, 400, "full"], "seeds": [1, 2, 3],
              "tasks": ["sr-b", "sr-t", "ner", "pos", "mlm"], "profile": "paper"}


def cpt_rates(plan: Any, world: Any = None, gpu: str | None = None) -> dict[tuple[str, int | None], tuple[Any, str]]:
    """``{(source, dim): (rate, where its N comes from)}`` for the cells of ``plan``: the CPT tokens per second
    (:class:`harness.throughput.Rate`) on one GPU of kind ``gpu`` (default: the kind measured last), from the
    throughput ``benchmarks/bench_cpt.py`` measured (``harness/throughput.json``) at the N of the cell's model
    (:func:`harness.throughput.model_parameters`; ``world`` None: the measured model's)."""
    from harness.throughput import cpt_rate, load, model_parameters

    data = load()
    cpt_rate(gpu, None, data)  # an unknown GPU kind is refused even when the plan holds no cell
    rates = {}
    for source, dim in sorted({(c.source, c.dim) for c in plan.cells}, key=lambda k: (k[0], k[1] or 0)):
        n, n_from = model_parameters(world, source, dim, data)
        rates[(source, dim)] = (cpt_rate(gpu, n, data), n_from)
    return rates


def estimate_rows(cfg: Any, plan: Any, estimates: dict[str, Any] | None = None,
                  rates: dict[tuple[str, int | None], tuple[Any, str]] | None = None) -> list[dict[str, Any]]:
    """One row of GPU-hours per cell: init and evaluation from ``estimates`` (the papers' budgets), CPT from
    ``rates`` (:func:`cpt_rates`; default: the measured GPU, at the measured model's N)."""
    est = estimates or PAPER_ESTIMATES
    rates = rates if rates is not None else cpt_rates(plan)
    cpt = cpt_settings(cfg)
    n_evals = 1 + ((len([s for s in cpt["checkpoints"] if 0 < s < cpt["steps"]]) + (1 if cpt["steps"] > 0 else 0))
                   if cpt["eval_tasks"] else 0)
    device = planned_device(cfg.device)
    res = cell_resources(cfg, device)
    rows = []
    for cell in plan.cells:
        init_h = est["init"].get(cell.method, est["init"]["default"])
        rate = rates[(cell.source, cell.dim)][0]
        cpt_h = rate.hours(int(cpt["steps"]), int(cpt["effective_batch"]), int(cpt["block_size"]))
        eval_h = n_evals * sum(est["task"].get(t, est["task"]["default"]) for t in plan.tasks)
        rows.append({"cell": cell.label, "cpus": res["num_cpus"], "gpus": res["num_gpus"],
                     "init_h": init_h, "cpt_h": cpt_h, "eval_h": eval_h, "total_h": init_h + cpt_h + eval_h,
                     "gpu": rate.gpu, "tokens_per_s": rate.tokens_per_s})
    return rows
