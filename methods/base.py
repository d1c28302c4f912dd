"""The method contract: a method turns an :class:`InitContext` into an :class:`InitResult`.

Nothing here knows about tasks or MLflow. A method is a function of its inputs: same inputs and seed, same
matrix, bit for bit; every random draw comes from ``ctx.generator()`` (never the global RNG).

:class:`Method` is the skeleton the built-in methods share: the declared parameters (:mod:`methods.params`) and
their check, the profile's settings for the method, its cost estimate, and the steps every ``initialize`` begins
with (the overlap mapping, checked against the context; a progress bar). A method need not derive from it: the
contract is :class:`InitMethod`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch

from harness.core.errors import ConfigError
from harness.core.registry import dim_refusal
from methods.params import Param, defaults_of, describe, resolve


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
    profile: str | None = None  # the run profile ("cpu", "paper"); None outside a run
    factorized: bool = False
    params: dict[str, Any] = field(default_factory=dict)  # the method's hyperparameters (from config)
    workdir: Path | None = None  # scratch / artifact folder for this initialization
    cache_dir: Path | None = None  # where the method may cache expensive products (keyed by their inputs)
    progress: Callable[[str, int], Callable[[int], None]] | None = None
    log_metric: Callable[[str, float, int], None] | None = None  # e.g. hypernetwork curves
    # the source model itself, loaded afresh at each call (a method may change it): the backbone as
    # transformers' AutoModel gives it, encoder or decoder, for methods that run the model (Token Distillation)
    source_model: Callable[[], Any] | None = None
    # which of the source's tables ``source_matrix`` is: "input", or "output" (the untied output table computed
    # again with the method); a method whose donor has tables of both kinds reads the matching one
    table: str = "input"

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


REFERENCE_SEPARATOR = " · "
NO_REFERENCE = "no reference implementation compared"
NOT_DECLARED = "not declared"


@dataclass(frozen=True)
class Reference:
    """What a method's rows were checked against, shown beside its rows on the leaderboard.

    ``implementation``  the reference: the authors' package and version (``"deepfocus 1.0.1"``) or repository at a
                        commit (``"cisnlp/ofa@73fce73"``); None when no reference implementation was compared
    ``compared``        what the tests compare with it, or, without one, what the tests check instead
    ``tests``           the tests, as paths from the repository root, each optionally ``path::test_name``

    :meth:`line` is the one line the runner logs with every cell run (the ``harness.method_reference`` tag), read
    by the leaderboard without importing the method: ``implementation · compared · tests``.
    """

    implementation: str | None
    compared: str
    tests: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.compared or not self.tests or self.implementation == "":
            raise ValueError("a Reference names what it compares and at least one test")
        for text in (self.implementation or "", self.compared, *self.tests):
            if REFERENCE_SEPARATOR.strip() in text or "\n" in text:
                raise ValueError(f"a Reference's fields are one line without {REFERENCE_SEPARATOR.strip()!r}: {text!r}")

    def line(self) -> str:
        return REFERENCE_SEPARATOR.join([self.implementation or NO_REFERENCE, self.compared, ", ".join(self.tests)])


def reference_line(method: Any) -> str:
    """A method's :meth:`Reference.line`, or ``"not declared"`` for one that declares no ``reference``."""
    ref = getattr(method, "reference", None)
    return ref.line() if isinstance(ref, Reference) else NOT_DECLARED


def check_mapping(ctx: InitContext, mapping: TokenMapping) -> None:
    """A mapping must be for the context's vocabularies (source matrix rows, target tokenizer)."""
    n_src = ctx.source_matrix.shape[0]
    if mapping.source_size != n_src:
        raise ValueError(f"token mapping is for a source vocabulary of {mapping.source_size} tokens, but the "
                         f"source matrix has {n_src} rows")
    if mapping.target_size != len(ctx.target_tokenizer):
        raise ValueError(f"token mapping is for {mapping.target_size} target tokens, the target tokenizer has "
                         f"{len(ctx.target_tokenizer)}")


class Method:
    """The skeleton of a built-in method: what it declares, and the steps every ``initialize`` shares.

    Declared (class attributes): ``name``, ``description``, ``requires``, ``overlap_rule``, ``supports_factorized``,
    ``params`` (a tuple of :class:`methods.params.Param`; ``defaults`` is derived from it), ``profiles`` (profile
    name -> the parameter values that profile sets, e.g. smaller fastText models for ``cpu``; they are part of
    the run's params and so of its cache keys), ``init_hours`` (GPU-hours of one initialization at the
    papers' scale, for ``harness plan``) and ``reference`` (a :class:`Reference`: what the method was checked
    against, shown beside its rows on the leaderboard; None: not declared).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()
    overlap_rule: ClassVar[str] = "ofa"
    supports_factorized: ClassVar[bool] = False
    params: ClassVar[tuple[Param, ...]] = ()
    defaults: ClassVar[dict[str, Any]] = {}
    profiles: ClassVar[dict[str, dict[str, Any]]] = {}
    init_hours: ClassVar[float] = 0.5
    reference: ClassVar[Reference | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.defaults = defaults_of(cls.params)

    # -- declarations read by the application -----------------------------------------------------------------
    @classmethod
    def profile_defaults(cls, profile: str) -> dict[str, Any]:
        """The parameter values the run profile ``profile`` sets for this method (the run's own override them)."""
        return dict(cls.profiles.get(profile, {}))

    @classmethod
    def cost_estimate(cls, profile: str = "paper") -> float:
        """GPU-hours of one initialization (``harness plan``); the papers' scale, whatever the profile."""
        return float(cls.init_hours)

    @classmethod
    def describe_params(cls) -> list[dict[str, str]]:
        return describe(cls.params)

    # -- the steps every initialize begins with ------------------------------------------------------------
    def resolve_params(self, ctx: InitContext) -> dict[str, Any]:
        """``ctx.params`` over the declared defaults, checked (:func:`methods.params.resolve`)."""
        return resolve(self.name, self.params, ctx.params)

    def full_dimension_only(self, ctx: InitContext) -> None:
        """A method called directly (not through the harness, which checks first) refuses what it cannot do."""
        refusal = dim_refusal(self.name, type(self), int(ctx.source_matrix.shape[1]) if ctx.factorized else None)
        if refusal:
            raise ConfigError(refusal)

    def mapping(self, ctx: InitContext, **options: Any) -> TokenMapping:
        """The method's overlap mapping (its ``overlap_rule`` with ``options``), checked against the context."""
        mapping = ctx.mapping_for(self.overlap_rule, **options)
        check_mapping(ctx, mapping)
        return mapping

    @staticmethod
    def bar(ctx: InitContext, label: str, total: int) -> Callable[[int], None] | None:
        """A progress callback for a loop of ``total`` steps (None when the caller shows no progress)."""
        return ctx.progress(label, total) if ctx.progress is not None else None
