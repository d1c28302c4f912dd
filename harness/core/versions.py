"""What a run computed with: library versions and the harness's git commit.

A leaderboard number is reproducible only with the versions that produced it, so every MLflow run carries these
(as ``harness.version.*`` tags, and the cell runs as ``version.*`` params too), and the leaderboard says so when
the rows of one table come from different major versions of torch or transformers.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import platform
import subprocess
from pathlib import Path

from harness import __version__

# module name -> the distributions that may provide it (first installed one wins)
LIBRARIES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "transformers": ("transformers",),
    "tokenizers": ("tokenizers",),
    "datasets": ("datasets",),
    "fasttext": ("fasttext-numpy2-wheel", "fasttext", "fasttext-wheel"),
    "mlflow": ("mlflow", "mlflow-skinny"),
}

# libraries whose major version changes numbers: the leaderboard notes a table that mixes them
MAJOR_CHECKED = ("torch", "transformers")


def _dist_version(names: tuple[str, ...]) -> str:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return "absent"


@functools.cache
def library_versions() -> dict[str, str]:
    """``{"python": ..., "harness": ..., "torch": ..., ...}``; a library that is not installed reads ``absent``."""
    out = {"python": platform.python_version(), "harness": __version__}
    out.update({mod: _dist_version(dists) for mod, dists in LIBRARIES.items()})
    return out


@functools.cache
def git_commit() -> str | None:
    """The commit of the checkout the harness runs from (with ``+dirty`` when it has uncommitted changes), or None
    when the harness is not run from its own checkout (an installed package inside some other repository does not
    count)."""
    pkg_root = Path(__file__).resolve().parents[2]  # harness/core/versions.py -> the checkout

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", *args], cwd=pkg_root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != pkg_root:
        return None
    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "harness", "methods", "tasks", "leaderboard")
    return commit + ("+dirty" if dirty else "")


def run_tags() -> dict[str, str]:
    """The tags every MLflow run gets (without the ``harness.`` prefix the tracker adds)."""
    tags = {f"version.{k}": v for k, v in library_versions().items()}
    tags["git_commit"] = git_commit() or "not a checkout"
    return tags


def major(version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2"``; anything unparsable is kept whole."""
    head = version.split(".", 1)[0]
    return head if head.isdigit() else version


def mixed_majors(version_sets: list[dict[str, str]]) -> dict[str, list[str]]:
    """For each checked library, the distinct major versions across ``version_sets`` when there is more than one."""
    out: dict[str, list[str]] = {}
    for lib in MAJOR_CHECKED:
        majors = sorted({major(v[lib]) for v in version_sets if v.get(lib)})
        if len(majors) > 1:
            out[lib] = majors
    return out
