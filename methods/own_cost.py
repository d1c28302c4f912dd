"""A method's own cost: the seconds of its initialization that are its own work, and the shared products it met.

:func:`harness.initialize.initialize_model` opens a :class:`Ledger` around the method's call (:func:`ledger`); what
inside that call is not the method's work says so: waiting for a shared product that another process is building
(a fastText model, the helper model), loading the world's source model (``ctx.source_model()``) -- each under
:func:`not_own`, whose seconds the ledger subtracts from the call's. A shared product met in the call is noted
(:func:`shared`): built here (its training is this cell's cost, once: it is inside the call and stays counted) or
found built (its cost is the cell's that made it). Outside a ledger both are no-ops, so a method called directly
(tests, benchmarks) behaves as before.

The report's ``seconds`` (logged as ``init/seconds``) is :meth:`Ledger.own`: what the board's cost table shows and
``harness plan`` prices. The worker's start-up, the imports and the loading of the world and its models before the
call were never in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Ledger:
    """What one initialization spent that is not the method's own work, and the shared products it met."""

    not_own: dict[str, float] = field(default_factory=dict)  # why -> seconds (waiting, loading the source model)
    shared: list[dict[str, Any]] = field(default_factory=list)  # {"product", "built", "seconds"}

    def own(self, call_seconds: float) -> float:
        """The seconds of a call of ``call_seconds`` that were the method's own work (never below 0)."""
        return max(0.0, float(call_seconds) - sum(self.not_own.values()))

    def as_dict(self) -> dict[str, Any]:
        return {"not_own": {k: round(v, 3) for k, v in self.not_own.items()}, "shared": list(self.shared)}


WAITING = "waiting for a shared product"  # another process builds it; its cost is that process's cell's
SOURCE_MODEL = "loading the source model"  # the world's model, as the cell loads it before the call

_local = threading.local()


def current() -> Ledger | None:
    """The ledger of the initialization running in this thread, or None."""
    return getattr(_local, "ledger", None)


@contextmanager
def ledger() -> Iterator[Ledger]:
    """A fresh ledger for the block (the one it replaces is restored after)."""
    before, mine = current(), Ledger()
    _local.ledger = mine
    try:
        yield mine
    finally:
        _local.ledger = before


@contextmanager
def not_own(why: str) -> Iterator[None]:
    """The block's seconds are not the method's own work (``why``: "waiting for a shared product", ...)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        exclude(why, time.perf_counter() - t0)


def exclude(why: str, seconds: float) -> None:
    """``seconds`` already spent (measured by the caller) that were not the method's own work."""
    book = current()
    if book is not None and seconds > 0:
        book.not_own[why] = book.not_own.get(why, 0.0) + float(seconds)


def shared(product: str, built: bool, seconds: float | None = None) -> None:
    """A shared product met by the initialization: ``built`` here (``seconds``: its training) or found built."""
    book = current()
    if book is None:
        return
    entry = {"product": product, "built": bool(built), "seconds": None if seconds is None else round(float(seconds), 3)}
    have = next((e for e in book.shared if e["product"] == product), None)
    if have is None:
        book.shared.append(entry)
    elif entry["built"] and not have["built"]:  # (trained side by side first, then read from the cache: built)
        have.update(entry)
