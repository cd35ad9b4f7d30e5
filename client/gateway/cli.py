"""`raftbus http --bootstrap B --listen HOST:PORT`: the command that runs the gateway."""
from __future__ import annotations

import argparse
import sys

from raftbus.client import settings as sdk_settings

from raftbus.gateway import settings


def add_http_command(sub, common: argparse.ArgumentParser) -> None:
    """Add `http` to the `raftbus` command's subparsers."""
    parser = sub.add_parser("http", parents=[common],
                            help="an HTTP/JSON gateway with OpenAPI docs and a web dashboard")
    parser.add_argument("--listen", default=settings.LISTEN_DEFAULT, help="HOST:PORT to serve on (port 0: any)")
    parser.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(handler=run_http)


def run_http(args: argparse.Namespace) -> int:
    try:
        from raftbus.gateway.server import serve
    except ImportError as exc:
        print(f"error: raftbus http needs the http extra (pip install 'raftbus[http]'): {exc}", file=sys.stderr)
        return 1
    bootstrap = getattr(args, "bootstrap", None) or sdk_settings.bootstrap_default()
    return serve(bootstrap, args.listen, args.log_level)
