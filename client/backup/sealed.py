"""Encrypted backups: the key file, and files sealed with AES-256-GCM (`cryptography`) in chunks.

Key file: one line `rbk1_` + 32 random bytes in URL-safe base64, written 0600 by `raftbus backup create-key FILE`
(never over an existing file). From it HKDF-SHA256 derives, each under its own label, the file key (AES-256-GCM),
the index key (HMAC-SHA256 over backups.json) and the key id (8 bytes, in hex): the id names the key in the
backup's index so a wrong key is told apart from a damaged file, and reveals nothing about the key.

A sealed file: a header (`RBSEAL01`, a random 7-byte nonce prefix for this file, the plaintext chunk size as a
32-bit big-endian count), then the chunks, each ciphertext + 16-byte tag; every chunk but the last holds exactly
chunk-size plaintext bytes, the last one 0 to chunk-size (an empty file is one empty last chunk). The nonce of
chunk i is prefix (7 bytes) + i (4 bytes, big-endian) + 1 for the last chunk or 0 (1 byte), so a nonce never
repeats under a key (a random prefix per file) and a file cut at a chunk boundary, reordered or extended fails.
The associated data binds each chunk to the backup set and to the file's path in it (`raftbus-backup-v1`, the
set id, the path relative to the backup directory): a file moved to another path or set fails too. Any failure
is CORRUPT_BACKUP; the wrong key is caught before, by its id (BACKUP_KEY_MISMATCH).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from raftbus.client.errors import CorruptBackup, InvalidArgument

KEY_PREFIX = "rbk1_"
KEY_BYTES = 32
KEY_FILE_BYTES_MAX = 1024
CIPHER = "AES-256-GCM"
MAGIC = b"RBSEAL01"
HEADER = struct.Struct(">8s7sI")  # magic, nonce prefix, plaintext chunk size
TAG_BYTES = 16
# Plaintext bytes per chunk when sealing; a sealed file naming more per chunk is refused when read.
CHUNK_BYTES = 1 << 20
CHUNK_BYTES_MAX = 16 << 20
AD_LABEL = b"raftbus-backup-v1\0"


@dataclass(frozen=True)
class BackupKey:
    """The keys derived from one key file."""

    key_id: str
    file_key: bytes
    index_key: bytes

    @classmethod
    def of(cls, secret: bytes) -> "BackupKey":
        return cls(derive(secret, b"raftbus backup v1 key id", 8).hex(), derive(secret, b"raftbus backup v1 files"),
                   derive(secret, b"raftbus backup v1 index"))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BackupKey":
        """The key in a key file; InvalidArgument when it is missing or is not a raftbus backup key."""
        try:
            with open(path, "rb") as f:
                text = f.read(KEY_FILE_BYTES_MAX + 1)
        except OSError as exc:
            raise InvalidArgument(f"key file {path}: {exc.strerror}") from None
        line = text.strip()
        try:
            if len(text) > KEY_FILE_BYTES_MAX or not line.startswith(KEY_PREFIX.encode()):
                raise ValueError
            body = line[len(KEY_PREFIX):]
            secret = base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4))
        except (ValueError, binascii.Error):
            raise InvalidArgument(f"{path} is not a raftbus backup key (make one with `raftbus backup create-key`)") \
                from None
        if len(secret) != KEY_BYTES:
            raise InvalidArgument(f"{path} is not a raftbus backup key: it holds {len(secret)} bytes, not {KEY_BYTES}")
        return cls.of(secret)

    def index_mac(self, body: bytes) -> str:
        return hmac.new(self.index_key, body, hashlib.sha256).hexdigest()


def derive(secret: bytes, label: bytes, length: int = 32) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=label).derive(secret)


def create_key_file(path: str | os.PathLike) -> BackupKey:
    """Write a new random key to `path` (0600; InvalidArgument if the file exists: a key is never overwritten)."""
    secret = os.urandom(KEY_BYTES)
    text = KEY_PREFIX + base64.urlsafe_b64encode(secret).decode().rstrip("=") + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidArgument(f"{path} exists: a key file is never overwritten (its backups would be lost)") from None
    except OSError as exc:
        raise InvalidArgument(f"key file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return BackupKey.of(secret)


def associated_data(set_id: str, relpath: str) -> bytes:
    return AD_LABEL + set_id.encode() + b"\0" + relpath.encode()


def chunk_nonce(prefix: bytes, index: int, last: bool) -> bytes:
    return prefix + struct.pack(">IB", index, 1 if last else 0)


class SealedWriter:
    """A file-like writer that seals what it is given, chunk by chunk, into an open binary file."""

    def __init__(self, out, key: BackupKey, set_id: str, relpath: str, chunk_bytes: int = CHUNK_BYTES):
        self._out = out
        self._aead = AESGCM(key.file_key)
        self._prefix = os.urandom(7)
        self._ad = associated_data(set_id, relpath)
        self._chunk_bytes = chunk_bytes
        self._pending = bytearray()
        self._index = 0
        out.write(HEADER.pack(MAGIC, self._prefix, chunk_bytes))

    def write(self, data) -> int:
        self._pending += data
        while len(self._pending) > self._chunk_bytes:  # a full chunk with more after it: not the last
            self._seal(bytes(self._pending[:self._chunk_bytes]), last=False)
            del self._pending[:self._chunk_bytes]
        return len(data)

    def close(self) -> None:
        self._seal(bytes(self._pending), last=True)
        self._pending = bytearray()

    def _seal(self, plaintext: bytes, last: bool) -> None:
        if self._index >= 1 << 32:
            raise InvalidArgument("a sealed file has at most 2**32 chunks")
        self._out.write(self._aead.encrypt(chunk_nonce(self._prefix, self._index, last), plaintext, self._ad))
        self._index += 1


def open_sealed(path: Path, key: BackupKey, set_id: str, relpath: str):
    """The plaintext chunks of a sealed file, in order; CorruptBackup when anything fails to authenticate."""
    aead = AESGCM(key.file_key)
    ad = associated_data(set_id, relpath)
    with open(path, "rb") as f:
        header = f.read(HEADER.size)
        if len(header) != HEADER.size:
            raise CorruptBackup(f"{relpath}: too short for an encrypted backup file")
        magic, prefix, chunk_bytes = HEADER.unpack(header)
        if magic != MAGIC or not 1 <= chunk_bytes <= CHUNK_BYTES_MAX:
            raise CorruptBackup(f"{relpath}: not an encrypted backup file (header)")
        remaining = os.fstat(f.fileno()).st_size - HEADER.size

        def read_block() -> bytes:  # never more than the file holds, whatever the header claims
            nonlocal remaining
            block = f.read(min(chunk_bytes + TAG_BYTES, remaining))
            remaining -= len(block)
            return block

        block = read_block()
        index = 0
        while True:
            following = read_block()
            last = not following
            if len(block) < TAG_BYTES or (not last and len(block) != chunk_bytes + TAG_BYTES) or index >= 1 << 32:
                raise CorruptBackup(f"{relpath}: cut short")
            try:
                yield aead.decrypt(chunk_nonce(prefix, index, last), block, ad)
            except InvalidTag:
                raise CorruptBackup(f"{relpath}: fails authentication (changed, cut, moved, or sealed under "
                                    "another backup set)") from None
            if last:
                return
            block, index = following, index + 1
