"""Goal: the Kafka port's SCRAM (SHA-256 and SHA-512) verifies a client's proof exactly as RFC 5802/7677 define
it (RFC 7677's own example), answers the server signature the client checks, and refuses a wrong password, a
replayed or altered nonce, an unknown user, messages out of order and malformed messages; the token's verifiers
are stored by the metadata group (never the token) and checked on their way in."""
import base64
import hashlib
import hmac
import json

import pytest

from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.security import commands as security_commands
from raftbus.broker.security import scram
from raftbus.broker.security.tokens import token_hash
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors


def _client_final(mechanism: str, password: str, client_first_bare: str, server_first: str) -> tuple[str, bytes]:
    """What a SCRAM client answers to `server_first`, and the server signature it expects back."""
    name = scram.HASHES[mechanism]
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.new(name, client_key).digest(), auth_message, name).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_key = hmac.new(salted, b"Server Key", name).digest()
    return f"{without_proof},p={proof}", hmac.new(server_key, auth_message, name).digest()


def _exchange(mechanism, verifiers_by_user):
    return scram.ScramExchange(mechanism, lambda user: verifiers_by_user.get(user, []))


def test_rfc_7677_example_is_verified_and_answered():
    """Goal: RFC 7677's SCRAM-SHA-256 exchange (user "user", password "pencil") passes with the RFC's proof and
    gets the RFC's server signature."""
    found = scram.verifier(scram.SHA_256, "pencil", base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096)
    exchange = scram.ScramExchange(scram.SHA_256, lambda user: [found] if user == "user" else [],
                                   nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_first = exchange.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    principal, server_final = exchange.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                              b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert principal == "user" and server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.mark.parametrize("mechanism", scram.MECHANISMS)
def test_the_right_token_passes_and_a_wrong_one_fails(mechanism):
    """Goal: a client holding the token authenticates (with either of two tokens under the principal's salt) and
    gets a server signature it can check; the wrong token fails."""
    salt = scram.new_salt()
    known = {"app": [scram.verifier(mechanism, "token-2", salt, 4096),
                     scram.verifier(mechanism, "token-1", salt, 4096)]}
    for password in ("token-1", "token-2"):
        exchange = _exchange(mechanism, known)
        server_first = exchange.first(b"n,,n=app,r=abc").decode()
        final, expected_signature = _client_final(mechanism, password, "n=app,r=abc", server_first)
        principal, server_final = exchange.final(final.encode())
        assert principal == "app" and server_final == b"v=" + base64.b64encode(expected_signature)
    exchange = _exchange(mechanism, known)
    server_first = exchange.first(b"n,,n=app,r=abc").decode()
    with pytest.raises(scram.ScramError, match="authentication failed"):
        exchange.final(_client_final(mechanism, "not-the-token", "n=app,r=abc", server_first)[0].encode())


def test_an_unknown_user_gets_a_stable_salt_and_fails():
    """Goal: an unknown user's first answer looks like a known one's (a salt derived from the name, the minimum
    iterations), so it does not tell who exists; its proof then fails."""
    first = [_exchange(scram.SHA_512, {}).first(b"n,,n=ghost,r=x").decode().split(",")[1:] for _ in range(2)]
    assert first[0] == first[1] and first[0][1] == "i=4096"
    exchange = _exchange(scram.SHA_512, {})
    server_first = exchange.first(b"n,,n=ghost,r=x").decode()
    with pytest.raises(scram.ScramError):
        exchange.final(_client_final(scram.SHA_512, "guess", "n=ghost,r=x", server_first)[0].encode())


@pytest.mark.parametrize("first, final", [
    (b"n=app,r=abc", None),                       # no GS2 header
    (b"p=tls-unique,,n=app,r=abc", None),         # channel binding
    (b"n,,n=app", None),                          # no nonce
    (b"n,,m=ext,n=app,r=abc", None),              # an extension
    (b"n,,n=a=b,r=abc", None),                    # a bad saslname
    (b"\xff\xfe", None),                          # not UTF-8
    (b"n,,n=app,r=" + b"a" * 5000, None),         # too long
    (b"n,,n=app,r=abc", b"c=biws,r=abc,p=AAAA"),  # the client's nonce without the server's part
    (b"n,,n=app,r=abc", b"c=biws,r=abc"),         # no proof
])
def test_malformed_and_altered_messages_fail(first, final):
    known = {"app": [scram.verifier(scram.SHA_512, "t", scram.new_salt(), 4096)]}
    exchange = _exchange(scram.SHA_512, known)
    with pytest.raises(scram.ScramError):
        exchange.first(first)
        exchange.final(final)


def test_a_final_message_before_the_first_or_twice_fails():
    known = {"app": [scram.verifier(scram.SHA_512, "t", scram.new_salt(), 4096)]}
    exchange = _exchange(scram.SHA_512, known)
    with pytest.raises(scram.ScramError, match="out of order"):
        exchange.final(b"c=biws,r=x,p=AAAA")
    server_first = exchange.first(b"n,,n=app,r=abc").decode()
    final = _client_final(scram.SHA_512, "t", "n=app,r=abc", server_first)[0].encode()
    assert exchange.final(final)[0] == "app"
    with pytest.raises(scram.ScramError, match="out of order"):
        exchange.final(final)


class _Metadata:
    def __init__(self):
        self.store = MemoryStore(MetadataStateMachine.TABLES)
        self.sm = MetadataStateMachine(self.store)
        self.index = self.sm.applied_index()

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)


def test_the_metadata_group_stores_verifiers_never_the_token_and_reloads_them():
    """Goal: create_token keeps both mechanisms' verifiers beside the hash; a reload from the store gives them
    back; the principal's verifiers are those under its newest token's salt, newest first."""
    meta = _Metadata()
    salt = scram.new_salt()
    meta.apply(security_commands.encode_create_token(principal="app", token_hash=token_hash("tok-1"), now_ms=1,
                                                     scram=scram.verifiers("tok-1", salt, 4096)))
    meta.apply(security_commands.encode_create_token(principal="app", token_hash=token_hash("tok-2"), now_ms=2,
                                                     scram=scram.verifiers("tok-2", salt, 4096)))
    with meta.store.read() as txn:
        stored = b"".join(bytes(k) + bytes(v) for k, v in txn.items("tokens"))
    assert b"tok-1" not in stored and b"tok-2" not in stored
    reloaded = MetadataStateMachine(meta.store).security()
    for mechanism in scram.MECHANISMS:
        assert reloaded.scram_verifiers("app", mechanism) == [scram.verifier(mechanism, "tok-2", salt, 4096),
                                                              scram.verifier(mechanism, "tok-1", salt, 4096)]
    assert reloaded.scram_verifiers("nobody", scram.SHA_256) == []


@pytest.mark.parametrize("bad", [
    {"SCRAM-SHA-1": {"salt": "c2FsdA==", "iterations": 4096, "stored_key": "", "server_key": ""}},
    {"SCRAM-SHA-512": {"salt": "c2FsdA==", "iterations": 4096}},
    {"SCRAM-SHA-512": scram.verifier(scram.SHA_512, "t", b"salt", 4096)._replace(iterations=10).to_dict()},
    {"SCRAM-SHA-256": scram.verifier(scram.SHA_512, "t", b"salt", 4096).to_dict()},  # 64-byte keys for SHA-256
    ["not", "a", "map"],
])
def test_a_malformed_verifier_is_refused_and_changes_nothing(bad):
    meta = _Metadata()
    command = b"J" + json.dumps({"type": "create_token", "principal": "app", "token_hash": token_hash("t"),
                                 "now_ms": 1, "scram": bad}).encode()
    outcome = meta.apply(command)
    assert isinstance(outcome, errors.InvalidArgument)
    assert meta.sm.security().tokens == {}
