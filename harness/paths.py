"""Where the harness keeps its products: ``HARNESS_HOME`` or the user cache dir (``~/.cache/harness``)."""

from __future__ import annotations

import os
from pathlib import Path


def harness_home() -> Path:
    env = os.environ.get("HARNESS_HOME")
    if env:
        home = Path(env).expanduser()
    else:
        from platformdirs import user_cache_dir

        home = Path(user_cache_dir("harness", appauthor=False))
    home.mkdir(parents=True, exist_ok=True)
    return home.resolve()


def default_tracking_uri() -> str:
    return f"sqlite:///{harness_home() / 'mlflow.db'}"


def default_artifact_root() -> Path:
    return harness_home() / "mlartifacts"
