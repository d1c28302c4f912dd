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


class DeviceFault(HarnessError):
    """The accelerator failed in a way that poisons the process (a CUDA device-side assert, an illegal memory
    access): every later computation of the same process would fail too. Raised by the in-process runner to stop
    the run at once; cells that run each in a process of their own (the default on a GPU) never need it."""

    exit_code = 1


# what a CUDA/accelerator error says of itself: once one is raised, the CUDA context of the process is unusable
DEVICE_FAULT_MARKERS = ("CUDA error", "device-side assert", "CUBLAS_STATUS", "CUDNN_STATUS", "cudaError",
                        "illegal memory access", "NCCL error", "unspecified launch failure")


class OtherProcessFailed(RuntimeError):
    """An error of another process reported here (a torchrun rank of a cell's CPT): whatever it says of a device,
    the device of this process is not affected."""


def is_device_fault(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is an accelerator fault that leaves the process's device unusable. Not
    an out-of-memory error (the device stays usable once the memory is freed), nor an error of another process
    (:class:`OtherProcessFailed`: the ranks' stderr of a failed torchrun launch names their CUDA errors)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OtherProcessFailed):
            return False
        text = str(exc)
        if (isinstance(exc, RuntimeError) and any(m in text for m in DEVICE_FAULT_MARKERS)
                and "out of memory" not in text.lower()):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
