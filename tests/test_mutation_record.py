"""What an evaluation covers (:mod:`harness.core.record`: the coverage tags, the languages a task run covers, the
ones it lacks, the finished cell a command may skip, one value a step), in process on fetched runs made up here and
in tests/_mutation_record_fakes.py. The whole record on a store kept in memory: test_mutation_record_store.py.
Written to kill the mutants of scripts/mutation.sh that the tests on a real store let live."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.core import record as R
from tests._mutation_record_fakes import _run


def test_coverage_tags_sorted_unique_and_split():
    assert R.langs_tag(3) == "langs.step_3"
    assert R.coverage_tags(3, ["b", "a", "b"]) == {"langs.step_3": "a,b"}
    assert R.coverage_tags(0, set()) == {"langs.step_0": ""}
    long = [f"l{i:05d}" for i in range(1500)]  # 6 characters each: 8999 characters joined
    tags = R.coverage_tags(2, long)
    text = ",".join(long)
    assert list(tags) == ["langs.step_2", "langs.step_2.1", "langs.step_2.2"]
    assert [len(v) for v in tags.values()] == [R._CHUNK, R._CHUNK, len(text) - 2 * R._CHUNK]
    assert "".join(tags.values()) == text
    assert R.coverage_tags(1, ["x" * R._CHUNK]) == {"langs.step_1": "x" * R._CHUNK}


def _with_coverage(step: int, languages: list[str], **more) -> SimpleNamespace:
    return _run({R.tag(k): v for k, v in R.coverage_tags(step, languages).items()}, evaluated=(step,), **more)


def test_covered_languages_read_back_from_the_tags():
    long = [f"l{i:05d}" for i in range(1500)]
    assert R.covered_languages(_with_coverage(2, long), "t", 2) == set(long)
    assert R.covered_languages(_with_coverage(2, ["a", "b"]), "t", 2) == {"a", "b"}
    assert R.covered_languages(_with_coverage(2, []), "t", 2) == set()
    run = _with_coverage(2, ["a"])
    run.data.tags[R.tag("langs.step_2.2")] = "z"  # a chunk after a gap is no part of it
    assert R.covered_languages(run, "t", 2) == {"a"}


def test_covered_languages_none_unless_evaluated_at_that_step():
    run = _with_coverage(2, ["a"])
    assert R.covered_languages(run, "t", 1) is None
    run.data.tags[R.done_tag(R.Done.evaluated(2))] = "0"
    assert R.covered_languages(run, "t", 2) is None
    assert R.covered_languages(_run(evaluated=(2,)), "t", 2) == set()


def test_covered_languages_of_a_run_before_coverage_are_its_metrics_languages():
    metrics = {"t/acc/a": 1.0, "t/acc/b": 1.0, "t/acc/avg": 1.0, "t/acc": 1.0, "u/acc/c": 1.0, "tt/acc/d": 1.0,
               "t/acc/e/x": 1.0, "x/t/acc/f": 1.0}
    assert R.covered_languages(_run(metrics=metrics, evaluated=(0,)), "t", 0) == {"a", "b"}


def test_missing_languages_in_the_order_asked():
    run = _with_coverage(0, ["a", "c"])
    assert R.missing_languages(run, "t", 0, ["d", "a", "b", "c"]) == ["d", "b"]
    assert R.missing_languages(run, "t", 0, ["a"]) == []
    assert R.missing_languages(run, "t", 1, ("b", "a")) == ["b", "a"]
    assert R.missing_languages(None, "t", 0, ("b", "a")) == ["b", "a"]


class _Tracker:
    """find_runs as the tracker answers it: the runs carrying every tag of the filter, in the order they were
    started (the first is the one ``get_or_create_run`` finds again and writes to)."""

    def __init__(self, runs: list[SimpleNamespace]):
        self.runs = runs
        self.reader = SimpleNamespace(get_run=lambda run_id: next(r for r in runs if r.info.run_id == run_id))

    def find_runs(self, experiment_id: str, tags: dict[str, str]) -> list[SimpleNamespace]:
        assert experiment_id == "e"
        return [r for r in self.runs if all(r.data.tags.get(R.tag(k)) == v for k, v in tags.items())]


def _cell(key: str = "k", status: str = "FINISHED", markers: tuple[str, ...] = (R.Done.INIT,), run_id: str = "c"):
    run = _run({R.tag(k): v for k, v in R.cell_identity(key).items()}, run_id=run_id, status=status)
    for m in markers:
        run.data.tags[R.done_tag(m)] = "1"
    return run


def _task(key: str, task: str, languages: dict[int, list[str]], run_id: str) -> SimpleNamespace:
    run = _run({R.tag(k): v for k, v in R.task_identity(key, task).items()}, run_id=run_id)
    for step, langs in languages.items():
        run.data.tags.update({R.tag(k): v for k, v in R.coverage_tags(step, langs).items()})
        run.data.tags[R.done_tag(R.Done.evaluated(step))] = "1"
    return run


def test_finished_cell_run_needs_status_markers_and_every_language_at_every_step():
    cell = _cell()
    record = R.RunRecord(_Tracker([cell, _task("k", "t", {0: ["a", "b"], 5: ["a"]}, "t1"),
                                   _task("k", "u", {0: ["x"]}, "u1")]))
    find = record.finished_cell_run
    assert find("e", "k", [R.Done.INIT], {"t": ["a"], "u": ["x"]}, [0]) is cell
    assert record.finished_cell("e", "k", [R.Done.INIT], {"t": ["a"]}, [0, 5]) == "c"
    assert find("e", "k", [], {}, []) is cell
    assert find("e", "k", [R.Done.INIT], {"t": ["b"]}, [0, 5]) is None
    assert find("e", "k", [R.Done.INIT], {"t": ["a"], "u": ["y"]}, [0]) is None
    assert find("e", "k", [R.Done.INIT], {"v": ["a"]}, [0]) is None
    assert find("e", "k", [R.Done.INIT, R.Done.CPT_LOG], {"t": ["a"]}, [0]) is None
    assert find("e", "other", [], {}, []) is None
    assert record.finished_cell("e", "other", [], {}, []) is None
    running = R.RunRecord(_Tracker([_cell(status="RUNNING"), _task("k", "t", {0: ["a"]}, "t1")]))
    assert running.finished_cell_run("e", "k", [], {"t": ["a"]}, [0]) is None
    assert record.missing("t1", "t", 0, ["c", "a", "d"]) == ["c", "d"]


def test_finished_cell_run_reads_the_first_found_task_run_of_each_task():
    """Where one task has two runs, the coverage of the first found counts: the one the record writes to."""
    cell = _cell()
    first, second = _task("k", "t", {0: ["a", "b"]}, "first"), _task("k", "t", {0: ["a"]}, "second")
    record = R.RunRecord(_Tracker([cell, first, second]))
    assert record.finished_cell_run("e", "k", [R.Done.INIT], {"t": ["a", "b"]}, [0]) is cell
    record = R.RunRecord(_Tracker([cell, second, first]))
    assert record.finished_cell_run("e", "k", [R.Done.INIT], {"t": ["a", "b"]}, [0]) is None


def test_finished_cell_run_is_the_newest_cell_run():
    newest, older = _cell(status="RUNNING", run_id="c2"), _cell(run_id="c1")
    record = R.RunRecord(_Tracker([newest, older]))
    assert record.finished_cell_run("e", "k", [], {}, []) is None
    unmarked = _cell(markers=(), run_id="c3")
    record = R.RunRecord(_Tracker([unmarked, older]))
    assert record.finished_cell_run("e", "k", [R.Done.INIT], {}, []) is None


def _m(step, value, timestamp):
    return SimpleNamespace(step=step, value=value, timestamp=timestamp)


def test_one_per_step_keeps_the_last_logged_value_of_each_step():
    history = [_m(2, 0.5, 30), _m(1, 0.25, 10), _m(2, 0.75, 20), _m(1, "0.125", 40), _m("3", 1, 5)]
    out = R.one_per_step(history)
    assert out == [(1, 0.125), (2, 0.5), (3, 1.0)]
    assert all(type(s) is int and type(v) is float for s, v in out)
    assert R.one_per_step([]) == []


@pytest.mark.parametrize("n", [1, 2])
def test_one_per_step_of_one_step(n):
    assert R.one_per_step([_m(0, float(i), i) for i in range(n)]) == [(0, float(n - 1))]


def test_a_run_before_coverage_is_read_by_its_task_s_metrics_where_it_is_missing_and_finished():
    old = _run({R.tag(k): v for k, v in R.task_identity("k", "t").items()}, {"t/acc/a": 1.0, "u/acc/b": 1.0},
               run_id="t0", evaluated=(0,))
    assert R.missing_languages(old, "t", 0, ["a", "b"]) == ["b"]
    record = R.RunRecord(_Tracker([_cell(), old]))
    assert record.finished_cell_run("e", "k", [], {"t": ["a"]}, [0]) is not None
    assert record.finished_cell_run("e", "k", [], {"t": ["b"]}, [0]) is None
