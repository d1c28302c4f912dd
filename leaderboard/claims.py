"""The papers' headline claims, checked on this run.

Each method's paper makes one directional claim that a board can test: FOCUS, WECHSEL, Tik-to-Tok, FVT and OFA
beat random initialization before any training (step 0), HyperOFA is level with OFA, and continued pre-training
lowers the MLM loss. For each task's headline metric at step 0 (and per profile) the claim is evaluated on the
languages both rows have, with two statistics: the paired Wilcoxon signed-rank test over languages (two-sided,
exact, on each language's mean over seeds) and the two-level bootstrap interval of the average difference
(languages and, within each, seeds resampled: :func:`leaderboard.stats.diff_interval`). Each claim gets one of
four verdicts:

* **holds** -- ``beats`` (a > b): a is ahead on average, the Wilcoxon test gives p < ``ALPHA`` and the whole
  interval lies on a's side of zero; ``level`` (a ≈ b): the interval lies within ±``LEVEL_TOLERANCE`` (metric
  units; an equivalence test); ``cpt``: every row's held-out MLM loss (the ``mlm`` task's average, else the
  runner's held-out diagnostic curve) is lower at the final step than at step 0;
* **contradicted** -- the interval lies entirely on the wrong side of the claim: below zero for "a beats b" (above
  it where lower is better), entirely outside ±``LEVEL_TOLERANCE`` for "a ≈ b", above zero for some row's change of
  the loss under CPT;
* **inconclusive** -- anything else: the interval reaches over the claim's boundary, or the test is not
  significant. Where the design cannot reach significance at all (the exact two-sided Wilcoxon test over ``n``
  languages cannot go below p = 2 / 2^n: 0.125 with 4 languages), the note says so and how many languages it would
  need (:func:`languages_needed`; seeds do not count there, the test pairs the languages' means over seeds);
* **not tested** -- a row the claim needs is not on the board (the method was not run, or not this task).

The pairwise verdicts are :func:`leaderboard.stats.pair_verdict`'s, the one verdict on a pair of rows that
``harness compare`` gives too: on the same rows, compare's average and the claim show the same interval, the same p
and agree (a claim "a beats b" holds where compare finds a the better, and only there).

A row is found by its method name; where a method has several rows (variants with other parameters), the one
with the method's default parameters at full dimension is used.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leaderboard.fmt import signed
from leaderboard.stats import (
    ALPHA,
    VERDICT_RESAMPLES,
    DiffInterval,
    diff_interval,
    languages_needed,
    pair_verdict,
    paired_test,
    verdict_key,
)

LEVEL_TOLERANCE = 0.02
RESAMPLES = VERDICT_RESAMPLES  # of the two-level bootstrap of each claim's average difference (the verdict's)
VERDICTS = ("holds", "contradicted", "inconclusive", "not tested")


@dataclass(frozen=True)
class Claim:
    id: str
    source: str  # the paper
    statement: str
    kind: str  # "beats", "level" or "cpt"
    a: str = ""
    b: str = ""
    # the kinds of source model the paper made it on (harness.core.objective): the papers measured encoders, so
    # their claims are tested on encoder rows only; a decoder's rows answer the open question instead
    objectives: frozenset[str] = frozenset({"mlm"})


CLAIMS: tuple[Claim, ...] = (
    Claim("ofa>random", "OFA (Liu et al., 2024)", "OFA > random at step 0", "beats", "ofa", "random"),
    Claim("hyperofa~ofa", "HyperOFA (Özeren et al., 2025)", f"HyperOFA ≈ OFA at step 0 (±{LEVEL_TOLERANCE})",
          "level", "hyperofa", "ofa"),
    Claim("focus>random", "FOCUS (Dobler & de Melo, 2023)", "FOCUS > random at step 0", "beats", "focus", "random"),
    Claim("wechsel>random", "WECHSEL (Minixhofer et al., 2022)", "WECHSEL > random at step 0", "beats", "wechsel",
          "random"),
    Claim("tiktotok>random", "Tik-to-Tok (Remy et al., 2024)", "Tik-to-Tok > random at step 0", "beats",
          "tiktotok", "random"),
    Claim("fvt>random", "FVT (Gee et al., 2022)", "FVT > random at step 0", "beats", "fvt", "random"),
    Claim("cpt", "all", "CPT lowers the held-out MLM loss for every method", "cpt"),
)


@dataclass
class ClaimResult:
    claim: Claim
    profile: str
    task: str  # the task whose board tested it ("mlm" or "held-out diagnostic" for the CPT claim)
    status: str  # one of VERDICTS
    a_avg: float | None = None
    b_avg: float | None = None
    diff: float | None = None
    p_value: float | None = None
    n: int = 0  # languages (or rows, for the CPT claim) the verdict rests on
    detail: str = ""  # the note: why this verdict
    interval: DiffInterval | None = None  # of a - b (seeds and languages resampled)
    languages_needed: int | None = None  # set where the test over n languages cannot reach p < ALPHA at all
    design: str = ""  # then: why it cannot, and what it would need (also in the detail)
    numerics: str = ""  # the rows' numerics, where the board's rows differ in them (one verdict per numerics)

    @property
    def where(self) -> str:
        """The task, and the numerics its rows were computed with where a board holds several."""
        return f"{self.task} ({self.numerics})" if self.numerics else self.task

    def as_dict(self) -> dict[str, Any]:
        return {"claim": self.claim.id, "paper": self.claim.source, "statement": self.claim.statement,
                "profile": self.profile, "task": self.task, "numerics": self.numerics, "status": self.status,
                "a_avg": self.a_avg,
                "b_avg": self.b_avg, "diff": self.diff, "p_value": self.p_value, "n": self.n,
                "detail": self.detail, "languages_needed": self.languages_needed,
                "interval": dict(self.interval.__dict__) if self.interval else None}


# -- the verdicts -----------------------------------------------------------------------------------------------
def numerics(variant: Any) -> str:
    """How a row's numbers were computed, where rows can differ in it: ``evaluation fp32, CPT bf16``."""
    import json

    protocol = json.loads(getattr(variant, "protocol", "{}") or "{}")
    cpt = json.loads(variant.cpt or "{}").get("precision")
    kernels = protocol.get("cpu_kernels")  # (absent: the pinned kernels, harness.core.kernels)
    return (f"evaluation {protocol.get('eval_precision', 'fp32')}" + (f", CPT {cpt}" if cpt else "")
            + (f", CPU kernels {kernels}" if kernels else ""))


def budget(variant: Any) -> str:
    """A row's CPT budget as its runs logged it (``10 CPT steps``; "" when not logged)."""
    import json

    steps = json.loads(getattr(variant, "cpt", "{}") or "{}").get("steps")
    return f"{steps} CPT steps" if steps is not None else ""


def group(variant: Any, with_budget: bool = True) -> str:
    """The rows a claim is tested within: one numerics (:func:`numerics`) and, ``with_budget``, one CPT budget."""
    b = budget(variant) if with_budget else ""
    return numerics(variant) + (f", {b}" if b else "")


def _with_budget(variants: list[Any]) -> bool:
    """Whether rows differ in their CPT budget (then it is part of each claim's group and its name)."""
    return len({budget(v) for v in variants if v is not None}) > 1


def objective_of(board: Any, variant: Any) -> str:
    """The objective of a row's source (the board's ``sources``; ``mlm`` where a board names none)."""
    return (getattr(board, "sources", None) or {}).get(variant.source, "mlm")


def _grouping(board: Any) -> Callable[[Any], str]:
    """The group of a row of ``board``: :func:`group` (its CPT budget where the rows differ in it), and its source
    where the board's rows extend several (both facts of the board, found once)."""
    keys = [r.variant for r in board.rows if r.variant is not None]
    wb, several = _with_budget(keys), len({k.source for k in keys}) > 1
    return lambda variant: group(variant, wb) + (f", source {variant.source}" if several else "")


def _groups(board: Any, objectives: frozenset[str] | None = None) -> list[str]:
    """The groups of the board's rows (:func:`_grouping`: one numerics, one CPT budget, one source), each a claim's
    own test: rows computed differently, or of different source models, are never compared with each other; only
    those of sources whose objective is in ``objectives`` when given."""
    group_of = _grouping(board)
    return sorted({group_of(r.variant) for r in board.rows if r.variant is not None
                   and (objectives is None or objective_of(board, r.variant) in objectives)})


def _row(board: Any, method: str, where: str | None = None) -> Any | None:
    """The method's row with its default parameters at full dimension where there is one (a variant row's label
    names the parameters it changes: ``focus d=full (overlap=casefold)``), else its first row; of the rows of the
    group ``where`` (:func:`_grouping`) when given."""
    group_of = _grouping(board)
    rows = [r for r in board.rows if r.variant is not None and r.variant.method == method
            and (where is None or group_of(r.variant) == where)]
    if not rows:
        return None
    return min(rows, key=lambda r: (r.variant.dim != "full",
                                    "(" in r.label and not r.label.endswith("(defaults)"), len(r.label)))


def _level(res: ClaimResult, lo: float, hi: float) -> None:
    tol = LEVEL_TOLERANCE
    if -tol <= lo and hi <= tol:
        res.status, res.detail = "holds", f"the interval lies within ±{tol}"
    elif lo > tol or hi < -tol:
        res.status, res.detail = "contradicted", f"the whole interval lies outside ±{tol}"
    else:
        where = "within" if abs(res.diff or 0.0) <= tol else "outside"
        res.status = "inconclusive"
        res.detail = f"the difference is {where} ±{tol}, but the interval reaches over ±{tol}"


def _pairwise_all(claim: Claim, board: Any) -> list[ClaimResult]:
    """The claim on ``board``, tested once per group of its rows (one numerics, one CPT budget) where they differ,
    never pooled. A group without both of the claim's rows is left out where another group tests the claim (one
    "not tested" result when none does). Rows of a source of another kind than the paper's (a decoder's, for a
    claim made on encoders) are not the claim's: a board of such rows only gives no result."""
    groups = _groups(board, claim.objectives)
    if not groups:
        return []
    if len(_groups(board)) <= 1:
        return [_pairwise(claim, board)]
    out = []
    for g in groups:
        res = _pairwise(claim, board, g)
        res.numerics = g
        out.append(res)
    tested = [r for r in out if r.status != "not tested"]
    if tested:
        return tested
    missing = [m for m in (claim.a, claim.b) if _row(board, m) is None]
    return [ClaimResult(claim, board.profile, board.task, "not tested", detail=f"no {missing[0]} row" if missing
                        else f"no group of rows (one numerics, one CPT budget) has both a {claim.a} and a "
                             f"{claim.b} row")]


def _pairwise(claim: Claim, board: Any, where: str | None = None) -> ClaimResult:
    res = ClaimResult(claim, board.profile, board.task, "not tested")
    ra, rb = _row(board, claim.a, where), _row(board, claim.b, where)
    if ra is None or rb is None:
        res.detail = f"no {claim.a if ra is None else claim.b} row"
        return res
    va, vb = ra.values(), rb.values()
    langs = sorted(set(va) & set(vb))
    if not langs:
        res.detail = "no language in common"
        return res
    res.n = len(langs)
    res.a_avg = statistics.fmean(va[x] for x in langs)
    res.b_avg = statistics.fmean(vb[x] for x in langs)
    # the one verdict on the pair (leaderboard.stats.pair_verdict), as `harness compare` gives it for these rows
    v = pair_verdict({x: ra.entries[x].values for x in langs}, {x: rb.entries[x].values for x in langs},
                     board.higher_is_better, resamples=RESAMPLES,
                     key=verdict_key(board.task, board.metric, board.profile, board.step, ra.label, rb.label))
    assert v is not None  # the rows share languages
    res.diff, res.interval, res.p_value = res.a_avg - res.b_avg, v.interval, v.test.p_value
    lo, hi = v.interval.lo, v.interval.hi
    if claim.kind == "level":
        _level(res, lo, hi)
        return res
    _beats(res, v, board.higher_is_better)
    return res


def _beats(res: ClaimResult, v: Any, higher_is_better: bool) -> None:
    """The verdict on "a beats b" from the pair's verdict ``v`` (:func:`leaderboard.stats.pair_verdict`): holds
    where it finds a better, contradicted where the whole interval lies on b's side, inconclusive otherwise."""
    test, sign = v.test, 1.0 if higher_is_better else -1.0
    far = v.interval.hi if sign > 0 else -v.interval.lo
    ahead, behind = sign * res.diff > 0, sign * res.diff < 0
    side = "below" if sign > 0 else "above"  # where the interval of a - b lies when a is behind
    counts = f"{test.wins} wins / {test.ties} ties / {test.losses} losses; "
    if v.better == "a":
        res.status = "holds"
        res.detail = counts + f"ahead: Wilcoxon p < {ALPHA} and the interval excludes 0"
    elif far < 0:
        res.status = "contradicted"
        res.detail = counts + f"behind: the whole interval lies {side} 0"
    else:
        res.status = "inconclusive"
        if v.design:
            res.languages_needed, res.design = languages_needed(), v.design
        res.detail = counts + ("ahead" if ahead else "behind" if behind else "level") + (f"; {v.why}" if v.why
                                                                                        else "")


def _cpt_verdict(changes: dict[str, float], rose: list[str]) -> str:
    if rose:
        return "contradicted"
    return "holds" if all(v < 0 for v in changes.values()) else "inconclusive"


def _cpt(claim: Claim, profile: str, boards: list[Any], variants: list[Any]) -> list[ClaimResult]:
    """The CPT claim, tested within each group of rows (one numerics, one CPT budget: :func:`group`), never pooled
    across them: on the ``mlm`` task's delta board where there is one, else on the runner's held-out diagnostic."""
    kinds = {k: v for b in boards for k, v in (getattr(b, "sources", None) or {}).items()}

    def mine(key: Any) -> bool:  # a row of a source of the kind the claim was made on
        return key is None or kinds.get(key.source, "mlm") in claim.objectives

    several = len({k.source for k in (r.variant for b in boards for r in b.rows) if k is not None and mine(k)}) > 1

    def where(key: Any, wb: bool) -> str:
        return group(key, wb) + (f", source {key.source}" if several else "")

    delta = next((b for b in boards if b.task == "mlm" and b.kind == "delta" and b.headline
                  and b.profile == profile), None)
    if delta is not None and delta.rows:
        wb = _with_budget([r.variant for r in delta.rows])
        by: dict[str, list[Any]] = {}
        for r in delta.rows:
            if mine(r.variant):
                by.setdefault(where(r.variant, wb) if r.variant is not None else "", []).append(r)
        out = [_cpt_delta(claim, profile, rows) for _, rows in sorted(by.items())]
        if len(by) > 1:
            for res, g in zip(out, sorted(by), strict=True):
                res.numerics = g
        return out
    here = [v for v in variants if v.profile == profile]
    if here and not any(mine(v.key) for v in here):
        return []  # rows of another kind only (a decoder's): not the claim's, as for the pairwise claims
    rows = [v for v in here if len(v.curves.get("cpt/heldout_loss") or []) >= 2 and mine(v.key)]
    if not rows:
        return [ClaimResult(claim, profile, "mlm", "not tested", detail="no CPT steps or no held-out MLM loss")]
    wb = _with_budget([v.key for v in rows])
    by = {}
    for v in rows:
        by.setdefault(where(v.key, wb), []).append(v)
    out = []
    for g, vs in sorted(by.items()):
        changes = {v.label: v.curves["cpt/heldout_loss"][-1][1] - v.curves["cpt/heldout_loss"][0][1] for v in vs}
        worst = max(changes, key=lambda k: changes[k])
        out.append(ClaimResult(claim, profile, "held-out diagnostic",
                               _cpt_verdict(changes, [k for k, v in changes.items() if v > 0]), diff=changes[worst],
                               n=len(changes), detail=f"largest change: {worst} {signed(changes[worst])} (one "
                               "held-out loss per row: no per-language interval without the mlm task)",
                               numerics=g if len(by) > 1 else ""))
    return out


def _cpt_delta(claim: Claim, profile: str, delta_rows: list[Any]) -> ClaimResult:
    res = ClaimResult(claim, profile, "mlm", "not tested", n=len(delta_rows))
    rows = [r for r in delta_rows if r.values()]
    if not rows:
        res.detail = "no row with a change of the loss"
        return res
    avgs = {r.label: statistics.fmean(r.values().values()) for r in rows}
    ivs = {r.label: diff_interval({x: e.values for x, e in r.entries.items()},
                                  {x: [0.0] for x in r.entries}, resamples=RESAMPLES,
                                  key=("mlm", profile, claim.id, r.label)) for r in rows}
    rose = [k for k, iv in ivs.items() if iv is not None and iv.resamples and iv.lo > 0]
    shown = max(rose, key=lambda k: ivs[k].lo) if rose else max(avgs, key=lambda k: avgs[k])
    res.diff, res.interval = avgs[shown], ivs[shown]
    ps = []
    for r in delta_rows:
        vals = r.values()
        t = paired_test(r.label, "step 0", vals, dict.fromkeys(vals, 0.0), higher_is_better=False)
        if t.p_value is not None:
            ps.append(t.p_value)
    res.p_value = max(ps) if ps else None
    res.status = _cpt_verdict(avgs, rose)
    res.detail = {"holds": "every row's average loss fell; largest change",
                  "contradicted": "the loss rose: the whole interval of the change lies above 0 for",
                  "inconclusive": "not every row's average loss fell, and no row's interval lies above 0; "
                                  "largest change"}[res.status] + f": {shown} {signed(avgs[shown])}"
    return res


def _step0_boards(boards: list[Any], profile: str) -> list[Any]:
    """The profile's headline boards at step 0 (the final boards where there was no CPT), the mlm task's aside."""
    step0 = [b for b in boards if b.profile == profile and b.headline and b.kind == "step" and b.step == 0
             and b.task != "mlm"]
    if not step0:  # every step-0 board is the final one (no CPT): the final board is step 0
        step0 = [b for b in boards if b.profile == profile and b.headline and b.kind == "final"
                 and b.step == 0 and b.task != "mlm"]
    return sorted(step0, key=lambda b: b.task)


def evaluate_claims(boards: list[Any], variants: list[Any]) -> list[ClaimResult]:
    """Every claim on every task (headline metric, step 0) of every profile on the boards."""
    out: list[ClaimResult] = []
    profiles = sorted({b.profile for b in boards})
    for profile in profiles:
        step0 = _step0_boards(boards, profile)
        for claim in CLAIMS:
            if claim.kind == "cpt":
                out += _cpt(claim, profile, boards, variants)
            else:
                out += [r for b in step0 for r in _pairwise_all(claim, b)]
    return out


# -- the open question: OFA and HyperOFA on a decoder ---------------------------------------------------------------
OPEN_QUESTION = ("Do OFA and HyperOFA help a decoder as they help an encoder? (the HyperOFA report's open question: "
                 "both methods are untested on decoder-only models)")
ANY_SOURCE = frozenset({"mlm", "clm"})
OPEN_CLAIMS: tuple[Claim, ...] = (
    Claim("open:ofa>random", "open question", "OFA > random at step 0", "beats", "ofa", "random", ANY_SOURCE),
    Claim("open:hyperofa>random", "open question", "HyperOFA > random at step 0", "beats", "hyperofa", "random",
          ANY_SOURCE),
)


@dataclass
class OpenResult:
    """One comparison of the open question on the rows of one source."""

    source: str
    objective: str
    result: ClaimResult


def evaluate_open_question(boards: list[Any]) -> list[OpenResult]:
    """OFA and HyperOFA against random at step 0, on each source's rows apart (encoders first), for every task
    (headline metric) and profile: the evidence on the open question, where a board has a decoder's rows (none
    otherwise: the question is about decoders)."""
    from leaderboard.model import objective_name

    if not any(o == "clm" for b in boards for o in (getattr(b, "sources", None) or {}).values()):
        return []
    out: list[OpenResult] = []
    for profile in sorted({b.profile for b in boards}):
        for b in _step0_boards(boards, profile):
            group_of = _grouping(b)
            by_group = {group_of(r.variant): r.variant for r in b.rows if r.variant is not None}
            several = len(by_group) > 1
            for g in sorted(by_group, key=lambda g: (objective_of(b, by_group[g]) != "mlm", g)):
                v = by_group[g]
                for claim in OPEN_CLAIMS:
                    res = _pairwise(claim, b, g if several else None)
                    res.numerics = g if several else f"source {v.source}"
                    out.append(OpenResult(v.source, objective_name(objective_of(b, v)), res))
    return out


def open_question_rows(results: list[OpenResult]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the open question's table as text (every rendering)."""
    from leaderboard import fmt

    head = ["comparison", "source", "task", "verdict", "a", "b", "diff", "95% interval", "p", "n", "note"]
    rows = [[o.result.claim.statement, f"{o.source} ({o.objective})", o.result.where, o.result.status,
             fmt.value(o.result.a_avg), fmt.value(o.result.b_avg), open_diff(o.result), _interval(o.result.interval),
             "-" if o.result.p_value is None else f"{o.result.p_value:.3g}", _n(o.result), o.result.detail]
            for o in results]
    return head, rows


def open_diff(r: ClaimResult) -> str:
    """The open question's difference with what its sign means on the task's headline metric: ``-0.0051 (ofa −
    random; bpb ↓: ofa ahead)``."""
    from harness.core.record_read import untagged_task_facts

    if r.diff is None:
        return "-"
    facts = untagged_task_facts(r.task)
    hib = facts.higher_is_better
    side = "level" if r.diff == 0 else "ahead" if (r.diff > 0) == hib else "behind"
    return (f"{signed(r.diff)} ({r.claim.a} − {r.claim.b}; {facts.headline or 'the metric'} {'↑' if hib else '↓'}: "
            f"{r.claim.a} {side})")


# -- as text ------------------------------------------------------------------------------------------------------
def summary(results: list[ClaimResult]) -> str:
    """One sentence above the board: how many of the tested claims hold, are contradicted or are inconclusive."""
    tested = [r for r in results if r.status != "not tested"]
    if not tested:
        return "No paper's claim could be tested on this run."
    count = {v: sum(r.status == v for r in tested) for v in VERDICTS}
    untested = len(results) - len(tested)
    return (f"{count['holds']} {'holds' if count['holds'] == 1 else 'hold'}, {count['contradicted']} contradicted, "
            f"{count['inconclusive']} inconclusive of the {len(tested)} tested claim{'s' if len(tested) > 1 else ''}"
            " of the papers on this run" + (f" ({untested} not tested)." if untested else "."))


LEGEND = (f"holds: the interval lies on the claim's side and the Wilcoxon test over languages gives p < {ALPHA} "
          "(for ≈: the interval lies within the band); contradicted: the interval lies entirely on the wrong side of "
          "the claim; inconclusive: anything else (the interval reaches over the claim's boundary, or the test is "
          "not significant -- the note says whether the number of languages lets it be). Intervals: 95 %, "
          "languages and then each row's seeds resampled.")


def claim_rows(results: list[ClaimResult]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the whole claims table as text, details included (the Markdown and HTML renderings)."""
    from leaderboard import fmt

    head = ["claim", "paper", "task", "profile", "verdict", "a", "b", "diff", "95% interval", "p", "n", "note"]
    rows = [[r.claim.statement, r.claim.source, r.where, r.profile, r.status, fmt.value(r.a_avg),
             fmt.value(r.b_avg), _diff(r), _interval(r.interval),
             "-" if r.p_value is None else f"{r.p_value:.3g}", _n(r), r.detail] for r in results]
    return head, rows


def brief_rows(results: list[ClaimResult]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the short claims table (the terminal): the claim, where, the verdict and its numbers; the
    task names its profile where the claims span several."""
    several = len({r.profile for r in results}) > 1
    head = ["claim", "task", "verdict", "diff", "95% interval", "n"]
    return head, [[r.claim.statement, f"{_brief(r.where)} ({r.profile})" if several else _brief(r.where), r.status,
                   _diff(r), _interval(r.interval), _n(r)] for r in results]


def _brief(where: str) -> str:
    """A claim's task and group in the terminal's words: ``sr-t (eval bf16, CPT fp32, 10 steps)``."""
    for long, short in (("evaluation ", "eval "), (" CPT steps", " steps"), ("CPU kernels ", "kernels ")):
        where = where.replace(long, short)
    return where


def _diff(r: ClaimResult) -> str:
    return "-" if r.diff is None else signed(r.diff)


def _interval(iv: DiffInterval | None) -> str:
    return "-" if iv is None or not iv.resamples else f"[{signed(iv.lo)}, {signed(iv.hi)}]"


def _n(r: ClaimResult) -> str:
    """Languages, and seeds per row where the interval resampled them (``23 × 3/3 seeds``); rows for the CPT
    claim."""
    if r.claim.kind == "cpt":
        return f"{r.n} row{'s' if r.n != 1 else ''}" if r.n else "-"
    iv = r.interval
    if iv is None:
        return str(r.n) if r.n else "-"
    return f"{r.n} × {iv.seeds_a}/{iv.seeds_b} seeds"
