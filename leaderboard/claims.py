"""The papers' headline claims, checked on this run.

Each method's paper makes one directional claim that a board can test: FOCUS, WECHSEL, Tik-to-Tok, FVT and OFA
beat random initialization before any training (step 0), HyperOFA is level with OFA, and continued pre-training
lowers the MLM loss. For each task's headline metric at step 0 (and per profile) the claim is evaluated on the
languages both rows have:

* ``beats`` (a > b): **holds** when a is ahead on average, the paired Wilcoxon signed-rank test over languages (on
  each language's mean over seeds) gives p < ``ALPHA``, and the two-level bootstrap interval of the average
  difference (languages and, within each, seeds resampled: :func:`leaderboard.stats.diff_interval`) lies above
  zero; **fails** otherwise (the detail says whether a was behind, or ahead without significance, and which test
  missed);
* ``level`` (a ≈ b): **holds** when the bootstrap interval of the average difference lies within
  ±``LEVEL_TOLERANCE`` (metric units; an equivalence test: a point estimate inside the band with an interval
  reaching out of it fails, with the detail saying so);
* ``cpt``: **holds** when every row's held-out MLM loss (the ``mlm`` task's average, else the runner's held-out
  diagnostic curve) is lower at the final step than at step 0;
* **not tested** when a row the claim needs is not on the board (the method was not run, or not this task).

A row is found by its method name; where a method has several rows (variants with other parameters), the one
with the method's default parameters at full dimension is used.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from leaderboard.stats import DiffInterval, diff_interval, paired_test

ALPHA = 0.05
LEVEL_TOLERANCE = 0.02
RESAMPLES = 2000  # of the two-level bootstrap of each claim's average difference


@dataclass(frozen=True)
class Claim:
    id: str
    source: str  # the paper
    statement: str
    kind: str  # "beats", "level" or "cpt"
    a: str = ""
    b: str = ""


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
    status: str  # "holds", "fails" or "not tested"
    a_avg: float | None = None
    b_avg: float | None = None
    diff: float | None = None
    p_value: float | None = None
    n: int = 0  # languages (or rows, for the CPT claim) the verdict rests on
    detail: str = ""
    interval: DiffInterval | None = None  # of a - b (seeds and languages resampled)

    def as_dict(self) -> dict[str, Any]:
        return {"claim": self.claim.id, "paper": self.claim.source, "statement": self.claim.statement,
                "profile": self.profile, "task": self.task, "status": self.status, "a_avg": self.a_avg,
                "b_avg": self.b_avg, "diff": self.diff, "p_value": self.p_value, "n": self.n,
                "detail": self.detail, "interval": dict(self.interval.__dict__) if self.interval else None}


def _row(board: Any, method: str) -> Any | None:
    """The method's row with its default parameters at full dimension where there is one (a variant row's label
    names the parameters it changes: ``focus d=full (overlap=casefold)``), else its first row."""
    rows = [r for r in board.rows if r.variant is not None and r.variant.method == method]
    if not rows:
        return None
    return min(rows, key=lambda r: (r.variant.dim != "full",
                                    "(" in r.label and not r.label.endswith("(defaults)"), len(r.label)))


def _pairwise(claim: Claim, board: Any) -> ClaimResult:
    res = ClaimResult(claim, board.profile, board.task, "not tested")
    ra, rb = _row(board, claim.a), _row(board, claim.b)
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
    res.diff = res.a_avg - res.b_avg
    sign = 1.0 if board.higher_is_better else -1.0
    res.interval = iv = diff_interval({x: ra.entries[x].values for x in langs}, {x: rb.entries[x].values for x in langs},
                                      resamples=RESAMPLES, key=(board.task, board.profile, claim.id))
    lo, hi = (iv.lo, iv.hi) if iv is not None else (res.diff, res.diff)
    test = paired_test(claim.a, claim.b, va, vb, board.higher_is_better)  # over the languages both rows have
    res.p_value = test.p_value
    if claim.kind == "level":
        inside = -LEVEL_TOLERANCE <= lo and hi <= LEVEL_TOLERANCE
        res.status = "holds" if inside else "fails"
        if inside:
            res.detail = f"interval within ±{LEVEL_TOLERANCE}"
        elif abs(res.diff) <= LEVEL_TOLERANCE:
            res.detail = f"|diff| ≤ {LEVEL_TOLERANCE}, but the interval reaches beyond ±{LEVEL_TOLERANCE}"
        else:
            res.detail = f"|diff| > {LEVEL_TOLERANCE}"
        return res
    ahead = sign * res.diff > 0
    significant = test.p_value is not None and test.p_value < ALPHA
    clear = sign * lo > 0 if sign > 0 else sign * hi > 0  # the whole interval on a's side of zero
    res.status = "holds" if ahead and significant and clear else "fails"
    missed = [m for m, ok in ((f"Wilcoxon p ≥ {ALPHA}", significant), ("interval includes 0", clear)) if not ok]
    res.detail = (f"{test.wins} wins / {test.ties} ties / {test.losses} losses; "
                  + ("ahead" if ahead else "behind" if sign * res.diff < 0 else "level")
                  + (f", not significant ({'; '.join(missed)})" if ahead and missed else ""))
    return res


def _cpt(claim: Claim, profile: str, boards: list[Any], variants: list[Any]) -> ClaimResult:
    delta = next((b for b in boards if b.task == "mlm" and b.kind == "delta" and b.headline
                  and b.profile == profile), None)
    if delta is not None and delta.rows:
        res = ClaimResult(claim, profile, "mlm", "not tested", n=len(delta.rows))
        avgs = {r.label: statistics.fmean(r.values().values()) for r in delta.rows if r.values()}
        worst = max(avgs, key=lambda k: avgs[k])
        res.diff = avgs[worst]
        ps = []
        for r in delta.rows:
            vals = r.values()
            t = paired_test(r.label, "step 0", vals, dict.fromkeys(vals, 0.0), higher_is_better=False)
            if t.p_value is not None:
                ps.append(t.p_value)
        res.p_value = max(ps) if ps else None
        res.status = "holds" if all(v < 0 for v in avgs.values()) else "fails"
        res.detail = f"largest change of the average loss: {worst} {avgs[worst]:+.3f}"
        return res
    curves = {v.label: v.curves["cpt/heldout_loss"] for v in variants
              if v.profile == profile and len(v.curves.get("cpt/heldout_loss") or []) >= 2}
    if not curves:
        return ClaimResult(claim, profile, "mlm", "not tested", detail="no CPT steps or no held-out MLM loss")
    changes = {k: c[-1][1] - c[0][1] for k, c in curves.items()}
    worst = max(changes, key=lambda k: changes[k])
    return ClaimResult(claim, profile, "held-out diagnostic",
                       "holds" if all(v < 0 for v in changes.values()) else "fails", diff=changes[worst],
                       n=len(changes), detail=f"largest change: {worst} {changes[worst]:+.3f} (no per-language "
                       "test without the mlm task)")


def evaluate_claims(boards: list[Any], variants: list[Any]) -> list[ClaimResult]:
    """Every claim on every task (headline metric, step 0) of every profile on the boards."""
    out: list[ClaimResult] = []
    profiles = sorted({b.profile for b in boards})
    for profile in profiles:
        step0 = [b for b in boards if b.profile == profile and b.headline and b.kind == "step" and b.step == 0
                 and b.task != "mlm"]
        if not step0:  # every step-0 board is the final one (no CPT): the final board is step 0
            step0 = [b for b in boards if b.profile == profile and b.headline and b.kind == "final"
                     and b.step == 0 and b.task != "mlm"]
        for claim in CLAIMS:
            if claim.kind == "cpt":
                out.append(_cpt(claim, profile, boards, variants))
            else:
                out += [_pairwise(claim, b) for b in sorted(step0, key=lambda b: b.task)]
    return out


def summary(results: list[ClaimResult]) -> str:
    """One sentence above the board: how many of the tested claims hold."""
    tested = [r for r in results if r.status != "not tested"]
    held = [r for r in tested if r.status == "holds"]
    if not tested:
        return "No paper's claim could be tested on this run."
    if not held:
        return f"This run reproduces none of the {len(tested)} tested claims of the papers."
    return f"{len(held)} of {len(tested)} tested claims of the papers hold on this run."


def claim_rows(results: list[ClaimResult]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the claims table as text (shared by the terminal, Markdown and HTML renderings)."""
    from leaderboard import fmt

    head = ["claim", "paper", "task", "profile", "verdict", "a", "b", "diff", "95% interval", "p", "n", "detail"]
    rows = [[r.claim.statement, r.claim.source, r.task, r.profile, r.status, fmt.value(r.a_avg),
             fmt.value(r.b_avg), "-" if r.diff is None else f"{r.diff:+.3f}", _interval(r.interval),
             "-" if r.p_value is None else f"{r.p_value:.3g}", _n(r), r.detail] for r in results]
    return head, rows


def _interval(iv: DiffInterval | None) -> str:
    return "-" if iv is None or not iv.resamples else f"[{iv.lo:+.3f}, {iv.hi:+.3f}]"


def _n(r: ClaimResult) -> str:
    """Languages, and seeds per row where the interval resampled them (``23 × 3/3 seeds``)."""
    iv = r.interval
    if iv is None:
        return str(r.n)
    return f"{r.n} × {iv.seeds_a}/{iv.seeds_b} seeds"
