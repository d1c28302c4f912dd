"""What verifying a cached product costs a cell process, at two corpus sizes 8x apart: the first verification (every
file hashed against its marker's sha256, then each file's stats recorded beside it) against a later process's, which
compares the stats only (:func:`harness.core.cache.verify_product`), and ``harness cache verify`` (everything hashed
again on demand).

Each product is a CPT corpus as :mod:`harness.corpus` lays it out (``tokens.bin`` of random uint16 ids and its
``index.json``), built through the product cache (its build hashes every file: the marker). Each measurement runs in a
fresh process, as a cell's worker meets the product: the time of ``ProductCache.lookup`` (the lease and the
verification), and the bytes it hashed. "first" is a process that finds no stat record (a product from before the
record, or copied to another file system: new inodes); "later" the processes after it (median of ``--repeat``).

    python benchmarks/bench_verify.py [--mb 64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads

REPO = Path(__file__).resolve().parents[1]
INPUTS = {"bench": "verify"}  # the product's cache key inputs (one product per home)


def build(home: Path, size: int) -> Path:
    import numpy as np

    from harness.core.cache import ProductCache, release_lease

    def write(folder: Path) -> dict:
        ids = np.random.default_rng(0).integers(0, 2**16, size // 2, dtype=np.uint16)
        ids.tofile(folder / "tokens.bin")
        (folder / "index.json").write_text(json.dumps({"block_size": 512, "dtype": "uint16",
                                                        "n_blocks": int(ids.size // 512)}))
        return {}

    product = ProductCache(home).get_or_build("corpus", INPUTS, write)
    release_lease(product.path)
    return product.path


def child(home: str) -> dict:
    """One cell process's look-up of the product: its seconds and the bytes it hashed."""
    from harness.core import cache

    hashed = [0]
    real = cache.sha256_file

    def counting(path: Path, *a: object) -> str:
        hashed[0] += path.stat().st_size
        return real(path, *a)

    cache.sha256_file = counting
    t0 = time.perf_counter()
    found = cache.ProductCache(Path(home)).lookup("corpus", INPUTS)
    seconds = time.perf_counter() - t0
    assert found is not None, "the product was not found sound"
    return {"seconds": seconds, "hashed": hashed[0]}


def in_child(home: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(home)], capture_output=True, text=True,
                         check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def cache_verify(home: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness.cli", "cache", "verify"], capture_output=True, check=True,
                   cwd=REPO, env={**os.environ, "HARNESS_HOME": str(home), "PYTHONPATH": str(REPO)})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="the smaller corpus, in MB (the other is 8 times larger)")
    ap.add_argument("--repeat", type=int, default=5, help="later processes measured at each size (median)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
        return
    from harness.core.cache import VERIFIED

    rows = []
    for mb in (a.mb, 8 * a.mb):
        home = Path(tempfile.mkdtemp(prefix="bench-verify-"))
        try:
            t0 = time.perf_counter()
            path = build(home, mb << 20)
            built = time.perf_counter() - t0
            time.sleep(0.05)  # (past the build's clock tick: its files are not racily clean)
            (path / VERIFIED).unlink()  # a product without a stat record: the first process hashes it
            first = in_child(home)
            later = [in_child(home) for _ in range(a.repeat)]
            verify = cache_verify(home)
            rows.append((mb, built, first, later, verify))
        finally:
            shutil.rmtree(home, ignore_errors=True)
    print(f"{'corpus':>8} {'build (s)':>10} {'first process (s)':>18} {'MB hashed':>10} "
          f"{'later process (s)':>18} {'MB hashed':>10} {'cache verify (s)':>17}")
    for mb, built, first, later, verify in rows:
        med = statistics.median(x["seconds"] for x in later)
        print(f"{mb:>5} MB {built:>10.2f} {first['seconds']:>18.3f} {first['hashed'] / 2**20:>10.0f} "
              f"{med:>18.4f} {max(x['hashed'] for x in later) / 2**20:>10.0f} {verify:>17.2f}")
    print("first: no stat record (every file hashed, then recorded); later: stats compared only "
          f"(median of {a.repeat} processes); cache verify: every file hashed again, with the CLI's start-up")


if __name__ == "__main__":
    main()
