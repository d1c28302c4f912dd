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
from types import SimpleNamespace
from typing import Any

from harness.config import RunConfig, run_seeds
from harness.core.errors import ConfigError, HarnessError, MissingResourceError
from harness.core.registry import METHODS, TASKS


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
    subset: bool = False  # some task leaves out languages it has data for (``--langs``)
    facts: RunFacts | None = None  # what planning read of the run's methods and tasks (:func:`run_facts`)
    order: list[Cell] = field(default_factory=list)  # the cells in the order they are handed out (:func:`run_order`)

    @property
    def method_facts(self) -> dict[str, SimpleNamespace] | None:
        """What planning read of each method of the run (:class:`RunFacts`), for the stages after it."""
        return self.facts.methods if self.facts is not None else None


METHOD_FACTS = {"requires": frozenset(), "supports_factorized": False, "serves_untied_output": True}
FAMILY_FACTS = {"cache_name": None}  # the product family a method's cells share (:func:`family_leaders`)
TASK_FACTS = {"objectives": None}  # the objectives a task scores (None: both)


@dataclass(frozen=True)
class RunFacts:
    """What planning starts from, each asked once, at its start (:func:`run_facts`), and read by every stage after
    it: the run's dimensions and seeds, and the facts of its methods and tasks, asked of the registry: of each
    method, :data:`METHOD_FACTS`, its product family (:data:`FAMILY_FACTS`) and its refusals (of the run's
    dimensions, of an untied output table); of each task, its objectives and what its languages are read from
    (:data:`tasks.base.LANGUAGE_FACTS`)."""

    dims: list[int | None]
    seeds: list[int]
    methods: dict[str, SimpleNamespace]  # in the order the run names them
    tasks: dict[str, SimpleNamespace]


def run_facts(cfg: RunConfig, world: Any) -> RunFacts:
    """The :class:`RunFacts` of a run on ``world``: its ``--dims`` and seeds, the facts of its ``--tasks`` and
    ``--methods`` (unknown names refused, the tasks first), read without importing a built-in method or task
    where its source declares them as literals."""
    from harness.core.registry import method_entries
    from tasks.base import LANGUAGE_FACTS

    dims, seeds = cfg.dim_values(), run_seeds(cfg, world.name)
    task_defaults, method_defaults = {**TASK_FACTS, **LANGUAGE_FACTS}, {**METHOD_FACTS, **FAMILY_FACTS}
    tasks = TASKS.entries(cfg.tasks, tuple(task_defaults), task_defaults)
    methods = method_entries(cfg.methods, tuple(method_defaults), method_defaults, tuple(dims))
    return RunFacts(dims, seeds, methods, tasks)


def task_languages(task: str, world: Any, facts: SimpleNamespace | None = None) -> list[str]:
    """The languages ``task`` scores on ``world``: its ``languages(world)``. A built-in task whose ``languages`` is
    the shared one (:class:`tasks.base.DeclaredLanguages`) is answered from what it declares (``facts``, its
    :class:`RunFacts` entry; else asked of the registry), without importing it (nor torch: a run with nothing left
    to do stays fast)."""
    from harness.core.declarations import defined_in

    if facts is None:
        from tasks.base import LANGUAGE_FACTS

        facts = TASKS.entries([task], tuple(LANGUAGE_FACTS), LANGUAGE_FACTS)[task]
    if facts.target is not None and defined_in(facts.target, "languages") == "tasks.base:DeclaredLanguages":
        from tasks.base import languages_from

        return languages_from(world, facts.name or task, facts.language_data, facts.pivot_queries)
    return list(TASKS.get(task)().languages(world))


def plan_cells(cfg: RunConfig, world: Any) -> tuple[list[Cell], list[str]]:
    """The cells of a run and why the others were skipped (one phrase per reason), from what a world declares: its
    languages and sources (``--langs``, ``--source`` are checked against them), the resources each method
    requires, each method's support of factorized dimensions, and the source models' hidden sizes (a ``--dims``
    at or above one is refused: :func:`check_dims`). ``world`` is a built :class:`~harness.worlds.base.World` or a
    declaration (:func:`harness.worlds.declared_world`), so ``harness run`` asks this before it builds anything."""
    return _cells(cfg, world, run_facts(cfg, world))


def _cells(cfg: RunConfig, world: Any, facts: RunFacts) -> tuple[list[Cell], list[str]]:
    dims = facts.dims
    if cfg.langs:
        world.check_languages(cfg.langs)
    sources = world.sources if cfg.source == "all" else [cfg.source or world.default_source]
    for s in sources:
        world.check_source(s)
    check_dims(dims, world, sources)
    skipped: list[str] = []
    usable = []
    for m, cls in facts.methods.items():
        missing = [r for r in sorted(getattr(cls, "requires", ())) if not world.has_resource(r)]
        if missing:
            msg = f"method {m!r} needs {', '.join(missing)}, which world {world.name!r} does not provide"
            if cfg.methods != ["all"]:
                raise MissingResourceError(msg)
            skipped.append(msg)
            continue
        usable.append(m)
    cells = []
    for source in sources:
        for m in usable:
            refusals = facts.methods[m].dim_refusals
            refused = [d for d in dims if d in refusals]
            if refused:
                skipped.append(f"{refusals[refused[0]]}: dim(s) {', '.join(map(str, refused))} skipped")
            for dim in [d for d in dims if d not in refused]:
                for seed in facts.seeds:
                    cells.append(Cell(source, m, dim, seed))
    cells = untied_cells(cfg, world, facts, cells, skipped)  # what each source's objective and tables allow
    cells = objective_cells(cfg, world, facts, cells, skipped)
    objective_tasks(cfg, world, facts, sorted({c.source for c in cells}), skipped)
    return cells, sorted(set(skipped))


def check_dims(dim_values: list[int | None], world: Any, sources: list[str]) -> None:
    """A factorized dimension must be below the hidden size of every source model of the run (read from its
    ``config.json``, or where the world is not built, from what the world declares; a world that declares none is
    checked once built): at or above it the factorization keeps every dimension and the row is the full one."""
    dims = [d for d in dim_values if d is not None]
    if not dims:
        return
    for s in sources:
        hidden = world.hidden_size(s)
        over = [d for d in dims if hidden is not None and d >= hidden]
        if over:
            raise ConfigError(f"--dims {','.join(map(str, over))}: the source model {s!r} of world {world.name!r} "
                              f"has hidden size {hidden}, and a factorized dimension must be smaller; give dims "
                              f"below {hidden}, or full")


def make_plan(cfg: RunConfig, world: Any) -> Plan:
    """The run's cells (:func:`plan_cells`), its tasks and each task's languages on ``world``, from the facts of
    its methods and tasks (:func:`run_facts`), asked once here; and the order in which its cells are handed out
    (:func:`run_order`, by the profile's initialization costs)."""
    facts = run_facts(cfg, world)
    cells, skipped = _cells(cfg, world, facts)
    order = run_order(cells, init_cost(cfg.profile), facts.methods)
    tasks = objective_tasks(cfg, world, facts, sorted({c.source for c in cells}), [])  # (_cells said why)
    languages, subset, pivot = {}, False, getattr(world, "pivot", None)
    for t in tasks:
        have = task_languages(t, world, facts.tasks[t])
        if not have:
            raise MissingResourceError(f"world {world.name!r} has no data for task {t!r}")
        # the one filter of a task's languages by --langs: those given, and the world's pivot language
        languages[t] = [lang for lang in have if not cfg.langs or lang in cfg.langs or lang == pivot]
        subset = subset or len(languages[t]) < len(have)
    return Plan(cells=cells, tasks=tasks, languages=languages, skipped=skipped, subset=subset, facts=facts,
                order=order)


def _objective_refusal(world: Any, task: str, facts: SimpleNamespace, source: str, objective: str) -> str | None:
    """Why ``task`` cannot score ``source`` (a task's ``objectives``, of its ``facts``: ``mlm`` for a masked LM,
    ``clm`` for a causal LM; both when it declares none), or None."""
    from harness.core.objective import DESCRIPTION

    accepts = facts.objectives or frozenset(DESCRIPTION)
    if objective in accepts:
        return None
    return (f"task {task!r} scores a {' or '.join(DESCRIPTION[o] for o in sorted(accepts))}, and source {source!r} "
            f"of world {world.name!r} is a {DESCRIPTION[objective]}")


def objective_tasks(cfg: RunConfig, world: Any, facts: RunFacts, sources: list[str], skipped: list[str]) -> list[str]:
    """The tasks of ``--tasks all`` that can score every source of the run (the others skipped); named tasks
    as given (:func:`objective_cells` checks them)."""
    if cfg.tasks != ["all"]:
        return list(facts.tasks)
    of = getattr(world, "source_objective", lambda s: "mlm")
    kept = []
    for t, task in facts.tasks.items():
        why = next((w for s in sources if (w := _objective_refusal(world, t, task, s, of(s)))), None)
        if why:
            skipped.append(why)
        else:
            kept.append(t)
    return kept


def objective_cells(cfg: RunConfig, world: Any, facts: RunFacts, cells: list[Cell], skipped: list[str]) -> list[Cell]:
    """The cells whose source every task named in ``--tasks`` can score: a source that one of them cannot is
    skipped (``--source all`` on a world with encoders and decoders), and a run left with no cell that way is
    refused (``--tasks mlm`` on a decoder, ``--tasks clm`` on an encoder)."""
    if cfg.tasks == ["all"] or not cells:
        return cells
    of = getattr(world, "source_objective", lambda s: "mlm")
    bad: dict[str, tuple[str, str]] = {}
    for s in dict.fromkeys(c.source for c in cells):
        for t, task in facts.tasks.items():
            if why := _objective_refusal(world, t, task, s, of(s)):
                bad[s] = (t, why)
                break
    kept = [c for c in cells if c.source not in bad]
    if not kept:
        t, why = next(iter(bad.values()))
        raise ConfigError(f"--tasks {t}: {why}; give --tasks without it (a decoder's held-out loss is 'clm', an "
                          f"encoder's 'mlm')")
    skipped.extend(f"source {s!r} skipped: {why}" for s, (_, why) in bad.items())
    return kept


def untied_cells(cfg: RunConfig, world: Any, facts: RunFacts, cells: list[Cell], skipped: list[str]) -> list[Cell]:
    """The cells whose method can initialize their source's untied output table the way the run asks (its
    ``untied_output``, by default ``recompute``: the method computed on that table; a method declaring
    ``serves_untied_output = False`` cannot: its ``untied_refusal``): a method named in ``--methods`` that cannot
    is refused, one that came with ``all`` is skipped."""
    tied = getattr(world, "source_tied", lambda s: True)
    kept = []
    for c in cells:
        policy = (cfg.method_params.get(c.method) or {}).get("untied_output", "recompute")
        refusal = None if tied(c.source) or policy != "recompute" else facts.methods[c.method].untied_refusal
        if refusal and cfg.methods != ["all"]:
            raise ConfigError(f"--methods {c.method}: source {c.source!r} has an untied output table: {refusal}")
        if refusal:
            skipped.append(f"{refusal} (source {c.source!r})")
        else:
            kept.append(c)
    return kept


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


def family_leaders(cells: list[Any], methods: dict[str, SimpleNamespace] | None = None) -> set[Any]:
    """The cell of each (source, product family) that builds what the family's other cells reuse: the lowest seed
    of the method the family is named after where the run has it (``wechsel`` for ``wechsel+overlap``), else the
    family's first cell. A method's family is the name under which it caches what its cells share (``cache_name``:
    ``wechsel+overlap`` trains no fastText model of its own, it reads ``wechsel``'s), its own name if it declares
    none: read from ``methods``, the plan's facts of its methods (:class:`RunFacts`; None: asked of the registry)."""
    if methods is None:
        methods = _family_facts(cells)
    leaders: dict[tuple[str, str], Any] = {}
    for c in cells:
        facts = methods.get(c.method)
        family = str(facts.cache_name or c.method) if facts is not None else c.method
        key = (c.source, family)
        have = leaders.get(key)
        if have is None or ((c.method == family, -c.seed) > (have.method == family, -have.seed)):
            leaders[key] = c
    return set(leaders.values())


def _family_facts(cells: list[Any]) -> dict[str, SimpleNamespace]:
    """:data:`FAMILY_FACTS` of the methods of ``cells`` without a plan (a method unknown here has none)."""
    out = {}
    for method in dict.fromkeys(c.method for c in cells):
        try:
            out[method] = SimpleNamespace(**METHODS.facts(method, tuple(FAMILY_FACTS), FAMILY_FACTS))
        except HarnessError:
            continue
    return out


def init_cost(profile: str, figures: dict[str, Any] | None = None) -> Any:
    """``cost(method, first) -> seconds`` of one initialization, to order cells by: on the ``cpu`` profile the
    seconds this code took on a CPU (``harness/throughput.json``: a family's first cell trains the fastText models
    and word sets its later cells reuse); on another profile the method's own GPU-hour estimate."""
    if profile == "cpu":
        from harness.throughput import cpu_figures, shared_products

        f = figures or cpu_figures()["reference"]["seconds"]
        # a first cell that may build a product several methods share counts it (the first of them builds it)
        return lambda method, first: float(f["init_first"].get(method, f["init_other"]) + sum(
            f.get("shared", {}).get(p, 0.0) for p in shared_products(method)) if first else f["init_other"])
    init = PAPER_ESTIMATES["init"]
    return lambda method, first: 3600.0 * init.get(method, init["default"])


def run_order(cells: list[Any], cost: Any = None, methods: dict[str, SimpleNamespace] | None = None) -> list[Any]:
    """The order in which cells are handed to the workers: every (source, method, dim)'s first seed before any
    second seed, and so on; within the first seeds the cheapest initializations first (``cost(method, first)``,
    :func:`init_cost`; ties keep the given order), so that a partial board holds as many methods as early as
    possible, and a family's other cells (``wechsel+overlap`` reads ``wechsel``'s fastText models) after every
    family's first, so that no worker starts by waiting on the lock of a product another is building; within the
    later seeds the costliest first, so that the cheap cells fill the gaps at the end. ``methods``: the plan's facts
    of the methods (:func:`family_leaders`)."""
    cost = cost or init_cost("cpu")
    seeds: dict[tuple[str, str, int | None], list[int]] = {}
    for c in cells:
        seeds.setdefault((c.source, c.method, c.dim), []).append(c.seed)
    rank = {c: sorted(set(seeds[(c.source, c.method, c.dim)])).index(c.seed) for c in cells}
    leaders = family_leaders(cells, methods)
    first = [c for c in cells if rank[c] == 0]
    built = sorted((c for c in first if c in leaders), key=lambda c: cost(c.method, True))
    reuse = sorted((c for c in first if c not in leaders), key=lambda c: cost(c.method, False))
    later = sorted((c for c in cells if rank[c] > 0), key=lambda c: (rank[c], -cost(c.method, c in leaders)))
    return built + reuse + later


def schedule(order: list[Any], seconds: dict[Any, float], workers: int) -> dict[Any, float]:
    """When each cell of ``order`` ends if ``workers`` workers each take the next cell when free (as the local
    executor hands them out) and cell ``c`` takes ``seconds[c]``: ``{cell: seconds from the cells' start}``."""
    import heapq

    free = [0.0] * max(1, int(workers))
    ends = {}
    for c in order:
        t = heapq.heappop(free) + seconds[c]
        ends[c] = t
        heapq.heappush(free, t)
    return ends


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


def estimate_rows(spec: Any, estimates: dict[str, Any] | None = None,
                  rates: dict[tuple[str, int | None], tuple[Any, str]] | None = None) -> list[dict[str, Any]]:
    """One row of GPU-hours per cell of the resolved run ``spec`` (:class:`harness.spec.RunSpec`): init and
    evaluation from ``estimates`` (the papers' budgets), CPT from ``rates`` (:func:`cpt_rates`; default: the
    measured GPU, at the measured model's N)."""
    est = estimates or PAPER_ESTIMATES
    plan, cpt, res = spec.plan, spec.cpt, spec.resources()
    rates = rates if rates is not None else cpt_rates(plan)
    rows = []
    for cell in plan.cells:
        init_h = est["init"].get(cell.method, est["init"]["default"])
        rate = rates[(cell.source, cell.dim)][0]
        cpt_h = rate.hours(cpt.steps, int(cpt["effective_batch"]), int(cpt["block_size"]))
        eval_h = cpt.evaluations() * sum(est["task"].get(t, est["task"]["default"]) for t in plan.tasks)
        rows.append({"cell": cell.label, "cpus": res["num_cpus"], "gpus": res["num_gpus"],
                     "init_h": init_h, "cpt_h": cpt_h, "eval_h": eval_h, "total_h": init_h + cpt_h + eval_h,
                     "gpu": rate.gpu, "tokens_per_s": rate.tokens_per_s})
    return rows


def on_cpu(cfg: Any) -> bool:
    """Whether a plan speaks of a CPU run: the ``cpu`` profile on a device that is not a GPU."""
    return cfg.profile == "cpu" and not str(cfg.device).startswith("cuda")


def shared_builders(order: list[Any], cpu: dict[str, Any] | None = None,
                    world: str | None = None) -> dict[Any, list[str]]:
    """``{cell: [product, ...]}``: the products several methods share (the helper model of OMP, CLP and CLP+),
    each priced once per source, on the first cell of ``order`` that reads it -- the one that builds it when the
    cells are handed out in that order (the others wait for it, which is not their cost: :mod:`methods.own_cost`).
    On ``world`` (a world's name), where it declares a donor, no helper model is built: those methods read the
    donor (methods.helper_model)."""
    from harness.throughput import declared_manifest, shared_products

    out: dict[Any, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    donor = world is not None and bool(declared_manifest(world).get("donor"))
    for c in order:
        for product in shared_products(c.method, cpu):
            if donor and product == "helper-model":
                continue
            if (c.source, product) not in seen:
                seen.add((c.source, product))
                out.setdefault(c, []).append(product)
    return out


def cpu_rows(spec: Any, workers: int, figures: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row of seconds per cell of the resolved run ``spec`` on a CPU, in the order the cells are handed out
    (:func:`run_order`): its initialization, its tasks at each step they are evaluated, its CPT and what every
    cell pays (:class:`harness.throughput.CpuCost`, from the world's declared model shape: the same whether the
    world is built or not), and when it ends with ``workers`` cells side by side (:func:`schedule`)."""
    from harness.throughput import cpu_cost

    plan, cpt = spec.plan, spec.cpt
    costs = {s: cpu_cost(spec.world, s, figures) for s in {c.source for c in plan.cells}}
    order = run_order(plan.cells, init_cost("cpu", figures and figures["cpu"]["reference"]["seconds"]),
                      plan.method_facts)
    leaders = family_leaders(plan.cells, plan.method_facts)
    builds = shared_builders(order, figures and figures.get("cpu"), spec.world)
    seconds, rows = {}, []
    for cell in order:
        cost = costs[cell.source]
        init_s = cost.init(cell.method, cell in leaders) + sum(cost.shared(p) for p in builds.get(cell, []))
        eval_s = cpt.evaluations() * sum(cost.task(t) for t in plan.tasks)
        cpt_s = cost.cpt(cpt.steps, int(cpt["effective_batch"]), int(cpt["block_size"]))
        total = cost.cell() + init_s + eval_s + cpt_s
        seconds[cell] = total
        rows.append({"cell": cell.label, "method": cell.method, "cpus": spec.cpus_per_cell, "init_s": init_s,
                     "eval_s": eval_s, "cpt_s": cpt_s, "total_s": total, "_cell": cell})
    ends = schedule(order, seconds, workers)
    for r in rows:
        r["ends_s"] = ends[r.pop("_cell")]
    return rows
