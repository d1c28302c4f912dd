"""Initialization methods. Importing this package registers the built-in methods in ``harness.core.registry.METHODS``
lazily: each name points at its class (``"module:Class"``), imported the first time the name is looked up, so
``harness list`` and ``harness leaderboard`` import no method (nor torch). What ``harness list`` shows of a built-in
method is what its class declares, read from the module's source without importing it
(:mod:`harness.core.declarations`).

Each module registers its classes with ``@METHODS.register(name)`` too (importing a module directly works as
before); third-party methods use the entry-point group ``harness.methods`` (see README, "Adding a new method").
"""

from harness.core.registry import METHODS

# name -> where the class is; what `harness list` shows of it is what the class declares, read from its source
# without importing it (harness.core.declarations)
BUILTIN: dict[str, str] = {
    "random": "methods.random_init:RandomInit",
    "random-map": "methods.random_init:RandomMapInit",
    "ofa": "methods.ofa:OFAInit",
    "hyperofa": "methods.hyperofa:HyperOFAInit",
    "focus": "methods.focus:FocusInit",
    "wechsel": "methods.wechsel:WechselInit",
    "wechsel+overlap": "methods.wechsel:WechselOverlapInit",
    "tiktotok": "methods.tiktotok:TikToTokInit",
    "fvt": "methods.fvt:FVTInit",
    "mean-cov": "methods.mean_cov:MeanCovInit",
    "omp": "methods.omp:OMPInit",
    "clp": "methods.clp:CLPInit",
    "clp+": "methods.clp:CLPPlusInit",
    "tokdist": "methods.tokdist:TokenDistillationInit",
}
for _name, _target in BUILTIN.items():
    METHODS.register_lazy(_name, _target)
