"""The `glot500` world: the papers' own setting, built from the real inputs (Hub ids + revisions, user paths).

``BUILDER`` reads ``spec.toml`` (override keys with ``$HARNESS_GLOT500_SPEC``); ``FIXTURE_BUILDER`` is the same code
pointed at tiny files written in the sources' schemas (``tests/fixtures/glot500/spec.toml``), so the loaders and
the whole build run offline in tests. ``harness world check glot500`` lists every input with how to provide it.

``reference_scores(task, model_setting, step=0)`` gives the papers' published per-language figures (HyperOFA
Tables 8-15) for leaderboards; ``model_setting(source, dim)`` names a run's setting (``multi-400``).
"""

from __future__ import annotations

from pathlib import Path

from harness.worlds.glot500.builder import SPEC_PATH, Glot500World
from harness.worlds.glot500.reference import model_setting, reference_averages, reference_scores

FIXTURE_SPEC = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "glot500" / "spec.toml"

BUILDER = Glot500World("glot500", SPEC_PATH)
FIXTURE_BUILDER = Glot500World(
    "glot500-fixture", FIXTURE_SPEC, env_override=False,
    description="the glot500 world's loaders and build on tiny files in the sources' schemas (tests; offline)")

__all__ = ["BUILDER", "FIXTURE_BUILDER", "FIXTURE_SPEC", "SPEC_PATH", "Glot500World", "model_setting",
           "reference_averages", "reference_scores"]
