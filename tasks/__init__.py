"""Evaluation tasks. Importing this package registers the built-in tasks in ``harness.core.registry.TASKS``
lazily: each name points at its class (``"module:Class"``), imported the first time the name is looked up, so
``harness list`` imports no task (nor torch). What ``harness list`` shows of a built-in task is what its class
declares, read from the module's source without importing it (:mod:`harness.core.declarations`).
"""

from harness.core.registry import TASKS

# name -> where the class is; what `harness list` shows of it is what the class declares, read from its source
# without importing it (harness.core.declarations)
BUILTIN: dict[str, str] = {
    "mlm": "tasks.mlm:MLMLoss",
    "clm": "tasks.clm:CausalLMLoss",
    "mlm-bpb": "tasks.mlm_bpb:MaskedLMBitsPerByte",
    "sr-b": "tasks.retrieval:SentenceRetrievalBible",
    "sr-t": "tasks.retrieval:SentenceRetrievalTatoeba",
    "ner": "tasks.tagging:NamedEntityRecognition",
    "pos": "tasks.tagging:PartOfSpeech",
}
for _name, _target in BUILTIN.items():
    TASKS.register_lazy(_name, _target)
