"""What the tests of the cache library (test_mutation_cache_admin.py, test_mutation_cache_admin_prune.py) share:
finished products, plain files and SQLite databases written by hand, modification times set back, and a lease or
build lock "held elsewhere" through another open file, which ``flock`` treats as another holder, as it treats
another process."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path

from harness.core.cache import DONE, lease_file
from harness.core.locks import release, try_exclusive

DAY = 86400.0


def _product(path: Path, size: int = 1000, marker: dict | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "weights.bin").write_bytes(b"\0" * size)
    if marker is not None:
        (path / DONE).write_text(json.dumps(marker))
    return path


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


def _sqlite(path: Path) -> Path:
    """An SQLite database (its header is all that tells it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    return path


def _set_mtime(path: Path, t: float) -> None:
    """``path`` and everything below it modified at ``t``."""
    for p in [*(path.rglob("*") if path.is_dir() and not path.is_symlink() else []), path]:
        os.utime(p, (t, t), follow_symlinks=False)


@contextmanager
def _leased_elsewhere(path: Path):
    """A reader's shared lease on ``path`` (another open file, as another process's)."""
    fd = os.open(lease_file(path), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        yield
    finally:
        os.close(fd)


@contextmanager
def _built_elsewhere(path: Path):
    """A builder holding the build lock of ``path``."""
    fd = try_exclusive(path)
    assert fd is not None
    try:
        yield
    finally:
        release(fd)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))
