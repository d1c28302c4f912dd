"""The key of every cell of a job, as the checkout this script is run from computes it on a home's world: run it
from two checkouts (an earlier version's and this one) on the same home and compare the two files. Equal keys mean
that a home made by the earlier version resumes the job with every cell it finished skipped.

    cd OLD_CHECKOUT && HARNESS_HOME=HOME python /path/to/check_upgrade_keys.py old.json --methods all --tasks sr-t,ner
    cd NEW_CHECKOUT && HARNESS_HOME=HOME python benchmarks/check_upgrade_keys.py new.json --methods all --tasks sr-t,ner \
        --compare old.json

(``--without-sources smollm2,gemma3`` for the earlier checkout, where the world gained its decoders since.)

``--kernels-label avx2`` computes the keys as a machine whose cells carry that CPU-kernel label does (the version
before the label was measured assumed ``avx2`` on any AVX2 CPU; on a CPU whose kernels compute otherwise, the
cells of the two versions differ by that label alone, and the newer one computes them again under the measured
label). The script imports the checkout it runs from (its working folder first on ``sys.path``) and only reads
the home.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--world", default="bible")
    ap.add_argument("--source", default=None)
    ap.add_argument("--methods", default="all")
    ap.add_argument("--tasks", default="sr-t,ner")
    ap.add_argument("--seeds", default=None, help="comma-separated (default: the world's)")
    ap.add_argument("--compare", type=Path, default=None,
                    help="an earlier checkout's file: how many of its cells have the same key here (a later version's "
                         "job may hold more cells: methods added since)")
    ap.add_argument("--without-sources", default=None,
                    help="comma-separated: the world as it was before these sources were added to it (`harness world "
                         "build --add-sources`), for a checkout that was run on it then")
    ap.add_argument("--kernels-label", default=None, help="the CPU-kernel label the cells carry (default: this "
                                                          "machine's, as the checkout computes it)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path.cwd()))
    if args.kernels_label is not None:
        import harness.core.kernels as kernels

        for name in ("cpu_kernels", "measured_kernels", "planned_kernels"):
            if hasattr(kernels, name):
                setattr(kernels, name, lambda *_a, **_k: args.kernels_label)
    from harness.config import make_config
    from harness.spec import resolve
    from harness.worlds import get_world

    world = get_world(args.world, build=False)
    if args.without_sources:
        import dataclasses

        drop = set(args.without_sources.split(","))
        manifest = {**world.manifest, "sources": {s: v for s, v in world.manifest["sources"].items() if s not in drop}}
        world = dataclasses.replace(world, manifest=manifest)
    overrides = {"methods": args.methods.split(","), "tasks": args.tasks.split(","), "world": args.world}
    if args.source:
        overrides["source"] = args.source
    if args.seeds:
        overrides["seeds"] = [int(s) for s in args.seeds.split(",")]
    spec = resolve(make_config(overrides=overrides), world)
    keys = {cell.label: spec.keys(cell).key for cell in spec.plan.cells}
    args.out.write_text(json.dumps(keys, indent=1, sort_keys=True) + "\n")
    print(f"{len(keys)} cells, world {args.world} {world.hash}: keys in {args.out}")
    if args.compare is not None:
        earlier = json.loads(args.compare.read_text())
        same = [c for c, k in earlier.items() if keys.get(c) == k]
        moved = [c for c, k in earlier.items() if c in keys and keys[c] != k]
        gone = [c for c in earlier if c not in keys]
        print(f"of the {len(earlier)} cells of {args.compare}: {len(same)} with the same key, {len(moved)} moved"
              f"{' (' + ', '.join(moved[:3]) + ')' if moved else ''}, {len(gone)} not in this job; "
              f"{len(set(keys) - set(earlier))} cells new here")
        if moved or gone:
            sys.exit(1)


if __name__ == "__main__":
    main()
