"""CSV rendering: one wide file per board (row x language means, then avg, avg∩, mean rank, init columns, the
metric's direction and why a row is marked as blown up) and one long file with every cell (mean, std, n, bootstrap
interval, the direction, the blow-up). Full precision; empty fields are gaps."""

from __future__ import annotations

import csv
import io

from leaderboard.model import Board, Leaderboard


def _num(v: float | None) -> str:
    return "" if v is None else repr(float(v))


def board_csv(board: Board) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    inits = board.init_columns()
    better = "higher" if board.higher_is_better else "lower"  # the metric's direction, on every row
    w.writerow(["row", "kind", "seeds", *board.languages, "avg", "avg_common", "mean_rank",
                *[k for k, _ in inits], "better", "blew_up"])
    for r in board.rows + board.paper_rows:
        w.writerow([r.label, r.kind, " ".join(r.seeds),
                    *[_num(r.value(lang)) for lang in board.languages],
                    _num(r.avg), _num(r.avg_common), _num(r.mean_rank), *[_num(r.init.get(k)) for k, _ in inits],
                    better, r.blowup])
    return buf.getvalue()


def long_csv(lb: Leaderboard) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["experiment", "profile", "task", "metric", "better", "kind", "step", "row", "row_kind", "language",
                "mean", "std", "n", "ci_low", "ci_high", "blew_up"])
    for b in lb.boards:
        for r in b.rows + b.paper_rows:
            for lang, e in sorted(r.entries.items()):
                w.writerow([b.experiment, b.profile, b.task, b.metric, "higher" if b.higher_is_better else "lower",
                            b.kind, "" if b.step is None else b.step, r.label, r.kind, lang, _num(e.mean),
                            _num(e.std), e.n, _num(e.ci[0] if e.ci else None), _num(e.ci[1] if e.ci else None),
                            r.blowup])
    return buf.getvalue()
