"""The development PKI: one CA, a certificate per broker naming the loopback host for server and client use,
reused on a second call."""
from __future__ import annotations

import socket
import ssl
import threading

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raftbus.broker.tls_dev import write_dev_pki


def test_certificates_name_loopback_and_serve_both_ways(tmp_path):
    """Broker certificates name the loopback host, allow server and client use, and keys are owner-only."""
    pki = write_dev_pki(tmp_path, [1, 2])
    assert pki.ca_file == tmp_path / "ca.pem" and set(pki.certs) == {1, 2}
    cert = x509.load_pem_x509_certificate(pki.broker(1)[0].read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usages)
    assert oct(pki.broker(1)[1].stat().st_mode & 0o777) == "0o600"


def test_a_mutual_tls_handshake_succeeds_with_the_files(tmp_path):
    """Broker 1 serves, broker 2 dials 127.0.0.1 with hostname checks on; both certificates verify."""
    pki = write_dev_pki(tmp_path, [1, 2])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(*map(str, pki.broker(1)))
    server.load_verify_locations(cafile=str(pki.ca_file))
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_cert_chain(*map(str, pki.broker(2)))
    client.load_verify_locations(cafile=str(pki.ca_file))
    listener = socket.create_server(("127.0.0.1", 0))
    seen = {}

    def serve():
        conn, _ = listener.accept()
        with server.wrap_socket(conn, server_side=True) as tls:
            seen["peer"] = tls.getpeercert()["subject"]
            tls.sendall(b"ok")
    thread = threading.Thread(target=serve)
    thread.start()
    with client.wrap_socket(socket.create_connection(listener.getsockname(), timeout=10),
                            server_hostname="127.0.0.1") as tls:
        assert tls.recv(2) == b"ok"
    thread.join(10)
    listener.close()
    assert seen["peer"] == ((("commonName", "raftbus-broker-2"),),)


def test_files_are_reused(tmp_path):
    """A second call keeps the CA and existing certificates and adds the missing ones."""
    first = write_dev_pki(tmp_path, [1])
    ca, cert = first.ca_file.read_bytes(), first.broker(1)[0].read_bytes()
    second = write_dev_pki(tmp_path, [1, 2])
    assert second.ca_file.read_bytes() == ca and second.broker(1)[0].read_bytes() == cert
    assert 2 in second.certs


def test_client_certificates_carry_their_name(tmp_path):
    """A client certificate's common name is the name asked for, signed by the same CA."""
    pki = write_dev_pki(tmp_path, [1], clients=["alice"])
    cert = x509.load_pem_x509_certificate(pki.client("alice")[0].read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca_file.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert cert.issuer == ca.subject
