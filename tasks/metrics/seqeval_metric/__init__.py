"""The seqeval metric as an ``evaluate`` module kept in the repository (loadable offline).

Load it with ``evaluate.load(str(Path(__file__).parent))``; see :func:`tasks.metrics.load_seqeval`.
"""
