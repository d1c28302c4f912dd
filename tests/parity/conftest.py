"""Fixtures of the parity tests: no downloads by the reference packages, the real source/target pair (built once
per run), and a terminal summary with each test's agreement table and timings."""

from __future__ import annotations

import pytest

from harness.core.paths import harness_home
from tests.parity.common import REPORT

# the registry downloads of the user's harness home (shared with the bible world's build), taken before the test
# session points HARNESS_HOME at a temporary folder
DOWNLOADS = harness_home() / "downloads"


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch):
    """The reference packages download models and dictionaries at run time; every input here is a local file,
    so a download attempt fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"the reference code tried to download {args[:1]}")

    for module in ("deepfocus.fasttext_embs", "wechsel"):
        try:
            mod = __import__(module, fromlist=["download"])
        except ImportError:
            continue
        monkeypatch.setattr(mod, "download", refuse)


@pytest.fixture(scope="session")
def real_pair(tmp_path_factory):
    from harness.worlds.bible.fetch import Fetcher
    from tests.parity.realpair import build_real_pair

    return build_real_pair(tmp_path_factory.mktemp("real-pair"), Fetcher(root=DOWNLOADS))


@pytest.fixture(scope="session")
def parity_cache(tmp_path_factory):
    """One method cache for the session: each fastText model is trained once and handed to both sides."""
    return tmp_path_factory.mktemp("method-cache")


def pytest_terminal_summary(terminalreporter):
    if REPORT:
        terminalreporter.section("parity with the authors' code")
        for line in REPORT:
            terminalreporter.write_line(line)
