"""A cell's lifecycle (:mod:`harness.cell`), function by function, in process, on a spec, a tracker and a run record
made up here: which cells a command passes over (only a FINISHED run with every evaluation it asks for logged), which
start over under each ``--rerun`` policy (never a RUNNING one), the tags and params a cell run carries, the per-cell
lock, the stages in their order with their marks and hooks, a failed cell's run marked so, and the products a
finished cell leaves or removes. Written to kill the mutants of scripts/mutation.sh that the runs end to end let
live."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness import cell as C
from harness.core import record as R
from harness.core.hashing import hash_obj
from harness.cpt_spec import CptSpec
from harness.plan import Cell, Plan
from harness.spec import CellKeys

A = Cell("src", "m", None, 1)
B = Cell("src", "m", 8, 2)
D = Cell("other", "m", None, 1)


def _spec(*, rerun: str = "never", steps: int = 0, checkpoints: tuple[int, ...] = (), eval_tasks: bool = True,
          keep: bool = False, subset: bool = False, cells: tuple[Cell, ...] = (A, B), shared: tuple[str, ...] = (),
          device: str = "cpu") -> SimpleNamespace:
    keys = {c: CellKeys(identity={"i": i}, key=f"key{i}", init_key=f"init{i}", cpt_key=f"cpt{i}" if steps else None)
            for i, c in enumerate(cells)}
    cpt = CptSpec({"steps": steps, "checkpoints": list(checkpoints), "eval_tasks": eval_tasks, "loss_threshold": 0.25})
    return SimpleNamespace(
        cfg=SimpleNamespace(rerun=rerun, keep_products=keep), profile="cpu", world="w", world_hash="wh",
        device=device, eval_precision="fp32", cpu_kernels="avx2", cpu_bf16=True, cpt=cpt, fitted={"f": "1"},
        plan=Plan(cells=list(cells), tasks=["t1", "t2"], languages={"t1": ("a", "b"), "t2": ("c",), "t3": ("z",)},
                  subset=subset),
        method_params={"m": {"p": 2}}, method_code={"m": {"m.py": "now"}},
        experiment=lambda source: f"w/{source}", keys=lambda c: keys[c], shared=lambda k: k in shared,
        init_inputs=lambda c: {"inputs": keys[c].key})


def _run(run_id: str = "r1", code: dict[str, str] | None = None) -> SimpleNamespace:
    return SimpleNamespace(info=SimpleNamespace(run_id=run_id), code=code)


class _Store:
    """What a made-up record answers and what it was asked."""

    def __init__(self, finished: dict | None = None, statuses: dict | None = None, code: dict | None = None):
        self.finished, self.statuses, self.code = finished or {}, statuses or {}, code or {}
        self.calls: list[tuple] = []
        self.deleted = 0


class _Record:
    """:class:`harness.core.record.RunRecord` as the cell uses it, on a :class:`_Store` (the tracker's ``store``)."""

    def __init__(self, tracker: Any):
        self.s: _Store = tracker.store

    def finished_cell_run(self, exp, key, need, languages, steps):
        self.s.calls.append(("finished", exp, key, need, languages, steps))
        return self.s.finished.get((exp, key))

    def cell_status(self, exp, key):
        self.s.calls.append(("status", exp, key))
        return self.s.statuses.get((exp, key), [])

    def cell_code(self, exp, key):
        self.s.calls.append(("cell_code", exp, key))
        return self.s.code.get((exp, key))

    @staticmethod
    def recorded_code(run):
        return run.code

    def delete_cell(self, exp, key, variant, seed):
        self.s.calls.append(("delete", exp, key, variant, seed))
        self.s.finished.pop((exp, key), None)
        return self.s.deleted

    def open_cell(self, exp, key, name, tags):
        self.s.calls.append(("open", exp, key, name, tags))
        return "parent"

    def log_init(self, parent, report, languages, **kw):
        self.s.calls.append(("log_init", parent, report, languages, kw))

    def log_cpt(self, parent, steps, seconds, train_log, layouts):
        self.s.calls.append(("log_cpt", parent, steps, seconds, train_log, layouts))

    def heldout_curve(self, parent):
        return [(0, 2.0), (parent, 1.0)]

    def log_cell_metrics(self, parent, metrics, step):
        self.s.calls.append(("cell_metrics", parent, metrics, step))


class _Tracker:
    def __init__(self, store: _Store | None = None, experiments: dict | None = None, live: dict | None = None):
        self.store = store or _Store()
        self.calls: list[tuple] = []
        self.live = live or {}
        exps = experiments if experiments is not None else {}

        def by_name(name):
            self.calls.append(("by_name", name))
            return exps.get(name)

        self.reader = SimpleNamespace(get_experiment_by_name=by_name)

    def experiment(self, name):
        return f"id:{name}"

    def fail(self, run_id, why):
        self.calls.append(("fail", run_id, why))

    def log_params(self, run_id, params):
        self.calls.append(("params", run_id, params))

    def set_tags(self, run_id, tags):
        self.calls.append(("tags", run_id, tags))

    def finish(self, run_id):
        self.calls.append(("finish", run_id))

    def live_runs(self, tags):
        self.calls.append(("live", tags))
        return [_run(r) for r in self.live.get(tuple(tags.items())[0], [])]


@pytest.fixture
def fake_record(monkeypatch):
    monkeypatch.setattr(C, "RunRecord", _Record)


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


# -- a cell run --------------------------------------------------------------------------------------------------
@pytest.fixture
def cellrun(monkeypatch, fake_record):
    """A CellRun of ``spec`` and ``cell`` on a made-up tracker; ``said`` holds its lines."""
    from harness.core import devices

    monkeypatch.delenv(devices.PINNED_ENV, raising=False)

    def make(spec=None, cell=A, store=None, finished=None, live=None):
        said: list[str] = []
        run = C.CellRun(spec or _spec(), SimpleNamespace(name="world"), _Tracker(store, live=live), cell,
                        said.append, prog=None, finished=finished)
        run.said = said
        return run

    return make


def test_cellrun_names_its_lock_by_experiment_and_key(cellrun, monkeypatch):
    from harness.core import devices

    run = cellrun()
    assert run.lock_name == hash_obj({"experiment": "w/src", "cell": "key0"}) + ".lock"
    assert cellrun(cell=B).lock_name != run.lock_name
    assert (run.exp, run.parent, run.code, run.device, run.known_finished) == ("", "", {"m.py": "now"}, "cpu", None)
    monkeypatch.setenv(devices.PINNED_ENV, "1")
    assert cellrun(spec=_spec(device="cuda:1")).device == "cuda"


def test_reached_tells_every_hook(cellrun, monkeypatch):
    from harness.core import hooks

    seen = []
    monkeypatch.setattr(hooks, "STAGE_HOOKS", [lambda s, c: seen.append((1, s, c)),
                                               lambda s, c: seen.append((2, s, c))])
    cellrun().reached("init")
    assert seen == [(1, "init", A), (2, "init", A)]


def test_run_holds_the_cell_s_lock_in_the_home(cellrun, monkeypatch, tmp_path):
    from harness.core import paths

    monkeypatch.setattr(paths, "harness_home", lambda: tmp_path)
    held = []

    @contextlib.contextmanager
    def lock(path, waiting):
        held.append(path)
        waiting()
        yield

    monkeypatch.setattr(C, "cell_lock", lock)
    run = cellrun()
    monkeypatch.setattr(run, "_run", lambda: {"ran": True})
    assert run.run() == {"ran": True}
    assert held == [tmp_path / "locks" / "cells" / run.lock_name]
    assert run.said == ["  m | src | dim full | seed 1: another process computes this cell; waiting for it"]


def test_run_two_processes_compute_one_cell_one_after_the_other(cellrun, monkeypatch, tmp_path):
    """The real lock: while another process holds it, the cell waits, says so, then runs."""
    from harness.core import paths

    monkeypatch.setattr(paths, "harness_home", lambda: tmp_path)
    run = cellrun()
    to_child, from_parent = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            with C.cell_lock(tmp_path / "locks" / "cells" / run.lock_name, lambda: None):
                os.write(to_parent, b"h")
                os.read(to_child, 1)
        finally:
            os._exit(0)
    os.read(from_child, 1)
    order = []
    run.say = lambda line: (order.append("waiting"), os.write(from_parent, b"r"))
    monkeypatch.setattr(run, "_run", lambda: order.append("ran") or {})
    run.run()
    os.waitpid(pid, 0)
    assert order == ["waiting", "ran"]
    for fd in (to_child, from_parent, from_child, to_parent):
        os.close(fd)


def _no_release(run):
    released = []
    run.release_products = lambda run_id: released.append(run_id) or 0
    return released


def test_run_of_a_finished_cell_logs_nothing_and_releases_its_products(cellrun):
    store = _Store(finished={("id:w/src", "key0"): _run("done")}, code={("id:w/src", "key0"): {"m.py": "now"}})
    run = cellrun(store=store)
    released = _no_release(run)
    assert run._run() == {"cell": A.label, "run_id": "done", "experiment_id": "id:w/src", "skipped": True,
                          "stale": []}
    assert released == ["done"]
    assert run.said == ["  finished, every evaluation logged: m | src | dim full | seed 1"]
    assert [c[0] for c in store.calls] == ["finished", "cell_code"]
    assert store.calls[0][1:3] == ("id:w/src", "key0") and store.calls[1] == ("cell_code", "id:w/src", "key0")


def test_run_of_a_finished_cell_found_by_pending_says_its_stale_code(cellrun):
    store = _Store()
    run = cellrun(store=store, finished=_run("known", {"m.py": "old", "x.py": "1"}))
    released = _no_release(run)
    out = run._run()
    assert out == {"cell": A.label, "run_id": "known", "experiment_id": "id:w/src", "skipped": True,
                   "stale": ["m.py", "x.py"]}
    assert released == ["known"]
    assert store.calls == []  # neither looked for again nor its code asked
    assert run.said == ["  finished, every evaluation logged: m | src | dim full | seed 1 (with older code of its "
                        "method: m.py, x.py changed since)"]


@pytest.fixture
def no_transformers(monkeypatch):
    """transformers as the cell uses it: its progress bars turned off (counted), its tokenizer loaded by name."""
    calls = []
    logging = SimpleNamespace(disable_progress_bar=lambda: calls.append("no bars"))
    utils = types.ModuleType("transformers.utils")
    utils.logging = logging
    mod = types.ModuleType("transformers")
    mod.utils = utils
    mod.AutoTokenizer = SimpleNamespace(from_pretrained=lambda path: ("tokenizer", path))
    monkeypatch.setitem(sys.modules, "transformers", mod)
    monkeypatch.setitem(sys.modules, "transformers.utils", utils)
    return calls


def _clock(monkeypatch, *, wall=(100.0,), mono=(50.0,)):
    walls, monos = list(wall), list(mono)
    monkeypatch.setattr(C, "time", SimpleNamespace(time=lambda: walls.pop(0), monotonic=lambda: monos.pop(0)))


def test_run_computes_a_cell_with_work_to_do(cellrun, monkeypatch, no_transformers):
    from harness.core import hooks

    stages = []
    monkeypatch.setattr(hooks, "STAGE_HOOKS", [lambda s, c: stages.append((s, c))])
    tagged = []
    monkeypatch.setattr(C, "cell_tags", lambda *a: tagged.append(a) or {"t": 1})
    _clock(monkeypatch, mono=(7.5,))
    spec = _spec(rerun="failed", steps=5, cells=(B,))
    store = _Store(finished={("id:w/src", "key0"): _run("old")}, statuses={("id:w/src", "key0"): ["FAILED"]})
    store.deleted = 2
    run = cellrun(spec=spec, cell=B, store=store)
    released = _no_release(run)
    started = []
    monkeypatch.setattr(run, "steps", lambda t: started.append(t))
    assert run._run() == {"cell": B.label, "run_id": "parent", "experiment_id": "id:w/src"}
    assert run.said == ["  m | src | dim 8 | seed 2: its earlier runs deleted, it starts over (--rerun failed)",
                        "  init m | src | dim 8 | seed 2: start"]
    assert ("delete", "id:w/src", "key0", C.cell_variant(spec, B), 2) in store.calls
    assert store.calls[-1] == ("open", "id:w/src", "key0", "m-8-s2", {"t": 1})
    assert tagged == [(spec, B, {"m.py": "now"}, "init0", "cpt0")]
    assert (run.exp, run.parent, started, released, stages) == ("id:w/src", "parent", [7.5], ["parent"],
                                                                [("finished", B)])
    assert no_transformers == ["no bars"]


def test_run_names_a_full_cell_s_run_and_says_nothing_of_a_start_over(cellrun, monkeypatch, no_transformers):
    monkeypatch.setattr(C, "cell_tags", lambda *a: {})
    store = _Store(statuses={("id:w/src", "key0"): ["FINISHED"]})
    run = cellrun(spec=_spec(rerun="failed"), store=store)
    _no_release(run)
    monkeypatch.setattr(run, "steps", lambda t: None)
    run._run()
    assert store.calls[-1][:4] == ("open", "id:w/src", "key0", "m-full-s1")
    assert run.said == ["  init m | src | dim full | seed 1: start"]


def test_run_stale_starts_over_only_a_cell_that_ran_other_code(cellrun, monkeypatch, no_transformers):
    """--rerun stale compares the code the cell's run recorded with the code this cell runs."""
    monkeypatch.setattr(C, "cell_tags", lambda *a: {})
    for recorded, deleted in (({"m.py": "now"}, False), ({"m.py": "old"}, True)):
        store = _Store(statuses={("id:w/src", "key0"): ["FINISHED"]}, code={("id:w/src", "key0"): recorded})
        run = cellrun(spec=_spec(rerun="stale"), store=store)
        _no_release(run)
        monkeypatch.setattr(run, "steps", lambda t: None)
        run._run()
        assert any(c[0] == "delete" for c in store.calls) is deleted


@pytest.mark.parametrize("exc,why", [(ValueError("boom"), None), (KeyboardInterrupt(), "interrupted")])
def test_run_marks_a_cell_that_fails_failed_and_raises(cellrun, monkeypatch, no_transformers, exc, why):
    from harness.core import hooks

    stages = []
    monkeypatch.setattr(hooks, "STAGE_HOOKS", [lambda s, c: stages.append(s)])
    monkeypatch.setattr(C, "cell_tags", lambda *a: {})
    run = cellrun()
    released = _no_release(run)

    def steps(started):
        raise exc

    monkeypatch.setattr(run, "steps", steps)
    with pytest.raises(type(exc)):
        run._run()
    assert run.tracker.calls == [("fail", "parent", exc if why is None else why)]
    assert (stages, released) == ([], [])


# -- the stages ----------------------------------------------------------------------------------------------------
@pytest.fixture
def stage_fakes(monkeypatch):
    """The stages' collaborators, recording into one list in the order they are called."""
    from harness import evaluation
    from harness.core import hooks, kernels

    log: list[tuple] = []
    monkeypatch.setattr(kernels, "check_measured", lambda label, bf16: log.append(("measured", label, bf16)))
    monkeypatch.setattr(evaluation, "evaluate_step", lambda run, step, path, tok, tasks=None: log.append(
        ("eval", step, path, tok, tasks)) if isinstance(run, C.CellRun) else log.append(("eval of", run)))
    monkeypatch.setattr(evaluation, "convergence", lambda curve, threshold: {"curve": curve, "threshold": threshold})
    monkeypatch.setattr(C, "cell_params", lambda spec, cell: {"params of": cell.label, "world": spec.world})
    monkeypatch.setattr(hooks, "STAGE_HOOKS", [lambda s, c: log.append(("stage", s))])
    return log


def _staged(run, log, ckpts=None):
    run.parent = "P"
    run.tracker.calls = log
    run.record.s.calls = log
    run.initialize = lambda since: log.append(("initialize", since)) or (Path("/init"), "tok")
    run.continue_pretraining = lambda d, t: log.append(("cpt", d, t)) or dict(ckpts or {})


def test_steps_without_cpt(cellrun, stage_fakes):
    run = cellrun()
    _staged(run, stage_fakes)
    run.steps(3.0)
    assert stage_fakes == [
        ("measured", "avx2", True), ("params", "P", {"params of": A.label, "world": "w"}), ("stage", "start"),
        ("initialize", 3.0), ("stage", "init"), ("eval", 0, Path("/init"), "tok", None), ("stage", "step0"),
        ("tags", "P", {"final_step": 0, "task_final_step": 0}), ("finish", "P")]


def test_steps_with_one_cpt_step(cellrun, stage_fakes):
    run = cellrun(spec=_spec(steps=1))
    _staged(run, stage_fakes, {1: Path("/c1")})
    run.steps(1.0)
    assert stage_fakes[7:] == [
        ("cpt", Path("/init"), "tok"), ("stage", "cpt"), ("eval", 1, Path("/c1"), "tok", ["t1", "t2"]),
        ("cell_metrics", "P", {"curve": [(0, 2.0), ("P", 1.0)], "threshold": 0.25}, 1),
        ("tags", "P", {"final_step": 1, "task_final_step": 1}), ("finish", "P")]


@pytest.mark.parametrize("eval_tasks", [True, False])
def test_steps_with_cpt_evaluate_each_checkpoint_in_order(cellrun, stage_fakes, eval_tasks):
    run = cellrun(spec=_spec(steps=10, checkpoints=(4,), eval_tasks=eval_tasks))
    _staged(run, stage_fakes, {10: Path("/c10"), 4: Path("/c4")})
    run.steps(1.0)
    tasks = ["t1", "t2"] if eval_tasks else []
    assert stage_fakes[6:] == [
        ("stage", "step0"), ("cpt", Path("/init"), "tok"), ("stage", "cpt"), ("eval", 4, Path("/c4"), "tok", tasks),
        ("eval", 10, Path("/c10"), "tok", tasks),
        ("cell_metrics", "P", {"curve": [(0, 2.0), ("P", 1.0)], "threshold": 0.25}, 10),
        ("tags", "P", {"final_step": 10, "task_final_step": 10 if eval_tasks else 0}), ("finish", "P")]


@pytest.fixture
def init_fakes(monkeypatch, tmp_path, no_transformers):
    """The init product built in ``tmp_path/prod`` (``cached`` as asked) and the progress it shows, recorded."""
    from harness import initialize
    from harness.core import cache, progress

    log: dict[str, Any] = {"running": [], "bars": []}
    prod = tmp_path / "prod"
    prod.mkdir()
    (prod / R.INIT_REPORT).write_text(json.dumps({"counts": {"new": 3}}))

    class Cache:
        cached = False

        def get_or_build(self, kind, inputs, build):
            log["product"] = (kind, inputs, build(tmp_path / "build"))
            return SimpleNamespace(path=prod, cached=Cache.cached)

    @contextlib.contextmanager
    def still_running(description, every, *, console, since):
        log["running"].append((description, every, console, since))
        yield

    @contextlib.contextmanager
    def bars():
        log["bars"].append("open")
        yield
        log["bars"].append("closed")

    monkeypatch.setattr(cache, "ProductCache", Cache)
    monkeypatch.setattr(progress, "log_console", lambda: "console")
    monkeypatch.setattr(progress, "mode", lambda console: log.setdefault("mode", console) and log["lines"])
    monkeypatch.setattr(progress, "still_running", still_running)
    monkeypatch.setattr(progress, "callbacks", lambda prog: log.update(prog=prog) or bars())
    monkeypatch.setattr(progress, "STARTUP_HEARTBEAT_S", 42.0)
    monkeypatch.setattr(initialize, "initialize_model", lambda *a, **k: log.update(init=(a, k)) or "the report")
    log["cache"], log["prod"], log["lines"] = Cache, prod, "lines"
    return log


def _world():
    lang = SimpleNamespace(script="Latn", seen={"src": True}, resource_level="low", text_chars=9)
    return SimpleNamespace(languages={"xx": lang, "yy": SimpleNamespace(script="Cyrl", seen={}, resource_level="high",
                                                                        text_chars=1)})


def test_initialize_builds_the_init_product_and_logs_its_report(cellrun, monkeypatch, init_fakes, tmp_path):
    _clock(monkeypatch, wall=(10.0, 12.5, 13.0))
    store = _Store()
    run = cellrun(spec=_spec(device="cuda:0"), cell=B, store=store)
    run.world, run.parent = _world(), "P"
    assert run.initialize(since=4.0) == (init_fakes["prod"], ("tokenizer", init_fakes["prod"]))
    kind, inputs, built = init_fakes["product"]
    assert (kind, inputs, built) == ("init", {"inputs": "key1"}, {"report": "the report"})
    assert init_fakes["init"] == ((run.world, "src", "m"), {"dim": 8, "seed": 2, "params": {"p": 2},
                                                            "out_dir": tmp_path / "build", "device": "cuda:0",
                                                            "profile": "cpu", "progress": None})
    assert init_fakes["running"] == [("  init m | src | dim 8 | seed 2", 42.0, "console", 4.0)]
    assert init_fakes["mode"] == "console" and init_fakes["bars"] == []
    assert run.said == ["  init m | src | dim 8 | seed 2: done in 2.5s · {'new': 3}"]
    assert store.calls == [("log_init", "P", {"counts": {"new": 3}},
                            {"xx": {"script": "Latn", "seen": True, "resource_level": "low", "text_chars": 9},
                             "yy": {"script": "Cyrl", "seen": None, "resource_level": "high", "text_chars": 1}},
                            {"wall_seconds": 3.0, "cached": False, "artifacts": init_fakes["prod"] / "artifacts"})]


def test_initialize_cached_with_bars_on_a_terminal(cellrun, monkeypatch, init_fakes):
    _clock(monkeypatch, wall=(10.0, 11.0, 12.0))
    init_fakes["cache"].cached = True
    init_fakes["lines"] = "bars"
    store = _Store()
    run = cellrun(store=store)
    run.world, run.parent, run.prog = _world(), "P", "the progress"
    run.initialize()
    assert init_fakes["running"] == [("  init m | src | dim full | seed 1", None, "console", None)]
    assert init_fakes["bars"] == ["open", "closed"] and init_fakes["prog"] == "the progress"
    assert init_fakes["init"][1]["progress"] is not None and init_fakes["init"][1]["dim"] is None
    assert run.said == ["  init m | src | dim full | seed 1: done in 1.0s · cached, {'new': 3}"]
    assert store.calls[0][4]["cached"] is True


def test_continue_pretraining_trains_under_the_product_s_lock_and_logs_it(cellrun, monkeypatch, tmp_path):
    from harness import cpt, initialize
    from harness.core import cache, locks

    log: dict[str, Any] = {}
    monkeypatch.setattr(cache, "ProductCache", lambda: SimpleNamespace(root=tmp_path / "products"))

    @contextlib.contextmanager
    def exclusive(path, waiting):
        log["lock"] = (path, waiting)
        log["held"] = True
        yield
        log["held"] = False

    def train_cell(**kw):
        log["train"], log["held while training"] = kw, log["held"]
        return {10: "ck10"}

    monkeypatch.setattr(locks, "exclusive", exclusive)
    monkeypatch.setattr(cpt, "train_cell", train_cell)
    monkeypatch.setattr(cpt, "read_train_log", lambda d: [("log of", d)])
    monkeypatch.setattr(cpt, "read_layouts", lambda d: [("layouts of", d)])
    monkeypatch.setattr(initialize, "load_model", lambda p, device: ("model", p, device))
    _clock(monkeypatch, wall=(5.0, 9.5))
    store = _Store()
    run = cellrun(spec=_spec(steps=10), store=store)
    run.parent, run.prog = "P", "prog"
    assert run.continue_pretraining(Path("/init"), "tok") == {10: "ck10"}
    cpt_dir = tmp_path / "products" / "cpt" / "cpt0"
    assert log["lock"] == (cpt_dir, "  CPT m | src | dim full | seed 1: another process builds it; waiting")
    assert log["held while training"] is True
    kw = log["train"]
    load = kw.pop("load_fn")
    assert kw == {"model_dir": Path("/init"), "tokenizer": "tok", "world": run.world, "settings": dict(run.spec.cpt),
                  "seed": 1, "device": "cpu", "product_dir": cpt_dir, "prog": "prog", "say": run.say}
    assert type(kw["settings"]) is dict
    assert load("/x") == ("model", "/x", "cpu")
    assert store.calls == [("log_cpt", "P", 10, 4.5, [("log of", cpt_dir)], [("layouts of", cpt_dir)])]


# -- the products a finished cell leaves ---------------------------------------------------------------------------
def _item(kind, name):
    return SimpleNamespace(kind=kind, path=Path("/home/products") / kind / name, why="")


@pytest.fixture
def products(monkeypatch, tmp_path):
    """The cell's products as cache_admin finds them, and what remove was handed (``kept``: those it leaves)."""
    from harness import cache_admin
    from harness.core import paths

    log: dict[str, Any] = {"items": [_item("init", "init0"), _item("cpt", "cpt0")], "keep": set(), "freed": 2048}

    def remove(items, home, skipped):
        log["removed"] = (list(items), home)
        if log.get("error"):
            raise OSError("disk gone")
        for i in items:
            if i.path.name in log["keep"]:
                i.why = "in use"
                skipped.append(i)
        return log["freed"]

    monkeypatch.setattr(paths, "harness_home", lambda: tmp_path)
    monkeypatch.setattr(cache_admin, "cell_products",
                        lambda home, init, cpt: log.update(asked=(home, init, cpt)) or list(log["items"]))
    monkeypatch.setattr(cache_admin, "remove", remove)
    return log


def test_release_products_removes_the_finished_cell_s_products(cellrun, products, tmp_path):
    run = cellrun(spec=_spec(steps=10), live={("init_product", "init0"): ["mine"], ("cpt_product", "cpt0"): []})
    assert run.release_products("mine") == 2048
    assert products["asked"] == (tmp_path, "init0", "cpt0")
    assert products["removed"] == (products["items"], tmp_path)
    assert run.tracker.calls == [("live", {"init_product": "init0"}), ("live", {"cpt_product": "cpt0"})]
    assert run.said == ["  removed the finished cell's init and cpt product(s) (2.0 KB; `--keep-products` keeps them)"]


def test_release_products_keeps_shared_and_live_ones(cellrun, products, tmp_path):
    run = cellrun(spec=_spec(steps=10, shared=("init0",)), live={("cpt_product", "cpt0"): ["mine", "another"]})
    assert run.release_products("mine") == 2048
    assert products["removed"] == ([], tmp_path)
    assert run.said == []
    run = cellrun(spec=_spec(steps=10), live={("init_product", "init0"): ["another"]})
    run.release_products("mine")
    assert [i.path.name for i in products["removed"][0]] == ["cpt0"]


def test_release_products_says_what_remove_kept(cellrun, products):
    products["keep"] = {"init0"}
    products["freed"] = 10
    run = cellrun(spec=_spec(steps=10))
    assert run.release_products("mine") == 10
    assert run.said == ["  removed the finished cell's cpt product(s) (10 B; `--keep-products` keeps them)",
                        "  kept the finished cell's init product: in use"]
    products["keep"] = {"init0", "cpt0"}
    run = cellrun(spec=_spec(steps=10))
    run.release_products("mine")
    assert run.said == ["  kept the finished cell's init product: in use",
                        "  kept the finished cell's cpt product: in use"]


def test_release_products_a_failed_removal_only_says_so(cellrun, products):
    products["error"] = True
    run = cellrun(spec=_spec(steps=10))
    assert run.release_products("mine") == 0
    assert run.said == ["  [yellow]could not remove the finished cell's products: disk gone[/yellow]"]


@pytest.mark.parametrize("keep,subset", [(True, False), (False, True)])
def test_release_products_keeps_everything_when_asked_or_for_a_subset(cellrun, products, keep, subset):
    run = cellrun(spec=_spec(steps=10, keep=keep, subset=subset))
    assert run.release_products("mine") == 0
    assert "asked" not in products and run.said == []
