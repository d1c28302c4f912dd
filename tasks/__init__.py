"""Evaluation tasks. Importing this package registers the built-in tasks in ``harness.core.registry.TASKS``
lazily: each name points at its class (``"module:Class"``), imported the first time the name is looked up, so
``harness list`` imports no task (nor torch). What ``harness list`` shows of a built-in task is kept beside its
name (:data:`LISTING`); ``tests/test_registry.py`` checks it against the class.
"""

from harness.core.registry import TASKS

# name -> (where the class is, what `harness list` shows of it: the class attributes of the same names)
BUILTIN: dict[str, tuple[str, dict]] = {
    "mlm": ("tasks.mlm:MLMLoss", {
        "description": "held-out masked-LM loss per language with fixed masks (lower is better)",
        "metrics": ("loss", "ppl"), "headline": "loss"}),
    "sr-b": ("tasks.retrieval:SentenceRetrievalBible", {
        "description": "Sentence retrieval on Bible verses: English queries, layer-8 mean pooling, cosine, top-10 "
                       "accuracy, at most 500 pairs per language",
        "metrics": ("acc@10", "acc@1"), "headline": "acc@10"}),
    "sr-t": ("tasks.retrieval:SentenceRetrievalTatoeba", {
        "description": "Sentence retrieval on Tatoeba: English queries, layer-8 mean pooling, cosine, top-10 "
                       "accuracy, at most 1,000 pairs per language",
        "metrics": ("acc@10", "acc@1"), "headline": "acc@10"}),
    "ner": ("tasks.tagging:NamedEntityRecognition", {
        "description": "NER (WikiANN-style IOB2 PER/LOC/ORG): fine-tune on the pivot language, select on its dev "
                       "set, zero-shot entity F1 (seqeval) on every language",
        "metrics": ("f1", "precision", "recall"), "headline": "f1"}),
    "pos": ("tasks.tagging:PartOfSpeech", {
        "description": "POS (UD UPOS): fine-tune on the pivot language, select on its dev set, zero-shot seqeval F1 "
                       "on bare tags (the papers' number) and token accuracy on every language",
        "metrics": ("f1", "acc"), "headline": "f1"}),
}
LISTING = {name: facts for name, (_, facts) in BUILTIN.items()}

for _name, (_target, _facts) in BUILTIN.items():
    TASKS.register_lazy(_name, _target, listing=_facts)
