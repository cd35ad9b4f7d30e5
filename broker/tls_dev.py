"""A development PKI for a cluster on one machine: a CA and one certificate per broker, written as PEM files.

`write_dev_pki(directory, broker_ids)` makes `ca.pem` (and its key) once and a certificate per broker that
names the loopback host (localhost, 127.0.0.1, ::1) and serves both as a TLS server and a TLS client, so the same
files fit mutual TLS on the Raft port and server TLS on the client gRPC port; `clients=("alice",)` adds client
certificates whose common name is that name (for mutual TLS on the client port). Files already there are
reused, so clients keep trusting `ca.pem` across restarts. For development only: the CA key sits beside the certificates.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1", "::1")
VALID_DAYS = 365


@dataclass(frozen=True)
class DevPki:
    ca_file: Path
    certs: dict[int, tuple[Path, Path]]  # broker id -> (certificate file, key file)
    clients: dict[str, tuple[Path, Path]]  # client name -> (certificate file, key file)

    def broker(self, broker_id: int) -> tuple[Path, Path]:
        return self.certs[broker_id]

    def client(self, name: str) -> tuple[Path, Path]:
        return self.clients[name]


def write_dev_pki(directory, broker_ids, clients=()) -> DevPki:
    """ca.pem, broker-N.pem / broker-N-key.pem for each broker id and client-NAME.pem / client-NAME-key.pem for
    each client name, in `directory` (made or reused)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = _load_or_make_ca(directory)
    certs = {int(b): _cert_files(directory, f"broker-{b}", f"raftbus-broker-{b}", ca) for b in broker_ids}
    named = {str(n): _cert_files(directory, f"client-{n}", str(n), ca) for n in clients}
    return DevPki(ca_file=directory / "ca.pem", certs=certs, clients=named)


def _cert_files(directory: Path, stem: str, common_name: str, ca) -> tuple[Path, Path]:
    cert_file, key_file = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    if not (cert_file.exists() and key_file.exists()):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(*ca, key, common_name)
        _write_key(key_file, key)
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_file, key_file


def _load_or_make_ca(directory: Path):
    cert_file, key_file = directory / "ca.pem", directory / "ca-key.pem"
    if cert_file.exists() and key_file.exists():
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        return cert, key
    cert, key = new_ca("raftbus development CA", VALID_DAYS)
    _write_key(key_file, key)
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def new_ca(common_name: str, valid_days: int):
    """A new self-signed CA that signs certificates only: (certificate, private key); also what `raftbus certs
    create` makes (client/cli/certs.py)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _issue(ca_cert, ca_key, key, common_name: str) -> x509.Certificate:
    names = [x509.DNSName(n) for n in LOOPBACK_NAMES] + [x509.IPAddress(ipaddress.ip_address(i)) for i in LOOPBACK_IPS]
    return issue_certificate(ca_cert, ca_key, key, common_name, names, VALID_DAYS)


def issue_certificate(ca_cert, ca_key, key, common_name: str, names: list[x509.GeneralName],
                      valid_days: int) -> x509.Certificate:
    """A certificate for `key` signed by the CA, naming `names`, good for serving and as a client (mutual TLS);
    also what `raftbus certs create` issues (client/cli/certs.py)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))


def _write_key(path: Path, key) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_token_file(path: Path) -> str:
    """A random bearer token in a file only its owner can read (the bootstrap admin's of a secure dev cluster)."""
    token = "rbt_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def secure_broker_env(pki: DevPki, broker_id: int, token_file: Path) -> dict[str, str]:
    """RAFTBUS_* settings of one broker of a secure dev cluster's client port: TLS with its certificate, auth on,
    the first admin from `token_file` (docs/security.md)."""
    cert, key = pki.broker(broker_id)
    return {"RAFTBUS_TLS_CERT_FILE": str(cert), "RAFTBUS_TLS_KEY_FILE": str(key),
            "RAFTBUS_TLS_CA_FILE": str(pki.ca_file), "RAFTBUS_AUTH_ENABLED": "true",
            "RAFTBUS_AUTH_BOOTSTRAP_TOKEN_FILE": str(token_file)}
