"""The bible build's progress display (:mod:`harness.core.progress` underneath)."""

from __future__ import annotations


class Progress:
    """The build's progress (:mod:`harness.core.progress`): rich bars on a terminal, plain lines when the output is
    piped (a line per stage, every tenth of a bar and its end with the elapsed time); silent when disabled."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._p = None

    def __enter__(self):
        if self.enabled:
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

            from harness.core.progress import Progress as HarnessProgress

            self._p = HarnessProgress(TextColumn("[bold]{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                      transient=False)
            self._p.__enter__()
        return self

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)

    def note(self, message: str) -> None:
        """A line of its own when the output is piped (a terminal shows the bars instead)."""
        from harness.core.progress import PlainProgress

        if isinstance(self._p, PlainProgress):
            self._p.print(message)

    def task(self, description: str, total: int):
        if self._p is None:
            return None
        return self._p.add_task(description, total=total)

    def advance(self, task, n: int = 1, description: str | None = None) -> None:
        if self._p is not None and task is not None:
            self._p.update(task, advance=n, **({"description": description} if description else {}))

    def set(self, task, completed: int, total: int | None = None) -> None:
        if self._p is not None and task is not None:
            self._p.update(task, completed=completed, **({"total": total} if total is not None else {}))
