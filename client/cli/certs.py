"""`raftbus certs create`: the files a deployed broker's TLS and auth settings name, made in one command.

`create_credentials(directory, hosts)` writes into `directory` (0700):

- `ca.pem`: the cluster's CA certificate (clients' `--tls-ca`, brokers' `tls_ca_file` and `raft_tls_ca_file`);
- `broker.pem` / `broker-key.pem` (or `<name>.pem` / `<name>-key.pem`): a certificate naming `hosts` (DNS names,
  `*.` wildcards, IP addresses), valid as TLS server and client, for the client port and the Raft port alike;
- `admin.token`: the first admin's bearer token (`auth_bootstrap_token_file`), made once;
- `metrics.token`: the token every scrape of /metrics presents (`metrics_token_file`), made once.

The CA's key stays in `ca_dir` (default `<directory>/ca/`, 0700), made once and reused: run the command again with
another `--name` and the other host's names for each further broker, and copy each broker only the files of
`directory` (never `ca/`). Keys and tokens are 0600. Nothing is written over: an existing certificate of that
name is refused (remove it to issue a new one).
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from raftbus.broker.tls_dev import issue_certificate, new_ca
from raftbus.client import errors

CA_VALID_DAYS = 3650
CERT_VALID_DAYS = 825
TOKEN_FILES = ("admin.token", "metrics.token")


def subject_names(hosts) -> list[x509.GeneralName]:
    """Each host as a subject alternative name: an IP address, else a DNS name (a leading `*.` allowed)."""
    names = []
    for host in hosts:
        host = host.strip().strip("[]")
        if not host:
            raise errors.InvalidArgument("--host must name a host (a DNS name or an IP address)")
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            labels = host.removeprefix("*.").split(".")
            if not all(label and all(c.isalnum() or c == "-" for c in label) for label in labels):
                raise errors.InvalidArgument(f"--host {host!r} is neither an IP address nor a DNS name") from None
            names.append(x509.DNSName(host.lower()))
    if not names:
        raise errors.InvalidArgument("give at least one --host: the names clients and brokers reach the broker by")
    return names


def private_dir(path: Path) -> Path:
    """`path` as a directory, each missing component made 0700."""
    for part in reversed([p for p in (path, *path.parents) if not p.exists()]):
        part.mkdir(mode=0o700, exist_ok=True)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")
    return path


def _write_private(path: Path, data: bytes) -> None:
    """A new file only its owner can read (never written over)."""
    with open(path, "xb", opener=lambda name, flags: os.open(name, flags, 0o600)) as f:
        f.write(data)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _ca(ca_dir: Path):
    """The CA of `ca_dir` (made on first use): (certificate, key)."""
    cert_file, key_file = ca_dir / "ca.pem", ca_dir / "ca-key.pem"
    if cert_file.exists() and key_file.exists():
        try:
            return (x509.load_pem_x509_certificate(cert_file.read_bytes()),
                    serialization.load_pem_private_key(key_file.read_bytes(), password=None))
        except (ValueError, TypeError) as exc:
            raise errors.InvalidArgument(f"--ca-dir {ca_dir} does not hold a usable CA: {exc}") from None
    cert, key = new_ca(f"raftbus CA {secrets.token_hex(4)}", CA_VALID_DAYS)
    _write_private(key_file, _key_pem(key))
    _write_private(cert_file, cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def create_credentials(directory, hosts, *, name: str = "broker", ca_dir=None) -> dict[str, str]:
    """Write the CA certificate, a certificate and key for `hosts`, and the tokens (see the module); returns
    {what: path} of the files of `directory`."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise errors.InvalidArgument(f"--name {name!r} must be a file name (letters, digits, - _ .)")
    names = subject_names(hosts)
    directory = Path(directory)
    try:
        private_dir(directory)
        ca_dir = private_dir(Path(ca_dir) if ca_dir else directory / "ca")
    except OSError as exc:
        raise errors.InvalidArgument(f"cannot make {exc.filename or directory}: {exc.strerror or exc}") from None
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}-key.pem"
    for path in (cert_file, key_file):
        if path.exists():
            raise errors.InvalidArgument(f"{path} exists; remove it to issue a new certificate, or choose another "
                                         "--name")
    ca_cert, ca_key = _ca(ca_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    _write_private(key_file, _key_pem(key))
    _write_private(cert_file, issue_certificate(ca_cert, ca_key, key, f"raftbus {name}", names, CERT_VALID_DAYS)
                   .public_bytes(serialization.Encoding.PEM))
    ca_copy = directory / "ca.pem"
    if not ca_copy.exists() or ca_copy.read_bytes() != (ca_dir / "ca.pem").read_bytes():
        shutil.copyfile(ca_dir / "ca.pem", ca_copy)
        os.chmod(ca_copy, 0o644)
    written = {"ca": str(ca_copy), "certificate": str(cert_file), "key": str(key_file)}
    for token_file in TOKEN_FILES:
        path = directory / token_file
        if not path.exists():
            _write_private(path, ("rbt_" + secrets.token_urlsafe(32) + "\n").encode())
        written[token_file.replace(".", "_")] = str(path)
    written["ca_key"] = str(ca_dir / "ca-key.pem")
    return written
