"""fastText training for FOCUS, WECHSEL and Tik-to-Tok: deterministic, with the settings a method may pass.

Determinism
-----------
Training is single-threaded (``thread=1``) and seeded (fastText's own ``seed`` argument, which the Python
wrapper's ``train_unsupervised`` does not accept; :func:`train_model` passes it through the same argument builder).
That alone is not enough: fastText initializes its input matrix in ten blocks, one per thread, and with fewer than
ten threads only the first block(s) are drawn (fastText issue #1061); the other rows keep whatever the allocator
returns. For a large matrix that is fresh zeroed pages, for a small one it can be leftover heap memory (observed:
values of 1e23, different on every run). :func:`zeroed_allocations` makes glibc hand out zero-filled memory
while fastText trains (``mallopt(M_PERTURB, 255)``), so the rows outside the first tenth start at exactly zero,
which is what fastText does with fresh memory and fewer than ten threads; training then is bit-for-bit
reproducible. On a platform without glibc the trainer warns that results may vary between runs.

The price: n-gram rows that start at zero make training converge more slowly. On a tiny corpus (the synthetic
world's 10k tokens per language) a few epochs leave the vectors nearly parallel (median cosine 0.999 at 3 epochs,
where a fully initialized model gives 0.89; at 10 epochs both give about 0.37). Every method therefore takes a
``threads`` parameter: 10 or more initializes every row (as the reference code does on a machine with 10+
cores) at the cost of reproducibility.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError

log = logging.getLogger(__name__)

M_PERTURB = -6  # glibc mallopt parameter
_ALLOC_LOCK = threading.Lock()

# settings a method may pass (fastText's names); everything else is an error
TRAIN_KEYS = ("model", "dim", "epoch", "minCount", "minn", "maxn", "neg", "ws", "lr", "bucket", "t",
              "lrUpdateRate", "wordNgrams", "loss", "seed", "thread")


def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        return lib if hasattr(lib, "mallopt") else None
    except OSError:
        return None


@contextmanager
def zeroed_allocations():
    """While inside, glibc's ``malloc`` returns zero-filled memory (see the module docstring)."""
    lib = _libc()
    with _ALLOC_LOCK:
        if lib is None or not lib.mallopt(M_PERTURB, 255):
            log.warning("fastText: cannot make allocations zero-filled on this platform (no glibc mallopt); "
                        "models trained with fewer than 10 threads may differ between runs")
            yield
            return
        try:
            yield
        finally:
            lib.mallopt(M_PERTURB, 0)


def train_model(corpus: Path, settings: dict[str, Any]) -> Any:
    """Train an unsupervised fastText model on ``corpus`` (one text per line, tokens separated by spaces),
    seeded, with zero-filled allocations; single-threaded unless ``settings["thread"]`` says otherwise (more than
    one thread is not reproducible: fastText's threads update the model without locks). ``settings`` use
    fastText's names."""
    from fasttext import FastText as _ft

    unknown = set(settings) - set(TRAIN_KEYS)
    if unknown:
        raise ConfigError(f"fastText settings {sorted(unknown)} are not supported; use {list(TRAIN_KEYS)}")
    args = dict(_ft.unsupervised_default)
    args.update({k: v for k, v in settings.items() if v is not None})
    args.update(input=str(corpus), verbose=0, pretrainedVectors="")
    args["thread"] = int(settings.get("thread") or 1)
    for key in ("dim", "epoch", "minCount", "minn", "maxn", "neg", "ws", "bucket", "seed", "lrUpdateRate",
                "wordNgrams"):
        args[key] = int(args[key])
    for key in ("lr", "t"):
        args[key] = float(args[key])
    built = _ft._build_args(args, set(args))
    model = _ft._FastText(args=built)
    with zeroed_allocations():
        _ft.fasttext.train(model.f, built)  # the pybind module, as train_unsupervised calls it
    model.set_args(model.f.getArgs())
    return model
