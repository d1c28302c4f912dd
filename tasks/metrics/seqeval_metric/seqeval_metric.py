"""seqeval as an ``evaluate`` metric module, kept in the repository so that it loads offline.

The hub copy (``evaluate.load("seqeval")``) cannot load without network access; this module computes the same
numbers with the installed ``seqeval`` package. Scores are fractions in [0, 1].

It reproduces the reference evaluation of OFA/HyperOFA/Glot500 (``seqeval.metrics.f1_score`` in the default,
non-strict mode). On tags without an IOB prefix (UD POS tags) seqeval reads the first character as the prefix and
the rest as the type, so adjacent identical tags (``NOUN NOUN``) merge into one chunk: that "POS F1" differs from
token accuracy, which is returned separately as ``overall_accuracy``.
"""

import warnings

import datasets
import evaluate
from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score
from seqeval.metrics.v1 import UndefinedMetricWarning

_DESCRIPTION = """\
Chunk-level precision, recall and F1 of sequence labels (seqeval, CoNLL-style), plus token accuracy.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of sentences, each a list of predicted tags (strings).
    references: list of sentences, each a list of gold tags (strings), aligned with ``predictions``.
    suffix: tags carry their chunk marker as a suffix (``PER-B``) instead of a prefix (default False).
    scheme: a seqeval scheme name (``IOB2``, ``IOBES`` ...) for strict mode; None for the default mode.
    mode: ``"strict"`` or None (the default, non-strict mode that the reference evaluation uses).
    zero_division: value for undefined precision/recall (``"warn"`` gives 0 with a warning, or 0 / 1).
    quiet: silence seqeval's "seems not to be NE tag" (expected for POS tags) and undefined-metric warnings
        (the value is still 0 as with ``zero_division="warn"``). Default True.
Returns:
    overall_precision, overall_recall, overall_f1, overall_accuracy (token accuracy), and per_type:
    {type: {precision, recall, f1, number}}.
"""

_CITATION = """\
@inproceedings{ramshaw-marcus-1995-text,
  title = "Text Chunking using Transformation-Based Learning",
  author = "Ramshaw, Lance and Marcus, Mitch",
  booktitle = "Third Workshop on Very Large Corpora",
  year = "1995",
}
@misc{seqeval,
  title = {{seqeval}: A Python framework for sequence labeling evaluation},
  author = {Hiroki Nakayama},
  year = {2018},
  url = {https://github.com/chakki-works/seqeval},
}
"""

_SCHEMES = ("IOB1", "IOB2", "IOE1", "IOE2", "IOBES", "BILOU")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SeqevalMetric(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string", id="label"), id="sequence"),
                    "references": datasets.Sequence(datasets.Value("string", id="label"), id="sequence"),
                }
            ),
            homepage="https://github.com/chakki-works/seqeval",
            codebase_urls=["https://github.com/chakki-works/seqeval"],
        )

    def _compute(self, predictions, references, suffix=False, scheme=None, mode=None, zero_division="warn",
                 quiet=True):
        predictions = [list(p) for p in predictions]
        references = [list(r) for r in references]
        for i, (p, r) in enumerate(zip(predictions, references, strict=True)):
            if len(p) != len(r):
                raise ValueError(f"sentence {i}: {len(p)} predicted tags but {len(r)} gold tags")
        scheme_cls = None
        if scheme is not None:
            if scheme not in _SCHEMES:
                raise ValueError(f"unknown scheme {scheme!r}; choose from {', '.join(_SCHEMES)}")
            import seqeval.scheme

            scheme_cls = getattr(seqeval.scheme, scheme)
        kw = {"suffix": suffix, "mode": mode, "scheme": scheme_cls, "zero_division": zero_division}
        with warnings.catch_warnings():
            if quiet:
                warnings.filterwarnings("ignore", message=".*seems not to be NE tag.*")
                warnings.filterwarnings("ignore", category=UndefinedMetricWarning)
            report = classification_report(references, predictions, output_dict=True, **kw)
            precision = precision_score(references, predictions, **kw)
            recall = recall_score(references, predictions, **kw)
            f1 = f1_score(references, predictions, **kw)
        per_type = {
            name: {"precision": float(v["precision"]), "recall": float(v["recall"]), "f1": float(v["f1-score"]),
                   "number": int(v["support"])}
            for name, v in report.items()
            if name not in {"micro avg", "macro avg", "weighted avg"}
        }
        return {
            "overall_precision": float(precision),
            "overall_recall": float(recall),
            "overall_f1": float(f1),
            "overall_accuracy": float(accuracy_score(references, predictions)),
            "per_type": per_type,
        }
