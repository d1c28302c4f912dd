"""A cell's lifecycle (:mod:`harness.cell`) before it runs, function by function, in process, on the spec, tracker
and run record made up in tests/_mutation_cell_fakes.py: which cells a command passes over (only a FINISHED run
with every evaluation it asks for logged), which start over under each ``--rerun`` policy (never a RUNNING one),
the tags and params a cell run carries, and the per-cell lock. A cell run itself: test_mutation_cell_run.py.
Written to kill the mutants of scripts/mutation.sh that the runs end to end let live."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from harness import cell as C
from harness.core import record as R
from tests._mutation_cell_fakes import (
    A,
    B,
    D,
    _fake_record,  # the fixture fake_record  # noqa: F401
    _Record,
    _run,
    _spec,
    _Store,
    _Tracker,
)


# -- the resume policy -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", ["FINISHED", "FAILED", "KILLED", "RUNNING", "SCHEDULED"])
@pytest.mark.parametrize("policy", ["never", "failed", "stale", "all"])
def test_starts_over_by_status_and_policy(status, policy):
    want = status != "RUNNING" and (policy == "all" or (policy == "failed" and status in ("FAILED", "KILLED")))
    assert C.starts_over(status, policy) is want


def _start_over(store, policy, code=None):
    return C.start_over(_Record(SimpleNamespace(store=store)), "e", "k", policy, {"method": "m"}, 3, code)


def test_start_over_never_deletes_nothing_and_asks_nothing():
    store = _Store(statuses={("e", "k"): ["FAILED"]}, code={("e", "k"): {"a": "1"}})
    store.deleted = 5
    assert _start_over(store, "never", {"a": "2"}) == 0
    assert store.calls == []


@pytest.mark.parametrize("policy,statuses,deleted", [
    ("failed", ["FAILED"], True), ("failed", ["FINISHED", "KILLED"], True), ("failed", ["FINISHED"], False),
    ("failed", ["RUNNING"], False), ("failed", [], False), ("all", ["FINISHED"], True), ("all", ["RUNNING"], False),
    ("all", [], False)])
def test_start_over_by_status_deletes_the_cell_and_its_aggregates(policy, statuses, deleted):
    store = _Store(statuses={("e", "k"): statuses})
    store.deleted = 4
    assert _start_over(store, policy) == (4 if deleted else 0)
    assert (("delete", "e", "k", {"method": "m"}, 3) in store.calls) is deleted


@pytest.mark.parametrize("recorded,statuses,deleted", [
    (None, ["FINISHED"], False), ({"a": "1"}, ["FINISHED"], False), ({"a": "0"}, ["FINISHED"], True),
    ({"a": "0"}, ["FAILED", "RUNNING"], False), ({"a": "0"}, ["FAILED"], True)])
def test_start_over_stale_only_where_the_recorded_code_differs_and_nothing_runs(recorded, statuses, deleted):
    store = _Store(statuses={("e", "k"): statuses}, code={("e", "k"): recorded})
    store.deleted = 2
    assert _start_over(store, "stale", {"a": "1"}) == (2 if deleted else 0)
    assert (("delete", "e", "k", {"method": "m"}, 3) in store.calls) is deleted
    assert ("cell_code", "e", "k") in store.calls


# -- tags and params ---------------------------------------------------------------------------------------------
class _Ref:
    def __init__(self, text):
        self.text = text


def test_method_tags_defaults_as_sorted_strings_and_the_reference(monkeypatch):
    from methods import base

    method = SimpleNamespace(defaults={"b": 2, "a": 0.5}, reference=None)
    assert C.method_tags(method) == {"method_defaults": '{"a": "0.5", "b": "2"}', "method_reference": "not declared"}
    assert C.method_tags(SimpleNamespace()) == {"method_defaults": "{}", "method_reference": "not declared"}
    assert C.method_tags(SimpleNamespace(defaults=None))["method_defaults"] == "{}"
    monkeypatch.setattr(base, "reference_line", lambda m: m.reference.text if hasattr(m, "reference") else "-")
    assert C.method_tags(SimpleNamespace(reference=_Ref("x" * 5000)))["method_reference"] == "x" * 5000
    assert C.method_tags(SimpleNamespace(reference=_Ref("x" * 5001))) == {"method_defaults": "{}"}
    big = {"k": "v" * (5000 - len('{"k": ""}'))}
    assert len(C.method_tags(SimpleNamespace(defaults=big))["method_defaults"]) == 5000
    big["k"] += "v"
    assert "method_defaults" not in C.method_tags(SimpleNamespace(defaults=big))


def test_code_tag_is_the_sorted_json_up_to_mlflow_s_limit():
    assert C.code_tag({"b.py": "2", "a.py": "1"}) == {"method_code": '{"a.py": "1", "b.py": "2"}'}
    fits = {"f": "d" * (5000 - len('{"f": ""}'))}
    assert len(C.code_tag(fits)["method_code"]) == 5000
    fits["f"] += "d"
    assert C.code_tag(fits) == {}


def test_cell_variant():
    spec = _spec()
    assert C.cell_variant(spec, A) == {"method": "m", "source": "src", "dim": "full", "profile": "cpu", "world": "w"}
    assert C.cell_variant(spec, B)["dim"] == "8"


@pytest.fixture
def one_method(monkeypatch):
    from harness.core import registry

    method = SimpleNamespace(defaults={"p": 1, "q": 3})
    monkeypatch.setattr(registry, "METHODS", SimpleNamespace(get=lambda name: {"m": method}[name]))
    return method


def test_cell_tags(monkeypatch, one_method):
    from harness.core import devices

    monkeypatch.delenv(devices.PINNED_ENV, raising=False)
    spec = _spec()
    want = {"method": "m", "source": "src", "dim": "8", "profile": "cpu", "world": "w", "seed": 2,
            "method_defaults": '{"p": "1", "q": "3"}', "method_reference": "not declared",
            "method_code": '{"a.py": "x"}', "init_product": "I", "cpt_product": "P"}
    assert C.cell_tags(spec, B, {"a.py": "x"}, "I", "P") == want
    del want["cpt_product"]
    assert C.cell_tags(spec, B, {"a.py": "x"}, "I", None) == want
    monkeypatch.setenv(devices.PINNED_ENV, "2,3")
    assert C.cell_tags(spec, B, {"a.py": "x"}, "I", None) == {**want, "gpus": "2,3"}


def test_cell_params(monkeypatch, one_method):
    import torch

    from harness.core import versions

    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(versions, "git_commit", lambda: "abc")
    monkeypatch.setattr(versions, "library_versions", lambda: {"torch": "9"})
    spec = _spec(steps=10)
    want = {"method": "m", "source": "src", "dim": "full", "seed": 1, "profile": "cpu", "world": "w",
            "world_hash": "wh", "device": "cpu", "eval_precision": "fp32", "cpu_kernels": "avx2", "torch_threads": 3,
            "git_revision": "abc", "method.p": 2, "method.q": 3, "cpt.steps": 10, "cpt.checkpoints": [],
            "cpt.eval_tasks": True, "cpt.loss_threshold": 0.25, "fitted.f": "1", "version.torch": "9"}
    assert C.cell_params(spec, A) == want
    assert C.cell_params(spec, B)["dim"] == "8"
    monkeypatch.setattr(versions, "git_commit", lambda: None)
    assert C.cell_params(spec, A)["git_revision"] == "not a checkout"
    monkeypatch.setattr(one_method, "defaults", None, raising=False)
    del one_method.defaults
    assert {k: v for k, v in C.cell_params(spec, A).items() if k.startswith("method.")} == {"method.p": 2}


# -- what a finished cell must have logged -------------------------------------------------------------------------
def test_finished_cell_run_asks_every_mark_task_language_and_step():
    store = _Store(finished={("e", "key0"): _run("done")})
    record = _Record(SimpleNamespace(store=store))
    assert C.finished_run(record, "e", "key0", _spec(steps=10, checkpoints=(4,))) == "done"
    assert store.calls == [("finished", "e", "key0", ["init", "cpt_log", "heldout_0", "heldout_4", "heldout_10"],
                            {"t1": ["a", "b"], "t2": ["c"]}, [0, 4, 10])]
    store.calls.clear()
    assert C.finished_run(record, "e", "key1", _spec()) is None
    assert store.calls == [("finished", "e", "key1", ["init"], {"t1": ["a", "b"], "t2": ["c"]}, [0])]
    store.calls.clear()
    C.finished_run(record, "e", "key1", _spec(steps=1))
    assert store.calls[0][3:] == (["init", "cpt_log", "heldout_0", "heldout_1"], {"t1": ["a", "b"], "t2": ["c"]},
                                  [0, 1])
    store.calls.clear()
    assert C.finished_cell_run(record, "e", "key0", _spec(steps=10, eval_tasks=False)).info.run_id == "done"
    assert store.calls[0][3:] == (["init", "cpt_log", "heldout_0", "heldout_10"], {"t1": ["a", "b"], "t2": ["c"]},
                                  [0])


class _MlflowTracker:
    """find_runs as the tracker answers it (the runs carrying every tag of the filter, newest first)."""

    def __init__(self, runs):
        self.runs = runs

    def find_runs(self, experiment_id, tags):
        return [r for r in reversed(self.runs) if all(r.data.tags.get(R.tag(k)) == str(v) for k, v in tags.items())]


def _logged(run_id, tags, status="FINISHED"):
    return SimpleNamespace(info=SimpleNamespace(run_id=run_id, status=status),
                           data=SimpleNamespace(tags=tags, metrics={}))


def _cell_run(key, markers, status="FINISHED"):
    tags = {R.tag(k): v for k, v in R.cell_identity(key).items()}
    return _logged("cell", {**tags, **{R.done_tag(m): "1" for m in markers}}, status)


def _task_run(key, task, steps):
    tags = {R.tag(k): v for k, v in R.task_identity(key, task).items()}
    for step, langs in steps.items():
        tags[R.done_tag(R.Done.evaluated(step))] = "1"
        tags.update({R.tag(k): v for k, v in R.coverage_tags(step, langs).items()})
    return _logged(f"{task}-run", tags)


def test_a_cell_is_finished_only_with_every_evaluation_logged():
    """On the run record itself: every mark, every task, each of its languages at each step."""
    spec = _spec(steps=10)
    marks = ["init", "cpt_log", "heldout_0", "heldout_10"]
    full = {0: ["a", "b", "c"], 10: ["a", "b", "c"]}

    def finished(cell_run, tasks):
        runs = [cell_run, *[_task_run("k", t, s) for t, s in tasks.items()]]
        return C.finished_run(R.RunRecord(_MlflowTracker(runs)), "e", "k", spec)

    assert finished(_cell_run("k", marks), {"t1": full, "t2": full}) == "cell"
    assert finished(_cell_run("k", marks, "KILLED"), {"t1": full, "t2": full}) is None
    assert finished(_cell_run("k", marks[:-1]), {"t1": full, "t2": full}) is None
    assert finished(_cell_run("k", marks), {"t1": full}) is None
    assert finished(_cell_run("k", marks), {"t1": full, "t2": {0: ["c"]}}) is None
    assert finished(_cell_run("k", marks), {"t1": {0: ["a"], 10: ["a", "b"]}, "t2": full}) is None


# -- the cells with work to do -----------------------------------------------------------------------------------
def _pending(spec, store, experiments=None, finished=None):
    exps = {"w/src": SimpleNamespace(experiment_id="E", lifecycle_stage="active"),
            "w/other": SimpleNamespace(experiment_id="O", lifecycle_stage="active")}
    tracker = _Tracker(store, exps if experiments is None else experiments)
    return C.pending(spec, tracker, finished), tracker


def test_pending_leaves_out_finished_cells_and_hands_their_runs_on(fake_record):
    done = _run("d", {"m.py": "old"})
    store = _Store(finished={("E", "key0"): done})
    finished: dict = {}
    out, tracker = _pending(_spec(cells=(A, B, D)), store, finished=finished)
    assert out == [B, D]
    assert finished == {A: done}
    assert tracker.calls == [("by_name", "w/src"), ("by_name", "w/other")]  # each experiment looked up once
    assert [c[1:3] for c in store.calls] == [("E", "key0"), ("E", "key1"), ("O", "key2")]
    assert store.calls[0][3:] == (["init"], {"t1": ["a", "b"], "t2": ["c"]}, [0])
    assert _pending(_spec(cells=(A, B, D)), store)[0] == [B, D]  # (no dict to fill)


def test_pending_a_missing_or_deleted_experiment_has_every_cell_pending(fake_record):
    store = _Store(finished={("E", "key0"): _run("d")})
    assert _pending(_spec(cells=(A,)), store, {})[0] == [A]
    gone = {"w/src": SimpleNamespace(experiment_id="E", lifecycle_stage="deleted")}
    assert _pending(_spec(cells=(A,)), store, gone)[0] == [A]
    assert store.calls == []


@pytest.mark.parametrize("policy,statuses,code,want", [
    ("never", ["FAILED", "FINISHED"], {"m.py": "old"}, []), ("all", ["FINISHED"], {"m.py": "now"}, [A]),
    ("failed", ["FINISHED"], {"m.py": "old"}, []), ("failed", ["KILLED", "FINISHED"], {"m.py": "now"}, [A]),
    ("stale", ["FAILED", "FINISHED"], {"m.py": "now"}, []), ("stale", ["FINISHED"], {"m.py": "old"}, [A]),
    ("stale", ["FINISHED"], None, [])])
def test_pending_by_policy(fake_record, policy, statuses, code, want):
    done = _run("d", code)
    store = _Store(finished={("E", "key0"): done}, statuses={("E", "key0"): statuses})
    finished: dict = {}
    assert _pending(_spec(rerun=policy, cells=(A,)), store, finished=finished)[0] == want
    assert finished == ({} if want else {A: done})


def test_stale_report():
    assert C.stale_report([{"cell": "a"}, {"cell": "b", "stale": []}]) is None
    line = C.stale_report([{"cell": "x", "stale": ["b.py", "a.py"]}, {"cell": "y"},
                           {"cell": "z", "stale": ["a.py", "c.py"]}])
    assert line == ("[yellow]2 finished cell(s) ran an older version of their method's code (a.py, b.py, c.py "
                    "changed since): their numbers are the old code's; `--rerun stale` runs them again[/yellow]: "
                    "x; z")


# -- the per-cell lock -------------------------------------------------------------------------------------------
def test_cell_lock_keeps_a_second_process_waiting_until_the_first_lets_go(tmp_path):
    path = tmp_path / "locks" / "cells" / "x.lock"
    to_child, from_parent = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:  # the first process: holds the lock until the second says it waits
        code = 1
        try:
            with C.cell_lock(path, lambda: os._exit(3)):
                os.write(to_parent, b"h")
                os.read(to_child, 1)
            code = 0
        finally:
            os._exit(code)
    assert os.read(from_child, 1) == b"h"
    events = []

    def waiting():
        events.append("waiting")
        os.write(from_parent, b"r")

    with C.cell_lock(path, waiting):
        events.append("held")
    assert os.waitpid(pid, 0)[1] == 0
    assert events == ["waiting", "held"]
    with C.cell_lock(path, lambda: events.append("again")):  # let go at the end of the block
        pass
    assert events == ["waiting", "held"]
    for fd in (to_child, from_parent, from_child, to_parent):
        os.close(fd)
