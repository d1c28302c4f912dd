"""Where the harness keeps its products: ``HARNESS_HOME`` or the user cache dir (``~/.cache/harness``).

The home is made only when something is written into it (:func:`harness_home`); a command first checks its inputs
against :func:`home_dir`, which names and checks the folder without making it, so that a refused command leaves
nothing on disk.
"""

from __future__ import annotations

import os
from pathlib import Path


def home_dir() -> Path:
    """The harness home, checked (:func:`check_home`) but not created."""
    env = os.environ.get("HARNESS_HOME")
    if env:
        home = Path(env).expanduser()
    else:
        from platformdirs import user_cache_dir

        home = Path(user_cache_dir("harness", appauthor=False))
    check_home(home)
    return home.resolve()


def harness_home() -> Path:
    """The harness home, created if it does not exist yet (call it only once a command's inputs are checked)."""
    home = home_dir()
    home.mkdir(parents=True, exist_ok=True)
    return home.resolve()


def check_home(home: Path) -> None:
    """A home that is a file, or that cannot be created or written, fails with one line (exit status 2)."""
    from harness.core.errors import HarnessError

    what = "HARNESS_HOME" if os.environ.get("HARNESS_HOME") else "the harness home"
    fix = "set HARNESS_HOME to a writable folder"
    if home.exists() and not home.is_dir():
        raise HarnessError(f"{what} {home} is a file, not a folder; {fix}")
    probe = home
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise HarnessError(f"{what} {home} cannot be created: {probe} is a file; {fix}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise HarnessError(f"{what} {home} is not writable ({probe}); {fix}")


def default_tracking_uri() -> str:
    return f"sqlite:///{harness_home() / 'mlflow.db'}"


def default_artifact_root() -> Path:
    return harness_home() / "mlartifacts"
