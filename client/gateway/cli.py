"""`raftbus http --bootstrap B --listen HOST:PORT [...]`: the command that runs the gateway, and its flags."""
from __future__ import annotations

import argparse
import sys

from raftbus.client import settings as sdk_settings

from raftbus.gateway import settings
from raftbus.gateway.options import GatewayOptions


def add_http_command(sub, common: argparse.ArgumentParser) -> None:
    """Add `http` to the `raftbus` command's subparsers."""
    parser = sub.add_parser("http", parents=[common],
                            help="an HTTP/JSON gateway with OpenAPI docs and a web dashboard")
    add_gateway_options(parser)
    parser.set_defaults(handler=run_http)


def add_gateway_options(parser: argparse.ArgumentParser) -> None:
    defaults = GatewayOptions()
    parser.add_argument("--listen", default=settings.LISTEN_DEFAULT, help="HOST:PORT to serve on (port 0: any)")
    parser.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    parser.add_argument("--anonymous", default="", metavar="PRINCIPAL",
                        help="serve callers without a bearer token as PRINCIPAL (default: refuse them with 401)")
    parser.add_argument("--anonymous-token-file", default="", metavar="FILE",
                        help="a token of the --anonymous principal (needed when the cluster checks tokens)")
    parser.add_argument("--allowed-hosts", default="", metavar="H[,H...]",
                        help="Host header names served, name or name:port, '*' for any "
                             "(default: the listen host, localhost, 127.0.0.1, ::1)")
    parser.add_argument("--allowed-origins", default="", metavar="O[,O...]",
                        help="browser origins served besides the gateway's own, scheme://host[:port]")
    for name in ("request_body_bytes_max", "connections_max", "connections_per_address_max", "token_client_sets_max",
                 "token_client_sets_per_principal_max", "token_recheck_ms", "consumer_instances_max",
                 "consumer_instances_per_principal_max"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name),
                            metavar="N", help=f"default {getattr(defaults, name)}")


def options_from_args(args: argparse.Namespace) -> GatewayOptions:
    def names(text: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in text.split(",") if part.strip())

    return GatewayOptions(
        anonymous=args.anonymous, anonymous_token_file=args.anonymous_token_file,
        allowed_hosts=names(args.allowed_hosts), allowed_origins=names(args.allowed_origins),
        request_body_bytes_max=args.request_body_bytes_max, connections_max=args.connections_max,
        connections_per_address_max=args.connections_per_address_max, token_client_sets_max=args.token_client_sets_max,
        token_client_sets_per_principal_max=args.token_client_sets_per_principal_max,
        token_recheck_ms=args.token_recheck_ms, consumer_instances_max=args.consumer_instances_max,
        consumer_instances_per_principal_max=args.consumer_instances_per_principal_max)


def run_http(args: argparse.Namespace) -> int:
    try:
        from raftbus.gateway.server import serve
    except ImportError as exc:
        print(f"error: raftbus http needs the http extra (pip install 'raftbus[http]'): {exc}", file=sys.stderr)
        return 1
    bootstrap = getattr(args, "bootstrap", None) or sdk_settings.bootstrap_default()
    return serve(bootstrap, args.listen, args.log_level, options_from_args(args))
