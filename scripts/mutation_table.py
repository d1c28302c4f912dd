"""The table of a mutation run (scripts/mutation.sh): per module, its mutants, those killed, those that survived
(or that no selected test reached), those of the survivors listed as equivalent in scripts/mutation-equivalent/
(one file a module, ``<module>.txt``), and those left unexplained. Exits 1 when a survivor is unexplained or a module has no results.

    python scripts/mutation_table.py WORK EQUIVALENT_FOLDER NAME... -- MODULE_LINE...
"""

from __future__ import annotations

import fnmatch
import json
import sys
from pathlib import Path

KILLED = {1, 3, 24, -24, 152, 255, 36, 37}  # failed, pytest internal error, timeouts, caught by the type check


def equivalents(folder: Path) -> dict[str, str]:
    """Mutant name -> why it is equivalent, from every ``*.txt`` of ``folder``; a line without a reason is refused."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.txt")):
        out.update(_listed(path))
    return out


def _listed(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, why = line.partition(" # ")
        if not sep or not why.strip() or " " in name.strip():
            sys.exit(f"mutation_table: {path}:{n}: want 'MUTANT_NAME # why it is equivalent', got {line!r}")
        out[name.strip()] = why.strip()
    return out


def results(work: Path, name: str, file: str, globs: str) -> dict[str, int | None] | None:
    meta = work / name / "mutants" / f"{file}.meta"
    if not meta.is_file():
        return None
    codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
    if globs != "*":
        codes = {k: v for k, v in codes.items() if any(fnmatch.fnmatch(k, g) for g in globs.split())}
    return codes


def main(argv: list[str]) -> int:
    work, equivalent_file = Path(argv[0]), Path(argv[1])
    split = argv.index("--")
    names, lines = argv[2:split], argv[split + 1:]
    modules = {line.split("|")[0]: line.split("|") for line in lines}
    listed = equivalents(equivalent_file)
    bad = False
    print(f"{'module':<16} {'mutants':>7} {'killed':>7} {'survived':>8} {'equivalent':>10} {'unexplained':>11}")
    for name in names:
        _, file, globs, _tests = modules[name]
        codes = results(work, name, file, globs)
        if codes is None:
            print(f"{name:<16} {'no results (mutmut did not finish)':>46}")
            bad = True
            continue
        unchecked = sorted(k for k, v in codes.items() if v is None)
        codes = {k: v for k, v in codes.items() if v is not None}
        survived = sorted(k for k, v in codes.items() if v not in KILLED)
        equivalent = [k for k in survived if k in listed]
        unexplained = [k for k in survived if k not in listed]
        stale = sorted(k for k in listed if k in codes and codes[k] in KILLED)
        print(f"{name:<16} {len(codes):>7} {len(codes) - len(survived):>7} {len(survived):>8} "
              f"{len(equivalent):>10} {len(unexplained):>11}")
        (work / name / "unexplained.txt").write_text("".join(f"{k}\n" for k in unexplained), encoding="utf-8")
        for k in unexplained:
            print(f"    unexplained: {k} ({'no test reaches it' if codes[k] == 33 else 'survived'})")
        for k in stale:
            print(f"    listed as equivalent but killed (drop the line): {k}")
        if unchecked:
            print(f"    {len(unchecked)} more mutants not checked (the run did not finish)")
        bad = bad or bool(unexplained) or bool(unchecked)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
