"""Goal: the SDK's credentials come from its arguments, else from RAFTBUS_TLS_CA / RAFTBUS_TOKEN_FILE; bad ones are
typed errors; the bearer token rides on every call of a channel."""
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from raftbus.broker.tls_dev import write_dev_pki
from raftbus.client.credentials import BearerToken, Credentials, read_token_file
from raftbus.client.errors import InvalidArgument


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return write_dev_pki(tmp_path_factory.mktemp("pki"), [1])


@pytest.fixture(scope="module")
def PEM(pki):
    return pki.ca_file.read_bytes()


def test_arguments_win_over_the_environment(tmp_path, PEM):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    token_file = tmp_path / "t"
    token_file.write_text("from-env\n")
    environ = {"RAFTBUS_TLS_CA": str(ca), "RAFTBUS_TOKEN_FILE": str(token_file)}
    assert Credentials.of(environ=environ) == Credentials(tls=True, tls_ca=PEM, token="from-env")
    assert Credentials.of(token="mine", environ=environ) == Credentials(token="mine")
    assert Credentials.of(tls_ca=PEM, environ=environ) == Credentials(tls=True, tls_ca=PEM)
    assert Credentials.of(environ={}) == Credentials()


def test_tls_ca_true_uses_the_system_trust_store():
    assert Credentials.of(tls_ca=True, environ={}) == Credentials(tls=True, tls_ca=None)


@pytest.mark.parametrize("kwargs, word", [
    ({"tls_ca": "/nonexistent/ca.pem"}, "tls_ca /nonexistent/ca.pem: No such file"),
    ({"tls_cert": b"x"}, "both tls_cert and tls_key"),
    ({"token": ""}, "one non-empty line"),
    ({"token": "a\nb"}, "one non-empty line"),
])
def test_bad_credentials_are_invalid_arguments(kwargs, word):
    with pytest.raises(InvalidArgument, match=word):
        Credentials.of(environ={}, **kwargs)


def test_certificate_files_are_checked_before_grpc_sees_them(tmp_path, pki):
    """A directory, a file that is not PEM and a key where a certificate belongs are named with the argument; so is
    an encrypted key, which gRPC cannot use."""
    cert, key = pki.broker(1)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    fake = tmp_path / "fake.pem"
    fake.write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    encrypted = tmp_path / "encrypted-key.pem"
    encrypted.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")))
    cases = [({"tls_ca": str(tmp_path)}, f"tls_ca {tmp_path}: Is a directory"),
             ({"tls_ca": str(not_pem)}, f"tls_ca {not_pem} is not a PEM certificate"),
             ({"tls_ca": str(fake)}, f"tls_ca {fake} is not a PEM certificate"),
             ({"tls_ca": str(key)}, f"tls_ca {key} is not a PEM certificate"),
             ({"tls_ca": b"junk"}, "tls_ca (given as bytes) is not a PEM certificate"),
             ({"tls_cert": str(cert), "tls_key": str(cert)}, f"tls_key {cert} is not a PEM private key"),
             ({"tls_cert": str(cert), "tls_key": str(encrypted)}, "is an encrypted private key")]
    for kwargs, message in cases:
        with pytest.raises(InvalidArgument) as raised:
            Credentials.of(environ={}, **kwargs)
        assert message in raised.value.message, (kwargs, raised.value.message)
    assert Credentials.of(tls_ca=str(pki.ca_file), tls_cert=str(cert), tls_key=str(key), environ={}).tls


def test_token_files_must_exist_and_hold_a_token(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InvalidArgument, match="empty"):
        read_token_file(empty)
    with pytest.raises(InvalidArgument, match="No such file"):
        Credentials.of(environ={"RAFTBUS_TOKEN_FILE": str(tmp_path / "missing")})


class Details:
    method, timeout, metadata, credentials, wait_for_ready, compression = "/m", 1.0, [("k", "v")], None, None, None


def test_the_bearer_token_is_added_to_the_call_metadata_of_every_kind_of_call():
    interceptor, seen = BearerToken("tok"), []

    def continuation(details, request):
        seen.append((details.method, details.timeout, list(details.metadata), request))
        return "answer"

    for call in (interceptor.intercept_unary_unary, interceptor.intercept_unary_stream,
                 interceptor.intercept_stream_unary, interceptor.intercept_stream_stream):
        assert call(continuation, Details(), "req") == "answer"
    assert seen == [("/m", 1.0, [("k", "v"), ("authorization", "Bearer tok")], "req")] * 4
