"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677, as Kafka uses them) for the Kafka port's SASL.

A token's SCRAM verifiers (one per mechanism) are computed once, by the controller when it creates the token (it
is the only place the token exists besides its answer): a salt, an iteration count, StoredKey =
H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"), with SaltedPassword =
PBKDF2-HMAC-H(token, salt, iterations). The metadata group replicates the verifiers beside the token's SHA-256;
none of them gives back the token.

SCRAM's first server message names one salt for the user, while a principal may hold several tokens (rotation):
a principal's tokens share its salt (the controller reuses it for each new token), and a proof is checked against
each of the principal's verifiers under that salt. An unknown user gets a salt derived from its name, so the
first answer does not tell who exists. Pure but for the random nonces and salts.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import NamedTuple

SHA_256, SHA_512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
HASHES = {SHA_256: "sha256", SHA_512: "sha512"}  # mechanism -> hashlib name
MECHANISMS = tuple(HASHES)
ITERATIONS_MIN = 4096  # Kafka's minimum for both mechanisms
SALT_BYTES = 24
NONCE_BYTES = 24
MESSAGE_BYTES_MAX = 4096


def key_bytes(mechanism: str) -> int:
    return hashlib.new(HASHES[mechanism]).digest_size


class ScramVerifier(NamedTuple):
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_dict(self) -> dict:
        return {"salt": _b64(self.salt), "iterations": self.iterations, "stored_key": _b64(self.stored_key),
                "server_key": _b64(self.server_key)}

    @classmethod
    def from_dict(cls, data: dict) -> "ScramVerifier":
        return cls(_unb64(data["salt"]), int(data["iterations"]), _unb64(data["stored_key"]),
                   _unb64(data["server_key"]))


class ScramError(ValueError):
    """The exchange failed: a malformed message, an unknown user, a wrong proof (answered
    SASL_AUTHENTICATION_FAILED)."""


def new_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def verifier(mechanism: str, password: str, salt: bytes, iterations: int) -> ScramVerifier:
    name = HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return ScramVerifier(salt, iterations, hashlib.new(name, client_key).digest(),
                         hmac.new(salted, b"Server Key", name).digest())


def verifiers(password: str, salt: bytes, iterations: int) -> dict[str, dict]:
    """Every mechanism's verifier of `password`, as a create_token command carries them."""
    return {m: verifier(m, password, salt, iterations).to_dict() for m in MECHANISMS}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {part[:16]!r}")
        out.setdefault(part[0], part[2:])
    return out


def _username(raw: str) -> str:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "="; any other "=" is malformed."""
    if "=" in raw.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM user name")
    return raw.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """The server side of one SCRAM exchange of `mechanism`: `first(client-first)` -> server-first, then
    `final(client-final)` -> (principal, server-final). `verifiers_of(user)` gives the user's verifiers of that
    mechanism (all under one salt and iteration count), empty for an unknown user. `nonce` draws the server's
    part of the nonce (random; fixed only to check RFC 7677's example)."""

    def __init__(self, mechanism: str, verifiers_of, nonce=None):
        self._hash = HASHES[mechanism]
        self._verifiers_of = verifiers_of
        self._draw_nonce = nonce or (lambda: base64.b64encode(secrets.token_bytes(NONCE_BYTES)).decode())
        self._user = ""
        self._verifiers: list[ScramVerifier] = []
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.done = False

    def first(self, message: bytes) -> bytes:
        text = _text(message)
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
            raise ScramError("SCRAM client-first must start with a GS2 header (n,, or y,,) without channel binding")
        bare = parts[2]
        attrs = _attributes(bare)
        if "m" in attrs:
            raise ScramError("SCRAM extensions are not supported")
        if not attrs.get("n") or not attrs.get("r"):
            raise ScramError("SCRAM client-first needs n= and r=")
        self._user = _username(attrs["n"])
        self._client_first_bare = bare
        self._verifiers = list(self._verifiers_of(self._user))
        salt, iterations = (self._verifiers[0].salt, self._verifiers[0].iterations) if self._verifiers else \
            (hmac.new(b"raftbus-unknown-user", self._user.encode(), "sha256").digest()[:SALT_BYTES], ITERATIONS_MIN)
        self._nonce = attrs["r"] + self._draw_nonce()
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> tuple[str, bytes]:
        if not self._server_first or self.done:
            raise ScramError("SCRAM client-final out of order")
        self.done = True
        text = _text(message)
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final needs p=")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise ScramError("SCRAM nonce mismatch")
        try:
            proof = base64.b64decode(proof_part.encode(), validate=True)
        except ValueError:
            raise ScramError("SCRAM proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        for found in self._verifiers:
            signature = hmac.new(found.stored_key, auth_message, self._hash).digest()
            if len(proof) != len(signature):
                continue
            client_key = bytes(a ^ b for a, b in zip(proof, signature))
            if hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), found.stored_key):
                server_signature = hmac.new(found.server_key, auth_message, self._hash).digest()
                return self._user, f"v={_b64(server_signature)}".encode()
        raise ScramError(f"authentication failed for user {self._user!r}")


def _text(message: bytes) -> str:
    if len(message) > MESSAGE_BYTES_MAX:
        raise ScramError(f"SCRAM message longer than {MESSAGE_BYTES_MAX} bytes")
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not UTF-8") from None
