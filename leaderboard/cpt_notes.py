"""The notes a board carries about CPT and the uniform guess: the CPT note (what the profile's post-CPT tables are,
with the held-out losses the board's own cells logged, rows that blew up named, not averaged in), the uniform
guess's row beside a loss (ln |V|), and the CPT budgets the runs logged against the profile's."""

from __future__ import annotations

import math
import statistics

from harness.core.objective import heldout_name
from leaderboard.collect import CellRecord, ExperimentData, TaskRun
from leaderboard.fmt import pair as fmt_pair
from leaderboard.model import GUESS, HELDOUT, Entry, Row, VariantKey


def _seed_order(s: str) -> tuple[int, str]:
    return (int(s), s) if s.lstrip("-").isdigit() else (1 << 30, s)



def heldout_at(cells: list[CellRecord], step: int | None) -> float | None:
    """The held-out loss (the CPT diagnostic, nats) at ``step`` (None: the last logged), mean over the cells that
    logged it there; None when none did."""
    vals = []
    for c in cells:
        curve = sorted(c.curves.get(HELDOUT) or [])
        at = curve[-1:] if step is None else [p for p in curve if p[0] == step]
        vals += [v for _, v in at]
    return statistics.fmean(vals) if vals else None


def cpt_note(profile: str, groups: dict[VariantKey, list[TaskRun]], cells: list[CellRecord],
             data: ExperimentData, left_out: dict[VariantKey, str] | None = None) -> str | None:
    """What the profile's post-CPT tables are, when it says (the ``cpu`` profile: a smoke test), with what this
    board's own cells logged of their CPT: its budget (``cpt.*`` params) and the held-out MLM loss at step 0 and at
    the final step (``cpt/heldout_loss``), averaged over each row's seeds. No number comes from anywhere else. The
    rows of ``left_out`` (row -> label: rows that blew up, :mod:`leaderboard.blowups`) are named, not averaged in;
    where every other row stays above a uniform guess without one far above it, the note says why, once."""
    from harness.core.profiles import PROFILES

    note = PROFILES.get(profile, {}).get("cpt_note")
    if not note:
        return None

    def logged(key: str) -> str:
        return " / ".join(sorted({v for c in cells if (v := c.params.get(key))}, key=_seed_order))

    steps, batch, block = logged("cpt.steps"), logged("cpt.effective_batch"), logged("cpt.block_size")
    heldout = heldout_name(c.objective for c in cells)
    budget = f"{steps} CPT steps" + (f" of {batch} x {block} tokens" if batch and block else "") if steps else "CPT"
    if not profile_budget(profile, cells):
        note = own_budget_note(profile, budget, cells)
    by_steps: dict[str, tuple[list[float], list[float]]] = {}  # a budget -> each row's loss before and after
    left_out = left_out or {}
    for key, runs in groups.items():
        if key in left_out:
            continue
        curves = [(p.params.get("cpt.steps") or "?", c) for r in runs if (p := data.parent(r)) is not None
                  and len(c := sorted(p.curves.get("cpt/heldout_loss") or [])) > 1]
        if curves:
            before, after = by_steps.setdefault(curves[0][0], ([], []))
            before.append(statistics.fmean(c[0][1] for _, c in curves))
            after.append(statistics.fmean(c[-1][1] for _, c in curves))
    if not by_steps:
        return f"{note} (this board's cells ran {budget}; they logged no {heldout})"
    parts = []
    for steps_of, (before, after) in sorted(by_steps.items(), key=lambda kv: _seed_order(kv[0])):
        lower = sum(a < b for a, b in zip(after, before, strict=True))
        a, b = fmt_pair(statistics.fmean(before), statistics.fmean(after))
        what = f"{steps_of} CPT steps" if len(by_steps) > 1 else budget
        parts.append(f"{what} took the {heldout} (the CPT diagnostic) from {a} to {b} nats (mean over "
                     f"{len(before)} row(s); lower for {lower} of {len(before)})")
    guess = uniform_guess(cells)
    if guess is not None:
        parts[-1] += f"; a uniform guess over the {guess[0]:,}-token target vocabulary scores ln |V| = {guess[1]:.2f}"
        after = [a for _, (_, aft) in by_steps.items() for a in aft]
        if after and min(after) > guess[1]:
            lo, hi = fmt_pair(min(after), max(after))
            parts[-1] += (f"; every {'other ' if left_out else ''}row stays above it ({lo} to {hi} nats) but none "
                          "far above it: a CPT this short leaves the new rows barely trained, which is no blow-up")
    if left_out:
        parts.append("left out of these means, as they blew up: " + ", ".join(sorted(left_out.values())))
    return f"{note}; on this board, " + "; ".join(parts)


def donor_note(groups: dict[VariantKey, list[TaskRun]], labels: dict[VariantKey, str],
               data: ExperimentData) -> str | None:
    """Which donor model the rows of omp, clp and clp+ read where it is not the helper trained on the world's text
    (their cells' ``init.donor`` param, the path from their init report): ``donor model: omp d=full: world donor
    (/path)``; None when every row used the trained helper."""
    seen: dict[str, set[str]] = {}
    for key, runs in groups.items():
        for r in runs:
            p = data.parent(r)
            if p is None or not (kind := p.params.get("init.donor")):
                continue
            model = ((p.init_report or {}).get("method_stats") or {}).get("donor_model") or {}
            seen.setdefault(labels[key], set()).add(f"{kind} ({model['path']})" if model.get("path") else kind)
    if not seen:
        return None
    return "donor model: " + "; ".join(f"{label}: {' / '.join(sorted(v))}" for label, v in sorted(seen.items()))


LM_LOSS_TASKS = ("mlm", "clm")  # tasks whose loss is a cross-entropy over the target vocabulary


def guess_row(task: str, metric: str, languages: list[str], cells: list[CellRecord]) -> Row | None:
    """The row of a uniform guess over the target vocabulary on a language-model loss board: ln |V| nats in every
    language for ``loss``, |V| for ``ppl`` (a row beside which a model that does worse than guessing shows it).
    It takes no part in averages of the common set, ranks or tests, as the papers' rows."""
    if task not in LM_LOSS_TASKS or metric not in ("loss", "ppl") or not languages:
        return None
    guess = uniform_guess(cells)
    if guess is None:
        return None
    value = guess[1] if metric == "loss" else float(guess[0])
    return Row(f"uniform guess (|V| = {guess[0]:,})", {lang: Entry([value], []) for lang in languages},
               kind=GUESS)


def uniform_guess(cells: list[CellRecord]) -> tuple[int, float] | None:
    """The target vocabulary's size |V| and the MLM loss of a uniform guess over it, ln |V| (nats): what a model
    that learned nothing scores. From the cells' init reports (``target_vocab_size``, else the sum of the
    provenance counts); None when they do not say, or name several sizes."""
    sizes = set()
    for c in cells:
        rep = c.init_report or {}
        v = rep.get("target_vocab_size")
        if v is None and isinstance(rep.get("counts"), dict):
            v = sum(int(x) for x in rep["counts"].values() if isinstance(x, int | float)) or None
        if v:
            sizes.add(int(v))
    if len(sizes) != 1:
        return None
    size = sizes.pop()
    return size, math.log(size)


_BUDGET_KEYS = ("steps", "effective_batch", "block_size")


def _budgets(profile: str, cells: list[CellRecord]) -> list[tuple[int, int, int]]:
    """(steps, effective batch, block size) of each cell's CPT as it logged them (``cpt.*`` params; a setting a
    cell did not log: the profile's)."""
    from harness.core.profiles import PROFILES

    default = PROFILES.get(profile, {}).get("cpt", {})
    out = []
    for c in cells:
        try:
            out.append(tuple(int(float(c.params.get(f"cpt.{k}") or default.get(k) or 0)) for k in _BUDGET_KEYS))
        except ValueError:
            continue
    return out


def profile_budget(profile: str, cells: list[CellRecord]) -> bool:
    """Whether the cells ran their profile's own CPT budget (or less): what the profile's ``cpt_note`` speaks of.
    A run that names a budget of its own (``--cpt-steps 4000``) is described by its logged budget instead."""
    from harness.core.profiles import PROFILES

    default = PROFILES.get(profile, {}).get("cpt", {})
    own = tuple(int(default.get(k) or 0) for k in _BUDGET_KEYS)
    return all(all(b <= o for b, o in zip(budget, own, strict=True)) for budget in _budgets(profile, cells))


def own_budget_note(profile: str, budget: str, cells: list[CellRecord]) -> str:
    """The post-CPT note of cells that ran a CPT budget of their own: that budget as logged, and its tokens against
    the papers' CPT (the ``paper`` profile's steps x effective batch x block size)."""
    from harness.core.profiles import PROFILES

    paper = PROFILES["paper"]["cpt"]
    paper_tokens = int(paper["steps"]) * int(paper["effective_batch"]) * int(paper["block_size"])
    tokens = max((s * b * k for s, b, k in _budgets(profile, cells)), default=0)
    papers = (f"the papers' {int(paper['steps']):,} steps of {paper['effective_batch']} x {paper['block_size']} "
              "tokens")
    note = (f"post-CPT results of the {profile} profile under a CPT budget of the run's own ({budget}: up to "
            f"{tokens:,} tokens a row, {tokens / paper_tokens:.2%} of {papers})")
    if tokens < paper_tokens:
        note += "; a shorter CPT than the papers' may rank the methods differently from theirs, so read step 0 too"
    return note
