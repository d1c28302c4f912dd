"""Run configuration: defaults < config file (TOML or YAML) < command-line flags.

Every key is checked: an unknown key, a value of the wrong type or an unknown name fails with a message that names
the key (exit status 2 from the CLI).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError

FULL = "full"


@dataclass
class RunConfig:
    methods: list[str] = field(default_factory=lambda: ["all"])
    tasks: list[str] = field(default_factory=lambda: ["sr-t", "ner"])
    world: str = "bible"
    source: str | None = None  # None: the world's default source; "all": every source
    langs: list[str] | None = None  # None: every language the world has data for
    dims: list[int | str] = field(default_factory=lambda: [FULL])  # factorized dims; "full" = no factorization
    # None: the world's default (DEFAULT_SEEDS, three seeds, so every number on the board has a spread; the
    # synthetic world, whose numbers mean nothing, one)
    seeds: list[int] | None = None
    cpt_steps: int | None = None  # None: the profile's
    cpt_checkpoints: list[int] = field(default_factory=list)  # extra evaluation steps during CPT
    profile: str = "cpu"
    device: str = "auto"
    tracking_uri: str | None = None
    experiment: str | None = None  # None: "<world>/<source>"
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> {param: value}
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)  # task -> {param: value}
    cpt: dict[str, Any] = field(default_factory=dict)  # overrides of the profile's CPT settings
    fail_fast: bool = False
    executor: str = "local"  # local | ray
    ray_address: str | None = None  # None: a local Ray instance; "auto" or "ray://host:port": a cluster
    max_retries: int = 3  # Ray retries of a cell whose worker died
    workers: int | None = None  # local executor: cells run side by side (None: auto, see executors.local_workers)

    # -- derived -------------------------------------------------------------------------------------------
    def dim_values(self) -> list[int | None]:
        return [None if d == FULL else int(d) for d in self.dims]


EXECUTORS = ("local", "ray")  # where cells run (harness.executors implements each)

_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
_LIST_STR = {"methods", "tasks", "langs"}
_LIST_INT = {"seeds", "cpt_checkpoints"}
_DICT = {"method_params", "task_params", "cpt"}
_STR = {"world", "source", "profile", "device", "tracking_uri", "experiment", "executor", "ray_address"}


def _split(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError


def _coerce(key: str, value: Any) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"config key {key!r}: expected {expected}, got {value!r} ({type(value).__name__})")

    if value is None:
        if key in {"source", "langs", "seeds", "cpt_steps", "tracking_uri", "experiment", "ray_address", "workers"}:
            return None
        raise bad("a value")
    if key in _LIST_STR:
        try:
            items = _split(value)
        except TypeError:
            raise bad("a list of names or a comma-separated string") from None
        if not all(isinstance(v, str) for v in items):
            raise bad("a list of names")
        return items
    if key in _LIST_INT:
        try:
            items = _split(value)
            out = [int(v) for v in items]
            if any(isinstance(v, bool) or (isinstance(v, float)) for v in items):
                raise ValueError
        except (TypeError, ValueError):
            raise bad("a list of integers or a comma-separated string of integers") from None
        return out
    if key == "dims":
        try:
            items = _split(value)
        except TypeError:
            raise bad("a list of dimensions ('full' or integers)") from None
        out = []
        for v in items:
            if isinstance(v, str) and v.lower() in {FULL, "none"}:
                out.append(FULL)
                continue
            try:
                if isinstance(v, (bool, float)):
                    raise ValueError
                d = int(v)
            except (TypeError, ValueError):
                raise bad("'full' or positive integers") from None
            if d <= 0:
                raise bad("'full' or positive integers")
            out.append(d)
        return out
    if key in {"cpt_steps", "max_retries", "workers"}:
        if isinstance(value, bool):
            raise bad("a non-negative integer")
        try:
            v = int(value)
        except (TypeError, ValueError):
            raise bad("a non-negative integer") from None
        if v < 0 or (isinstance(value, float) and not value.is_integer()):
            raise bad("a non-negative integer")
        return v
    if key == "fail_fast":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key in _STR:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if key in _DICT:
        if not isinstance(value, dict):
            raise bad("a table/mapping")
        if key in {"method_params", "task_params"} and not all(isinstance(v, dict) for v in value.values()):
            raise bad("a mapping of name -> {param: value}")
        return dict(value)
    raise bad("a known type")  # pragma: no cover


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


def make_config(file_values: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Merge defaults < file values < overrides (flags given on the command line), checking every key."""
    cfg = RunConfig()
    for source_name, values in (("config file", file_values or {}), ("command line", overrides or {})):
        for key, value in values.items():
            if key not in _FIELDS:
                close = difflib.get_close_matches(key, list(_FIELDS), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown config key {key!r} in the {source_name}.{hint} "
                                  f"Known keys: {', '.join(sorted(_FIELDS))}")
            setattr(cfg, key, _coerce(key, value))
    from harness.profiles import profile

    profile(cfg.profile)
    if cfg.device not in {"auto", "cpu"} and not cfg.device.startswith(("cuda", "mps")):
        raise ConfigError(f"config key 'device': expected auto, cpu, cuda or cuda:N, got {cfg.device!r}")
    if cfg.executor not in EXECUTORS:
        raise ConfigError(f"config key 'executor': expected one of {', '.join(EXECUTORS)}, got {cfg.executor!r}")
    if cfg.seeds is not None and not cfg.seeds:
        raise ConfigError("config key 'seeds': give at least one seed")
    if not cfg.dims:
        raise ConfigError("config key 'dims': give at least one dimension ('full' for no factorization)")
    return cfg


DEFAULT_SEEDS = [1, 2, 3]


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
