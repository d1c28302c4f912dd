"""The run record (:mod:`harness.core.record`) is the one place that spells the MLflow schema: tags, done markers
and artifact paths; what it writes, it reads back."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

# what only the record may spell: our tag prefix, done markers, the cell/task artifacts' paths and file names
SPELLINGS = [
    (re.compile(r"""["']harness\.(kind|cell|task|parent|seeds|group|pid|host|error|done|world|profile|method|"""
                r"""source|dim|seed|final_step|task_final_step|method_defaults|rendered_at)\b"""), "a tag key"),
    (re.compile(r"\{TAG\}"), "a tag key built from TAG"),
    (re.compile(r"""["']done\."""), "a done marker"),
    (re.compile(r"""f?["'](tables|items)/"""), "an artifact path"),
    (re.compile(r"""["'](init_report|cpt_layout)\.json["']"""), "an artifact name"),
    (re.compile(r"""["']kind["']\s*:\s*["'](cell|task|aggregate|leaderboard|result)["']"""), "an identity"),
]
SCOPE = ["harness", "leaderboard"]
# a world's own languages.json is a file of the world, not of the record; the record module itself
EXEMPT = {"harness/core/record.py"}


def _offences() -> list[str]:
    found = []
    for top in SCOPE:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in EXEMPT:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                for pattern, what in SPELLINGS:
                    if pattern.search(code):
                        found.append(f"{rel}:{n}: {what}: {line.strip()}")
    return found


def test_only_the_record_spells_the_schema():
    assert _offences() == []


def test_the_check_catches_a_spelling(tmp_path, monkeypatch):
    bad = tmp_path / "harness"
    bad.mkdir()
    (bad / "x.py").write_text('x = {"kind": "cell"}\ny = f"tables/{t}.json"\nz = run.tags["harness.seeds"]\n')
    monkeypatch.setattr("tests.test_record.REPO", tmp_path)
    assert len(_offences()) == 3


def test_what_the_record_writes_it_reads(tracking_uri):
    from mlflow.tracking import MlflowClient

    from harness.core.record import Done, RunRecord
    from harness.core.record_read import read_cell_run, read_task_run
    from harness.core.tracking import Tracker
    from tasks.base import ItemStats, TaskResult

    tracker = Tracker(tracking_uri)
    record = RunRecord(tracker)
    exp = tracker.experiment("t-record")
    parent = record.open_cell(exp, "k1", "random-full-s1", {"method": "random", "source": "src", "dim": "full",
                                                            "seed": 1, "profile": "cpu", "world": "w"})
    record.log_init(parent, {"counts": {"copied": 3, "method": 0, "random": 2}, "seconds": 0.5},
                    {"qaa_Latn": {"script": "Latn"}}, wall_seconds=0.7, cached=False)
    trun = record.open_task(exp, "k1", "sr-t", parent, {"method": "random", "task.headline": "acc@10",
                                                         "task.higher_is_better": "true",
                                                         "task.metrics": "acc@10,acc@1"})
    res = TaskResult(scores={"acc@10": {"qaa_Latn": 0.5, "qab_Latn": 0.25}}, extras={"hyperparameters": {"k": 1}},
                     items={"acc@10": {"qaa_Latn": ItemStats([1.0, 0.0], [1.0, 1.0])}},
                     label_source={"qaa_Latn": "gold", "qab_Latn": "gold"})
    record.log_evaluation(trun, parent, "sr-t", 0, res, 1.5)
    assert record.done(trun, Done.evaluated(0)) and record.done(parent, Done.INIT)
    assert record.logged_average(parent, "sr-t", "acc@10", 0) == 0.375
    client = MlflowClient(tracking_uri)
    cell = read_cell_run(client, client.get_run(parent))
    assert (cell.method, cell.seed, cell.metrics["init/copied"]) == ("random", "1", 3.0)
    assert cell.languages == {"qaa_Latn": {"script": "Latn"}} and cell.init_report["seconds"] == 0.5
    task = read_task_run(client, client.get_run(trun))
    assert task.parent_id == parent and task.scores == {0: {"acc@10": {"qaa_Latn": 0.5, "qab_Latn": 0.25}}}
    assert task.item_steps == {0} and task.protocol == {"k": "1"} and task.facts.headline == "acc@10"
    tracker.finish(parent)
    sr_t = {"sr-t": ["qaa_Latn", "qab_Latn"]}
    assert record.finished_cell(exp, "k1", [Done.INIT], sr_t, [0]) == parent
    assert record.finished_cell(exp, "k1", [Done.INIT, Done.CPT_LOG], sr_t, [0]) is None
    assert record.finished_cell(exp, "k1", [Done.INIT], {**sr_t, "ner": ["qaa_Latn"]}, [0]) is None
    # an evaluation on fewer languages than asked for is not finished (a run with --langs, then one without)
    assert record.finished_cell(exp, "k1", [Done.INIT], {"sr-t": ["qaa_Latn", "qab_Latn", "qac_Latn"]}, [0]) is None
    assert record.delete_cell(exp, "k1", {"method": "random"}, 1) == 2


def test_record_is_kernel():
    text = Path(REPO / "harness/core/record.py").read_text()
    assert not re.search(r"^\s*(from|import) (harness\.(?!core)|leaderboard|methods|tasks)", text, re.M)


def test_artifacts_read_in_place_are_what_the_client_downloads(tmp_path):
    """A local artifact store is read in place (no download round trips): the same paths and contents."""
    from mlflow.tracking import MlflowClient

    from harness.core.record import list_artifact_paths, read_json_artifact

    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    exp = client.create_experiment("e", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp)
    rid, uri = run.info.run_id, run.info.artifact_uri
    assert uri.startswith("file:")
    client.log_dict(rid, {"a": [1, 2]}, "tables/x.json")
    client.log_dict(rid, {"b": 3}, "top.json")
    for folder in ("tables", ""):
        assert list_artifact_paths(client, rid, folder, uri) == list_artifact_paths(client, rid, folder)
    assert list_artifact_paths(client, rid, "absent", uri) == list_artifact_paths(client, rid, "absent") == []
    for path in ("tables/x.json", "top.json", "absent.json"):
        assert read_json_artifact(client, rid, path, uri) == read_json_artifact(client, rid, path)
    assert read_json_artifact(client, rid, "tables/x.json", uri) == {"a": [1, 2]}
