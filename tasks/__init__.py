"""Evaluation tasks. Importing this package registers the built-in tasks in ``harness.core.registry.TASKS``."""

import importlib

_BUILTIN = ("tasks.mlm", "tasks.retrieval", "tasks.tagging")

for _mod in _BUILTIN:
    try:
        importlib.import_module(_mod)
    except ModuleNotFoundError as _exc:  # a module not written yet must not hide the others
        if _exc.name != _mod:
            raise
