"""Goal: the SDK's credentials come from its arguments, else from RAFTBUS_TLS_CA / RAFTBUS_TOKEN_FILE; bad ones are
typed errors; the bearer token rides on every call of a channel."""
import pytest

from raftbus.client.credentials import BearerToken, Credentials, read_token_file
from raftbus.client.errors import InvalidArgument

PEM = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"


def test_arguments_win_over_the_environment(tmp_path):
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
    ({"tls_ca": "/nonexistent/ca.pem"}, "tls_ca"),
    ({"tls_cert": PEM}, "both tls_cert and tls_key"),
    ({"token": ""}, "one non-empty line"),
    ({"token": "a\nb"}, "one non-empty line"),
])
def test_bad_credentials_are_invalid_arguments(kwargs, word):
    with pytest.raises(InvalidArgument, match=word):
        Credentials.of(environ={}, **kwargs)


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
