"""Runs and a tracker's store made up for the tests of :mod:`harness.core.record` (test_mutation_record.py,
test_mutation_record_store.py): a fetched run with the tags and metrics given, and an MLflow store kept in
memory, local or remote."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from harness.core import record as R


def _run(tags: dict[str, str] | None = None, metrics: dict[str, float] | None = None, *, run_id: str = "r",
         status: str = "FINISHED", evaluated: tuple[int, ...] = ()) -> SimpleNamespace:
    tags = dict(tags or {})
    for step in evaluated:
        tags[R.done_tag(R.Done.evaluated(step))] = "1"
    return SimpleNamespace(data=SimpleNamespace(tags=tags, metrics=dict(metrics or {})),
                           info=SimpleNamespace(run_id=run_id, status=status))



class _Store:
    """What :class:`harness.core.tracking.Tracker` does on an MLflow store, in memory (runs, tags, params, metric
    histories) and in a folder (each run's JSON artifacts): runs found in the order they were started, a param never
    overwritten, a metric's history given back in no order of its logging (newest first here), the artifacts read
    in place where the store is local (its client refuses to list or download them then) and through the client
    where it is elsewhere (``remote``). It is the tracker, its reader and its client."""

    def __init__(self, folder, remote: bool = False):
        self.folder, self.remote = folder, remote
        self.runs: dict[str, SimpleNamespace] = {}
        self.history: dict[tuple[str, str], list[SimpleNamespace]] = {}
        self.files: list[tuple[str, str, str | None]] = []  # (run, file name, artifact folder) of log_artifact
        self.deleted: list[str] = []
        self.clock = 0
        self.reader = self.client = self

    def find_runs(self, experiment_id, tags):
        return [r for r in self.runs.values() if r.info.experiment_id == experiment_id
                and r.info.run_id not in self.deleted and all(r.data.tags.get(R.tag(k)) == v for k, v in tags.items())]

    def get_or_create_run(self, experiment_id, tags, name, parent_run_id=None):
        found = self.find_runs(experiment_id, tags)
        if found:
            found[0].info.status = "RUNNING"
            return found[0].info.run_id, True
        run_id = f"r{len(self.runs)}"
        (self.folder / run_id).mkdir(parents=True)
        info = SimpleNamespace(run_id=run_id, experiment_id=experiment_id, status="RUNNING", run_name=name,
                               artifact_uri=f"mlflow-artifacts:/{run_id}" if self.remote else str(self.folder / run_id))
        run = SimpleNamespace(info=info, data=SimpleNamespace(tags={R.tag(k): str(v) for k, v in tags.items()},
                                                              params={}, metrics={}))
        if parent_run_id:
            run.data.tags[R.PARENT_TAG] = parent_run_id
        self.runs[run_id] = run
        return run_id, False

    def set_tags(self, run_id, tags):
        self.runs[run_id].data.tags.update({R.tag(k): str(v) for k, v in tags.items()})

    def is_done(self, run_id, what):
        return self.runs[run_id].data.tags.get(R.done_tag(what)) == "1"

    def mark_done(self, run_id, what):
        self.runs[run_id].data.tags[R.done_tag(what)] = "1"

    def finish(self, run_id):
        self.runs[run_id].info.status = "FINISHED"

    def log_params(self, run_id, params):
        have = self.runs[run_id].data.params
        have.update({k: str(v) for k, v in params.items() if k not in have})

    def log_metrics(self, run_id, metrics, step):
        self.log_points(run_id, [(k, int(step), float(v)) for k, v in metrics.items()])

    def log_series(self, run_id, key, points):
        self.log_points(run_id, [(key, int(s), float(v)) for s, v in points])

    def log_points(self, run_id, points):
        self.clock += 1
        for key, step, value in points:
            self.history.setdefault((run_id, key), []).append(SimpleNamespace(key=key, step=step, value=value,
                                                                             timestamp=self.clock))
            self.runs[run_id].data.metrics[key] = value

    def log_dict(self, run_id, obj, artifact_file):
        path = self.folder / run_id / artifact_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(obj, indent=1, ensure_ascii=False, default=str))

    def log_artifact(self, run_id, path, artifact_path=None):
        self.files.append((run_id, path.name, artifact_path))

    def get_run(self, run_id):
        return self.runs[run_id]

    def get_metric_history(self, run_id, key):
        if not isinstance(key, str):  # (MLflow's file store joins the key into a path)
            raise TypeError(f"a metric key, not {key!r}")
        return list(reversed(self.history.get((run_id, key), [])))

    def delete_run(self, run_id):
        self.deleted.append(run_id)

    def list_artifacts(self, run_id, path=None):
        assert self.remote, "a local store's artifacts are read in place"
        where = self.folder / run_id / (path or "")
        return [SimpleNamespace(path=f"{path}/{p.name}" if path else p.name) for p in sorted(where.iterdir())] \
            if where.is_dir() else []

    def download_artifacts(self, run_id, path, dst):
        assert self.remote, "a local store's artifacts are read in place"
        out = Path(dst) / Path(path).name
        out.write_bytes((self.folder / run_id / path).read_bytes())
        return str(out)

    # what a test reads back
    def points(self, run_id, key):
        """``[(step, value)]`` of a metric, in the order logged."""
        return [(m.step, m.value) for m in self.history.get((run_id, key), [])]

    def logged(self, run_id, step):
        """``{key: value}`` of every metric logged at ``step`` (the last of each)."""
        return {key: m.value for (rid, key), ms in self.history.items() if rid == run_id for m in ms
                if m.step == step}

    def artifact(self, run_id, path):
        f = self.folder / run_id / path
        return json.loads(f.read_text()) if f.is_file() else None

    def artifact_names(self, run_id):
        root = self.folder / run_id
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
