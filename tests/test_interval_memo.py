"""The board's memo of intervals (leaderboard.stats.IntervalMemo) is keyed by the code that computes them: a change
to the bootstrap (or to the Wilcoxon test's call) computes them again instead of serving the old ones; a comment does
not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from leaderboard import stats


def _samples():
    rng = np.random.default_rng(3)
    return [stats.SeedSample(0.5, [(1.0, stats.ItemSample(rng.integers(0, 2, 40).astype(float), np.ones(40)))])
            for _ in range(3)]


def _memo_answers(memo_path: Path):
    with stats.remembered_intervals(memo_path):
        ci = stats.bootstrap_ci(_samples(), resamples=200, key="t")
        test = stats.paired_test("a", "b", {"x": 1.0, "y": 2.0, "z": 0.5}, {"x": 0.0, "y": 1.5, "z": 0.7}, True)
    return ci, (test.statistic, test.p_value)


def _as_source(monkeypatch, tmp_path: Path, edit) -> None:
    """The module's code as if its source were edited (``edit`` on its text), for the memo's key."""
    src = Path(stats.__file__).read_text(encoding="utf-8")
    changed = edit(src)
    assert changed != src
    copy = tmp_path / f"stats_{abs(hash(changed))}.py"
    copy.write_text(changed, encoding="utf-8")
    monkeypatch.setattr(stats, "__file__", str(copy))
    monkeypatch.setattr(stats, "_CODE_VERSION", [])


def test_the_memo_serves_only_what_the_same_code_computed(tmp_path, monkeypatch):
    memo = tmp_path / "intervals.json"
    ci, test = _memo_answers(memo)
    # a planted answer under every key: served while the code is the same
    planted = {k: [-1.0, -1.0] for k in json.loads(memo.read_text())}
    memo.write_text(json.dumps(planted))
    assert _memo_answers(memo) == ((-1.0, -1.0), (-1.0, -1.0))
    # a comment added to the bootstrap: the same code, the same keys
    _as_source(monkeypatch, tmp_path, lambda s: s.replace("    k = len(samples)\n    rng =",
                                                          "    k = len(samples)  # seeds\n    rng =", 1))
    assert _memo_answers(memo) == ((-1.0, -1.0), (-1.0, -1.0))
    # the bootstrap changed (another quantile): computed again, not the planted answer
    _as_source(monkeypatch, tmp_path, lambda s: s.replace("alpha = (1.0 - level) / 2", "alpha = (1.0 - level) / 3"))
    got, got_test = _memo_answers(memo)
    assert got != (-1.0, -1.0) and got_test == test
    memo.write_text(json.dumps(planted))
    # the Wilcoxon call changed: computed again
    _as_source(monkeypatch, tmp_path, lambda s: s.replace('zero_method="wilcox", alternative="two-sided"',
                                                          'zero_method="wilcox", alternative="greater"'))
    assert _memo_answers(memo)[1] != (-1.0, -1.0)


def test_the_code_version_reads_no_scipy_stats():
    import subprocess
    import sys

    code = ("import sys\nfrom leaderboard import stats\nv = stats.code_version()\n"
            "assert len(v) == 16 and 'scipy.stats' not in sys.modules, sys.modules.keys()\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
