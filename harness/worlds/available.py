"""Registers the worlds that ship with the harness (lazily: a world's module is imported when it is used)."""


# The default world `bible` and the papers' `glot500` world register here when they land.
