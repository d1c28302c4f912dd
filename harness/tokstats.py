"""Tokenizer statistics per language, for the source and the target tokenizer of an initialization.

For each language of the world's held-out text (the ``mlm`` task's files, the first ``max_sentences`` lines):

* ``fertility``: tokens a word (words split at whitespace; the tokenizer's special tokens not counted), the measure
  of Rust et al. 2021 and of ``tokenkit``'s ``fertilize`` (summed over the language's text, not averaged over
  sentences);
* ``bytes_per_token``: UTF-8 bytes of the text over its tokens;
* ``unk_rate``: the share of its tokens that are the tokenizer's UNK;
* for the target tokenizer only, ``copied`` / ``method`` / ``random`` / ``unk``: the share of the language's token
  occurrences whose embedding row the initialization copied, computed with the method, drew at random or mapped to
  UNK (its provenance), so that a method's rows are read against what each language actually uses.

``tokenkit`` (PyPI) computes fertility and parity from a hub model name; these figures need the local tokenizers,
the provenance and one pass over each language's text, so they are computed here (a few lines each).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.core.objective import utf8_bytes

PROVENANCE_NAMES = ("copied", "method", "random", "unk")  # methods.base.Provenance's order


def language_stats(tokenizer: Any, lines: Sequence[str], provenance: np.ndarray | None = None) -> dict[str, float]:
    """The statistics of one tokenizer on one language's ``lines`` (and, given the target's provenance per id,
    the shares of its token occurrences by provenance)."""
    ids = tokenizer(list(lines), add_special_tokens=False)["input_ids"]
    flat = np.fromiter((i for seq in ids for i in seq), dtype=np.int64)
    words = sum(len(x.split()) for x in lines)
    n_bytes = sum(utf8_bytes(x) for x in lines)
    n = int(flat.size)
    unk = tokenizer.unk_token_id
    out = {"tokens": n, "words": words, "fertility": n / words if words else 0.0,
           "bytes_per_token": n_bytes / n if n else 0.0,
           "unk_rate": float((flat == unk).sum()) / n if n and unk is not None else 0.0}
    if provenance is not None and n:
        counts = np.bincount(provenance[flat].astype(np.int64), minlength=len(PROVENANCE_NAMES))
        out.update({name: float(counts[k]) / n for k, name in enumerate(PROVENANCE_NAMES)})
    return out


def tokenizer_stats(world: Any, source_tokenizer: Any, target_tokenizer: Any, provenance: np.ndarray,
                    max_sentences: int = 200) -> dict[str, dict[str, dict[str, float]]]:
    """``{language: {"source": stats, "target": stats}}`` over the world's held-out text ({} where it has none)."""
    from harness.worlds.base import read_lines

    task_dir = getattr(world, "task_dir", None)
    folder = task_dir("mlm") if task_dir is not None else None
    if folder is None or not folder.is_dir():
        return {}
    out = {}
    for path in sorted(folder.glob("*.txt")):
        lines = read_lines(path)[:max_sentences]
        if lines:
            out[path.stem] = {"source": language_stats(source_tokenizer, lines),
                              "target": language_stats(target_tokenizer, lines, provenance)}
    return out
