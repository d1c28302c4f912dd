"""The runner: orchestrates a resolved run (:class:`harness.spec.RunSpec`). It announces the run, hands its cells
(each a :class:`harness.cell.CellRun`: independent, idempotent, in any order and any process) to an executor or
runs them here one after the other, then writes the seed aggregates and names the cells that ran older code of
their method. It decides nothing about a cell: the spec resolved every setting, and the cell owns its lifecycle.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.core.errors import DeviceFault, HarnessError, is_device_fault
from harness.core.progress import STARTUP_HEARTBEAT_S, log_console, stage

log = logging.getLogger(__name__)
console = log_console()


@contextlib.contextmanager
def cell_threads(threads: int) -> Iterator[int]:
    """torch's threads while a cell runs: exactly the run's (:func:`harness.spec.cell_threads`: the CPUs the
    profile gives a cell, or fewer where the machine has fewer cores for each of the cells side by side, and then
    in the cells' identity), wherever the cell runs -- in the harness process, a pool worker or Ray. A parallel
    reduction splits its sum by thread, so the thread count moves the last digits of a pass and, through training,
    every number after it: one count a run, whatever the process's own (``OMP_NUM_THREADS``, ``--workers``, how
    many cells are left), makes a cell compute the same. Restored after the cell."""
    import torch

    before = torch.get_num_threads()
    n = max(1, int(threads))
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


PARTIAL_EVERY_S = 600.0  # a run's partial boards come at most this often


class PartialBoards:
    """When a run still computing shows the board so far. A board is due when a cell ends, cells are left to
    compute, and some method has a cell done that the last board did not show; and then only if the last partial
    board (or, before the first, the cells' start) is at least ``interval`` seconds old -- except the first board
    that holds every method, which does not wait when no partial board came before it. ``clock`` is injectable
    (tests)."""

    def __init__(self, methods: list[str], interval: float = PARTIAL_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.methods = list(dict.fromkeys(methods))
        self.interval = float(interval)
        self.clock = clock
        self.start = clock()
        self.last: float | None = None
        self.shown: set[str] = set()

    def due(self, done_methods: set[str], computing: bool) -> list[str] | None:
        """The methods still to come (none of their cells done) when a board is due now, else None."""
        if not computing or not (set(done_methods) - self.shown):
            return None
        now = self.clock()
        every = set(self.methods) <= set(done_methods)
        if (now - (self.start if self.last is None else self.last) < self.interval
                and not (every and self.last is None)):
            return None
        self.last, self.shown = now, set(done_methods)
        return [m for m in self.methods if m not in done_methods]

    def minutes(self) -> float:
        return (self.clock() - self.start) / 60


class Runner:
    """The cells of the resolved run ``spec`` (:func:`harness.spec.resolve`) on ``world``."""

    def __init__(self, spec: Any, world: Any, tracker: Any = None):
        self.spec = spec
        self.world = world
        if tracker is None:
            from harness.core.tracking import Tracker

            with stage("MLflow store: opening", heartbeat=STARTUP_HEARTBEAT_S):  # mlflow's import: seconds
                tracker = Tracker(self.spec.cfg.tracking_uri)
        self.tracker = tracker
        self.prefix = ""  # put before each line this runner prints (cells side by side)
        # called (cells done, cells, methods still to come, minutes of cells) when a partial board is due
        self.on_partial: Any = None
        self.partial_clock: Callable[[], float] = time.monotonic  # (tests: an injectable clock)
        self.partial_every: float = PARTIAL_EVERY_S
        self.todo: set[Any] | None = None  # the cells with work left (None: every cell may have)
        self.finished: dict[Any, Any] = {}  # the finished runs of the others, found before the cells start
        self._done: list[Any] = []
        self._partial: PartialBoards | None = None
        self._status: Any = None

    def order(self) -> list[Any]:
        """The cells in the order they are handed out: the plan's (:func:`harness.plan.run_order`)."""
        return self.spec.plan.order

    def start_partials(self, cells: list[Any]) -> None:
        """The cells start now: the partial boards' clock starts (:class:`PartialBoards`)."""
        self._partial = PartialBoards([c.method for c in cells], self.partial_every, self.partial_clock)

    def say(self, message: str) -> None:
        from rich.markup import escape

        console.print(escape(self.prefix) + message if self.prefix else message)

    def run(self, executor: Any = None) -> dict[str, Any]:
        from harness.core.cache import ProductCache
        from harness.core.devices import describe

        spec = self.spec
        for s in spec.plan.skipped:
            console.print(f"[yellow]skipped:[/yellow] {s}")
        console.print(f"world [bold]{spec.world}[/bold] ({spec.world_hash}), profile {spec.profile}, device "
                      f"{describe(spec.device)}: {len(spec.plan.cells)} cell(s) x tasks "
                      f"{', '.join(spec.plan.tasks)}")
        for setting, why in spec.fitted.items():
            console.print(f"[yellow]fitted to the source model:[/yellow] {setting} {why}")
        ProductCache().clean_stale()
        self.mark_orphans()
        results: dict[str, Any] = {"cells": [], "failed": []}
        self._done = []
        cells = self.order()
        self.start_partials(cells)
        self._cells(cells, executor, results)
        self.aggregate()
        from harness.cell import stale_report

        if stale_report(results["cells"]):
            console.print(stale_report(results["cells"]))
        return results

    def _cells(self, cells: list[Any], executor: Any, results: dict[str, Any]) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        from harness.core.progress import Progress
        from harness.core.run_status import StatusFile

        spec = self.spec
        # rich bars on a terminal, plain progress lines when the output is piped
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as prog:
            bar = prog.add_task("cells", total=len(spec.plan.cells))
            # the run's status file (which cells are done, which are left), for a second terminal while they run
            self._status = StatusFile(cells, lambda c: spec.experiment(c.source), self.tracker.uri)
            try:
                if executor is not None:
                    self.on_executor(executor, cells, prog, bar, results)
                else:
                    self.here(cells, prog, bar, results)
            finally:
                self._status.close()

    def advance(self, prog: Any, bar: Any, cell: Any, failed: bool = False) -> None:
        """A cell has ended: the bar moves, the status file says so, and where a partial board is due
        (:class:`PartialBoards`), ``on_partial`` shows what is logged so far."""
        prog.advance(bar)
        if self._status is not None:
            self._status.ended(cell, failed)
        if failed:
            return
        self._done.append(cell)
        cells = self.spec.plan.cells
        todo = self.todo if self.todo is not None else set(cells)
        computing = bool(todo - set(self._done))  # (a run with nothing left to compute shows its board once)
        # the partial boards started with the cells (:meth:`start_partials`, in the order :meth:`run` hands them out)
        to_come = self._partial.due({c.method for c in self._done}, computing) if self._partial else None
        if self.on_partial and to_come is not None:
            self.on_partial(len(self._done), len(cells), to_come, self._partial.minutes())

    def on_executor(self, executor: Any, cells: list[Any], prog: Any, bar: Any, results: dict[str, Any]) -> None:
        prog.update(bar, description=f"cells on {type(executor).__name__}")
        workers = getattr(executor, "workers", None)
        console.print(f"cells: {f'{workers} worker process(es)' if workers else 'workers'} starting (each "
                      f"loads torch, the world and the MLflow store before its first cell)")
        try:
            done, failed = executor.run(self, cells, on_done=lambda c, bad=False: self.advance(prog, bar, c, bad))
        finally:
            executor.shutdown()
        results["cells"].extend(done)
        results["failed"].extend(failed)
        for f in failed:
            console.print(f"[red]cell {f['cell']} failed:[/red] {f['error']}")

    def here(self, cells: list[Any], prog: Any, bar: Any, results: dict[str, Any]) -> None:
        """The cells one after the other in this process; a failed device stops them (every later cell here
        would fail with it)."""
        for cell in cells:
            prog.update(bar, description=f"cell {cell.label}")
            try:
                results["cells"].append(self.run_cell(cell, prog))
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                if is_device_fault(exc):
                    raise DeviceFault(
                        f"cell {cell.label}: the device failed ({type(exc).__name__}: {str(exc)[:300]}); "
                        f"every later cell of this process would fail with it, so the run stops here. "
                        f"Finished cells are kept; the same command resumes (with --isolate-cells, the default "
                        f"on a GPU, each cell runs in a process of its own and the others go on)") from exc
                log.exception("cell %s failed", cell.label)
                results["failed"].append({"cell": cell.label, "error": f"{type(exc).__name__}: {exc}"})
                console.print(f"[red]cell {cell.label} failed:[/red] {type(exc).__name__}: {exc}")
                if self.spec.cfg.fail_fast or isinstance(exc, HarnessError):
                    raise
                self.advance(prog, bar, cell, failed=True)
                continue
            self.advance(prog, bar, cell)

    def run_cell(self, cell: Any, prog: Any = None) -> dict[str, Any]:
        """One cell's lifecycle (:class:`harness.cell.CellRun`); a worker process prints its own lines."""
        from harness.cell import CellRun
        from harness.core.progress import PlainProgress, mode, set_prefix

        if prog is None and mode(console) == "lines":  # a worker process: its own progress lines, prefixed
            set_prefix(self.prefix)
            prog = PlainProgress(console.file)
        # a cell found finished (harness.cell.pending) computes nothing, and loads no torch: its threads are not set
        found_finished = self.todo is not None and cell not in self.todo
        with contextlib.nullcontext() if found_finished else cell_threads(self.spec.threads):
            run = CellRun(self.spec, self.world, self.tracker, cell, self.say, prog, self.finished.get(cell))
            return run.run()

    def aggregate(self) -> None:
        from harness.aggregate import aggregate_seeds, seed_groups

        groups = seed_groups(self.spec.plan.cells)
        if any(len(c) > 1 for c in groups.values()):
            with stage("seed aggregates: mean and sd over seeds, per variant and task", heartbeat=STARTUP_HEARTBEAT_S):
                aggregate_seeds(self.spec, self.tracker, groups)

    def experiment_ids(self) -> list[str]:
        """The ids of the run's experiments that exist in the store."""
        exps = (self.tracker.reader.get_experiment_by_name(name) for name in self.spec.experiments())
        return [e.experiment_id for e in exps if e is not None]

    def mark_orphans(self) -> None:
        """Runs left RUNNING by a dead process become KILLED (this run's cells resume theirs and finish them)."""
        n = self.tracker.mark_orphans_killed(self.experiment_ids())
        if n:
            console.print(f"[yellow]{n} MLflow run(s) left RUNNING by a process that died are marked KILLED; "
                          f"the cells of this command resume theirs[/yellow]")
