"""Where a board's rows come from, in one line: the experiment (or leaderboard folder) and its cell runs, by name
with the seeds folded or, with ``ids``, each run by name and id. ``harness compare`` prints it under each side's
rows (:func:`where_rows_are`), ``harness leaderboard`` and ``harness run`` under each board (:func:`runs_footer`).
"""

from __future__ import annotations

from typing import Any


def where_rows_are(side: Any, labels: set[str], ids: bool = False) -> str:
    """One line naming the experiment and the cell runs (with ``ids``, their run ids) of ``side``'s rows
    ``labels``."""
    runs: dict[str, str] = {}
    for table in side.tables.values():
        for lab, row in table.rows.items():
            if lab in labels:
                runs.update(row.runs)
    names = sorted(runs.items(), key=lambda kv: kv[1])
    shown = ", ".join(f"{n} ({i})" if ids else n for i, n in names)
    where = f"experiment {side.experiment}" if side.experiment else f"folder {side.name}"
    return f"{where}" + (f", runs {shown}" if shown else "")


def runs_footer(experiment: str, cells: Any, ids: bool = False) -> str:
    """The line under a board that names where its rows are: the experiment and its cell runs (by name, seeds
    folded: ``ofa-full-s1,2,3``; with ``ids`` each run by name and id)."""
    cells = list(cells)
    if ids:
        shown = ", ".join(f"{c.method}-{c.dim}-s{c.seed} ({c.run_id})"
                          for c in sorted(cells, key=lambda c: (c.method, c.dim, str(c.seed))))
    else:
        seeds: dict[str, list[str]] = {}
        for c in cells:
            seeds.setdefault(f"{c.method}-{c.dim}-s", []).append(str(c.seed))
        shown = ", ".join(k + ",".join(sorted(v, key=lambda x: (len(x), x))) for k, v in sorted(seeds.items()))
    return f"rows from experiment {experiment}: {len(cells)} cell run(s) {shown}" + ("" if ids else " (ids: --ids)")
