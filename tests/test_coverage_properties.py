"""Property tests of what a finished evaluation covers (the account's ``coverage`` inputs: languages, steps,
tasks; :mod:`harness.inputs`): whatever a command asks for beyond what a cell's runs logged, the cell is not
finished; whatever it asks for within it, the cell is."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.record import (
    Done,
    RunRecord,
    cell_identity,
    coverage_tags,
    covered_languages,
    done_tag,
    missing_languages,
    tag,
)
from harness.inputs import COVERAGE, COVERAGE_FIELDS, of

LANGS = [f"q{a}{b}_Latn" for a in "abc" for b in "abcd"]
TASKS = ["sr-t", "sr-b", "ner", "mlm"]
STEPS = [0, 2, 5, 10]


def _run(tags: dict[str, str], metrics: dict[str, float] | None = None, status: str = "FINISHED"):
    return SimpleNamespace(data=SimpleNamespace(tags=tags, metrics=metrics or {}),
                           info=SimpleNamespace(status=status, run_id="r"))


def _task_run(task: str, covered: dict[int, set[str]]):
    tags = {tag("task"): task}
    for step, langs in covered.items():
        tags[done_tag(Done.evaluated(step))] = "1"
        tags.update({tag(k): v for k, v in coverage_tags(step, langs).items()})
    return _run(tags)


class _Tracker:
    """What RunRecord.finished_cell_run asks of the store: the cell run, then its task runs."""

    def __init__(self, cell, tasks):
        self.cell, self.tasks = cell, tasks

    def find_runs(self, experiment_id, tags):
        return [self.cell] if tags == cell_identity("k") else list(self.tasks)


def _finished(logged: dict[str, dict[int, set[str]]], asked: dict[str, list[str]], steps: list[int]) -> bool:
    cell = _run({done_tag(Done.INIT): "1"})
    record = RunRecord(_Tracker(cell, [_task_run(t, cov) for t, cov in logged.items()]))
    return record.finished_cell_run("e", "k", [Done.INIT], asked, steps) is not None


langs_st = st.sets(st.sampled_from(LANGS), min_size=1)
steps_st = st.sets(st.sampled_from(STEPS), min_size=1)
tasks_st = st.sets(st.sampled_from(TASKS), min_size=1)


def test_the_account_names_these_coverage_fields():
    assert {e.where for e in of(COVERAGE)} == set(COVERAGE_FIELDS) == {"languages", "steps", "tasks"}


@settings(max_examples=60, deadline=None)
@given(covered=langs_st, asked=langs_st)
def test_languages_beyond_those_logged_leave_the_cell_unfinished(covered, asked):
    logged = {"sr-t": {0: covered}}
    assert _finished(logged, {"sr-t": sorted(asked)}, [0]) == (asked <= covered)
    assert missing_languages(_task_run("sr-t", {0: covered}), "sr-t", 0, sorted(asked)) == \
        sorted(asked - covered)


@settings(max_examples=60, deadline=None)
@given(logged_steps=steps_st, asked_steps=steps_st, langs=langs_st)
def test_steps_beyond_those_logged_leave_the_cell_unfinished(logged_steps, asked_steps, langs):
    logged = {"mlm": dict.fromkeys(logged_steps, langs)}
    assert _finished(logged, {"mlm": sorted(langs)}, sorted(asked_steps)) == (asked_steps <= logged_steps)


@settings(max_examples=60, deadline=None)
@given(logged_tasks=tasks_st, asked_tasks=tasks_st)
def test_tasks_beyond_those_logged_leave_the_cell_unfinished(logged_tasks, asked_tasks):
    logged = {t: {0: {"qaa_Latn"}} for t in logged_tasks}
    asked = {t: ["qaa_Latn"] for t in asked_tasks}
    assert _finished(logged, asked, [0]) == (asked_tasks <= logged_tasks)


@settings(max_examples=40, deadline=None)
@given(langs=st.sets(st.from_regex(r"[a-z]{3}_[A-Z][a-z]{3}", fullmatch=True), max_size=1200))
def test_the_covered_languages_read_back_are_those_written(langs):
    run = _task_run("sr-t", {3: langs})
    assert covered_languages(run, "sr-t", 3) == langs
    assert covered_languages(run, "sr-t", 4) is None  # another step: not evaluated there
    assert all(len(v) <= 5000 for v in run.data.tags.values())  # MLflow's cap on a tag's value
