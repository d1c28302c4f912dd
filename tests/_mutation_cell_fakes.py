"""The made-up spec, tracker and run record that the tests of :mod:`harness.cell` run on (test_mutation_cell.py,
test_mutation_cell_run.py): what each answers and what it was asked, so that a test sees every question a cell
puts to the record and the tracker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from harness import cell as C
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


@pytest.fixture(name="fake_record")
def _fake_record(monkeypatch):
    monkeypatch.setattr(C, "RunRecord", _Record)
