"""What the subcommands share: the consoles, the run flags and settings, and the checks made before anything
is loaded."""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console

from harness.core.errors import HarnessError

# piped or redirected output keeps its tables on one line per row (rich would otherwise fold them to 80 columns)
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200)
err = Console(stderr=True)


def add_run_args(p: argparse.ArgumentParser) -> None:
    from harness.config import add_run_flags

    add_run_flags(p)  # each setting is declared once, in harness.config.RunConfig


def config_from_args(args: argparse.Namespace):
    from harness.config import config_from_flags

    return config_from_flags(args)


def check_device(device: str) -> None:
    """A CUDA device must exist before anything is loaded (torch's own error is a traceback deep in a cell)."""
    if not device.startswith("cuda"):
        return
    import torch

    idx = device.partition(":")[2]
    if idx and not idx.isdigit():
        raise HarnessError(f"--device {device!r} is malformed; give cuda or cuda:N")
    if not torch.cuda.is_available():
        raise HarnessError(f"--device {device}: CUDA is not available on this machine; use --device cpu or auto")
    if idx and int(idx) >= torch.cuda.device_count():
        raise HarnessError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                           f"give cuda:0 to cuda:{torch.cuda.device_count() - 1}")


def check_world_name(name: str) -> None:
    from harness.worlds import WORLDS

    WORLDS.get(name)  # unknown names fail with a suggestion
