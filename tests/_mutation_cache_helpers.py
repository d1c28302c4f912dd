"""What the tests of the product cache's data safety (test_mutation_cache.py, test_mutation_cache_safety.py)
share: each test starting as a new process would (nothing checked, no lease held), another process's lease
stood in for by a description of its own, a clock, a file system where deleting fails, and finished products
written by hand."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

import pytest

from harness.core import cache as cache_mod
from harness.core.cache import DONE, lease_file
from harness.core.locks import try_lock

LOGGER = "harness.core.cache"


@pytest.fixture(autouse=True)
def _fresh_process():
    """Each test starts as a new process would: nothing checked, no lease held (and leaves none behind)."""
    cache_mod._CHECKED.clear()
    yield
    for fd in cache_mod._LEASES.values():
        os.close(fd)
    cache_mod._LEASES.clear()
    cache_mod._CHECKED.clear()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _foreign_shared(path: Path) -> int:
    """Another reader's lease on ``path``: a shared lock on its lease file through a description of its own."""
    fd = os.open(lease_file(path), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def _prunable(path: Path) -> bool:
    """Whether a prune could take ``path``'s lease now (nobody, this process included, leases it)."""
    fd = try_lock(lease_file(path))
    if fd is None:
        return False
    os.close(fd)
    return True


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _failing_rmtree(path, ignore_errors=False):
    """shutil.rmtree on a file system where deleting fails (it deletes nothing)."""
    if not ignore_errors:
        raise PermissionError(path)


def _model_like(d: Path) -> None:
    (d / "model.bin").write_bytes(bytes(range(256)) * 4)
    (d / "sub").mkdir()
    (d / "sub" / "config.json").write_text('{"a": 1}')



class _Clock:
    """time.time() for the cache module: the given values, then the last one again."""

    def __init__(self, *values: float):
        self.values = list(values)

    def time(self) -> float:
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


def _product(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """A finished product folder written by hand: ``files`` and a marker listing them."""
    p = tmp_path / "prod"
    p.mkdir(parents=True)
    for rel, data in files.items():
        (p / rel).parent.mkdir(parents=True, exist_ok=True)
        (p / rel).write_bytes(data)
    marker = {"files": {rel: {"size": len(d), "sha256": _sha(d)} for rel, d in files.items()}}
    (p / DONE).write_text(json.dumps(marker))
    return p
