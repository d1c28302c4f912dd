"""The task contract: evaluate a model on a world's task data, per language.

Nothing here knows about methods or MLflow. ``evaluate`` returns per-language scores; the runner logs them as
``{task}/{metric}/{lang}`` with MLflow's step = CPT step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable


@dataclass
class TaskSettings:
    """Protocol settings from the run's profile (``cpu`` or ``paper``) plus run-level context."""

    profile: str = "cpu"
    seed: int = 1
    device: str = "cpu"
    batch_size: int = 32
    max_length: int = 256
    max_sentences: int | None = None  # cap of evaluation sentences per language (cpu profile)
    params: dict[str, Any] = field(default_factory=dict)  # task-specific settings
    cache_dir: Path | None = None  # where a task may cache products (fine-tuned taggers), keyed by inputs
    model_key: str = ""  # identity of the evaluated model (for task-level caches)
    precision: str = "fp32"  # resolved model-pass precision (harness.core.precision): "fp32", "bf16" or "fp16"
    progress: Any = None


@dataclass
class ItemStats:
    """Per-item sufficient statistics of one metric in one language: the metric is ``sum(num) / sum(den)``
    (then ``transform``), so it can be recomputed on any resample of the test items (bootstrap).

    accuracy: num = 1/0 per query, den = 1; entity F1: num = 2·TP, den = 2·TP + FP + FN per sentence;
    MLM loss: num = summed cross-entropy, den = masked tokens per sentence (transform "exp" gives perplexity).
    """

    num: list[float]
    den: list[float]
    transform: str = "identity"  # or "exp"

    def value(self) -> float:
        import math

        d = sum(self.den)
        v = sum(self.num) / d if d else 0.0
        return math.exp(min(v, 50.0)) if self.transform == "exp" else v

    def to_dict(self) -> dict[str, Any]:
        return {"num": self.num, "den": self.den, "transform": self.transform}


@dataclass
class TaskResult:
    scores: dict[str, dict[str, float]]  # metric -> {lang: value}
    extras: dict[str, Any] = field(default_factory=dict)  # e.g. dev curves, counts per language
    label_source: dict[str, str] = field(default_factory=dict)  # lang -> gold/silver
    items: dict[str, dict[str, ItemStats]] = field(default_factory=dict)  # metric -> lang -> per-item stats

    def averages(self, languages: list[str] | None = None) -> dict[str, float]:
        out = {}
        for metric, per_lang in self.scores.items():
            langs = languages if languages is not None else list(per_lang)
            vals = [per_lang[lang] for lang in langs if lang in per_lang]
            if vals and len(vals) == len(langs):
                out[metric] = float(sum(vals) / len(vals))
        return out


@runtime_checkable
class Task(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]
    headline: ClassVar[str]  # the metric the leaderboard sorts by
    higher_is_better: ClassVar[bool]

    def languages(self, world: Any) -> list[str]: ...

    def evaluate(self, model: Any, tokenizer: Any, world: Any, languages: list[str],
                 settings: TaskSettings) -> TaskResult: ...


LANGUAGE_FACTS: dict[str, Any] = {"name": "", "language_data": None, "pivot_queries": False}


def languages_from(world: Any, name: str, language_data: str | None, pivot_queries: bool) -> list[str]:
    """The languages a task scores on ``world``: those of the world's data for it (``language_data``, by default
    the task's own ``name``), less the pivot language where the pivot gives the queries (retrieval)."""
    have = world.task_languages(language_data or name)
    return [lang for lang in have if not (pivot_queries and lang == world.pivot)]


class DeclaredLanguages:
    """``languages(world)`` from what a task class declares (:data:`LANGUAGE_FACTS`): ``language_data``, the
    world's data folder it reads (its ``name`` when None), and ``pivot_queries`` (the pivot language gives the
    queries and is not scored). Planning reads these declarations from a built-in task's source without importing
    it (``harness.plan.task_languages``), so a run with nothing left to do imports no task (nor torch)."""

    name: ClassVar[str]
    language_data: ClassVar[str | None] = None
    pivot_queries: ClassVar[bool] = False

    def languages(self, world: Any) -> list[str]:
        return languages_from(world, self.name, self.language_data, self.pivot_queries)
