"""Run configuration: defaults < config file (TOML or YAML) < command-line flags.

Every key is checked: an unknown key, a value of the wrong type or an unknown name fails with a message that names
the key (exit status 2 from the CLI).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, HarnessError
from harness.core.profiles import DEFAULT_SEEDS

FULL = "full"
RERUN_POLICIES = ("never", "failed", "stale", "all")  # the resume policies (harness.cell)
EXECUTORS = ("local", "ray")  # where cells run (harness.executors implements each)


def setting(default: Any = dataclasses.MISSING, *, kind: str, help: str | None = None, nullable: bool = False,
            flag_type: type = str, factory: Any = dataclasses.MISSING, check: Any = None) -> Any:
    """One run setting, declared once as a field of :class:`RunConfig`: its name is the config key and (dashed)
    the ``harness run`` / ``harness plan`` flag; ``kind`` says how a value from a file or a flag is read
    (:data:`_KINDS`); ``help`` is the flag's help (None: no flag, a config-file key only); ``nullable``: None
    (the setting's own "not given") is accepted; ``flag_type``: what argparse parses the flag as (``bool``: a
    switch that sets True); ``check(cfg)`` runs once every value is merged."""
    meta = {"kind": kind, "help": help, "nullable": nullable, "flag_type": flag_type, "check": check}
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


def _check_profile(cfg: RunConfig) -> None:
    from harness.core.profiles import profile

    profile(cfg.profile)


def given_as(cfg: RunConfig, key: str) -> str:
    """How the run's setting ``key`` was given, for a message that refuses it: its flag (``--cpt-steps``) when the
    command line gave it, else its config key (``config key 'cpt_steps'``)."""
    if key in getattr(cfg, "_flags", ()):
        return "--" + key.replace("_", "-")
    return f"config key {key!r}"


def _check_precision(cfg: RunConfig) -> None:
    from harness.core.precision import PRECISIONS

    if cfg.precision is not None and cfg.precision.lower() not in PRECISIONS:
        raise ConfigError(f"{given_as(cfg, 'precision')}: expected one of {', '.join(PRECISIONS)}, got "
                          f"{cfg.precision!r}")


def _check_device(cfg: RunConfig) -> None:
    """The one check of a device's name: ``auto``, ``cpu``, ``mps``, ``cuda`` or ``cuda:N``."""
    if cfg.device not in {"auto", "cpu"} and not cfg.device.startswith(("cuda", "mps")):
        raise ConfigError(f"{given_as(cfg, 'device')}: expected auto, cpu, cuda or cuda:N, got {cfg.device!r}")
    idx = cfg.device.partition(":")[2] if cfg.device.startswith("cuda") else ""
    if idx and not idx.isdigit():
        raise ConfigError(f"--device {cfg.device!r} is malformed; give cuda or cuda:N")


def device_available(device: str, cpt_devices: int = 1) -> None:
    """The one check that a CUDA device exists on this machine, and GPUs enough for ``cpt_devices`` per cell,
    before anything is loaded (torch's own error is a traceback deep in a cell); what runs here asks it
    (``harness run``, ``harness init``), not ``harness plan``, which may plan for a cluster from a machine without
    one."""
    from harness.core.devices import gpu_slots

    if not device.startswith("cuda"):
        gpu_slots(resolve_device(device), cpt_devices)  # a CPU emulating a GPU node: its GPUs counted the same
        return
    import torch

    idx = device.partition(":")[2]
    if not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: CUDA is not available on this machine; use --device cpu or auto")
    if idx and int(idx) >= torch.cuda.device_count():
        raise ConfigError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                          f"give cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    gpu_slots(device, cpt_devices)


def resolve_device(device: str) -> str:
    """The one resolution of ``auto``: a CUDA GPU when this machine has one, else the CPU. A torch built without
    CUDA (nor ROCm) can have none: that is read from its ``version.py`` without importing torch (a second)."""
    if device != "auto":
        return device
    if not _torch_has_gpu_build():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _torch_has_gpu_build() -> bool:
    """Whether the installed torch was built with CUDA or ROCm (its ``version.cuda`` / ``version.hip``), read from
    ``torch/version.py`` without importing torch; True where that cannot be read (then torch is asked)."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return True
    try:
        tree = ast.parse((Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text())
    except (OSError, SyntaxError, StopIteration):
        return True
    found: dict[str, object] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip") and node.value is not None:
            try:
                found[target.id] = ast.literal_eval(node.value)
            except ValueError:
                return True
    return set(found) != {"cuda", "hip"} or any(v is not None for v in found.values())


def _check_workers(cfg: RunConfig) -> None:
    if cfg.workers is not None and cfg.workers < 1:
        raise ConfigError(f"{given_as(cfg, 'workers')}: give at least 1 (cells side by side), not {cfg.workers}")


def _check_executor(cfg: RunConfig) -> None:
    if cfg.executor not in EXECUTORS:
        raise ConfigError(f"{given_as(cfg, 'executor')}: expected one of {', '.join(EXECUTORS)}, got {cfg.executor!r}")


def _check_rerun(cfg: RunConfig) -> None:
    if cfg.rerun not in RERUN_POLICIES:
        raise ConfigError(f"{given_as(cfg, 'rerun')}: expected one of {', '.join(RERUN_POLICIES)}, got {cfg.rerun!r}")


MAX_SEED = 2**32 - 1  # numpy's and the Trainer's seeds are unsigned 32-bit integers


def _check_seeds(cfg: RunConfig) -> None:
    if cfg.seeds is not None and not cfg.seeds:
        raise ConfigError(f"{given_as(cfg, 'seeds')}: give at least one seed")
    outside = [s for s in cfg.seeds or [] if not 0 <= s <= MAX_SEED]
    if outside:
        raise ConfigError(f"{given_as(cfg, 'seeds')} {','.join(map(str, outside))}: a seed is an integer from 0 to "
                          f"{MAX_SEED} (2**32 - 1); give seeds in that range, e.g. 1,2,3")


def _check_dims(cfg: RunConfig) -> None:
    if not cfg.dims:
        raise ConfigError(f"{given_as(cfg, 'dims')}: give at least one dimension ('full' for no factorization)")


@dataclass
class RunConfig:
    """Every setting of a run (``harness run``, ``harness plan``): defaults here < config file < flags."""

    methods: list[str] = setting(kind="names", factory=lambda: ["all"],
                                 help="'all' or a comma-separated list (see `harness list`)")
    tasks: list[str] = setting(kind="names", factory=lambda: ["sr-t", "ner"],
                               help="comma-separated tasks, e.g. sr-t,ner")
    world: str = setting("bible", kind="str", help="world name (default: bible)")
    # None: the world's default source; "all": every source
    source: str | None = setting(None, kind="str", nullable=True,
                                 help="source model of the world ('all' for every one)")
    langs: list[str] | None = setting(None, kind="names", nullable=True,  # None: every language with data
                                      help="comma-separated iso3_Script codes (default: every language with data)")
    dims: list[int | str] = setting(kind="dims", factory=lambda: [FULL], check=_check_dims,  # "full": none
                                    help="factorized dims, e.g. 100,200,full (default: full)")
    # None: the world's default (DEFAULT_SEEDS, three seeds, so every number on the board has a spread; the
    # synthetic world, whose numbers mean nothing, one)
    seeds: list[int] | None = setting(None, kind="ints", nullable=True, check=_check_seeds,
                                      help="comma-separated seeds (default: 1,2,3; 1 on the synthetic world)")
    cpt_steps: int | None = setting(None, kind="count", nullable=True, flag_type=int,  # None: the profile's
                                    help="continued pre-training steps (default: the profile's)")
    cpt_checkpoints: list[int] = setting(kind="ints", factory=list,  # extra evaluation steps during CPT
                                         help="extra CPT steps at which to evaluate, e.g. 10,20")
    profile: str = setting("cpu", kind="str", check=_check_profile, help="cpu (default) or paper")
    device: str = setting("auto", kind="str", check=_check_device, help="auto (default), cpu, cuda, cuda:N")
    # None: the profile's (auto: fp32 on any CPU, bf16 on a CUDA GPU that computes it; harness.core.precision)
    precision: str | None = setting(None, kind="str", nullable=True, check=_check_precision,
                                    help="model passes of evaluation and CPT: fp32, bf16, fp16 (CUDA) or auto "
                                         "(default: fp32 on any CPU, bf16 on a CUDA GPU that computes it); "
                                         "`[cpt] precision` sets CPT's alone")
    tracking_uri: str | None = setting(None, kind="str", nullable=True,
                                       help="MLflow tracking URI (default: sqlite under the harness home)")
    experiment: str | None = setting(None, kind="str", nullable=True,  # None: "<world>/<source>"
                                     help="MLflow experiment name (default: <world>/<source>)")
    method_params: dict[str, dict[str, Any]] = setting(kind="params", factory=dict)  # method -> {param: value}
    task_params: dict[str, dict[str, Any]] = setting(kind="params", factory=dict)  # task -> {param: value}
    cpt: dict[str, Any] = setting(kind="table", factory=dict)  # overrides of the profile's CPT settings
    fail_fast: bool = setting(False, kind="bool", flag_type=bool, help="stop at the first failed cell")
    # the resume policy (harness/cell.py); no part of a cell's identity
    rerun: str = setting("never", kind="str", check=_check_rerun,
                         help="which cells logged before start over: never (default: finished cells are kept, "
                              "failed or killed ones resume), failed (failed or killed ones start over), stale "
                              "(cells that ran another version of their method's code) or all")
    # not part of any cell's identity: what the home keeps once a cell's run finished
    keep_products: bool = setting(False, kind="bool", flag_type=bool,
                                  help="keep the init and CPT products of cells whose run finished (default: "
                                       "removed; a later evaluation of the cell builds them again)")
    executor: str = setting("local", kind="str", check=_check_executor,
                            help="local (default: this machine) or ray (a Ray task per cell)")
    # None: a local Ray instance; "auto" or "ray://host:port": a cluster
    ray_address: str | None = setting(None, kind="str", nullable=True,
                                      help="Ray cluster to join ('auto' or ray://host:port); default: a local "
                                           "instance")
    max_retries: int = setting(3, kind="count", flag_type=int,
                               help="Ray retries of a cell whose worker died (default 3)")
    # local executor: cells run side by side (None: auto, see executors.local_workers)
    workers: int | None = setting(None, kind="count", nullable=True, flag_type=int, check=_check_workers,
                                  help="local executor: cells run side by side, each in its own process (default: "
                                       "on a CPU, the cores / the profile's CPUs per cell; otherwise 1 = in this "
                                       "process)")
    # local executor: each cell in a fresh process of its own (None: auto, on an accelerator; see
    # harness.executors.isolate_cells): a CUDA fault that poisons its process then stays in its cell
    isolate_cells: bool | None = setting(None, kind="bool", nullable=True, flag_type=bool,
                                         help="run each cell in a fresh process of its own (default on a GPU: a "
                                              "CUDA fault then stays in its cell; in a config file, false turns "
                                              "it off)")

    # -- derived -------------------------------------------------------------------------------------------
    def dim_values(self) -> list[int | None]:
        return [None if d == FULL else int(d) for d in self.dims]


_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
# the order of the flags in `--help` (a setting without help has no flag)
_FLAG_ORDER = ("methods", "tasks", "world", "source", "langs", "dims", "seeds", "cpt_steps", "cpt_checkpoints",
               "cpt_devices", "profile", "device", "precision", "tracking_uri", "experiment", "executor", "workers", "isolate_cells", "ray_address",
               "max_retries", "rerun", "config", "fail_fast", "keep_products")


def _split(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError


class _Bad(Exception):
    """A value of the wrong type: ``expected`` says what the key takes."""

    def __init__(self, expected: str):
        self.expected = expected


def _names(value: Any) -> list[str]:
    try:
        items = _split(value)
    except TypeError:
        raise _Bad("a list of names or a comma-separated string") from None
    if not all(isinstance(v, str) for v in items):
        raise _Bad("a list of names")
    return items


def _ints(value: Any) -> list[int]:
    try:
        items = _split(value)
        out = [int(v) for v in items]
        if any(isinstance(v, bool) or (isinstance(v, float)) for v in items):
            raise ValueError
    except (TypeError, ValueError):
        raise _Bad("a list of integers or a comma-separated string of integers") from None
    return out


def _dims(value: Any) -> list[int | str]:
    try:
        items = _split(value)
    except TypeError:
        raise _Bad("a list of dimensions ('full' or integers)") from None
    out: list[int | str] = []
    for v in items:
        if isinstance(v, str) and v.lower() in {FULL, "none"}:
            out.append(FULL)
            continue
        try:
            if isinstance(v, (bool, float)):
                raise ValueError
            d = int(v)
        except (TypeError, ValueError):
            raise _Bad("'full' or positive integers") from None
        if d <= 0:
            raise _Bad("'full' or positive integers")
        out.append(d)
    return out


def _count(value: Any) -> int:
    if isinstance(value, bool):
        raise _Bad("a non-negative integer")
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise _Bad("a non-negative integer") from None
    if v < 0 or (isinstance(value, float) and not value.is_integer()):
        raise _Bad("a non-negative integer")
    return v


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad("true or false")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad("a string")
    return value


def _table(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad("a table/mapping")
    return dict(value)


def _params(value: Any) -> dict[str, dict[str, Any]]:
    out = _table(value)
    if not all(isinstance(v, dict) for v in out.values()):
        raise _Bad("a mapping of name -> {param: value}")
    return out


# how a value of each kind of setting is read from a config file or a flag
_KINDS = {"names": _names, "ints": _ints, "dims": _dims, "count": _count, "bool": _bool, "str": _str,
          "table": _table, "params": _params}


def _coerce(key: str, value: Any, flag: bool = False) -> Any:
    """``value`` of setting ``key`` as its declared kind; a wrong one fails naming the key (its flag, ``flag``: given
    on the command line) and what it takes."""
    meta = _FIELDS[key].metadata
    try:
        if value is None:
            if meta["nullable"]:
                return None
            raise _Bad("a value")
        return _KINDS[meta["kind"]](value)
    except _Bad as bad:
        name = "--" + key.replace("_", "-") if flag and meta["help"] else f"config key {key!r}"
        raise ConfigError(f"{name}: expected {bad.expected}, got {value!r} ({type(value).__name__})") from None


def load_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif path.suffix.lower() in {".yaml", ".yml"}:
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"config file {str(path)!r}: use a .toml, .yaml or .yml file")
    except ConfigError:
        raise
    except Exception as exc:
        mark = getattr(exc, "problem_mark", None)  # YAML: its message spans several lines with a code excerpt
        if mark is not None:
            why = f"{getattr(exc, 'problem', None) or exc} at line {mark.line + 1}, column {mark.column + 1}"
        else:
            why = " ".join(str(exc).split())
        raise ConfigError(f"config file {str(path)!r} could not be parsed: {why}; fix its syntax") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a table/mapping at the top level")
    if "run" in data and isinstance(data["run"], dict) and set(data) == {"run"}:
        data = data["run"]
    return {k.replace("-", "_"): v for k, v in data.items()}


def make_config(file_values: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None,
                said: list[str] | None = None) -> RunConfig:
    """Merge defaults < file values < overrides (flags given on the command line), checking every key. A value
    given twice in a list of methods, tasks, languages, dims or seeds is kept once (one identity is one cell): what
    was removed is appended to ``said``, one line each, for the command to print."""
    cfg = RunConfig()
    flags = {k for k in overrides or {} if k in _FIELDS}
    cfg.__dict__["_flags"] = frozenset(flags)  # (not a field: how each setting was given, for the messages)
    for source_name, values in (("config file", file_values or {}), ("command line", overrides or {})):
        for key, value in values.items():
            if key not in _FIELDS:
                close = difflib.get_close_matches(key, list(_FIELDS), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown config key {key!r} in the {source_name}.{hint} "
                                  f"Known keys: {', '.join(sorted(_FIELDS))}")
            setattr(cfg, key, _coerce(key, value, flag=source_name == "command line"))
    for key in _UNIQUE:
        values = getattr(cfg, key)
        if values:
            kept = list(dict.fromkeys(values))
            if len(kept) < len(values):
                twice = sorted({str(v) for v in values if values.count(v) > 1})
                setattr(cfg, key, kept)
                if said is not None:
                    said.append(f"{given_as(cfg, key)}: {', '.join(twice)} given more than once, kept once "
                                f"({','.join(map(str, kept))})")
    for f in _CHECK_ORDER:
        _FIELDS[f].metadata["check"](cfg)
    return cfg


_UNIQUE = ("methods", "tasks", "langs", "dims", "seeds", "cpt_checkpoints")  # lists whose values name cells
_CHECK_ORDER = ("profile", "device", "precision", "executor", "rerun", "seeds", "dims", "workers")  # each one with a ``check``, in this order
assert set(_CHECK_ORDER) == {f.name for f in _FIELDS.values() if f.metadata["check"] is not None}


# -- flags -------------------------------------------------------------------------------------------------
def add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``harness run`` and ``harness plan``: one per setting with a help text, plus ``--config``
    and the shortcut ``--cpt-devices`` (the ``devices`` entry of the ``cpt`` table)."""
    for name in _FLAG_ORDER:
        flag = "--" + name.replace("_", "-")
        if name == "cpt_devices":
            p.add_argument(flag, type=int, help="processes/GPUs for CPT (torchrun; the effective batch is kept)")
        elif name == "config":
            p.add_argument(flag, type=Path, help="TOML or YAML file with the same keys; flags override it")
        else:
            meta = _FIELDS[name].metadata
            if meta["flag_type"] is bool:
                p.add_argument(flag, action="store_true", default=None, help=meta["help"])
            else:
                p.add_argument(flag, type=meta["flag_type"], help=meta["help"])
    missing = {f.name for f in _FIELDS.values() if f.metadata["help"]} - set(_FLAG_ORDER)
    assert not missing, f"settings with a help text but no place among the flags: {missing}"


def config_from_flags(args: argparse.Namespace, said: list[str] | None = None) -> RunConfig:
    """The run's settings from parsed flags: defaults < ``--config`` file < the flags given (``said``: as
    :func:`make_config`)."""
    file_values = load_config_file(args.config) if getattr(args, "config", None) else {}
    overrides = {name: getattr(args, name) for name in _FLAG_ORDER
                 if name in _FIELDS and getattr(args, name, None) is not None}
    if getattr(args, "cpt_devices", None) is not None:
        if args.cpt_devices < 1:
            raise HarnessError("--cpt-devices must be at least 1")
        overrides["cpt"] = {**file_values.get("cpt", {}), "devices": args.cpt_devices}
    cfg = make_config(file_values, overrides, said)
    if getattr(args, "cpt_devices", None) is not None:
        cfg.__dict__["_flags"] = cfg._flags - {"cpt"} | {"cpt_devices"}  # (the rest of [cpt] is the file's)
    return cfg




def run_seeds(cfg: RunConfig, world_name: str) -> list[int]:
    """The seeds a run uses: the given ones, else the world builder's ``default_seeds``, else :data:`DEFAULT_SEEDS`."""
    if cfg.seeds:
        return list(cfg.seeds)
    from harness.worlds import WORLDS

    try:
        builder = WORLDS.get(world_name)
    except HarnessError:  # an unknown world is reported where it is loaded
        builder = None
    return list(getattr(builder, "default_seeds", None) or DEFAULT_SEEDS)


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
