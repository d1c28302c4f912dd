"""The vocabulary-expansion initialization harness.

Crosses a registry of embedding-initialization methods with a registry of evaluation tasks on a *world*
(source model, target tokenizer, languages, resources, task data), runs continued pre-training, logs everything
to MLflow and renders per-language leaderboards.
"""

__version__ = "0.1.0"
