"""A development PKI (`raftbus dev --secure`, tests): one CA, a certificate per broker, client certificates.

Built with `cryptography`. Keys are ECDSA P-256; every broker certificate names localhost, 127.0.0.1 and ::1 and
serves both as a server and as a client certificate (brokers call each other's ports). For development and tests
only: production certificates come from the operator's CA (docs/security.md).
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_VALIDITY_DAYS = 365
_LOOPBACK_NAMES = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                   x509.IPAddress(ipaddress.ip_address("::1"))]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raftbus dev"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=CERT_VALIDITY_DAYS)))


def write_ca(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder("raftbus dev CA", _name("raftbus dev CA"), key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    ca_path, key_path = directory / "ca.pem", directory / "ca-key.pem"
    ca_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return ca_path, key_path


def issue_certificate(ca_path: Path, ca_key_path: Path, common_name: str, prefix: Path, *,
                      server: bool = True) -> dict:
    """A certificate for `common_name` signed by the CA: {"cert": path, "key": path}. A client certificate's common
    name is the principal it authenticates as."""
    ca = x509.load_pem_x509_certificate(Path(ca_path).read_bytes())
    ca_key = serialization.load_pem_private_key(Path(ca_key_path).read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
    builder = (_builder(common_name, ca.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(_LOOPBACK_NAMES), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_path, key_path = Path(f"{prefix}.pem"), Path(f"{prefix}-key.pem")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return {"cert": str(cert_path), "key": str(key_path)}


def write_dev_pki(directory, broker_ids) -> dict:
    """A CA and one certificate per broker in `directory`: {"ca": path, "brokers": {id: {"cert", "key"}}}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_path, ca_key_path = write_ca(directory)
    brokers = {broker_id: issue_certificate(ca_path, ca_key_path, f"broker-{broker_id}",
                                            directory / f"broker-{broker_id}")
               for broker_id in broker_ids}
    return {"ca": str(ca_path), "ca_key": str(ca_key_path), "brokers": brokers}


def write_token_file(path: Path) -> str:
    """A random bearer token in a file only its owner can read (the bootstrap admin's)."""
    token = "rbt_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def secure_broker_env(pki: dict, broker_id: int, token_file: Path) -> dict[str, str]:
    """RAFTBUS_* settings of one broker of a secure dev cluster: TLS on the client port, auth on, first admin."""
    files = pki["brokers"][broker_id]
    return {"RAFTBUS_TLS_CERT_FILE": files["cert"], "RAFTBUS_TLS_KEY_FILE": files["key"],
            "RAFTBUS_TLS_CA_FILE": pki["ca"], "RAFTBUS_AUTH_ENABLED": "true",
            "RAFTBUS_AUTH_BOOTSTRAP_TOKEN_FILE": str(token_file)}


def existing_dev_pki(directory, broker_ids) -> dict | None:
    """The PKI write_dev_pki left in `directory`, if every file is there (a restarted dev cluster keeps it)."""
    directory = Path(directory)
    pki = {"ca": str(directory / "ca.pem"), "ca_key": str(directory / "ca-key.pem"),
           "brokers": {i: {"cert": str(directory / f"broker-{i}.pem"), "key": str(directory / f"broker-{i}-key.pem")}
                       for i in broker_ids}}
    paths = [pki["ca"], pki["ca_key"], *(p for files in pki["brokers"].values() for p in files.values())]
    return pki if all(Path(p).is_file() for p in paths) else None
