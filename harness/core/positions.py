"""How many tokens a model takes in one sequence, read from its config (a ``PretrainedConfig`` or the dict of a
``config.json``): the position embeddings, less the offset of the models whose positions start after the padding
index (RoBERTa and its kin: 514 embeddings give 512 positions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OFFSET_POSITIONS = frozenset({"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "xmod"})


def usable_positions(config: Any) -> int | None:
    """The longest input the model embeds, or None when its config does not say."""
    get = config.get if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
    pos = get("max_position_embeddings")
    if not isinstance(pos, int) or pos <= 0:
        return None
    if get("model_type", "") in OFFSET_POSITIONS:
        pos -= int(get("pad_token_id", 1) or 0) + 1
    return pos
