"""Initialization methods. Importing this package registers the built-in methods in ``harness.core.registry.METHODS``.

Each module registers its classes with ``@METHODS.register(name)``; third-party methods use the entry-point group
``harness.methods`` (see README, "Adding a new method").
"""

import importlib

_BUILTIN = ("methods.random_init", "methods.ofa", "methods.hyperofa", "methods.focus", "methods.wechsel", "methods.tiktotok",
            "methods.fvt", "methods.mean_cov")

for _mod in _BUILTIN:
    try:
        importlib.import_module(_mod)
    except ModuleNotFoundError as _exc:  # a module not written yet must not hide the others
        if _exc.name != _mod:
            raise
