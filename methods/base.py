"""The method contract: a method turns an :class:`InitContext` into an :class:`InitResult`.

Nothing here knows about tasks or MLflow. A method is a function of its inputs: same inputs and seed, same
matrix, bit for bit; every random draw comes from ``ctx.generator()`` (never the global RNG).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch


class Provenance(enum.IntEnum):
    """How each target row was initialized (HyperOFA Table 2 style counts)."""

    COPIED = 0  # copied from an overlapping source token
    METHOD = 1  # computed by the method ("wise")
    RANDOM = 2  # fallback draw (per-dimension Gaussian)
    UNK = 3  # mapped to the source UNK row (Tik-to-Tok)


@dataclass
class TokenMapping:
    """Which target ids copy which source ids, under one overlap rule (computed once per pair, cached)."""

    rule: str
    source_size: int
    target_size: int
    copy: dict[int, int]  # target id -> source id
    source_tokens: list[str] = field(default_factory=list)  # canonical strings by id
    target_tokens: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class InitContext:
    """Everything a method may use. ``source_matrix`` is E_s, or F_s when the embeddings are factorized."""

    source_matrix: torch.Tensor  # (|V_s|, d), float32, read-only by convention
    source_tokenizer: Any  # a transformers tokenizer
    target_tokenizer: Any
    mapping_for: Callable[[str], TokenMapping]  # overlap rule name -> mapping
    world: Any  # harness.worlds.base.World (resources, languages); methods only read files through it
    seed: int
    device: str = "cpu"
    factorized: bool = False
    params: dict[str, Any] = field(default_factory=dict)  # the method's hyperparameters (from config)
    workdir: Path | None = None  # scratch / artifact folder for this initialization
    cache_dir: Path | None = None  # where the method may cache expensive products (keyed by their inputs)
    progress: Callable[[str, int], Callable[[int], None]] | None = None
    log_metric: Callable[[str, float, int], None] | None = None  # e.g. hypernetwork curves

    def generator(self, salt: int = 0) -> torch.Generator:
        g = torch.Generator(device="cpu")
        g.manual_seed(int(self.seed) * 1_000_003 + salt)
        return g

    def rng(self, salt: int = 0) -> np.random.Generator:
        return np.random.default_rng([int(self.seed), salt])


@dataclass
class InitResult:
    matrix: torch.Tensor  # (|V_t|, d), same space as ctx.source_matrix
    provenance: np.ndarray  # (|V_t|,) of Provenance values
    copy: dict[int, int] = field(default_factory=dict)  # target id -> source id for copied rows (bias remap)
    stats: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Path] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {p.name.lower(): int((self.provenance == p.value).sum()) for p in Provenance}


@runtime_checkable
class InitMethod(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    requires: ClassVar[frozenset[str]]  # resources, e.g. {"word_vectors"}, {"target_text"}, {"dictionary"}
    overlap_rule: ClassVar[str]
    supports_factorized: ClassVar[bool]

    def initialize(self, ctx: InitContext) -> InitResult: ...
