"""A cell run (:class:`harness.cell.CellRun`), in process, on the spec, tracker and run record made up in
tests/_mutation_cell_fakes.py: the cell's lock held while it computes (a second process waits), a finished cell
passed over with its products released, the stages in their order with their marks and hooks, a failed cell's
run marked so, and the products a finished cell leaves or removes. Written to kill the mutants of
scripts/mutation.sh that the runs end to end let live."""

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
from tests._mutation_cell_fakes import (
    A,
    B,
    _fake_record,  # the fixture fake_record  # noqa: F401
    _run,
    _spec,
    _Store,
    _Tracker,
)


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
