"""Planning asks the registry once for what it needs of each method and task (:func:`harness.plan.run_facts`), and
every stage after it, the order the cells are handed out in included, reads those facts."""

from collections import Counter

from harness.config import make_config
from harness.core.registry import METHODS, TASKS
from harness.plan import init_cost, make_plan, run_order, world_for_planning


def test_planning_asks_the_registry_once_for_each_method_and_task(monkeypatch):
    asked: Counter = Counter()
    for registry in (METHODS, TASKS):
        def counted(name, *args, _real=registry.facts, _kind=registry.kind, **kwargs):
            asked[(_kind, name)] += 1
            return _real(name, *args, **kwargs)

        monkeypatch.setattr(registry, "facts", counted)
    cfg = make_config(overrides={"world": "synthetic", "methods": ["all"], "tasks": ["all"], "dims": [32, "full"]})
    plan = make_plan(cfg, world_for_planning("synthetic"))
    assert plan.cells and plan.tasks
    assert {name for kind, name in asked if kind == "method"} == set(METHODS.names())
    assert {name for kind, name in asked if kind == "task"} == set(TASKS.names())
    assert set(asked.values()) == {1}, {k: n for k, n in asked.items() if n > 1}
    monkeypatch.undo()
    # the order its cells are handed out in comes with the plan: the one the registry's own answers give
    assert plan.order == run_order(plan.cells, init_cost(cfg.profile))
    assert sorted(plan.order, key=plan.cells.index) == plan.cells
