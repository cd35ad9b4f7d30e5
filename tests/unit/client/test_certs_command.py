"""Goal: `raftbus certs create` writes a CA, a certificate for the hosts given (signed by that CA, usable by a TLS
server and client), the admin and metrics tokens, owner-only, keeps the CA's key out of the directory brokers get,
reuses the CA for a second broker, and refuses to write over a certificate or to name a host it cannot."""
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from raftbus.cli.certs import create_credentials
from raftbus.client import errors


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_files_a_deployed_broker_names_are_made_owner_only(tmp_path):
    out = tmp_path / "credentials"
    written = create_credentials(out, ["*.raftbus-peers.ns.svc.cluster.local", "10.0.0.1", "localhost"])
    assert sorted(p.name for p in out.iterdir()) == ["admin.token", "broker-key.pem", "broker.pem", "ca", "ca.pem",
                                                     "metrics.token"]
    assert mode(out) == 0o700 and mode(out / "ca") == 0o700
    for name in ("admin.token", "metrics.token", "broker-key.pem"):
        assert mode(out / name) == 0o600, name
    assert mode(out / "ca" / "ca-key.pem") == 0o600
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate((out / "broker.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["*.raftbus-peers.ns.svc.cluster.local", "localhost"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.1"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {u.dotted_string for u in usage} == {"1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"}
    admin, metrics = ((out / n).read_text().strip() for n in ("admin.token", "metrics.token"))
    assert admin.startswith("rbt_") and metrics.startswith("rbt_") and admin != metrics
    assert written["ca_key"] == str(out / "ca" / "ca-key.pem")


def test_a_second_broker_gets_its_own_certificate_from_the_same_ca_and_the_same_tokens(tmp_path):
    out = tmp_path / "credentials"
    create_credentials(out, ["10.0.0.1"])
    token = (out / "admin.token").read_text()
    create_credentials(out, ["10.0.0.2"], name="broker-2")
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    x509.load_pem_x509_certificate((out / "broker-2.pem").read_bytes()).verify_directly_issued_by(ca)
    assert (out / "admin.token").read_text() == token


@pytest.mark.parametrize("hosts, name, word", [
    ([], "broker", "--host"),
    (["bad host"], "broker", "bad host"),
    (["h"], "../x", "--name"),
])
def test_what_cannot_be_made_is_refused_naming_the_option(tmp_path, hosts, name, word):
    with pytest.raises(errors.InvalidArgument, match=word.replace(".", r"\.")):
        create_credentials(tmp_path / "c", hosts, name=name)


def test_an_existing_certificate_is_never_written_over(tmp_path):
    out = tmp_path / "credentials"
    create_credentials(out, ["10.0.0.1"])
    before = (out / "broker-key.pem").read_bytes()
    with pytest.raises(errors.InvalidArgument, match="exists"):
        create_credentials(out, ["10.0.0.9"])
    assert (out / "broker-key.pem").read_bytes() == before
    assert isinstance(x509.load_pem_x509_certificate((out / "broker.pem").read_bytes()).public_key(),
                      ec.EllipticCurvePublicKey)
