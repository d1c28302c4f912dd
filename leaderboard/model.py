"""The leaderboard's records: boards of rows × languages, each cell the values of a row's seeds and their summary.

Everything else in ``leaderboard/`` builds (:mod:`leaderboard.tables`), tests (:mod:`leaderboard.claims`) or renders
these; this module imports nothing of the leaderboard but its statistics.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from leaderboard.stats import PairTest, mean_ranks, pairwise_tests

GUESS = "guess"  # the kind of a loss board's row of a uniform guess over the target vocabulary (ln |V|)
# the kind of a transplant board's reference rows: the source with its own tokenizer, the donor (leaderboard.retained)
REFERENCE = "reference"
RETAINED = "bpb_retained"  # the metric of a transplant's BPB-retained board, and its column on the bpb board
INIT_COLUMNS = (("init/copied", "copied"), ("init/method", "method"), ("init/random", "random"),
                ("init/seconds", "init s"), ("init/val_cosine", "val cos"))
HELDOUT = "cpt/heldout_loss"  # a decoder's board: each row's held-out loss (the CPT diagnostic) at its step, nats
# what a metric is, in a line under its board and under the results table (lm-eval's and MTEB's boards say it)
METRIC_NOTES = {
    "bpb": "bpb ↓ (bits per byte): the held-out text's summed negative log-likelihood over ln 2 times its UTF-8 "
           "bytes; lower is better, and rows whose tokenizers differ compare on it (a loss a token does not)",
    "ppl": "ppl ↓ (perplexity): exp of the loss a token; lower is better",
    RETAINED: "bpb_retained ↑ (BPB retained): the bpb of the source model with its own tokenizer (the ceiling) over "
              "the row's bpb on the same held-out sentences, per language and seed; 1.0 keeps all of the source's "
              "compression, below 1.0 the transplant lost some",
}


OBJECTIVE_NAMES = {"mlm": "encoder, masked LM", "clm": "decoder, causal LM"}


def objective_name(objective: str) -> str:
    """``encoder, masked LM`` for ``mlm``; ``decoder, causal LM`` for ``clm``."""
    return OBJECTIVE_NAMES.get(objective, objective)


def sources_phrase(sources: dict[str, str]) -> str:
    """The sources of a board's rows with their kinds: ``source src (encoder, masked LM)``; ``sources dec
    (decoder, causal LM), src (encoder, masked LM)``."""
    named = ", ".join(f"{s} ({objective_name(o)})" for s, o in sorted(sources.items()))
    return f"source{'s' if len(sources) > 1 else ''} {named}"


# -- records ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VariantKey:
    method: str
    dim: str
    source: str
    params: str = "{}"  # canonical JSON of the method's parameters
    cpt: str = "{}"  # canonical JSON of the CPT settings
    seed: str | None = None  # set for per-seed rows only
    # canonical JSON of what else moves its numbers: the evaluation precision, where it is not fp32 (as the cell's
    # identity holds it)
    protocol: str = "{}"


@dataclass
class Entry:
    """One row x language: the values of the row's seeds and their summary."""

    values: list[float]
    seeds: list[str]
    ci: tuple[float, float] | None = None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None


@dataclass
class Row:
    label: str
    entries: dict[str, Entry]
    kind: str = "ours"  # "ours", "paper", GUESS or REFERENCE
    variant: VariantKey | None = None
    seeds: list[str] = field(default_factory=list)
    init: dict[str, float] = field(default_factory=dict)
    avg: float | None = None
    avg_common: float | None = None
    mean_rank: float | None = None
    steps: list[int] = field(default_factory=list)  # the CPT step(s) its values are from (of a final board)
    blowup: str = ""  # why the row is marked as blown up (leaderboard.blowups); "" where it is not
    avg_ci: tuple[float, float] | None = None  # the average's interval over languages and seeds (where computed)

    def uneven_languages(self) -> dict[str, int]:
        """``{lang: seeds}`` of the languages fewer of the row's seeds cover than its others ({}: every language
        of the row has the same seeds): its average then mixes languages averaged over different seeds."""
        counts = {lang: len(set(e.seeds)) for lang, e in self.entries.items()}
        most = max(counts.values(), default=0)
        return {lang: n for lang, n in sorted(counts.items()) if n < most}

    def value(self, lang: str) -> float | None:
        e = self.entries.get(lang)
        return e.mean if e is not None else None

    def values(self) -> dict[str, float]:
        return {lang: e.mean for lang, e in self.entries.items()}


@dataclass
class SliceColumn:
    """The average of each row over the languages of one slice (a script, seen/unseen, a resource level, a label
    source); complete rows only, as for the board's average."""

    dimension: str
    value: str
    languages: dict[str, list[str]]  # row label -> the slice's languages for that row (seen depends on the source)
    averages: dict[str, float | None]  # row label -> average

    @property
    def header(self) -> str:
        sizes = {len(v) for v in self.languages.values()}
        n = str(sizes.pop()) if len(sizes) == 1 else "var."
        return f"{self.value} ({n})"


@dataclass
class Board:
    experiment: str
    task: str
    metric: str
    profile: str
    higher_is_better: bool
    kind: str  # "step", "final" or "delta"
    step: int | None  # the CPT step (for "final": None when rows stopped at different steps)
    languages: list[str]
    rows: list[Row]
    paper_rows: list[Row] = field(default_factory=list)
    common: list[str] = field(default_factory=list)
    pairs: list[PairTest] = field(default_factory=list)
    slices: list[SliceColumn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    headline: bool = False
    final_steps: list[int] = field(default_factory=list)
    # the precision of the rows' model passes, as their cell runs logged it ("evaluation fp32, CPT fp32"; "" for
    # runs that logged none): part of the title, so every rendering's header names it
    precision: str = ""
    # what each method of the board costs (leaderboard.costs.CostRow; the headline board at the final step only)
    costs: list[Any] = field(default_factory=list)
    # the rows' source models and their objectives ({"src": "mlm", "dec": "clm"}): part of the title, so every
    # rendering's header names what kind of model each row extends ({}: boards built before, no source named)
    sources: dict[str, str] = field(default_factory=dict)
    # rows that stopped CPT at different steps: the budget (its final step) whose rows alone this board holds (its
    # final step, kind "step"; or its change from step 0, kind "delta"); None: every row of the task
    budget: int | None = None
    cpt_steps: list[int] = field(default_factory=list)  # the CPT steps its rows' cells ran
    guess: float | None = None  # ln |V| of its rows' target vocabulary (a uniform guess's loss), where they say

    # -- labels ---------------------------------------------------------------------------------------------
    @property
    def step_label(self) -> str:
        """The one step every column shows: ``step 10 (final)``; ``step 0, before CPT`` where the cells ran CPT but
        the tasks were evaluated at step 0 only (or where rows stopped CPT at different steps: every row at step 0);
        ``step 2 (final of the 2-step CPT budget)`` for a board of one budget's rows."""
        if self.kind == "delta":
            return f"delta step {self.step} - step 0" + (f" ({self.budget}-step CPT budget)" if self.budget else "")
        if self.budget is not None:
            return f"step {self.step} (final of the {self.budget}-step CPT budget)"
        if self.kind == "final":
            if self.step == 0 and any(s > 0 for s in self.cpt_steps):
                return "step 0, before CPT"
            return f"step {self.step} (final)"
        return f"step {self.step}"

    @property
    def budget_final(self) -> bool:
        """Whether the board shows one CPT budget's final step (beside the final board that shows step 0)."""
        return self.kind == "step" and self.budget is not None

    @property
    def title(self) -> str:
        title = f"{self.experiment} · {self.task} · {self.metric} · {self.step_label} · profile {self.profile}"
        title = f"{title} · {self.precision}" if self.precision else title
        return f"{title} · {sources_phrase(self.sources)}" if self.sources else title

    @property
    def id(self) -> str:
        step = {"final": "final", "delta": "delta"}.get(self.kind, f"step{self.step}")
        step += f"{self.step}" if self.kind == "delta" and self.budget is not None else ""
        raw = f"{self.task}__{self.metric}__{step}__{self.profile}"
        return re.sub(r"[^\w.-]", "_", raw.replace("@", "_at_"))

    # -- lookups --------------------------------------------------------------------------------------------
    def row(self, label: str) -> Row:
        for r in self.rows + self.paper_rows:
            if r.label == label:
                return r
        raise KeyError(label)

    def average(self, label: str) -> float | None:
        return self.row(label).avg

    def best(self, lang: str) -> float | None:
        """The best mean among our rows in a language column (paper rows do not compete); None when every row
        scores the same (an all-zero column has no best)."""
        return self.best_of([r.value(lang) for r in self.rows])

    def best_of(self, values: list[float | None], lower_is_better: bool | None = None) -> float | None:
        """The best of ``values``; None when there is none, or when two or more are all equal (a tie at the top
        of every row is not a best)."""
        vals = [v for v in values if v is not None]
        if not vals or (len(vals) > 1 and len(set(vals)) == 1):
            return None
        low = (not self.higher_is_better) if lower_is_better is None else lower_is_better
        return min(vals) if low else max(vals)

    def init_columns(self) -> list[tuple[str, str]]:
        """The init-report columns that at least one row has (val cos only for methods that log it), and on a
        decoder's board each row's held-out loss in nats beside a uniform guess's (ln |V|)."""
        cols = [(k, name) for k, name in INIT_COLUMNS if any(k in r.init for r in self.rows)]
        if any(HELDOUT in r.init for r in self.rows):
            guess = f", guess {self.guess:.2f}" if self.guess is not None else ""
            cols.append((HELDOUT, f"held-out loss ↓ (nats{guess})"))
        if any(RETAINED in r.init for r in self.rows):
            cols.append((RETAINED, "BPB retained ↑ (avg)"))
        return cols


@dataclass
class VariantInfo:
    """What the leaderboard records about a row beside its scores (spec/methods.md Appendix B)."""

    label: str
    profile: str
    key: VariantKey
    seeds: list[str]
    settings: dict[str, str]
    init: dict[str, float]
    curves: dict[str, list[tuple[int, float]]]  # cpt/train_loss, cpt/heldout_loss: mean over seeds per step
    convergence: dict[str, float]  # cpt/heldout_auc, cpt/steps_to_threshold (mean over seeds)


@dataclass
class Leaderboard:
    experiment: str
    boards: list[Board]
    variants: list[VariantInfo]
    languages: dict[str, dict[str, Any]]  # lang -> script, seen (per source), resource level, label source (per task)
    worlds: list[str]
    bootstrap: dict[str, Any] = field(default_factory=dict)  # resamples, seed, level
    claims: list[Any] = field(default_factory=list)  # leaderboard.claims.ClaimResult, one per claim x task x profile
    # leaderboard.claims.OpenResult: OFA and HyperOFA against random on each source, where a decoder's rows are on it
    open_question: list[Any] = field(default_factory=list)
    # leaderboard.tokstats.SourceTokStats: each source's tokenizer statistics per language and its methods' shares
    tokstats: list[Any] = field(default_factory=list)

    def headline_boards(self) -> list[Board]:
        return [b for b in self.boards if b.headline and b.kind == "final"]

    def budget_boards(self, final: Board) -> list[Board]:
        """The boards of each CPT budget's final step beside a final board (rows that stopped CPT at different
        steps; none otherwise): with it, a column per step."""
        return [b for b in self.boards if b.budget_final and (b.task, b.metric, b.profile) ==
                (final.task, final.metric, final.profile)]


# -- building ---------------------------------------------------------------------------------------------


def finish_board(b: Board) -> None:
    """Languages, averages (complete rows only), the common language set, mean ranks, row order, pair tests."""
    b.languages = sorted({lang for r in b.rows for lang in r.entries})
    b.common = [lang for lang in b.languages if all(lang in r.entries for r in b.rows)]
    table = {r.label: r.values() for r in b.rows}
    ranks = mean_ranks(table, b.common, b.higher_is_better)
    for r in b.rows + b.paper_rows:
        vals = r.values()
        r.avg = statistics.fmean(vals[lang] for lang in b.languages) if b.languages and all(
            lang in vals for lang in b.languages) else None
        r.avg_common = statistics.fmean(vals[lang] for lang in b.common) if b.common and all(
            lang in vals for lang in b.common) else None
        r.mean_rank = ranks.get(r.label) if r.kind == "ours" else None
    for r in b.rows:
        if r.kind == "ours" and (fewer := r.uneven_languages()):
            which = ", ".join(f"{lang} {n}" for lang, n in fewer.items())
            b.notes.append(f"{r.label}: its seeds cover different languages ({which} of its {len(r.seeds)} seeds); "
                           f"its average mixes them")
        elif r.kind == "ours" and r.avg is None and r.entries:
            b.notes.append(f"{r.label}: evaluated on {len(r.entries)} of the board's {len(b.languages)} languages "
                           f"(no average; avg∩ is over the languages every row has)")
    sign = -1.0 if b.higher_is_better else 1.0
    b.rows.sort(key=lambda r: (r.mean_rank is None, r.mean_rank or 0.0,
                               r.avg_common is None, sign * (r.avg_common or 0.0), r.label))
    b.pairs = pairwise_tests({r.label: r.values() for r in b.rows}, b.higher_is_better) if len(b.rows) > 1 else []


def board_dict(b: Board) -> dict[str, Any]:
    """A board as plain data (the JSON artifact and the HTML page's numbers come from here)."""

    def row(r: Row) -> dict[str, Any]:
        return {"label": r.label, "kind": r.kind, "seeds": r.seeds, "steps": r.steps, "blowup": r.blowup, "avg": r.avg,
                **({"avg_ci": list(r.avg_ci)} if r.avg_ci else {}), "avg_common": r.avg_common,
                "mean_rank": r.mean_rank, "init": r.init,
                "values": {lang: {"mean": e.mean, "std": e.std, "n": e.n, "ci": list(e.ci) if e.ci else None,
                                  "seeds": dict(zip(e.seeds, e.values, strict=True)) if e.seeds else {}}
                           for lang, e in sorted(r.entries.items())}}

    return {"id": b.id, "title": b.title, "experiment": b.experiment, "task": b.task, "metric": b.metric,
            "profile": b.profile, "precision": b.precision, "sources": b.sources, "kind": b.kind, "step": b.step,
            "budget": b.budget, "guess": b.guess,
            "higher_is_better": b.higher_is_better,
            "headline": b.headline,
            "languages": b.languages, "common_languages": b.common, "rows": [row(r) for r in b.rows],
            "paper_rows": [row(r) for r in b.paper_rows], "pairs": [p.as_dict() for p in b.pairs],
            "slices": [{"dimension": s.dimension, "value": s.value, "languages": s.languages,
                        "averages": s.averages} for s in b.slices], "notes": b.notes}
