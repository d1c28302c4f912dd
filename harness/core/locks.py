"""Inter-process locks on files of the harness home, so that two processes never build the same product at once.

Cells of one run (and runs started side by side) share per-world products such as fastText models: without a lock,
the first two cells that need one both train it (FOCUS's token-level model is many minutes of a core), and one copy
is thrown away. With :func:`exclusive`, the second waits for the first and then finds the product in the cache.

The locks are ``flock`` locks on ``<name>.lock`` files: the operating system releases them when the process that
holds them dies, so a killed run never leaves a product locked. The lock files stay (they are empty). On a platform
without ``fcntl`` the locks do nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]


def lock_file(path: Path) -> Path:
    """The lock file that guards ``path``: ``<path>.lock`` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


def try_exclusive(path: Path) -> int | None:
    """Take the lock of ``path`` if nobody holds it: an open descriptor that holds it (close it with
    :func:`release`; a forked child inherits it, and the lock lasts until every copy is closed), or None when
    another process holds it."""
    lock = lock_file(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    return try_lock(lock)


def try_lock(file: Path) -> int | None:
    """The exclusive ``flock`` of ``file`` (created if missing; its folder must exist) without waiting: an open
    descriptor that holds it, or None when another process holds it (or holds a shared lock on it)."""
    fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
    if fcntl is None:
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


@contextmanager
def exclusive(path: Path, waiting: str | None = None) -> Iterator[None]:
    """Hold the lock of ``path`` for the ``with`` block, first waiting for another process that holds it (then
    ``waiting``, when given, is shown as a long step: ``<waiting>: start``, ``still running``, ``done``)."""
    fd = try_exclusive(path)
    if fd is None:
        from harness.core.progress import activity

        fd = os.open(lock_file(path), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if waiting is None:
                fcntl.flock(fd, fcntl.LOCK_EX)  # type: ignore[union-attr]
            else:
                with activity(waiting):
                    fcntl.flock(fd, fcntl.LOCK_EX)  # type: ignore[union-attr]
        except BaseException:
            os.close(fd)
            raise
    try:
        yield
    finally:
        release(fd)
