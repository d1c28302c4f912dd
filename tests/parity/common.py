"""Helpers shared by the parity tests (they import only the harness; the reference packages are imported by the
tests themselves, mergekit's OMP by file through :func:`mergekit_omp`)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from methods.multilang import dictionary_for

REPORT: list[str] = []  # lines printed in the terminal summary of a parity run (see conftest.py)


def report(line: str) -> None:
    REPORT.append(line)
    print(line)


def cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.double(), b.double()
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(1e-300)


def our_neighbours(ctx, stats, lang: str, ids: list[int], k: int = 10) -> dict[int, tuple[list[int], np.ndarray]]:
    """Our top-``k`` source ids of each target id (ties: lower id first) and its cosines to every source token,
    recomputed as methods.wechsel does (float64; the alignment on this process's BLAS, which tests/parity/run.sh
    pins to the kernels and thread count methods.pinned_blas pins)."""
    from methods.fasttext_util import load_model, word_vectors
    from methods.multilang import read_dictionary
    from methods.pinned_blas import align
    from methods.wechsel import alignment_pairs, decoded_tokens

    src = load_model(stats["source_vectors"]["path"])
    u = word_vectors(src, decoded_tokens(ctx.source_tokenizer)).astype(np.float64)
    tgt = src
    if lang != ctx.world.pivot:
        tgt = load_model(stats["languages"][lang]["vectors"]["path"])
        path, rev = dictionary_for(ctx.world, ctx.world.pivot, lang)
        u = align(u, *alignment_pairs(src, tgt, read_dictionary(path, reverse=rev)))[0]  # this process's BLAS
    u = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
    strings = decoded_tokens(ctx.target_tokenizer)
    out = {}
    for i in ids:
        v = tgt.get_word_vector(strings[i]).astype(np.float64)
        sims = u @ (v / np.linalg.norm(v))
        out[i] = (np.argsort(-sims, kind="stable")[:k].tolist(), sims)
    return out


def tied_rows(ctx, stats, lang: str, ids: list[int], their_sources: dict[int, list[int]], k: int = 10) -> set[int]:
    """Rows whose top-``k`` source sets differ between us and the reference, after checking that every differing
    id ties (to 1e-9) with our ``k``-th neighbour: the reference's ``np.argpartition`` keeps either of tied ids."""
    ours_nb = our_neighbours(ctx, stats, lang, ids, k)
    ties = set()
    for i in ids:
        top, sims = ours_nb[i]
        theirs = their_sources[i]
        if sorted(theirs) != sorted(top):
            for j in set(theirs) ^ set(top):
                assert abs(sims[j] - sims[top[-1]]) < 1e-9, (lang, i, j, sims[j], sims[top[-1]])
            ties.add(i)
    return ties


def reference_file(path: str, folder: Path) -> str:
    """The fastText ``.bin`` a reference implementation reads for our cached model at ``path``: the compact form
    rebuilt as fastText wrote it (every input row, hence every word vector, bit for bit; the output matrix, which
    neither reference reads, is zeros)."""
    from methods.fasttext_compact import full_model_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return str(full_model_file(path, folder))


def mergekit_omp() -> types.ModuleType:
    """mergekit's ``tokensurgeon/omp.py`` (with its one import, ``rope_helpers``) from the installed wheel."""
    spec = importlib.util.find_spec("mergekit")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("mergekit is not installed (tests/parity/run.sh installs mergekit==0.1.5)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokensurgeon"
    package = types.ModuleType("mergekit_omp_oracle")
    package.__path__ = [str(folder)]
    sys.modules.setdefault("mergekit_omp_oracle", package)
    for name in ("rope_helpers", "omp"):
        full = f"mergekit_omp_oracle.{name}"
        if full not in sys.modules:
            module_spec = importlib.util.spec_from_file_location(full, folder / f"{name}.py")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[full] = module
            module_spec.loader.exec_module(module)
    return sys.modules["mergekit_omp_oracle.omp"]
