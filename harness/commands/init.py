"""``harness init``: write one initialized model folder and its ``init_report.json``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.commands.common import check_method_params, check_world_name, console
from harness.core.errors import HarnessError
from harness.core.record import INIT_REPORT


def cmd_init(args: argparse.Namespace) -> int:
    """One cell's initialization, with the settings of ``harness run`` (:class:`harness.config.RunConfig`: the same
    checks, the same merging of the profile's method parameters with the given ones, the same device)."""
    from harness.config import device_available, make_config, resolve_device, run_seeds
    from harness.core.paths import harness_home
    from harness.core.registry import METHODS
    from harness.initialize import initialize_model
    from harness.spec import method_params, profile_of
    from harness.worlds import declared_world, get_world

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise HarnessError(f"--out {out} is a file; give a folder")
    if out.exists() and any(out.iterdir()) and not args.force:
        raise HarnessError(f"--out {out} exists and is not empty; choose another folder or pass --force")
    try:
        params = json.loads(args.params) if args.params else {}
    except json.JSONDecodeError as exc:
        raise HarnessError(f"--params is not valid JSON ({exc}); give an object, e.g. '{{\"k\": 10}}'") from None
    if not isinstance(params, dict):
        raise HarnessError("--params must be a JSON object, e.g. '{\"k\": 10}'")
    METHODS.get(args.method)
    check_world_name(args.world)
    try:
        cfg = make_config(overrides={
            "world": args.world, "source": args.source, "methods": [args.method], "profile": args.profile,
            "device": args.device, "dims": ["full" if args.dim is None else args.dim],
            "seeds": None if args.seed is None else [args.seed], "method_params": {args.method: params}})
    except HarnessError as exc:  # name the flag, not the config key
        raise HarnessError(str(exc).replace("config key 'dims'", "--dim").replace("config key ", "--")) from None
    try:
        check_method_params(cfg, args.method)  # names and values, as `harness run` checks them
    except HarnessError as exc:
        raise HarnessError(str(exc).replace(f"config key 'method_params.{args.method}'", "--params")) from None
    device_available(cfg.device)
    declared = declared_world(cfg.world)  # --source and --dim against what the world declares, before it is built
    if declared is not None:
        _check_source_and_dim(cfg, declared)
    harness_home()
    world = get_world(cfg.world)
    _check_source_and_dim(cfg, world)
    source = cfg.source or world.default_source
    out.mkdir(parents=True, exist_ok=True)
    report = initialize_model(world, source, args.method, dim=cfg.dim_values()[0],
                              seed=run_seeds(cfg, cfg.world)[0], params=method_params(cfg, args.method, profile_of(cfg)),
                              out_dir=out, device=resolve_device(cfg.device), profile=cfg.profile)
    console.print_json(json.dumps(report.get("counts", {})))
    console.print(f"model written to {out} (report: {out / INIT_REPORT})")
    return 0


def _check_source_and_dim(cfg: Any, world: Any) -> None:
    """The source is one of ``world``'s, and a factorized dim is below its hidden size (:func:`harness.plan.
    check_dims`, as ``harness run`` checks ``--dims``)."""
    from harness.plan import check_dims

    source = cfg.source or world.default_source
    world.check_source(source)
    try:
        check_dims(cfg.dim_values(), world, [source])
    except HarnessError as exc:  # name the flag of this command
        raise HarnessError(str(exc).replace("--dims", "--dim").replace("give dims", "give a dim")) from None


def add_parser(sub: Any) -> None:
    i = sub.add_parser("init", help="write one initialized model folder and its init_report.json")
    i.add_argument("--world", default="bible", help="the world whose source model and target tokenizer it uses "
                                                    "(default: bible; `harness list` names them)")
    i.add_argument("--source", help="source model (default: the world's default)")
    i.add_argument("--method", required=True, help="the initialization method (`harness list` names them)")
    i.add_argument("--dim", type=int, default=None, help="factorized dim (default: full)")
    i.add_argument("--seed", type=int, default=None, help="seed (default: the world's first default seed, 1)")
    i.add_argument("--params", help="method parameters as a JSON object (over the profile's)")
    i.add_argument("--profile", default="cpu",
                   help="whose method parameters to start from: cpu (default, as `harness run` uses) or paper")
    i.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: a CUDA GPU where this machine has one, else the CPU)")
    i.add_argument("--out", required=True, help="the folder to write the model and its init_report.json to")
    i.add_argument("--force", action="store_true", help="write into a non-empty --out")
    i.set_defaults(func=cmd_init)
