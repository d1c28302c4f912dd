"""``harness init``: write one initialized model folder and its ``init_report.json``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.commands.common import check_device, check_world_name, console
from harness.core.errors import HarnessError


def cmd_init(args: argparse.Namespace) -> int:
    from harness.core.paths import harness_home
    from harness.core.profiles import profile
    from harness.core.registry import METHODS
    from harness.initialize import initialize_model
    from harness.worlds import get_world

    harness_home()
    check_world_name(args.world)
    METHODS.get(args.method)
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
    if args.dim is not None and args.dim <= 0:
        raise HarnessError(f"--dim {args.dim} must be a positive number (leave it out for the full dimension)")
    params = {**profile(args.profile).get("method_params", {}).get(args.method, {}), **params}
    if args.device not in {"auto", "cpu"} and not args.device.startswith(("cuda", "mps")):
        raise HarnessError(f"--device {args.device!r}: expected auto, cpu, cuda or cuda:N")
    check_device(args.device)
    world = get_world(args.world)
    source = args.source or world.default_source
    world.source_dir(source)
    out.mkdir(parents=True, exist_ok=True)
    from harness.plan import resolve_device

    report = initialize_model(world, source, args.method, dim=args.dim, seed=args.seed, params=params,
                              out_dir=out, device=resolve_device(args.device), profile=args.profile)
    console.print_json(json.dumps(report.get("counts", {})))
    console.print(f"model written to {out} (report: {out / 'init_report.json'})")
    return 0


def add_parser(sub: Any) -> None:
    i = sub.add_parser("init", help="write one initialized model folder and its init_report.json")
    i.add_argument("--world", default="bible")
    i.add_argument("--source", help="source model (default: the world's default)")
    i.add_argument("--method", required=True)
    i.add_argument("--dim", type=int, default=None, help="factorized dim (default: full)")
    i.add_argument("--seed", type=int, default=1)
    i.add_argument("--params", help="method parameters as a JSON object (over the profile's)")
    i.add_argument("--profile", default="cpu",
                   help="whose method parameters to start from: cpu (default, as `harness run` uses) or paper")
    i.add_argument("--device", default="auto")
    i.add_argument("--out", required=True)
    i.add_argument("--force", action="store_true", help="write into a non-empty --out")
    i.set_defaults(func=cmd_init)
