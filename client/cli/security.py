"""`raftbus tokens create|list|revoke`, `raftbus acl grant|revoke|list`, `raftbus whoami`, `raftbus secret generate`
(a fresh cluster secret), and the credential
flags every command takes: --tls-ca FILE, --token-file FILE (RAFTBUS_TLS_CA, RAFTBUS_TOKEN_FILE), and for mutual
TLS --tls-cert FILE / --tls-key FILE (RAFTBUS_TLS_CERT, RAFTBUS_TLS_KEY). The SDK reads those variables when it
is given no credentials (client/credentials.py), so the flags only set them for this process."""
from __future__ import annotations

import argparse
import json
import os
import secrets

from raftbus.client import credentials
from raftbus.client.admin import Admin

CREDENTIAL_FLAGS = {"tls_ca": credentials.TLS_CA_ENV, "token_file": credentials.TOKEN_FILE_ENV,
                    "tls_cert": credentials.TLS_CERT_ENV, "tls_key": credentials.TLS_KEY_ENV}
_HELP = {"tls_ca": "CA certificate (PEM) that signed the brokers' certificates",
         "token_file": "file holding a bearer token", "tls_cert": "client certificate (PEM) for mutual TLS",
         "tls_key": "its private key (PEM)"}


def add_credential_options(parser: argparse.ArgumentParser, default=argparse.SUPPRESS) -> None:
    for name, env in CREDENTIAL_FLAGS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", default=default, metavar="FILE",
                            help=f"{_HELP[name]} (default: ${env})")


PEM_KINDS = {"tls_ca": credentials.CERTIFICATE, "tls_cert": credentials.CERTIFICATE,
             "tls_key": credentials.PRIVATE_KEY}


def export_credentials(args: argparse.Namespace) -> None:
    """Flags given on the command line become the RAFTBUS_* variables the SDK reads (and worker processes inherit);
    each file is checked first (exists, readable, PEM or a token), so a bad one is named by its flag."""
    for name, env in CREDENTIAL_FLAGS.items():
        value = getattr(args, name, None)
        if not value:
            continue
        flag = f"--{name.replace('_', '-')}"
        if name in PEM_KINDS:
            credentials.read_pem(flag, value, PEM_KINDS[name])
        else:
            credentials.read_token_file(value, label=flag)
        os.environ[env] = value


CLUSTER_SECRET_BYTES = 32  # random bytes of a generated cluster secret (the brokers' cluster_secret_bytes_min is 32)


def add_secret_command(sub, common: argparse.ArgumentParser) -> None:
    secret = sub.add_parser("secret", help="make a cluster secret").add_subparsers(dest="secret_command",
                                                                                   required=True)
    generate = secret.add_parser("generate", parents=[common],
                                 help=f"print a fresh cluster secret ({CLUSTER_SECRET_BYTES} random bytes, hex) for "
                                      "RAFTBUS_CLUSTER_SECRET, the same on every broker")
    generate.set_defaults(handler=run_secret_generate)


def add_certs_command(sub, common: argparse.ArgumentParser) -> None:
    certs = sub.add_parser("certs", help="make the TLS certificates and first tokens of a deployment") \
        .add_subparsers(dest="certs_command", required=True)
    create = certs.add_parser(
        "create", parents=[common],
        help="write ca.pem, broker.pem, broker-key.pem, admin.token and metrics.token into DIRECTORY (the CA's key "
             "into DIRECTORY/ca/, reused by later runs); see docs/operations.md")
    create.add_argument("directory", help="where the files go (made owner-only)")
    create.add_argument("--host", action="append", default=[], metavar="NAME",
                        help="a DNS name (*.wildcard allowed) or IP address the broker is reached by; repeat it")
    create.add_argument("--name", default="broker", help="file name of the certificate (default: broker)")
    create.add_argument("--ca-dir", default=None, metavar="DIR", help="where the CA's key is kept "
                                                                     "(default: DIRECTORY/ca)")
    create.set_defaults(handler=run_certs_create)


def run_certs_create(args) -> int:
    from raftbus.cli.certs import create_credentials

    written = create_credentials(args.directory, args.host, name=args.name, ca_dir=args.ca_dir)
    if args.json:
        print(json.dumps(written))
    else:
        for what, path in written.items():
            print(f"{what:<14} {path}")
    return 0


def run_secret_generate(args) -> int:
    """A cluster secret from the operating system's random source; it never leaves this process but on stdout."""
    value = secrets.token_hex(CLUSTER_SECRET_BYTES)
    print(json.dumps({"cluster_secret": value}) if args.json else value)
    return 0


def _resource_options(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="one topic ('*': every topic)")
    which.add_argument("--prefix", help="every topic whose name starts with this")
    which.add_argument("--group", help="one consumer group ('*': every group)")
    which.add_argument("--cluster", action="store_true", help="the cluster (admin: everything)")
    parser.add_argument("--operation", required=True, choices=("produce", "consume", "admin"))


def add_security_commands(sub, common: argparse.ArgumentParser, bootstrap_of) -> None:
    tokens = sub.add_parser("tokens", help="create, list and revoke bearer tokens").add_subparsers(
        dest="tokens_command", required=True)
    create = tokens.add_parser("create", parents=[common], help="a new token of a principal (shown once)")
    create.add_argument("principal")
    listing = tokens.add_parser("list", parents=[common], help="tokens by principal and id (never the token)")
    listing.add_argument("--principal", default="")
    revoke = tokens.add_parser("revoke", parents=[common], help="revoke a principal's tokens (or one, by id)")
    revoke.add_argument("principal")
    revoke.add_argument("--token-id", default="")
    acl = sub.add_parser("acl", help="grant, revoke and list ACLs").add_subparsers(dest="acl_command", required=True)
    grant = acl.add_parser("grant", parents=[common], help="allow a principal an operation on a resource")
    grant.add_argument("principal")
    _resource_options(grant)
    take = acl.add_parser("revoke", parents=[common], help="remove one ACL")
    take.add_argument("principal")
    _resource_options(take)
    acls = acl.add_parser("list", parents=[common], help="every ACL (of one principal)")
    acls.add_argument("--principal", default="")
    whoami = sub.add_parser("whoami", parents=[common], help="the principal the cluster takes you for")
    for parser, handler in ((create, run_tokens_create), (listing, run_tokens_list), (revoke, run_tokens_revoke),
                            (grant, run_acl_grant), (take, run_acl_revoke), (acls, run_acl_list),
                            (whoami, run_whoami)):
        parser.set_defaults(handler=lambda args, h=handler: h(args, Admin(bootstrap_of(args))))


def _resource(args) -> dict:
    return {"topic": args.topic, "prefix": args.prefix, "group": args.group, "cluster": args.cluster}


def _rows(headers: list[str], rows: list[list]) -> None:
    cells = [[str(v) for v in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def run_tokens_create(args, admin: Admin) -> int:
    with admin:
        created = admin.create_token(args.principal)
    print(json.dumps(created) if args.json else created["token"])
    return 0


def run_tokens_list(args, admin: Admin) -> int:
    with admin:
        tokens = admin.list_tokens(args.principal)
    if args.json:
        print(json.dumps(tokens))
    else:
        _rows(["PRINCIPAL", "TOKEN_ID", "CREATED_MS"], [[t["principal"], t["token_id"], t["created_ms"]]
                                                         for t in tokens])
    return 0


def run_tokens_revoke(args, admin: Admin) -> int:
    with admin:
        revoked = admin.revoke_tokens(args.principal, args.token_id)
    print(json.dumps({"principal": args.principal, "revoked": revoked}) if args.json
          else f"revoked {revoked} token(s) of {args.principal}")
    return 0


def run_acl_grant(args, admin: Admin) -> int:
    with admin:
        admin.grant_acl(args.principal, args.operation, **_resource(args))
    if not args.json:
        print(f"granted {args.operation} to {args.principal}")
    return 0


def run_acl_revoke(args, admin: Admin) -> int:
    with admin:
        revoked = admin.revoke_acl(args.principal, args.operation, **_resource(args))
    print(json.dumps({"revoked": revoked}) if args.json else f"revoked {revoked} ACL(s)")
    return 0


def run_acl_list(args, admin: Admin) -> int:
    with admin:
        acls = admin.list_acls(args.principal)
    if args.json:
        print(json.dumps(acls))
    else:
        _rows(["PRINCIPAL", "RESOURCE_TYPE", "RESOURCE_NAME", "OPERATION"],
              [[a["principal"], a["resource_type"], a["resource_name"] or "-", a["operation"]] for a in acls])
    return 0


def run_whoami(args, admin: Admin) -> int:
    with admin:
        me = admin.whoami()
    print(json.dumps(me) if args.json else (me["principal"] if me["auth_enabled"] else "auth is off"))
    return 0
