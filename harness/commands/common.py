"""What the subcommands share: the consoles, the run flags and settings, and the checks made before anything
is loaded."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.core.errors import HarnessError

# piped or redirected output keeps its tables on one line per row (rich would otherwise fold them to 80 columns)
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200)
err = Console(stderr=True, soft_wrap=not sys.stderr.isatty())  # logs: never wrapped when piped


def add_run_args(p: argparse.ArgumentParser) -> None:
    from harness.config import add_run_flags

    add_run_flags(p)  # each setting is declared once, in harness.config.RunConfig


def config_from_args(args: argparse.Namespace):
    """The run's settings (:func:`harness.config.config_from_flags`); a value given twice in a list (``--seeds
    1,1``) is kept once, and said so in one line on stderr."""
    from harness.config import config_from_flags

    said: list[str] = []
    cfg = config_from_flags(args, said)
    for line in said:
        err.print(f"[yellow]note:[/yellow] {line}", soft_wrap=True, highlight=False)
    return cfg


def check_world_name(name: str) -> None:
    from harness.worlds import WORLDS

    WORLDS.get(name)  # unknown names fail with a suggestion


# -- the tracking store --------------------------------------------------------------------------------------
def check_tracking(uri: str | None) -> str:
    """The tracking URI a command will use, checked before anything is written: the cheap checks of
    :func:`harness.core.tracking.check_tracking_uri`, then whether MLflow opens that kind of store at all and
    whether its folder really takes a file (a read-only mount, ``/proc``: permission bits do not say), then
    whether an http(s) server answers. Every failure is one line (:class:`HarnessError`). With no URI given (and
    no ``MLFLOW_TRACKING_URI``), the default store in the harness home: the home is made first, so call this
    last, once every other input is checked."""
    from harness.core.tracking import check_tracking_reachable, check_tracking_uri

    checked = check_tracking_uri(uri)
    _check_store_usable(checked)
    check_tracking_reachable(checked)
    return checked


_HINT = "give --tracking-uri sqlite:///PATH/mlflow.db, a file: folder or an http(s):// MLflow server"


def _check_store_usable(uri: str) -> None:
    from urllib.parse import urlparse

    if uri.startswith(("http://", "https://")):
        return
    scheme = urlparse(uri).scheme.lower() if "://" in uri or ":" in uri else "file"
    if scheme == "sqlite":
        target = Path(uri[len("sqlite:///"):])
        if target.is_file():
            _check_sqlite_file(uri, target)
            return
        _probe_folder(uri, target.parent)
    elif scheme == "file":
        _check_file_store_allowed(uri)
        target = Path(urlparse(uri).path) if "://" in uri else Path(uri)
        _probe_folder(uri, target if target.is_dir() else target.parent)


def _check_sqlite_file(uri: str, target: Path) -> None:
    """An existing database file must be an SQLite database this process may write."""
    try:
        with open(target, "r+b") as f:
            head = f.read(16)
    except OSError as exc:
        raise HarnessError(f"tracking URI {uri!r}: {target} cannot be opened for writing "
                           f"({exc.strerror or exc}); fix its permissions or {_HINT}") from None
    if head and head != b"SQLite format 3\x00":
        raise HarnessError(f"tracking URI {uri!r}: {target} is not an SQLite database; {_HINT}")


def _probe_folder(uri: str, folder: Path) -> None:
    """Whether a file can be made in ``folder`` (made and removed at once)."""
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=".harness-probe-", dir=folder)
    except OSError as exc:
        raise HarnessError(f"tracking URI {uri!r}: no file can be made in {folder} ({exc.strerror or exc}); "
                           f"give a folder this user can write, or {_HINT}") from None
    os.close(fd)
    os.unlink(name)


def _check_file_store_allowed(uri: str) -> None:
    """MLflow 3 refuses its file store unless ``MLFLOW_ALLOW_FILE_STORE`` is set: say so before the run starts."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:  # an MLflow without the switch opens file stores
        return
    if not MLFLOW_ALLOW_FILE_STORE.get():
        raise HarnessError(f"tracking URI {uri!r}: this MLflow opens a file store only with "
                           f"MLFLOW_ALLOW_FILE_STORE=true; set it, or give --tracking-uri sqlite:///PATH/mlflow.db "
                           f"or an http(s):// MLflow server")


# -- the config tables ---------------------------------------------------------------------------------------
def check_config_tables(cfg: Any) -> None:
    """The tables of a run's settings, checked before any world is built: ``method_params`` (each method named
    must exist; its parameters are checked against what the method declares, names and values, as the method
    checks them when it runs), ``task_params`` (each task named must exist; its parameter names are checked where
    the task declares them) and ``cpt`` (:func:`harness.spec.cpt_settings`: its names; its precision and its
    effective batch against the devices, :func:`harness.spec.check_cpt_table`)."""
    from harness.spec import check_cpt_table, cpt_settings, profile_of

    for method in cfg.method_params:
        check_method_params(cfg, method)
    for task, given in cfg.task_params.items():
        check_task_params(task, given)
    check_cpt_table(cfg, cpt_settings(cfg, profile_of(cfg)))


def _did_you_mean(name: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _named(registry: Any, key: str, name: str) -> Any:
    """The registry's entry ``name``; an unknown one fails naming the config key it was found under."""
    from harness.core.errors import ConfigError, UnknownNameError

    try:
        return registry.get(name)
    except UnknownNameError as exc:
        raise ConfigError(f"config key {key!r}: {exc}") from None


def check_method_params(cfg: Any, method: str) -> None:
    """``[method_params.<method>]``: the names the method declares (``params``, plus the embedding-surgery
    options every method takes) and their values (:func:`methods.params.resolve`, over the profile's settings
    for the method: :func:`harness.config.method_params`, as the run merges them). A method that declares no
    parameter list (a plug-in class without ``params``) takes none but the surgery options: a parameter given to
    it would be ignored, so it is refused."""
    from harness.core.errors import ConfigError
    from harness.core.registry import METHODS
    from harness.initialize import SURGERY_PARAMS
    from harness.spec import method_params, profile_of

    cls = _named(METHODS, "method_params", method)
    declared = getattr(cls, "params", None)
    if not isinstance(declared, tuple | list):
        ignored = sorted(set(cfg.method_params[method]) - set(SURGERY_PARAMS))
        if ignored:
            raise ConfigError(f"config key 'method_params.{method}': {method} declares no parameters (no `params` "
                              f"list of methods.params.Param on its class), so {', '.join(map(repr, ignored))} would "
                              f"be ignored; leave them out, or declare them on the method (docs/adding-a-method.md)")
        return
    from methods.params import resolve

    names = [p.name for p in declared]
    unknown = sorted(set(cfg.method_params[method]) - set(names) - set(SURGERY_PARAMS))
    if unknown:
        takes = ", ".join(sorted(names)) or "no parameters of its own"
        raise ConfigError(f"config key 'method_params.{method}': unknown parameter "
                          f"{', '.join(repr(u) + _did_you_mean(u, names) for u in unknown)}; {method} takes "
                          f"{takes} (`harness list --method {method}` describes them)")
    values = method_params(cfg, method, profile_of(cfg))
    try:
        resolve(method, declared, {k: v for k, v in values.items() if k not in SURGERY_PARAMS})
    except ConfigError as exc:
        raise ConfigError(f"config key 'method_params.{method}': {exc}") from None


def task_param_names(cls: Any) -> list[str] | None:
    """The parameter names a task declares, or None where it declares none. A task declares them as a class
    attribute ``PARAMS``, or, as the tagging and MLM tasks do, by the settings of its module's ``PROFILES`` (profile
    -> {setting: value}, each overridable) plus ``EXTRA_PARAMS``."""
    import sys

    names = getattr(cls, "PARAMS", None)
    if isinstance(names, tuple | list | frozenset | set):
        return sorted(names)
    module = sys.modules.get(getattr(cls, "__module__", ""))
    profiles = getattr(module, "PROFILES", None)
    if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
        return None
    return sorted({k for v in profiles.values() for k in v} | set(getattr(module, "EXTRA_PARAMS", ())))


def task_param_kind(cls: Any, name: str) -> str | None:
    """What a task's parameter ``name`` takes, read from the values its module's ``PROFILES`` give it: ``bool``
    (every profile a switch), ``count`` (integers >= 0), ``number`` (numbers >= 0), ``str``; None where the profiles
    say nothing of one kind (a table, a parameter of no profile)."""
    import sys

    profiles = getattr(sys.modules.get(getattr(cls, "__module__", "")), "PROFILES", None)
    if not isinstance(profiles, dict):
        return None
    values = [p[name] for p in profiles.values() if isinstance(p, dict) and p.get(name) is not None]
    if not values:
        return None
    if all(isinstance(v, bool) for v in values):
        return "bool"
    if any(isinstance(v, bool) for v in values):
        return None
    if all(isinstance(v, int) for v in values):
        return "count"
    if all(isinstance(v, int | float) for v in values):
        return "number"
    return "str" if all(isinstance(v, str) for v in values) else None


_TASK_KINDS = {"bool": ("true or false", lambda v: isinstance(v, bool)),
               "count": ("an integer >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
               "number": ("a number >= 0", lambda v: isinstance(v, int | float) and not isinstance(v, bool)
                          and v == v and v >= 0),
               "str": ("a string", lambda v: isinstance(v, str))}


def check_task_params(task: str, given: dict[str, Any]) -> None:
    """``[task_params.<task>]``: the task must exist, the names must be ones it declares (where it does), and each
    value of the kind its profiles give the parameter (:func:`task_param_kind`; ``null`` keeps the default where a
    profile's is none); the rest of a value's checks are the task's, when it evaluates."""
    from harness.core.errors import ConfigError
    from harness.core.registry import TASKS

    cls = _named(TASKS, "task_params", task)
    names = task_param_names(cls)
    if names is None:
        return
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ConfigError(f"config key 'task_params.{task}': unknown parameter "
                          f"{', '.join(repr(u) + _did_you_mean(u, names) for u in unknown)}; {task} takes "
                          f"{', '.join(names)}")
    for name, value in given.items():
        kind = task_param_kind(cls, name)
        if kind is None or value is None:
            continue
        what, ok = _TASK_KINDS[kind]
        if not ok(value):
            raise ConfigError(f"config key 'task_params.{task}.{name}': expected {what}, got {value!r}; fix it in "
                              f"the [task_params.{task}] table of the config file")
