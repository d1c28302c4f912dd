"""Rows that blew up: an initialization whose model is far worse than guessing, or whose new embedding rows lie far
outside the source's, is marked ``[blew up]`` on every board, and the notes name it instead of averaging it in.

The rule, per profile and source model (its rows share one target vocabulary and one scale of loss):

* the row's held-out loss (the CPT diagnostic ``cpt/heldout_loss``, mean over its seeds, at step 0 or at its final
  step, whichever is higher) is over :data:`LOSS_FACTOR` times both a uniform guess's over the target vocabulary
  (ln |V|) and the median of the other rows' of its source; or
* the largest norm of the rows its method computed is over :data:`NORM_FACTOR` times the largest norm of the source's
  rows (``init/row_norm_ratio``, logged by :func:`harness.initialize.row_norm_ratio`).

Why these bounds: a row that learned nothing scores ln |V|; a short CPT (the ``cpu`` profile's ten steps) leaves every
fresh row a little above it (the main job's encoder rows sit at 15 to 17 nats against ln |V| = 11.7, 1.3 to 1.5
times), which is not a blow-up, and the rows of one source sit near one another. CLP's 1,916 nats against 6.76 on the
synthetic world (283 times) and CLP's and OMP's 52 to 192 nats against 11.7 on the bible decoders (4.4 to 16 times)
did blow up. Three times both bounds lies between the two; a row above only one of them (every row of a source above
ln |V|, or one row far above rows that all guess well) is not marked.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from leaderboard.model import HELDOUT

LOSS_FACTOR = 3.0
NORM_FACTOR = 10.0
NORM_METRIC = "init/row_norm_ratio"
MARK = "[blew up]"
RULE = (f"{MARK} marks a row whose held-out loss (at step 0 or its final step) is over {LOSS_FACTOR:g}x both a "
        f"uniform guess's (ln |V|) and the median of the other rows of its source, or whose computed embedding "
        f"rows' largest norm is over {NORM_FACTOR:g}x the source rows' largest; it takes no part in the notes' "
        "averages")


def heldout_ends(cells: list[Any]) -> tuple[float, float] | None:
    """The held-out loss (nats) at the first and the last logged step, each the mean over the cells that logged
    two points or more; None when none did."""
    curves = [c for cell in cells if len(c := sorted(cell.curves.get(HELDOUT) or [])) > 1]
    if not curves:
        return None
    return statistics.fmean(c[0][1] for c in curves), statistics.fmean(c[-1][1] for c in curves)


def find_blowups(cells: list[Any], key_of: Callable[[Any], Any],
                 guess_of: Callable[[list[Any]], tuple[int, float] | None]) -> dict[tuple[str, Any], str]:
    """``(profile, row key) -> why it is marked`` for the rows of ``cells`` that blew up (:data:`RULE`);
    ``key_of``: a cell's row key; ``guess_of``: the target vocabulary's size and ln |V| of some cells."""
    groups: dict[tuple[str, str], dict[Any, list[Any]]] = {}
    for c in cells:
        groups.setdefault((c.profile, c.source), {}).setdefault(key_of(c), []).append(c)
    out: dict[tuple[str, Any], str] = {}
    for (profile, _), rows in groups.items():
        guess = guess_of([c for cs in rows.values() for c in cs])
        losses = {k: max(ends) for k, cs in rows.items() if (ends := heldout_ends(cs)) is not None}
        for key, cs in rows.items():
            why = []
            loss = losses.get(key)
            others = [v for k, v in losses.items() if k != key]
            median = statistics.median(others) if others else None
            if loss is not None and (guess is not None or median is not None) \
                    and (guess is None or loss > LOSS_FACTOR * guess[1]) \
                    and (median is None or loss > LOSS_FACTOR * median):
                refs = ([f"{loss / guess[1]:,.0f}x ln |V| = {guess[1]:.2f}"] if guess else []) + (
                    [f"{loss / median:,.0f}x the other rows' median {median:,.2f}"] if median else [])
                why.append(f"held-out loss {loss:,.1f} nats, " + " and ".join(refs))
            ratios = [c.metrics[NORM_METRIC] for c in cs if c.metrics.get(NORM_METRIC) is not None]
            if ratios and max(ratios) > NORM_FACTOR:
                why.append(f"its computed rows' largest norm {max(ratios):,.1f}x the source rows' largest")
            if why:
                out[(profile, key)] = "; ".join(why)
    return out


def blowup_note(marked: dict[str, str]) -> str:
    """The note of a board with rows marked: each row and why, then the rule (once)."""
    rows = "; ".join(f"{label} ({why})" for label, why in sorted(marked.items()))
    return f"blew up: {rows}. {RULE}"
