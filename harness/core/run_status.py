"""What a run still computing has done so far, for another process to read: ``harness leaderboard`` in a second
terminal marks its board partial and names the cells still running or to come.

The harness process of a run writes one small JSON file, ``<HARNESS_HOME>/runs/<pid>.json``, when its cells start
and after each cell ends (written whole to a temporary file and renamed over the old one, so a reader never sees
half of it), and removes it when the run ends, however it ends. A file whose process is gone (the run was killed
with SIGKILL) is stale: readers pass it over, and the next run of the home removes it. The file is the run's own
scratch record, never a result: the results are in the tracking store.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def status_dir() -> Path:
    from harness.core.paths import home_dir

    return home_dir() / "runs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _cell_dict(cell: Any, experiment: str) -> dict[str, Any]:
    return {"label": cell.label, "method": cell.method, "source": cell.source, "dim": cell.dim, "seed": cell.seed,
            "experiment": experiment}


@dataclass
class RunStatus:
    """The cells of a run in the order they are handed out, those done and those failed, by label."""

    pid: int
    started: float  # time.time() when the cells started
    tracking_uri: str
    cells: list[dict[str, Any]]
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def experiments(self) -> list[str]:
        return sorted({c["experiment"] for c in self.cells})

    def methods(self) -> list[str]:
        """The run's methods, in the order their first cells are handed out."""
        return list(dict.fromkeys(c["method"] for c in self.cells))

    def to_come(self) -> list[str]:
        """The methods none of whose cells has ended yet."""
        ended = set(self.done) | set(self.failed)
        have = {c["method"] for c in self.cells if c["label"] in ended}
        return [m for m in self.methods() if m not in have]

    def left(self) -> list[dict[str, Any]]:
        ended = set(self.done) | set(self.failed)
        return [c for c in self.cells if c["label"] not in ended]


class StatusFile:
    """The status file of this process's run (:class:`RunStatus`); :meth:`close` removes it."""

    def __init__(self, cells: list[Any], experiment_of: Any, tracking_uri: str, folder: Path | None = None):
        self.folder = folder or status_dir()
        self.status = RunStatus(os.getpid(), time.time(), str(tracking_uri),
                                [_cell_dict(c, experiment_of(c)) for c in cells])
        self.path = self.folder / f"{self.status.pid}.json"
        for old in self.folder.glob("*.json") if self.folder.is_dir() else []:  # left by runs killed outright
            try:
                if int(old.stem) != self.status.pid and not _alive(int(old.stem)):
                    old.unlink(missing_ok=True)
            except (ValueError, OSError):
                continue
        self.write()

    def write(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.status.__dict__), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:  # a full disk or a read-only home: the run goes on, a second terminal sees no status
            pass

    def ended(self, cell: Any, failed: bool = False) -> None:
        (self.status.failed if failed else self.status.done).append(cell.label)
        self.write()

    def close(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass


def running(tracking_uri: str, experiment: str | None = None, folder: Path | None = None) -> list[RunStatus]:
    """The runs of live processes that log to ``tracking_uri`` (and to ``experiment`` where one is given)."""
    folder = folder or status_dir()
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            st = RunStatus(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue
        if st.tracking_uri != str(tracking_uri) or not _alive(st.pid):
            continue
        if experiment is None or experiment in st.experiments:
            out.append(st)
    return out


def partial_line(done: int, total: int, to_come: list[str], running_now: list[str] | None = None,
                 minutes: float | None = None) -> str:
    """The line that marks a board partial: how many cells are done, the methods none of whose cells has ended
    (their rows are missing), and the cells running now where known."""
    at = f" after {minutes:.1f} min of cells" if minutes is not None else ""
    line = f"partial board{at}: {done} of {total} cells done"
    line += (f"; still to come: {', '.join(to_come)} (no cell done yet: no row)" if to_come
             else "; every method has a cell done")
    if running_now:
        line += f"; running: {', '.join(running_now)}"
    return line + "; seeds still running or pending are missing, so spreads and claims are provisional"


def partial_note(reader: Any, tracking_uri: str, experiment: Any) -> str | None:
    """The line that marks ``experiment``'s board partial while a live run still computes cells of it (None when
    none does): the cells done, the methods to come, the cells running now (the cell runs the store holds as
    RUNNING) and how many are pending."""
    from harness.core.record import Kind, kind_filter, own_tags
    from harness.core.record_read import search_runs

    statuses = running(tracking_uri, experiment.name)
    if not statuses:
        return None
    st = statuses[0]
    mine = [c for c in st.cells if c["experiment"] == experiment.name]
    labels = {c["label"] for c in mine}
    done = [lab for lab in st.done if lab in labels]
    now = []
    for run in search_runs(reader, experiment.experiment_id, kind_filter(Kind.CELL)):
        if run.info.status == "RUNNING" and run.info.start_time / 1000 >= st.started - 60:
            tags = own_tags(run)
            now.append(f"{tags.get('method', '?')}-{tags.get('dim', 'full')}-s{tags.get('seed', '?')}")
    ended = set(st.done) | set(st.failed)
    pending = len([c for c in mine if c["label"] not in ended]) - len(now)
    line = partial_line(len(done), len(mine), st.to_come(), sorted(now), (time.time() - st.started) / 60)
    return line.replace("partial board", f"partial board (run of process {st.pid} still computing)", 1) + (
        f"; {max(0, pending)} cell(s) pending" if pending > 0 else "")
