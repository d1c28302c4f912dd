"""``harness ui``: the MLflow UI on 127.0.0.1."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_ui(args: argparse.Namespace) -> int:
    from harness.ui import serve

    return serve(tracking_uri=args.tracking_uri, port=args.port, open_browser=args.open and not args.no_browser)


def add_parser(sub: Any) -> None:
    u = sub.add_parser("ui", help="start the MLflow UI on 127.0.0.1 and print the results' URLs (again when new "
                       "results are logged)")
    u.add_argument("--tracking-uri", help="the MLflow store to serve (default: $MLFLOW_TRACKING_URI, else the "
                                          "harness home's sqlite store)")
    u.add_argument("--port", type=int, default=5000, help="the port on 127.0.0.1 to serve on (default 5000)")
    u.add_argument("--open", action="store_true", help="open the current leaderboard in a browser")
    u.add_argument("--no-browser", action="store_true", help="never open a browser (the default)")
    u.set_defaults(func=cmd_ui)
