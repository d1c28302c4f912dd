"""Registers the worlds that ship with the harness (lazily: a world's module is imported when it is used)."""

from harness.worlds import WORLDS

WORLDS.register_lazy("bible", "harness.worlds.bible:BUILDER")
WORLDS.register_lazy("glot500", "harness.worlds.glot500:BUILDER")
WORLDS.register_lazy("glot500-fixture", "harness.worlds.glot500:FIXTURE_BUILDER")
