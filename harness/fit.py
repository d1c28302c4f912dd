"""Settings fitted to the source model when a run is planned, before any cell.

A profile names sizes for a family of models (the ``paper`` profile's CPT blocks of 512 tokens for XLM-R); a world's
source model may take fewer positions (the synthetic world's 128). The harness **clamps** such a setting to what the
model takes, rather than refusing the run: the profile stays usable on every world, the clamped value is part of the
cells' identity (it is the value CPT runs with), it is printed when the run starts, logged on every cell run as a
``fitted.<setting>`` parameter that names the requested value, the used one and why, and named under every board
the run's rows appear on. A setting the model does not bound is never touched.

The tasks' own maximum lengths are fitted where the model is at hand (``tasks.data.max_input_length``) and logged
with the task's protocol (``<task>.max_length``).
"""

from __future__ import annotations

import json
from typing import Any

from harness.core.positions import usable_positions


def source_positions(world: Any, source: str) -> int | None:
    """The longest input the source model takes, from its ``config.json`` (None when the world has no folder)."""
    path = world.source_dir(source) / "config.json"
    if not path.is_file():
        return None
    return usable_positions(json.loads(path.read_text()))


def fit_cpt(cpt: dict[str, Any], world: Any, sources: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``cpt`` with its block size clamped to the shortest input among ``sources``' models, and
    ``{"cpt.block_size": "512 -> 128: ..."}`` for every setting changed."""
    limits = {s: n for s in sources if (n := source_positions(world, s)) is not None}
    fitted, notes = dict(cpt), {}
    if not limits:
        return fitted, notes
    source = min(limits, key=lambda s: (limits[s], s))
    limit = limits[source]
    block = int(cpt["block_size"])
    if block > limit:
        fitted["block_size"] = limit
        notes["cpt.block_size"] = f"{block} -> {limit}: source model {source!r} takes {limit} positions"
    return fitted, notes
