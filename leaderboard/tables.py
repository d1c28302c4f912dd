"""Per-language tables read back from MLflow (never recomputed).

For each task and CPT step: a method x language table of the task's headline metric, with the average only for rows
that have every language of the table (a row with gaps shows them and gets no average, as MTEB does). Profiles are
never mixed in one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.tracking import TAG, Tracker, metric_key


@dataclass
class Board:
    task: str
    metric: str
    step: int | str
    profile: str
    experiment: str
    languages: list[str]
    rows: dict[str, dict[str, float]]  # row label -> lang -> value
    higher_is_better: bool

    def average(self, row: str) -> float | None:
        vals = self.rows[row]
        if all(lang in vals for lang in self.languages) and self.languages:
            return sum(vals[lang] for lang in self.languages) / len(self.languages)
        return None


def collect(tracker: Tracker, experiment: str | None = None, world: str | None = None, task: str | None = None,
            step: str = "final") -> list[Board]:
    from harness.registry import TASKS

    client = tracker.client
    exps = client.search_experiments()
    if experiment:
        exps = [e for e in exps if e.name == experiment]
    boards: dict[tuple, Board] = {}
    for exp in exps:
        flt = f"tags.`{TAG}kind` = 'task'"
        if task:
            flt += f" and tags.`{TAG}task` = '{task}'"
        if world:
            flt += f" and tags.`{TAG}world` = '{world}'"
        for run in client.search_runs([exp.experiment_id], filter_string=flt, max_results=5000):
            tags = {k[len(TAG):]: v for k, v in run.data.tags.items() if k.startswith(TAG)}
            tname = tags.get("task")
            if tname not in TASKS.names():
                continue
            t = TASKS.get(tname)
            prefix = metric_key(tname, t.headline) + "/"
            parent = client.get_run(tags["parent"]) if tags.get("parent") else None
            final = int(parent.data.tags.get(f"{TAG}final_step", 0)) if parent else 0
            want = final if step == "final" else int(step)
            values: dict[str, float] = {}
            for key in run.data.metrics:
                if not key.startswith(prefix) or key.endswith("/avg"):
                    continue
                hist = [m for m in client.get_metric_history(run.info.run_id, key) if m.step == want]
                if hist:
                    values[key[len(prefix):]] = hist[-1].value
            if not values:
                continue
            label = f"{tags.get('method')} d={tags.get('dim')} s={tags.get('seed')}"
            bkey = (exp.name, tname, tags.get("profile"), want)
            b = boards.setdefault(bkey, Board(tname, t.headline, want, tags.get("profile", "?"), exp.name, [], {},
                                              t.higher_is_better))
            b.rows[label] = values
    for b in boards.values():
        b.languages = sorted({lang for v in b.rows.values() for lang in v})
    return sorted(boards.values(), key=lambda b: (b.experiment, b.task, b.profile, str(b.step)))


def render(board: Board, console: Console) -> None:
    t = Table(title=f"{board.experiment} · {board.task} · {board.metric} · step {board.step} · profile "
                    f"{board.profile}", title_justify="left")
    t.add_column("method")
    for lang in board.languages:
        t.add_column(lang, justify="right")
    t.add_column("avg", justify="right")
    best = {}
    for lang in board.languages:
        vals = [r[lang] for r in board.rows.values() if lang in r]
        if vals:
            best[lang] = max(vals) if board.higher_is_better else min(vals)
    for label, vals in sorted(board.rows.items()):
        cells = []
        for lang in board.languages:
            if lang not in vals:
                cells.append("[dim]—[/dim]")
                continue
            s = f"{vals[lang]:.3f}"
            cells.append(f"[bold green]{s}[/bold green]" if vals[lang] == best.get(lang) else s)
        avg = board.average(label)
        cells.append(f"{avg:.3f}" if avg is not None else "[dim]gaps[/dim]")
        t.add_row(label, *cells)
    console.print(t)


def print_leaderboard(tracking_uri: str | None = None, experiment: str | None = None, task: str | None = None,
                      step: str = "final", world: str | None = None) -> int:
    import sys

    # piped output (a file, a test) gets the full table instead of wrapped columns
    console = Console(width=None if sys.stdout.isatty() else 400)
    boards = collect(Tracker(tracking_uri), experiment=experiment, world=world, task=task, step=step)
    if not boards:
        console.print("no results yet: run `harness run ...` first")
        return 0
    for b in boards:
        render(b, console)
    return 0


def board_dict(b: Board) -> dict[str, Any]:
    return {"task": b.task, "metric": b.metric, "step": b.step, "profile": b.profile, "experiment": b.experiment,
            "languages": b.languages, "rows": b.rows, "averages": {r: b.average(r) for r in b.rows}}
