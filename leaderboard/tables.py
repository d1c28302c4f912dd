"""Per-language tables built from the runs read back from MLflow (never recomputed).

For each experiment, task, metric and CPT step (0, every checkpoint, the final step) a *board*: rows are model
variants (method, factorized dim, source model; method and CPT settings when they differ) aggregated over their
seeds, columns are languages. Each cell holds the mean over seeds, the standard deviation (ddof=1), the number of
seeds and a bootstrap confidence interval over seeds and test items (:mod:`leaderboard.stats`).

Averages follow MTEB: ``avg`` is the mean over all the board's languages and only for rows that have every one of
them (a row with gaps shows them and gets no average); ``avg∩`` is the mean over the languages every row has, so it is
comparable across all rows. The mean rank is computed over that common set too, with ties sharing their average
rank. A *delta* board holds final − step 0 per seed. Every column holds the values of one step: where rows stopped
CPT at different steps (several CPT budgets), the final board shows every row at step 0 and each budget's final step
(and its change from step 0) is a board of its own (:func:`board_specs`). A row that blew up carries a mark and is
left out of the notes' means (:mod:`leaderboard.blowups`); a decoder's board shows each row's held-out loss beside
a uniform guess's. Published figures ("paper: <method>" rows,
:mod:`leaderboard.papers`) sit beside ours but never enter averages of the common set, ranks or tests. Profiles are
never mixed in one board.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any

from harness.core.kernels import NATIVE as NATIVE_KERNELS
from harness.core.objective import heldout_name
from harness.core.versions import MAJOR_CHECKED, mixed_majors
from leaderboard.blowups import blowup_note, find_blowups
from leaderboard.claims import evaluate_claims, evaluate_open_question
from leaderboard.collect import CellRecord, ExperimentData, TaskFacts, TaskRun
from leaderboard.cpt_notes import (
    _seed_order,
    cpt_note,
    donor_note,
    guess_row,
    heldout_at,
    profile_budget,
    uniform_guess,
)
from leaderboard.labels import _variant, variant_labels
from leaderboard.model import (
    HELDOUT,
    INIT_COLUMNS,
    METRIC_NOTES,
    Board,
    Entry,
    Leaderboard,
    Row,
    VariantInfo,
    VariantKey,
    finish_board,
)
from leaderboard.references import SETTING as REFERENCE_SETTING
from leaderboard.references import reference_of
from leaderboard.retained import board_references, reference_rows, retained_board
from leaderboard.stats import ItemSample, SeedSample, bootstrap_ci, remembered_intervals

log = logging.getLogger(__name__)


def _mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    by: dict[int, list[float]] = {}
    for c in curves:
        for s, v in c:
            by.setdefault(s, []).append(v)
    return [(s, statistics.fmean(v)) for s, v in sorted(by.items())]


class _Builder:
    def __init__(self, data: ExperimentData, *, per_seed: bool, bootstrap: int, bootstrap_seed: int, level: float,
                 progress: Any = None):
        self.data = data
        self.per_seed = per_seed
        self.bootstrap = bootstrap
        self.bootstrap_seed = bootstrap_seed
        self.level = level
        self.progress = progress
        self.blowups: dict[tuple[str, VariantKey], str] = {}  # (profile, row) -> why it blew up

    def value(self, run: TaskRun, metric: str, lang: str, step: int | None) -> float | None:
        if step is None:
            return None
        return run.scores.get(step, {}).get(metric, {}).get(lang)

    def sample(self, run: TaskRun, metric: str, lang: str, step: int, value: float) -> SeedSample:
        it = self.data.items(run, step).get(metric, {}).get(lang) if self.bootstrap > 0 else None
        return SeedSample(value, [(1.0, ItemSample.from_dict(it))] if it and it.get("num") else [])

    def delta_sample(self, run: TaskRun, metric: str, lang: str, step: int, value: float) -> SeedSample:
        if self.bootstrap <= 0:
            return SeedSample(value)
        a = self.data.items(run, step).get(metric, {}).get(lang)
        b = self.data.items(run, 0).get(metric, {}).get(lang)
        if a and b and a.get("num") and len(a["num"]) == len(b.get("num", [])):
            return SeedSample(value, [(1.0, ItemSample.from_dict(a)), (-1.0, ItemSample.from_dict(b))])
        return SeedSample(value)

    def board(self, task: str, metric: str, profile: str, kind: str, step: int | None,
              groups: dict[VariantKey, list[TaskRun]], labels: dict[VariantKey, str], hib: bool,
              budget: int | None = None) -> Board:
        """One board. Where the rows stopped CPT at different steps (``finals`` differ), every column still holds
        one step: the final board shows every row at ``step`` 0, and ``budget`` restricts a board to the runs whose
        final step is ``budget`` (that budget's final step, or its change from step 0)."""
        data = self.data
        rows: list[Row] = []
        finals = sorted({f for runs in groups.values() for r in runs if (f := data.final_step(r)) is not None})
        for key, runs in groups.items():
            runs = [r for r in runs if budget is None or data.final_step(r) == budget]
            row = self.row(task, metric, profile, kind, step, key, runs, labels[key])
            if row is not None:
                rows.append(row)
        b = Board(data.name, task, metric, profile, hib, kind, step if kind == "step" or step is not None else
                  (finals[0] if len(finals) == 1 else None), [], rows, final_steps=finals, budget=budget)
        board_cells = list({id(p): p for runs in groups.values() for r in runs
                            if (p := data.parent(r)) is not None}.values())
        b.precision = precision_label(board_cells)
        b.sources = {p.source: p.objective for p in board_cells}
        b.cpt_steps = sorted({p.final_step for p in board_cells if p.final_step is not None})
        guess = uniform_guess(board_cells)
        b.guess = guess[1] if guess else None
        if kind != "delta" and (row := guess_row(task, metric, b.languages or sorted(
                {lang for r in rows for lang in r.entries}), board_cells)) is not None:
            if "clm" in b.sources.values() and b.guess is not None:
                row.init[HELDOUT] = b.guess  # beside each row's held-out loss
            b.paper_rows.append(row)
        if metric == "bpb" and kind != "delta":  # a derived world's references (leaderboard.retained)
            b.paper_rows.extend(reference_rows(board_references(data, groups), metric, self,
                                               (task, metric, profile, kind, step, budget)))
        finish_board(b)
        self.notes(b, groups, labels, board_cells)
        return b

    def row(self, task: str, metric: str, profile: str, kind: str, step: int | None, key: VariantKey,
            runs: list[TaskRun], label: str) -> Row | None:
        """A row of the board: its runs' values at the board's step (their change from step 0 on a delta board),
        its init columns, the held-out loss at that step beside them on a decoder's board, and its mark where it
        blew up (:mod:`leaderboard.blowups`); None when it has no value there."""
        data = self.data
        entries: dict[str, Entry] = {}
        per_lang: dict[str, tuple[list[float], list[str], list[SeedSample]]] = {}
        row_steps: set[int] = set()
        for run in sorted(runs, key=lambda r: _seed_order(r.seed)):
            fin = data.final_step(run)
            if kind == "final" and step is not None:
                fin = step  # rows of several budgets: each at the board's one step
            if kind == "final" and fin is not None:
                row_steps.add(fin)
            langs = set()
            for st in {fin, 0, step} - {None}:
                langs |= set(run.scores.get(st, {}).get(metric, {}))  # type: ignore[arg-type]
            for lang in sorted(langs):
                if kind == "delta":
                    if fin is None or fin == 0:
                        continue
                    a, b = self.value(run, metric, lang, fin), self.value(run, metric, lang, 0)
                    if a is None or b is None:
                        continue
                    v = a - b
                    smp = self.delta_sample(run, metric, lang, fin, v)
                else:
                    st = fin if kind == "final" else step
                    v = self.value(run, metric, lang, st)
                    if v is None:
                        continue
                    smp = self.sample(run, metric, lang, st, v)  # type: ignore[arg-type]
                vals, seeds, smps = per_lang.setdefault(lang, ([], [], []))
                vals.append(v)
                seeds.append(run.seed)
                smps.append(smp)
        for lang, (vals, seeds, smps) in per_lang.items():
            ci = bootstrap_ci(smps, resamples=self.bootstrap, level=self.level, seed=self.bootstrap_seed,
                              key=(task, metric, profile, kind, step, label, lang))
            entries[lang] = Entry(vals, seeds, ci)
        if not entries:
            return None
        seeds_all = sorted({r.seed for r in runs}, key=_seed_order)
        init = self.init_of(runs)
        cells = [p for r in runs if (p := data.parent(r)) is not None]
        if kind != "delta" and any(c.objective == "clm" for c in cells) and (
                loss := heldout_at(cells, sorted(row_steps)[0] if len(row_steps) == 1 else step)) is not None:
            init[HELDOUT] = loss
        return Row(label, entries, "ours", key, seeds_all, init, steps=sorted(row_steps),
                   blowup=self.blowups.get((profile, key), ""))

    def notes(self, b: Board, groups: dict[VariantKey, list[TaskRun]], labels: dict[VariantKey, str],
              board_cells: list[CellRecord]) -> None:
        """The notes under a board: rows that blew up, budgets, CPT, the protocol, fitted settings, versions and
        unfinished cells."""
        data, kind, profile, task, finals = self.data, b.kind, b.profile, b.task, b.final_steps
        if marked := {r.label: r.blowup for r in b.rows if r.blowup}:
            b.notes.append(blowup_note(marked))
        if METRIC_NOTES.get(b.metric):
            b.notes.append(METRIC_NOTES[b.metric])
        left_out = {k: labels[k] for k in groups if self.blowups.get((profile, k))}
        if kind == "final" and len(finals) > 1:
            b.notes.append(budgets_note(finals))
        if (kind in ("final", "delta") or b.budget) and any(f > 0 for f in finals) and (
                note := cpt_note(profile, groups, board_cells, data, left_out)):
            b.notes.append(note)
        cpt_only = sorted({p.final_step for runs in groups.values() for r in runs if (p := data.parent(r)) is not None
                           and p.task_final_step == 0 and (p.final_step or 0) > 0})
        if kind == "final" and cpt_only:
            why = ("the profile's CPT is a smoke test; `[cpt] eval_tasks = true` or a CPT budget of the run's own "
                   "evaluates them" if profile_budget(profile, board_cells) else
                   "the run set `[cpt] eval_tasks = false`; `[cpt] eval_tasks = true` evaluates them")
            b.notes.append(f"the tasks were evaluated at step 0 only: after CPT ({', '.join(map(str, cpt_only))} "
                           f"steps) only the {heldout_name(c.objective for c in board_cells)} was measured ({why})")
            if (note := cpt_note(profile, groups, board_cells, data, left_out)) and note not in b.notes:
                b.notes.append(note)
        b.notes.extend(protocol_notes(task, [r for runs in groups.values() for r in runs]))
        if note := donor_note(groups, labels, data):
            b.notes.append(note)
        fitted = sorted({f"{k[len('fitted.'):]} {v}" for runs in groups.values() for r in runs
                         if (p := data.parent(r)) is not None for k, v in p.params.items() if k.startswith("fitted.")})
        if fitted:
            b.notes.append("settings fitted to the source model (the profile asked for more than it takes): "
                           + "; ".join(fitted))
        mixed = mixed_majors([{lib: p.params.get(f"version.{lib}", "") for lib in MAJOR_CHECKED}
                              for runs in groups.values() for r in runs if (p := data.parent(r)) is not None])
        if mixed:
            b.notes.append("rows come from different major versions of " + "; ".join(
                f"{lib} ({', '.join(v)})" for lib, v in mixed.items()) + ": numbers may not be comparable")
        unfinished = sorted({f"{labels[key]} seed {r.seed} ({p.status})" for key, runs in groups.items()
                             for r in runs if (p := data.parent(r)) is not None and p.status != "FINISHED"})
        if unfinished:
            b.notes.append("incomplete cells (their runs did not finish; the same `harness run` command resumes "
                           "them): " + ", ".join(unfinished))

    def init_of(self, runs: list[TaskRun]) -> dict[str, float]:
        vals: dict[str, list[float]] = {}
        for r in runs:
            p = self.data.parent(r)
            if p is None:
                continue
            for k, _ in INIT_COLUMNS:
                if k in p.metrics:
                    vals.setdefault(k, []).append(p.metrics[k])
        return {k: statistics.fmean(v) for k, v in vals.items()}


def precision_label(cells: list[CellRecord]) -> str:
    """The numerics of the cells' model passes as they logged them (params ``eval_precision``, ``cpt.precision``
    and ``cpu_kernels``): ``evaluation fp32, CPT fp32, CPU kernels avx2``; several values where the cells differ
    (``fp32 / bf16``); "" when none logged a precision. A cell logged before the kernels were pinned computed with
    each library's own (``native``)."""

    def values(key: str) -> str:
        return " / ".join(sorted({v for c in cells if (v := c.params.get(key))}))

    parts = [f"{name} {v}" for name, key in (("evaluation", "eval_precision"), ("CPT", "cpt.precision"))
             if (v := values(key))]
    if parts:
        parts.append("CPU kernels " + " / ".join(sorted({c.params.get("cpu_kernels") or NATIVE_KERNELS for c in cells})))
    return ", ".join(parts)


def protocol_notes(task: str, runs: list[TaskRun]) -> list[str]:
    """The task's protocol as its runs logged it (their ``<task>.*`` params: fine-tuning budget, learning rate, how
    a word's label meets its sub-tokens, test sizes...): one note naming the settings every row shares, and one
    naming each setting the rows do not share (their numbers may not be comparable)."""
    logged = [r.protocol for r in runs if r.protocol]
    if not logged:
        return []
    values: dict[str, set[str]] = {}
    for proto in logged:
        for k, v in proto.items():
            values.setdefault(k, set()).add(v)
    same = {k: next(iter(v)) for k, v in sorted(values.items()) if len(v) == 1 and all(k in p for p in logged)}
    differ = {k: sorted(v) for k, v in sorted(values.items()) if k not in same}
    notes = []
    if same:
        notes.append(f"{task} protocol: " + ", ".join(f"{k}={v}" for k, v in same.items()))
    if differ:
        notes.append(f"rows ran different {task} protocols ("
                     + "; ".join(f"{k}: {', '.join(v)}" for k, v in differ.items())
                     + "): their numbers may not be comparable")
    return notes


def _metric_order(facts: TaskFacts, present: set[str]) -> list[str]:
    headline, metrics = facts.headline, facts.metrics
    order = ([headline] if headline else []) + [m for m in metrics if m != headline]
    return [m for m in order if m in present] + sorted(present - set(order))


def build_leaderboard(data: ExperimentData, *, per_seed: bool = False, bootstrap: int = 1000,
                      bootstrap_seed: int = 0, level: float = 0.95, papers: bool = True,
                      progress: Any = None) -> Leaderboard:
    """Every board of an experiment: per (task, profile), each metric at each step, the final step and the delta."""
    with remembered_intervals(intervals_memo()):
        return _build_leaderboard(data, per_seed=per_seed, bootstrap=bootstrap, bootstrap_seed=bootstrap_seed,
                                  level=level, papers=papers, progress=progress)


def board_specs(steps: list[int], finals: set[int]) -> list[tuple[str, int | None, int | None]]:
    """(kind, step, budget) of each board of a task's metric, so that every column holds the values of one step.
    One final step: a board per other step, the final board and the change from step 0. Rows that stopped CPT at
    different steps (several budgets): the final board shows every row at step 0, and each budget's final step is
    a board of its own (kind ``step``, its ``budget`` set: the rows of that budget only), as is its change from step
    0; the other steps a board each, as before."""
    if len(finals) <= 1:
        final = next(iter(finals), None)
        specs: list[tuple[str, int | None, int | None]] = [("step", s, None) for s in steps if s != final]
        if finals:
            specs.append(("final", final, None))
        if any(f > 0 for f in finals) and 0 in steps:
            specs.append(("delta", final, None))
        return specs
    budgets = sorted(f for f in finals if f > 0)
    specs = [("step", s, s if s in budgets else None) for s in steps if s != 0]
    specs.append(("final", 0, None))
    specs += [("delta", f, f) for f in budgets if 0 in steps]
    return specs


def budgets_note(finals: list[int]) -> str:
    """The note of a final board whose rows stopped CPT at different steps: what it shows, and where the rest is."""
    later = ", ".join(f"step {f}" for f in finals if f > 0)
    return (f"rows stopped CPT at different steps ({', '.join(map(str, finals))}): this board shows every row at "
            f"step 0, so that a column holds one step; each CPT budget's final step is a board of its own ({later})")


def intervals_memo() -> Path | None:
    """Where the bootstrap intervals of this home's boards are remembered (:class:`leaderboard.stats.IntervalMemo`)."""
    from harness.core.paths import home_dir

    try:
        home = home_dir()
    except Exception:  # noqa: BLE001 - no home: intervals are computed, not remembered
        return None
    return home / "cache" / "boards" / "intervals.json" if home.is_dir() else None


def _build_leaderboard(data: ExperimentData, *, per_seed: bool, bootstrap: int, bootstrap_seed: int, level: float,
                       papers: bool, progress: Any) -> Leaderboard:
    from leaderboard.slices import language_table, slice_board

    bld = _Builder(data, per_seed=per_seed, bootstrap=bootstrap, bootstrap_seed=bootstrap_seed, level=level,
                   progress=progress)
    bld.blowups = find_blowups(list(data.cells.values()), lambda c: _variant(c, c, per_seed), uniform_guess)
    by_group: dict[tuple[str, str], list[TaskRun]] = {}
    for run in data.tasks:
        by_group.setdefault((run.task, run.profile), []).append(run)
    labels = profile_labels(data, per_seed)
    jobs = []
    for (task, profile), runs in sorted(by_group.items()):
        facts = data.task_info(task)
        headline, hib = facts.headline, facts.higher_is_better
        groups: dict[VariantKey, list[TaskRun]] = {}
        for run in runs:
            groups.setdefault(_variant(run, data.parent(run), per_seed), []).append(run)
        steps = sorted({s for r in runs for s in r.scores})
        finals = {f for r in runs if (f := data.final_step(r)) is not None}
        present = {m for r in runs for per in r.scores.values() for m in per}
        for metric in _metric_order(facts, present):
            for kind, step, budget in board_specs(steps, finals):
                jobs.append((task, metric, profile, kind, step, budget, groups, labels, hib, metric == headline))
    bar = progress.add_task(f"tables {data.name}", total=len(jobs)) if progress and jobs else None
    boards = []
    for task, metric, profile, kind, step, budget, groups, labels, hib, is_head in jobs:
        b = bld.board(task, metric, profile, kind, step, groups, labels, hib, budget)
        b.headline = is_head
        boards.append(b)
        if (rb := retained_board(bld, b, groups, labels)) is not None:
            boards.append(rb)
        if bar is not None:
            progress.advance(bar)
    if bar is not None:
        progress.remove_task(bar)
    langs = language_table(data)
    worlds = sorted({r.world for r in data.tasks})
    if papers:
        from leaderboard.papers import attach_paper_rows

        for b in boards:
            attach_paper_rows(b, data)
    for b in boards:
        slice_board(b, data, langs)
    from leaderboard.costs import attach_costs

    attach_costs(boards, data)
    variants = variant_infos(data, per_seed)
    from leaderboard.tokstats import tokenizer_stats

    return Leaderboard(data.name, boards, variants, langs, worlds,
                       {"resamples": bootstrap, "seed": bootstrap_seed, "level": level},
                       evaluate_claims(boards, variants) if not per_seed else [],
                       evaluate_open_question(boards) if not per_seed else [],
                       tokenizer_stats(list(data.cells.values())))


def profile_labels(data: ExperimentData, per_seed: bool) -> dict[VariantKey, str]:
    """Row labels, made unique within each profile over every cell and task run of the experiment (so that a row
    has the same label on every board and in the settings table)."""
    keys: dict[str, set[VariantKey]] = {}
    for cell in data.cells.values():
        keys.setdefault(cell.profile, set()).add(_variant(cell, cell, per_seed))
    for run in data.tasks:
        keys.setdefault(run.profile, set()).add(_variant(run, data.parent(run), per_seed))
    defaults: dict[str, dict[str, str]] = {}
    for cell in data.cells.values():
        if cell.method_defaults:
            defaults.setdefault(cell.method, cell.method_defaults)
    out: dict[VariantKey, str] = {}
    for profile, ks in keys.items():
        out.update(variant_labels(sorted(ks, key=lambda k: (k.method, k.dim, k.source, k.params, k.cpt,
                                                            k.protocol, str(k.seed))), defaults,
                                  cpt_defaults=profile_cpt(profile)))
    return out


def profile_cpt(profile: str | None) -> dict[str, Any]:
    """The CPT settings of a profile (what a run of it that did not log a setting ran with)."""
    from harness.core.profiles import PROFILES

    return dict(PROFILES.get(profile or "", {}).get("cpt", {}))


def variant_infos(data: ExperimentData, per_seed: bool = False) -> list[VariantInfo]:
    groups: dict[tuple[str, VariantKey], list[CellRecord]] = {}
    for cell in data.cells.values():
        groups.setdefault((cell.profile, _variant(cell, cell, per_seed)), []).append(cell)
    labels = profile_labels(data, per_seed)
    out = []
    for profile in sorted({p for p, _ in groups}):
        keys = [k for p, k in groups if p == profile]
        for key in keys:
            cells = sorted(groups[(profile, key)], key=lambda c: _seed_order(c.seed))
            init = {k: statistics.fmean(c.metrics[k] for c in cells if k in c.metrics)
                    for k, _ in INIT_COLUMNS if any(k in c.metrics for c in cells)}
            curves = {k: _mean_curve([c.curves[k] for c in cells if k in c.curves])
                      for k in ("cpt/train_loss", "cpt/heldout_loss") if any(k in c.curves for c in cells)}
            conv = {k: statistics.fmean(c.metrics[k] for c in cells if k in c.metrics)
                    for k in ("cpt/heldout_auc", "cpt/steps_to_threshold") if any(k in c.metrics for c in cells)}
            out.append(VariantInfo(labels[key], profile, key, [c.seed for c in cells], settings_of(cells), init,
                                   curves, conv))
    return sorted(out, key=lambda v: (v.profile, v.label))


def settings_of(cells: list[CellRecord]) -> dict[str, str]:
    """The explicit decisions behind a row (spec/methods.md Appendix B), from its runs' params and init reports."""

    def one(get) -> str:
        vals = []
        for c in cells:
            try:
                v = get(c)
            except (KeyError, TypeError, AttributeError):
                v = None
            if v is not None and str(v) not in vals:
                vals.append(str(v))
        return " / ".join(vals) if vals else "-"

    s = {
        "method": one(lambda c: c.method),
        "source": one(lambda c: c.source),
        "factorized dim": one(lambda c: c.dim),
        "seeds": ", ".join(c.seed for c in cells),
        "profile": one(lambda c: c.profile),
        "world": one(lambda c: f"{c.world} ({c.params.get('world_hash', '?')})"),
        "overlap rule": one(lambda c: c.init_report.get("overlap_rule")),
        "mode": one(lambda c: c.init_report["surgery"]["mode"]),
        "LM-head bias": one(lambda c: c.init_report["surgery"]["bias_policy"]),
        "method params": one(lambda c: ", ".join(f"{k}={v}" for k, v in c.method_params.items()) or "defaults"),
        "CPT": one(lambda c: ", ".join(f"{k}={v}" for k, v in c.cpt_params.items()) or "none"),
        "final step": one(lambda c: c.final_step),
        "git": one(lambda c: c.params.get("git_revision", "")[:10] or None),
        "versions": one(lambda c: ", ".join(f"{lib} {c.params[f'version.{lib}']}" for lib in MAJOR_CHECKED)),
        REFERENCE_SETTING: reference_of(cells),  # what the method was checked against (its runs' tag)
    }
    return s


def select_boards(boards: list[Board], *, task: str | None = None, step: str = "final",
                  metric: str | None = None) -> list[Board]:
    """Boards matching a task, a step (``final``, ``delta``, ``all`` or a number) and a metric (None: headline)."""
    out = []
    for b in boards:
        if task and b.task != task:
            continue
        if metric is None and not b.headline:
            continue
        if metric not in (None, "all") and b.metric != metric:
            continue
        if step == "all":
            pass
        elif step in ("final", "delta"):
            if b.kind != step:
                continue
        else:
            try:
                want = int(step)
            except ValueError:
                from harness.core.errors import ConfigError

                raise ConfigError(f"--step must be 0, a CPT step, 'final', 'delta' or 'all', not {step!r}") from None
            if b.kind == "delta" or b.step != want:
                continue
        out.append(b)
    return out
