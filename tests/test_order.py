"""The order a run's cells are handed out in (every method's first seed before any second seed, the cheap ones
first), when a run still computing prints a partial board (at most every 10 minutes, naming the methods to come,
on an injectable clock), and the status file a second terminal's ``harness leaderboard`` reads."""

from __future__ import annotations

import os

import pytest

from harness.plan import Cell, family_leaders, init_cost, run_order
from harness.runner import PartialBoards

MAIN_JOB = ("random", "ofa", "hyperofa", "focus", "wechsel", "wechsel+overlap", "tiktotok", "fvt", "mean-cov",
            "random-map")


def _cells(methods=MAIN_JOB, seeds=(1, 2, 3)):
    return [Cell("mono", m, None, s) for m in methods for s in seeds]


def test_every_first_seed_comes_before_any_second_seed_and_the_cheap_ones_first():
    cells = _cells()
    order = run_order(cells, init_cost("cpu"))
    assert sorted(order, key=repr) == sorted(cells, key=repr)
    first = order[:len(MAIN_JOB)]
    assert {c.seed for c in first} == {1} and {c.method for c in first} == set(MAIN_JOB)
    assert all(c.seed > 1 for c in order[len(MAIN_JOB):])
    assert all(order.index(c) < order.index(d) for c in order for d in order
               if c.method == d.method and c.seed < d.seed)  # seed 2 before seed 3, too
    names = [c.method for c in first]
    # the four that train fastText models and word sets go after every cheap one, the costliest last; ties keep
    # the given order
    expensive = ["hyperofa", "tiktotok", "wechsel", "focus"]
    assert [m for m in names if m in expensive] == expensive
    assert max(names.index(m) for m in ("random", "ofa", "fvt", "mean-cov", "random-map")) < names.index("hyperofa")
    assert names[:5] == ["random", "ofa", "fvt", "mean-cov", "random-map"]
    # wechsel+overlap reads wechsel's fastText models: after wechsel, so that it never waits on that lock
    assert names[-1] == "wechsel+overlap"


def test_a_product_family_is_led_by_the_method_it_is_named_after():
    cells = [Cell("mono", "wechsel+overlap", None, 1), Cell("mono", "wechsel", None, 2), Cell("mono", "wechsel", None, 1)]
    assert family_leaders(cells) == {Cell("mono", "wechsel", None, 1)}
    # on the paper profile: the methods' GPU-hour estimates order the first seeds the same way (cheap first)
    order = run_order(_cells(("hyperofa", "random"), (1, 2)), init_cost("paper"))
    assert [(c.method, c.seed) for c in order] == [("random", 1), ("hyperofa", 1), ("hyperofa", 2), ("random", 2)]


def test_partial_boards_come_at_most_every_ten_minutes_naming_the_methods_to_come():
    now = [0.0]
    boards = PartialBoards(["random", "ofa", "focus", "wechsel"], interval=600, clock=lambda: now[0])
    now[0] = 120
    assert boards.due({"random"}, computing=True) is None  # too early: two minutes into the cells
    now[0] = 599
    assert boards.due({"random", "ofa"}, computing=True) is None
    now[0] = 610
    assert boards.due({"random", "ofa"}, computing=True) == ["focus", "wechsel"]
    now[0] = 900
    assert boards.due({"random", "ofa", "focus"}, computing=True) is None  # five minutes after the last one
    now[0] = 1300
    assert boards.due({"random", "ofa"}, computing=True) is None  # nothing new since the last board
    assert boards.due({"random", "ofa", "focus"}, computing=False) is None  # the run's own board comes next
    assert boards.due({"random", "ofa", "focus"}, computing=True) == ["wechsel"]
    assert boards.minutes() == pytest.approx(1300 / 60)


def test_the_first_board_that_holds_every_method_does_not_wait_when_none_came_before():
    now = [0.0]
    boards = PartialBoards(["random", "ofa"], interval=600, clock=lambda: now[0])
    now[0] = 30
    assert boards.due({"random"}, computing=True) is None
    assert boards.due({"random", "ofa"}, computing=True) == []


def test_the_runner_hands_out_the_order_and_prints_partial_boards_by_its_clock(synthetic_world, tmp_path,
                                                                              monkeypatch):
    """The runner of a real run spec on the synthetic world: its order, and the boards its ``advance`` asks for
    as cells end on a clock that the test moves (no cell is computed)."""
    from harness.config import make_config
    from harness.core.run_status import running
    from harness.runner import Runner
    from harness.spec import resolve

    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    cfg = make_config(overrides={"world": "synthetic", "methods": ["random", "ofa", "focus", "wechsel"],
                                 "tasks": ["sr-t"], "seeds": [1, 2]})
    spec = resolve(cfg, synthetic_world)

    class Tracker:
        uri = "sqlite:///nowhere.db"

    runner = Runner(spec, synthetic_world, tracker=Tracker())
    order = runner.order()
    # the cheap first seeds, then wechsel (266 s of initialization measured on the bible world) before focus
    # (522 s), then the second seeds
    assert [(c.method, c.seed) for c in order] == [("random", 1), ("ofa", 1), ("wechsel", 1), ("focus", 1),
                                                   ("random", 2), ("ofa", 2), ("focus", 2), ("wechsel", 2)]
    now = [0.0]
    runner.partial_clock = lambda: now[0]  # the injectable clock
    shown = []
    runner.on_partial = lambda done, total, to_come, minutes: shown.append((done, total, to_come, round(minutes)))

    class Bar:
        def advance(self, bar):
            pass

    from harness.core.run_status import StatusFile

    runner._status = StatusFile(order, lambda c: spec.experiment(c.source), Tracker.uri)
    runner.start_partials(order)  # at 0 s
    for i, cell in enumerate(order):
        now[0] = 400.0 * (i + 1)  # a cell every 400 s
        runner.advance(Bar(), None, cell)
        if i == 2:  # a second terminal sees the run, its cells done and the methods still to come
            st = running(Tracker.uri)
            assert len(st) == 1 and st[0].pid == os.getpid() and st[0].done == [c.label for c in order[:3]]
            assert st[0].to_come() == ["focus"] and len(st[0].left()) == 5
    runner._status.close()
    assert running(Tracker.uri) == []
    # 400 s: too early; 800 s: the first two methods, two to come; 1200 s: a third, but 400 s after the last
    # board; 1600 s: every method, 800 s after the last board; then nothing new
    assert shown == [(2, 8, ["wechsel", "focus"], 13), (4, 8, [], 27)]


def test_a_status_file_of_a_dead_process_is_passed_over_and_removed_by_the_next_run(tmp_path):
    import json

    from harness.core.run_status import StatusFile, running

    folder = tmp_path / "runs"
    folder.mkdir()
    dead = folder / "999999999.json"
    dead.write_text(json.dumps({"pid": 999999999, "started": 0.0, "tracking_uri": "u", "cells": [], "done": [],
                                "failed": []}))
    assert running("u", folder=folder) == []
    live = StatusFile([Cell("src", "random", None, 1)], lambda c: "synthetic/src", "u", folder=folder)
    assert not dead.exists() and [s.pid for s in running("u", folder=folder)] == [os.getpid()]
    assert running("u", experiment="other", folder=folder) == [] and running("v", folder=folder) == []
    live.close()
    assert not any(folder.iterdir())


def test_a_second_terminal_marks_the_board_partial_naming_the_cells_running_and_to_come(tmp_path):
    """``harness leaderboard`` during a run: the live run's status file and the cell runs the store holds as
    RUNNING give the line over the experiment's board."""
    import time

    from mlflow.tracking import MlflowClient

    from harness.core.run_status import StatusFile, partial_note

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.get_experiment(client.create_experiment("synthetic/src"))
    other = client.get_experiment(client.create_experiment("other"))
    cells = run_order(_cells(("random", "ofa", "focus"), (1, 2)), init_cost("cpu"))
    status = StatusFile(cells, lambda c: "synthetic/src", uri, folder=tmp_path / "runs")
    import harness.core.run_status as rs

    real_dir = rs.status_dir
    rs.status_dir = lambda: tmp_path / "runs"
    try:
        status.ended(cells[0])  # random s1
        run = client.create_run(exp.experiment_id, tags={"harness.kind": "cell", "harness.method": "ofa",
                                                         "harness.dim": "full", "harness.seed": "1"},
                                start_time=int(time.time() * 1000))
        assert run.info.status == "RUNNING"
        note = partial_note(client, uri, exp)
        assert note.startswith("partial board (run of process ") and "1 of 6 cells done" in note, note
        assert "still to come: ofa, focus" in note and "running: ofa-full-s1" in note and "4 cell(s) pending" in note
        assert partial_note(client, uri, other) is None  # a board of an experiment the run does not touch
        status.close()
        assert partial_note(client, uri, exp) is None  # the run has ended: the board is whole
    finally:
        rs.status_dir = real_dir
