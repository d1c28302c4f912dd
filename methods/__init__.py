"""Initialization methods. Importing this package registers the built-in methods in ``harness.core.registry.METHODS``
lazily: each name points at its class (``"module:Class"``), imported the first time the name is looked up, so
``harness list`` and ``harness leaderboard`` import no method (nor torch). What ``harness list`` shows of a built-in
method is kept beside its name (:data:`LISTING`); ``tests/test_registry.py`` checks it against the class.

Each module registers its classes with ``@METHODS.register(name)`` too (importing a module directly works as
before); third-party methods use the entry-point group ``harness.methods`` (see README, "Adding a new method").
"""

from harness.core.registry import METHODS

# name -> (where the class is, what `harness list` shows of it: the class attributes of the same names)
BUILTIN: dict[str, tuple[str, dict]] = {
    "random": ("methods.random_init:RandomInit", {
        "description": "OFA/HyperOFA random baseline: overlapping tokens copied (OFA rule), the rest drawn per "
                       "dimension from N(mean, std) of the source (coordinate) matrix",
        "requires": (), "overlap_rule": "ofa", "supports_factorized": True}),
    "random-map": ("methods.random_init:RandomMapInit", {
        "description": "FOCUS random baseline: overlapping tokens copied (FOCUS rule), every other token takes the "
                       "embedding of a randomly chosen source token",
        "requires": (), "overlap_rule": "focus", "supports_factorized": False}),
    "ofa": ("methods.ofa:OFAInit", {
        "description": "OFA: subword vectors from multilingual word vectors, top-10 source neighbours by cosine, "
                       "softmax(sim/0.1) combination of source (coordinate) rows; overlap copied (OFA rule); "
                       "per-dimension Gaussian for tokens without a matched word",
        "requires": ("word_vectors",), "overlap_rule": "ofa", "supports_factorized": True}),
    "hyperofa": ("methods.hyperofa:HyperOFAInit", {
        "description": "HyperOFA: a BiLSTM hypernetwork trained to map a source token's matched multilingual word "
                       "vectors to its source (coordinate) row predicts the new tokens; overlap copied (OFA rule); "
                       "per-dimension Gaussian for tokens without a matched word",
        "requires": ("word_vectors",), "overlap_rule": "ofa", "supports_factorized": True}),
    "focus": ("methods.focus:FocusInit", {
        "description": "FOCUS: overlap copied (exact, fuzzy for symbols); other tokens a sparsemax-weighted mean of "
                       "overlapping tokens' source rows by cosine in a token-level fastText trained on target text; "
                       "per-dimension Gaussian for tokens under minCount",
        "requires": ("target_text",), "overlap_rule": "focus", "supports_factorized": False}),
    "wechsel": ("methods.wechsel:WechselInit", {
        "description": "WECHSEL: fastText word vectors per language aligned to the source by Procrustes on a "
                       "bilingual dictionary; token vectors by subword composition; top-10 source tokens, "
                       "softmax(sim/0.1); only specials copied; Gaussian for tokens without a vector",
        "requires": ("dictionary", "target_text"), "overlap_rule": "wechsel", "supports_factorized": False}),
    "wechsel+overlap": ("methods.wechsel:WechselOverlapInit", {
        "description": "WECHSEL with the overlapping tokens copied (OFA's overlap rule) instead of only the "
                       "specials; a variant for the extension setting, not the paper's rule",
        "requires": ("dictionary", "target_text"), "overlap_rule": "ofa", "supports_factorized": False}),
    "tiktotok": ("methods.tiktotok:TikToTokInit", {
        "description": "Tik-to-Tok (dictionary + bilingual fastText): shared non-alphabetic tokens copied, "
                       "unshared ones UNK; dictionary words the ranked mean of their translations, other tokens of "
                       "their 3 nearest source tokens (30/10/60 weights); no random rows",
        "requires": ("dictionary", "target_text"), "overlap_rule": "tiktotok", "supports_factorized": False}),
    "fvt": ("methods.fvt:FVTInit", {
        "description": "FVT (Gee et al. 2022): shared tokens copied (OFA rule), every other token the mean of the "
                       "source rows of its source tokenization; per-dimension Gaussian for tokens the source "
                       "tokenizes to UNK only",
        "requires": (), "overlap_rule": "ofa", "supports_factorized": True}),
    "mean-cov": ("methods.mean_cov:MeanCovInit", {
        "description": "Hewitt / transformers' resize init: overlapping tokens copied (OFA rule), the rest drawn "
                       "from the multivariate N(mean, covariance) of the source (coordinate) matrix",
        "requires": (), "overlap_rule": "ofa", "supports_factorized": True}),
}
LISTING = {name: facts for name, (_, facts) in BUILTIN.items()}

for _name, (_target, _facts) in BUILTIN.items():
    METHODS.register_lazy(_name, _target, listing=_facts)
