"""Reading a run's artifacts: JSON files and folder listings, read in place when the artifact store is a local folder
(``file://``, the default store in the harness home), through the MLflow client's downloads otherwise. What the
artifacts are called is the run record's business (:mod:`harness.core.record`)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _local_artifacts(artifact_uri: str | None) -> Path | None:
    """The folder of a run's artifacts when its store is a local folder (``file://``, or a plain absolute path, as
    MLflow records an experiment made without an artifact location), else None."""
    if artifact_uri and "://" not in artifact_uri and Path(artifact_uri).is_absolute():
        return Path(artifact_uri)
    if not artifact_uri or not artifact_uri.startswith("file:"):
        return None
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    return Path(url2pathname(urlparse(artifact_uri).path))  # (what MLflow's local_file_uri_to_path gives on POSIX)


def list_artifact_paths(client: Any, run_id: str, folder: str, artifact_uri: str | None = None) -> list[str]:
    """The paths of the artifacts in a run's ``folder`` (relative to the run's root); read from the folder itself
    when the artifact store is local (``artifact_uri``), without the client's round trips."""
    local = _local_artifacts(artifact_uri)
    if local is not None:
        where = local / folder
        return sorted(f"{folder}/{p.name}" if folder else p.name for p in where.iterdir()) if where.is_dir() else []
    return [a.path for a in client.list_artifacts(run_id, folder or None)]


def read_json_artifact(client: Any, run_id: str, path: str, artifact_uri: str | None = None) -> Any:
    """A JSON artifact of a run, or None when it is absent or unreadable; read in place when the artifact store is
    a local folder (``artifact_uri``: the run's), else downloaded through the client."""
    local = _local_artifacts(artifact_uri)
    if local is not None:
        try:
            return json.loads((local / path).read_text())
        except (OSError, ValueError) as exc:  # absent, or written by an older runner
            log.debug("artifact %s of run %s not readable: %s", path, run_id, exc)
            return None
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    with tempfile.TemporaryDirectory() as td:
        try:
            local = client.download_artifacts(run_id, path, td)
            return json.loads(Path(local).read_text())
        except Exception as exc:  # absent, or written by an older runner
            log.debug("artifact %s of run %s not readable: %s", path, run_id, exc)
            return None


def copy_artifact(client: Any, run_id: str, path: str, dest: Path, artifact_uri: str | None = None) -> Path:
    """One artifact of a run copied to the file ``dest``, byte for byte: from the folder itself when the artifact
    store is local (``artifact_uri``: the run's), else downloaded through the client without its progress bar (one
    bar a file, on stderr, is noise when the harness reads its own artifacts). Raises OSError (or the client's
    error) when the run has no such artifact."""
    import shutil

    local = _local_artifacts(artifact_uri)
    if local is not None:
        shutil.copyfile(local / path, dest)
        return dest
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    with tempfile.TemporaryDirectory() as td:
        shutil.copyfile(client.download_artifacts(run_id, path, td), dest)
    return dest
