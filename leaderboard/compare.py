"""``harness compare A B``: two experiments, runs or leaderboard folders side by side, per task and language.

Each side is resolved, in this order, to
  * a **leaderboard folder** (a folder holding the ``leaderboard.json`` that ``harness leaderboard`` writes, or that
    file itself): the per-seed values it stores;
  * an **MLflow run** (a 32-hex run id): a cell run with its task runs, or a task run with its cell;
  * an **MLflow experiment** by name: every cell in it;
  * a **method name or row label** (``ofa``, ``"ofa d=100"``): the rows of that method, or the row of that label,
    on the current experiment (``--experiment``; default: the experiment of the latest cell run in the store).
    Two such sides on one experiment are paired variant by variant (``ofa d=100`` with ``random d=100``), and
    their cells seed by seed (below).

Both sides are read back, never recomputed, into rows (a model variant, labelled as on the leaderboard) of per-language
values per seed. A row of A meets the row of B with the same label, or the one row of B of the same method and dim
(labels name the parameters that differ within one experiment), or, when each side has a single row for a table
(two runs), that row. For every task, metric, profile and CPT step both sides have, and for every language both
rows have, the comparison gives A, B, ``A - B`` (means over seeds), a bootstrap interval of the difference and whether
it is significant (the interval excludes 0), with a two-sided bootstrap p-value:

  * **items, paired**: one seed a side, the same world and the same number of test items (the same sentences in the
    same order): the items are drawn with replacement, the same indices for both sides;
  * **seeds, paired** (**seeds + items, paired**): the same seeds on both sides, two or more, in the same world:
    the seeds are drawn with replacement, the same seeds for both sides, and within each drawn seed its items,
    the same indices for both sides, where both logged them;
  * **seeds + items** / **seeds**: otherwise, each side's mean over seeds is resampled on its own, seeds with
    replacement and, within each drawn seed, its items when the run logged them (:mod:`leaderboard.stats`);
  * no interval when a side has neither items nor two seeds (a single run read from a leaderboard folder).

A row's average over the languages both rows have gets **the one verdict on the pair**,
:func:`leaderboard.stats.pair_verdict`, the function the claims of the board ask too: its interval is
:func:`leaderboard.stats.diff_interval`'s (languages, then each row's seeds resampled), its p the paired Wilcoxon test's
over the languages, and it is significant where both agree (p < 0.05 and the interval on one side of 0); on the same
rows, the same interval, p and verdict as the claims table (the default ``--bootstrap`` is the claims' resamples).
Where the number of languages cannot reach significance at all (4 languages: p >= 0.125), a note under the table says
so.

Rows of different **variants** (another source model, CPT budget or CPT setting, evaluation precision or CPU
kernels: what a label's qualifiers name) are not put side by side: their difference is not the methods'. The
comparison is refused unless ``across_variants`` (``--across-variants``), and then each table says what differs.
A leaderboard folder does not record its rows' variants: nothing is refused there.

Each table names the step it compares by its number (``step 0 (final)``: the final table of a run whose tasks were
evaluated at step 0 only). Output: for a terminal (the default: plain text at most :data:`WIDTH` columns wide, each
row label whole on a line of its own), Markdown (one table per task, metric, step and pair of rows) or CSV (one line
per language and average).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from leaderboard.stats import (
    VERDICT_RESAMPLES,
    ItemSample,
    PairVerdict,
    SeedSample,
    pair_verdict,
    stable_seed,
    verdict_key,
)

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
LEVEL = 0.95


# -- what a side holds ----------------------------------------------------------------------------------------
@dataclass
class SideRow:
    """One row of one side: per-language values per seed, and each seed's test items when they were logged."""

    label: str
    world: str = ""
    values: dict[str, list[float]] = field(default_factory=dict)
    items: dict[str, list[ItemSample | None]] = field(default_factory=dict)
    seeds: dict[str, list[str]] = field(default_factory=dict)  # the seed of each value ([] where unknown)
    runs: dict[str, str] = field(default_factory=dict)  # the cell runs the row's values come from: id -> name
    # what the row was computed with beyond its method (its variant: source, CPT budget and settings, evaluation
    # precision, CPU kernels), as the qualifiers of a label name it; {} where unknown (a leaderboard folder)
    variant: dict[str, str] = field(default_factory=dict)

    def mean(self, lang: str) -> float:
        return statistics.fmean(self.values[lang])


@dataclass
class SideTable:
    task: str
    metric: str
    profile: str
    step: str  # "final" or the CPT step
    higher_is_better: bool
    headline: bool
    rows: dict[str, SideRow] = field(default_factory=dict)
    at: int | None = None  # the CPT step the values are from (of the "final" table: the final step)


@dataclass
class Side:
    name: str
    kind: str  # "experiment", "run", "folder" or "rows" (a method name or a row label)
    tables: dict[tuple[str, str, str, str], SideTable] = field(default_factory=dict)
    experiment: str = ""  # where the rows are (a folder: none)

    @property
    def title(self) -> str:
        where = f" of experiment {self.experiment}" if self.experiment and self.kind in ("rows", "run") else ""
        return f"{self.name} ({self.kind}{where})"


# -- reading a side -------------------------------------------------------------------------------------------
def resolve(spec: str, client: Any = None, experiment: str | None = None) -> Side:
    """A leaderboard folder, an MLflow run id, an experiment name, or a method name or row label on ``experiment``
    (default: the current one, :func:`current_experiment`); see the module's docstring."""
    p = Path(spec).expanduser()
    if p.is_file() and p.name.endswith(".json"):
        return from_folder(p.parent, p)
    if p.is_dir():
        if (p / "leaderboard.json").is_file():
            return from_folder(p, p / "leaderboard.json")
        raise HarnessError(f"{spec}: a folder without leaderboard.json; give the folder `harness leaderboard` "
                           "wrote (its --out, or <HARNESS_HOME>/leaderboards/<experiment>/)")
    if client is None:
        raise HarnessError(f"{spec}: not a leaderboard folder, and no tracking store to look for a run or an "
                           "experiment")
    if RUN_ID.match(spec):
        try:
            run = client.get_run(spec)
        except Exception:
            run = None
        if run is not None:
            return from_run(client, run)
    exp = client.get_experiment_by_name(spec)
    if exp is not None and exp.lifecycle_stage == "active":
        return from_experiment(client, exp)
    return from_rows(client, spec, experiment)


def current_experiment(client: Any) -> Any:
    """The experiment of the latest cell run in the store (None: the store holds no cell run)."""
    from harness.core.record import Kind, kind_filter
    from leaderboard.collect import experiments

    exps = experiments(client)
    if not exps:
        return None
    runs = client.search_runs([e.experiment_id for e in exps], filter_string=kind_filter(Kind.CELL),
                              order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        return None
    return next(e for e in exps if e.experiment_id == runs[0].info.experiment_id)


def from_rows(client: Any, spec: str, experiment: str | None = None) -> Side:
    """The rows of method ``spec``, or the row labelled ``spec``, of ``experiment`` (default: the current one)."""
    from leaderboard.collect import collect_experiment

    if experiment is not None:
        exp = client.get_experiment_by_name(experiment)
        if exp is None or exp.lifecycle_stage != "active":
            names = sorted(e.name for e in client.search_experiments())
            raise HarnessError(f"--experiment {experiment!r}: no such experiment in the tracking store "
                               f"(experiments: {', '.join(names) or 'none'})")
    else:
        exp = current_experiment(client)
        if exp is None:
            names = sorted(e.name for e in client.search_experiments())
            raise HarnessError(f"{spec!r} is neither a leaderboard folder, a run id nor an experiment "
                               f"(experiments: {', '.join(names) or 'none'}), and the store holds no cell run to "
                               f"look for a method or row of that name in; see `harness compare --help`")
    side = _from_data(exp.name, "experiment", collect_experiment(client, exp))
    picked = Side(spec, "rows", experiment=exp.name)
    labels: set[str] = set()
    for key, table in side.tables.items():
        labels |= set(table.rows)
        rows = {lab: r for lab, r in table.rows.items() if lab == spec or _method_dim(lab)[0] == spec}
        if spec in rows:
            rows = {spec: rows[spec]}
        if rows:
            picked.tables[key] = SideTable(table.task, table.metric, table.profile, table.step,
                                           table.higher_is_better, table.headline, rows, table.at)
    if not picked.tables:
        methods = sorted({_method_dim(lab)[0] for lab in labels})
        names = sorted(e.name for e in client.search_experiments())
        raise HarnessError(f"{spec!r} is neither a leaderboard folder, a run id nor an experiment (experiments: "
                           f"{', '.join(names)}), nor a method or row label of experiment {exp.name!r} (methods: "
                           f"{', '.join(methods) or 'none'}; rows: {', '.join(sorted(labels)) or 'none'}); give "
                           f"--experiment to look in another one")
    return picked


def _step_key(kind: str, step: int | None) -> str | None:
    if kind == "final":
        return "final"
    if kind == "step" and step is not None:
        return str(step)
    return None  # delta boards are not compared (compare the steps themselves)


def _from_data(name: str, kind: str, data: Any) -> Side:
    """Rows of every board of the runs in ``data`` (an ``ExperimentData``), with each seed's items."""
    from leaderboard.labels import qualifier_values
    from leaderboard.tables import _variant, build_leaderboard, profile_cpt

    side = Side(name, kind, experiment=data.name)
    if not data.tasks:
        return side
    lb = build_leaderboard(data, bootstrap=0, papers=False)
    for b in lb.boards:
        step = _step_key(b.kind, b.step)
        if step is None:
            continue
        headline = data.task_info(b.task).headline  # unknown: every metric is shown
        table = SideTable(b.task, b.metric, b.profile, step, b.higher_is_better, headline in (None, b.metric),
                          at=b.step)
        for r in b.rows:
            runs = [t for t in data.tasks if t.task == b.task and t.profile == b.profile
                    and _variant(t, data.parent(t), False) == r.variant]
            row = SideRow(r.label, world=runs[0].world if runs else "")
            if r.variant is not None:  # (whether tasks ran after CPT moves no number: the step compared says it)
                row.variant = {"source": r.variant.source, **{k: v for k, v in qualifier_values(
                    r.variant, profile_cpt(b.profile)).items() if k != "cpt.eval_tasks"}}
            for t in runs:
                cell = data.parent(t)
                if cell is not None:
                    row.runs[cell.run_id] = f"{cell.method}-{cell.dim}-s{cell.seed}"
            for lang, e in r.entries.items():
                row.values[lang] = list(e.values)
                row.seeds[lang] = [str(x) for x in e.seeds]
                its: list[ItemSample | None] = []
                for seed in e.seeds:
                    run = next((t for t in runs if t.seed == seed), None)
                    st = None if run is None else (int(step) if step != "final" else data.final_step(run)
                                                   if b.step is None else b.step)  # the step of the values
                    raw = data.items(run, st).get(b.metric, {}).get(lang) if run is not None and st is not None \
                        else None
                    its.append(ItemSample.from_dict(raw) if raw and raw.get("num") else None)
                row.items[lang] = its
            table.rows[r.label] = row
        side.tables[(b.task, b.metric, b.profile, step)] = table
    return side


def from_experiment(client: Any, exp: Any) -> Side:
    from leaderboard.collect import collect_experiment

    return _from_data(exp.name, "experiment", collect_experiment(client, exp))


def from_run(client: Any, run: Any) -> Side:
    """A cell run with its task runs; a task run brings its cell (and that cell's other tasks)."""
    from harness.core.record import Kind, kind_filter, parent_of, tag
    from harness.core.record_read import read_cell_run, read_task_run
    from leaderboard.collect import ExperimentData

    kind = run.data.tags.get(tag("kind"))
    cell = run
    if kind == Kind.TASK:
        parent = parent_of(run)
        if not parent:
            raise HarnessError(f"run {run.info.run_id} is a task run without its cell run")
        cell = client.get_run(parent)
    elif kind != Kind.CELL:
        raise HarnessError(f"run {run.info.run_id} is not a harness cell or task run (tag {tag('kind')} is "
                           f"{kind!r}); give a run of `harness run`")
    exp_id = cell.info.experiment_id
    task_runs = client.search_runs([exp_id], filter_string=kind_filter(Kind.TASK, parent=cell.info.run_id))
    tasks = [t for t in (read_task_run(client, r) for r in task_runs) if t is not None and t.scores]
    data = ExperimentData(name=client.get_experiment(exp_id).name, experiment_id=exp_id,
                          cells={cell.info.run_id: read_cell_run(client, cell)}, tasks=tasks, client=client)
    side = _from_data(run.info.run_id, "run", data)
    side.experiment = data.name
    return side


def from_folder(folder: Path, path: Path) -> Side:
    """The boards of a ``leaderboard.json``: per-seed values (no items: the interval resamples seeds only)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        boards = doc["boards"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HarnessError(f"{path}: not a leaderboard.json written by `harness leaderboard` ({exc})") from exc
    from leaderboard.collect import untagged_task_facts

    side = Side(str(folder), "folder")
    worlds = doc.get("worlds") or []
    # a task without a headline board (its headline unknown) shows every metric
    has_headline = {b["task"] for b in boards if b.get("headline")}
    for b in boards:
        step = _step_key(b.get("kind", ""), b.get("step"))
        if step is None:
            continue
        if "headline" in b:
            is_head = bool(b["headline"]) or b["task"] not in has_headline
        else:  # written before the boards said which is the headline
            is_head = untagged_task_facts(b["task"]).headline in (None, b["metric"])
        table = SideTable(b["task"], b["metric"], b["profile"], step, bool(b.get("higher_is_better", True)),
                          is_head, at=b.get("step"))
        for r in b.get("rows", []):
            row = SideRow(r["label"], world=",".join(worlds))
            for lang, v in (r.get("values") or {}).items():
                seeds = v.get("seeds") or {}
                row.values[lang] = [float(x) for x in seeds.values()] if seeds else [float(v["mean"])]
                row.items[lang] = [None] * len(row.values[lang])
            table.rows[r["label"]] = row
        side.tables[(b["task"], b["metric"], b["profile"], step)] = table
    return side


# -- the comparison -------------------------------------------------------------------------------------------
@dataclass
class LangDiff:
    language: str  # a language, or "avg (N)" for the average over the languages both rows have
    a: float | None
    b: float | None
    seeds_a: int = 0
    seeds_b: int = 0
    diff: float | None = None
    lo: float | None = None
    hi: float | None = None
    p: float | None = None
    resampled: str = ""  # what the interval resamples; "" when there is none
    verdict: PairVerdict | None = None  # the average's: the one verdict on the pair (stats.pair_verdict)

    @property
    def significant(self) -> bool | None:
        if self.verdict is not None:
            return self.verdict.significant
        if self.lo is None or self.hi is None:
            return None
        return self.lo > 0 or self.hi < 0


@dataclass
class Comparison:
    task: str
    metric: str
    profile: str
    step: str
    higher_is_better: bool
    row_a: str
    row_b: str
    lines: list[LangDiff]
    average: LangDiff | None
    at: int | None = None  # the CPT step compared (of the "final" table: the final step, where one is known)
    differs: list[str] = field(default_factory=list)  # what tells the rows' variants apart (--across-variants)

    def better(self, d: LangDiff) -> str:
        """``A`` or ``B`` when the difference is significant, else ``—``."""
        if d.verdict is not None:
            return {"a": "A", "b": "B"}.get(d.verdict.better or "", "—")
        if not d.significant or d.diff is None:
            return "—"
        return "A" if (d.diff > 0) == self.higher_is_better else "B"

    @property
    def step_title(self) -> str:
        """The step compared, by its number: ``step 0 (final)``; ``final step`` where the number is unknown."""
        if self.step != "final":
            return f"step {self.step}"
        return "final step" if self.at is None else f"step {self.at} (final)"


def _mean_replicates(values: list[float], items: list[ItemSample | None], rng: np.random.Generator,
                     m: int) -> np.ndarray:
    """``m`` bootstrap replicates of the mean over seeds: seeds with replacement, then each seed's items."""
    samples = [SeedSample(v, [(1.0, it)] if it is not None else []) for v, it in zip(values, items, strict=True)]
    k = len(samples)
    drawn = rng.integers(0, k, size=(m, k)) if k > 1 else np.zeros((m, 1), dtype=int)
    out = np.empty((m, k))
    for s, sample in enumerate(samples):
        pos = np.nonzero(drawn == s)
        if len(pos[0]):
            out[pos] = sample.resampled(rng, len(pos[0]))
    return out.mean(axis=1)


def _paired_replicates(a: ItemSample, b: ItemSample, rng: np.random.Generator, m: int,
                       chunk: int = 128) -> np.ndarray:
    """``m`` replicates of ``a - b`` on the same test items drawn with replacement (the same indices for both)."""
    n = len(a)
    out = np.empty(m)
    for i in range(0, m, chunk):
        k = min(chunk, m - i)
        idx = rng.integers(0, n, size=(k, n))
        va = a.finish(a.num[idx].sum(axis=1), a.den[idx].sum(axis=1))
        vb = b.finish(b.num[idx].sum(axis=1), b.den[idx].sum(axis=1))
        out[i: i + k] = va - vb
    return out


def _seed_paired_replicates(va: list[float], vb: list[float], ia: list[ItemSample | None],
                            ib: list[ItemSample | None], rng: np.random.Generator, m: int) -> np.ndarray:
    """``m`` replicates of the mean over seeds of ``a_s - b_s`` (``va``, ``vb`` aligned seed by seed): the seeds
    drawn with replacement, the same for both sides, and within a seed whose items both sides logged (the same
    number), its items, the same indices for both."""
    k = len(va)
    per_seed = np.empty((m, k))
    for s in range(k):
        a, b = ia[s], ib[s]
        if a is not None and b is not None and len(a) == len(b):
            per_seed[:, s] = _paired_replicates(a, b, rng, m)
        else:
            per_seed[:, s] = va[s] - vb[s]
    drawn = rng.integers(0, k, size=(m, k))
    return np.take_along_axis(per_seed, drawn, axis=1).mean(axis=1)


def _same_seeds(ra: SideRow, rb: SideRow, lang: str) -> list[tuple[int, int]] | None:
    """Where both rows hold the same two or more seeds in the same world: the positions of each seed in A's and
    B's values; else None."""
    sa, sb = ra.seeds.get(lang) or [], rb.seeds.get(lang) or []
    if len(sa) < 2 or sorted(sa) != sorted(sb) or len(set(sa)) != len(sa) or not ra.world or ra.world != rb.world:
        return None
    return [(sa.index(s), sb.index(s)) for s in sorted(sa)]


def _varies(values: list[float], items: list[ItemSample | None]) -> bool:
    return len(values) > 1 or (len(values) == 1 and items[0] is not None)


def lang_diff(lang: str, ra: SideRow, rb: SideRow, *, resamples: int, seed: int, key: object,
              level: float = LEVEL) -> LangDiff:
    va, vb = ra.values[lang], rb.values[lang]
    ia, ib = ra.items.get(lang) or [None] * len(va), rb.items.get(lang) or [None] * len(vb)
    d = LangDiff(lang, ra.mean(lang), rb.mean(lang), len(va), len(vb))
    d.diff = d.a - d.b  # type: ignore[operator]
    if resamples <= 0 or not (_varies(va, ia) and _varies(vb, ib)):
        return d
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, stable_seed(key)])
    pairs = _same_seeds(ra, rb, lang)
    if (len(va) == len(vb) == 1 and ia[0] is not None and ib[0] is not None and len(ia[0]) == len(ib[0])
            and ra.world and ra.world == rb.world):
        reps = _paired_replicates(ia[0], ib[0], rng, resamples)
        d.resampled = "items, paired"
    elif pairs is not None:
        reps = _seed_paired_replicates([va[i] for i, _ in pairs], [vb[j] for _, j in pairs],
                                       [ia[i] for i, _ in pairs], [ib[j] for _, j in pairs], rng, resamples)
        with_items = any(ia[i] is not None and ib[j] is not None for i, j in pairs)
        d.resampled = "seeds + items, paired" if with_items else "seeds, paired"
    else:
        reps = _mean_replicates(va, ia, rng, resamples) - _mean_replicates(vb, ib, rng, resamples)
        with_items = any(x is not None for x in ia + ib)
        d.resampled = "seeds + items" if with_items and (len(va) > 1 or len(vb) > 1) else (
            "items" if with_items else "seeds")
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    d.lo, d.hi = float(lo), float(hi)
    d.p = float(min(1.0, 2 * min(np.mean(reps <= 0), np.mean(reps >= 0))))
    return d


def _method_dim(label: str) -> tuple[str, str]:
    """``("hyperofa", "full")`` from a row label ``hyperofa d=full (epochs=60, patience=5)``."""
    method, _, rest = label.partition(" d=")
    return method, rest.split(" ")[0]


def match_rows(ta: SideTable, tb: SideTable) -> list[tuple[SideRow, SideRow]]:
    """The rows to put side by side: the single row of each side (two runs); else the rows with the same label,
    then, among the rest, the rows of the same method and dim when each side has exactly one of them (a label
    names the parameters that tell variants apart within its own experiment, so one variant may be labelled
    differently in two experiments)."""
    if len(ta.rows) == 1 and len(tb.rows) == 1:
        return [(next(iter(ta.rows.values())), next(iter(tb.rows.values())))]
    pairs = [(ta.rows[lab], tb.rows[lab]) for lab in ta.rows if lab in tb.rows]
    rest_a = [r for lab, r in ta.rows.items() if lab not in tb.rows]
    rest_b = [r for lab, r in tb.rows.items() if lab not in ta.rows]
    for ra in rest_a:
        key = _method_dim(ra.label)
        same_a = [r for r in rest_a if _method_dim(r.label) == key]
        same_b = [r for r in rest_b if _method_dim(r.label) == key]
        if len(same_a) == 1 and len(same_b) == 1:
            pairs.append((ra, same_b[0]))
    if not pairs:  # two methods (or rows) of one experiment: variant by variant, the method's name aside
        for ra in rest_a:
            same_b = [r for r in rest_b if _variant_rest(r.label) == _variant_rest(ra.label)]
            if len(same_b) == 1 and sum(_variant_rest(r.label) == _variant_rest(ra.label) for r in rest_a) == 1:
                pairs.append((ra, same_b[0]))
    return pairs


def _variant_rest(label: str) -> str:
    """A row label without its method: ``d=100 (cpt=2)`` of ``ofa d=100 (cpt=2)``."""
    return label.partition(" ")[2]


def variant_differences(ra: SideRow, rb: SideRow) -> list[str]:
    """What tells the variants of two rows apart, one ``name A / B`` each (``cpt 2 / 10``, ``eval fp32 / bf16``);
    [] where they are of one variant or a side does not know its rows' variants (a leaderboard folder)."""
    if not ra.variant or not rb.variant:
        return []
    names = sorted(set(ra.variant) | set(rb.variant))
    return [f"{n} {ra.variant.get(n, '-')} / {rb.variant.get(n, '-')}" for n in names
            if ra.variant.get(n) != rb.variant.get(n)]


def _average(t: SideTable, ra: SideRow, rb: SideRow, both: list[str], resamples: int, seed: int) -> LangDiff:
    """The rows' average over the languages both have, with the one verdict on the pair
    (:func:`leaderboard.stats.pair_verdict`: the claims' test, on the same rows the same interval and p)."""
    avg = LangDiff(f"avg ({len(both)})", statistics.fmean(ra.mean(x) for x in both),
                   statistics.fmean(rb.mean(x) for x in both),
                   max(len(ra.values[x]) for x in both), max(len(rb.values[x]) for x in both))
    avg.diff = avg.a - avg.b  # type: ignore[operator]
    if resamples <= 0:
        return avg
    step = t.at if t.step == "final" else t.step
    v = pair_verdict({x: ra.values[x] for x in both}, {x: rb.values[x] for x in both}, t.higher_is_better,
                     resamples=resamples, seed=seed,
                     key=verdict_key(t.task, t.metric, t.profile, step, ra.label, rb.label))
    if v is not None:
        avg.verdict, avg.lo, avg.hi, avg.p = v, v.interval.lo, v.interval.hi, v.test.p_value
        avg.resampled = "languages + seeds; Wilcoxon"
    return avg


def compare(a: Side, b: Side, *, task: str | None = None, metric: str | None = None, step: str = "final",
            resamples: int = VERDICT_RESAMPLES, seed: int = 0, across_variants: bool = False) -> list[Comparison]:
    """Every table both sides have (``metric``: None = the task's headline, ``all``; ``step``: ``final``, a CPT
    step, or ``all``), row against row, language by language, with the average and its verdict. Rows of different
    variants (:func:`variant_differences`) are refused unless ``across_variants``; then each comparison names
    what differs."""
    out: list[Comparison] = []
    for key in sorted(set(a.tables) & set(b.tables)):
        ta, tb = a.tables[key], b.tables[key]
        t, m, prof, st = key
        if (task and t != task) or (step != "all" and st != str(step)):
            continue
        if (metric is None and not ta.headline) or (metric not in (None, "all") and m != metric):
            continue
        for ra, rb in match_rows(ta, tb):
            differs = variant_differences(ra, rb)
            if differs and not across_variants:
                raise HarnessError(f"{ra.label!r} and {rb.label!r} are rows of different variants "
                                   f"({'; '.join(differs)}): their difference is not the methods'; give "
                                   "--across-variants to compare them anyway")
            langs = sorted(set(ra.values) | set(rb.values))
            lines = []
            for lang in langs:
                if lang in ra.values and lang in rb.values:
                    lines.append(lang_diff(lang, ra, rb, resamples=resamples, seed=seed,
                                           key=(t, m, prof, st, ra.label, rb.label, lang)))
                else:
                    lines.append(LangDiff(lang, ra.mean(lang) if lang in ra.values else None,
                                          rb.mean(lang) if lang in rb.values else None,
                                          len(ra.values.get(lang, [])), len(rb.values.get(lang, []))))
            both = [lang for lang in langs if lang in ra.values and lang in rb.values]
            avg = _average(ta, ra, rb, both, resamples, seed) if both else None
            out.append(Comparison(t, m, prof, st, ta.higher_is_better, ra.label, rb.label, lines, avg,
                                  at=ta.at if ta.at == tb.at else None, differs=differs))
    return out


__all__ = ["Comparison", "LangDiff", "Side", "compare", "resolve"]
