"""Inter-process locks on files of the harness home, so that two processes never build the same product at once.

Cells of one run (and runs started side by side) share per-world products such as fastText models: without a lock,
the first two cells that need one both train it (FOCUS's token-level model is many minutes of a core), and one copy
is thrown away. With :func:`exclusive`, the second waits for the first and then finds the product in the cache.

The locks are ``flock`` locks on ``<name>.lock`` files: the operating system releases them when the process that
holds them dies, so a killed run never leaves a product locked. The lock files stay (they are empty) until
``harness cache prune`` removes the product, which it does holding the lock: a process that was waiting on the
removed file then takes the lock again on the new one (:func:`try_lock`, :func:`exclusive`), so two builders never
hold one product's lock at once. :func:`held` tells, creating nothing, whether a process builds a product now: a
temporary folder whose builder's lock is free was left by a killed build, whatever its age. On a platform without
``fcntl`` the locks do nothing.
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
    while True:
        fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is None:
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if _current(fd, file):
            return fd
        os.close(fd)  # the file was removed (with its product) once this took it: lock the one there now


def _current(fd: int, file: Path) -> bool:
    """Whether the open ``fd`` is still the file at ``file`` (not one removed meanwhile)."""
    try:
        a, b = os.fstat(fd), os.stat(file)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def held(path: Path) -> bool:
    """Whether a process holds the lock of ``path`` (builds it now); nothing is created to tell. A lock that this
    process holds through another descriptor counts as held too."""
    if fcntl is None:
        return False
    try:
        fd = os.open(lock_file(path), os.O_RDONLY)
    except OSError:  # no lock file: nobody ever took it, or its product was removed
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _wait_for(lock: Path) -> int:
    """Wait for the lock of ``lock`` (the file) and hold it: an open descriptor."""
    while True:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # type: ignore[union-attr]
        except BaseException:
            os.close(fd)
            raise
        if _current(fd, lock):
            return fd
        os.close(fd)  # removed by a prune while this waited: wait for the new one


@contextmanager
def exclusive(path: Path, waiting: str | None = None) -> Iterator[None]:
    """Hold the lock of ``path`` for the ``with`` block, first waiting for another process that holds it (then
    ``waiting``, when given, is shown as a long step: ``<waiting>: start``, ``still running``, ``done``)."""
    fd = try_exclusive(path)
    if fd is None:
        if waiting is None:
            fd = _wait_for(lock_file(path))
        else:
            from harness.core.progress import activity

            with activity(waiting):
                fd = _wait_for(lock_file(path))
    try:
        yield
    finally:
        release(fd)
