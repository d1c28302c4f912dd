"""User-facing errors: each names what was wrong and what to do; the CLI turns them into exit status 2."""

from __future__ import annotations


class HarnessError(Exception):
    """An error caused by the user's input or environment (bad name, bad config, missing resource).

    The CLI prints the message without a traceback and exits with status 2.
    """

    exit_code = 2


class UnknownNameError(HarnessError):
    def __init__(self, kind: str, name: str, known: list[str]):
        import difflib

        self.kind, self.name, self.known = kind, name, known
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        avail = ", ".join(sorted(known)) or "(none)"
        super().__init__(f"unknown {kind} {name!r}.{hint} Available: {avail}. (`harness list` shows them all.)")


class ConfigError(HarnessError):
    pass


class MissingResourceError(HarnessError):
    pass
