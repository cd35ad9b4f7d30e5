"""Property-based fuzz tests of what backup verify and restore decode from disk (Hypothesis): manifests, the index,
queue lines and sealed files, valid, mutated or random, give a correct decode or CORRUPT_BACKUP, within bounded
memory and time."""
from __future__ import annotations

import io
import json
from dataclasses import asdict

from hypothesis import given
from hypothesis import strategies as st

from raftbus.client.backup.layout import BackupIndex, Manifest, decode_index, decode_manifest, queue_file, stream_file
from raftbus.client.backup.queue_lines import decode_queue_line
from raftbus.client.backup.sealed import BackupKey, SealedWriter, open_sealed
from raftbus.client.errors import CorruptBackup

from tests import fuzzing
from tests.unit.client.backup.builder import message_record, queue_line

FUZZ = fuzzing.FUZZ
KEY = BackupKey.of(b"k" * 32)

names = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True).filter(lambda n: n not in (".", ".."))
partitions = st.integers(0, 20).map(str)
sha = st.binary(min_size=32, max_size=32).map(bytes.hex)
offsets = st.integers(0, 2**40)


@st.composite
def manifests(draw) -> Manifest:
    topics = draw(st.lists(names, max_size=4, unique=True))
    streams, queues = {}, {}
    for t in topics:
        for p in draw(st.lists(partitions, max_size=3, unique=True)):
            start = draw(offsets)
            if draw(st.booleans()):
                streams.setdefault(t, {})[p] = {"from": start, "to": start + draw(st.integers(0, 1000)),
                                                "file": stream_file(t, p), "sha256": draw(sha),
                                                "bytes": draw(st.integers(0, 2**30))}
            else:
                queues.setdefault(t, {})[p] = {"file": queue_file(t, p), "sha256": draw(sha),
                                               "messages": draw(st.integers(0, 10**6))}
    settings_ = [{"name": t, "kind": draw(st.sampled_from(["stream", "queue"])), "ordering": None,
                  "partitions": draw(st.integers(1, 50)), "replication_factor": draw(st.integers(1, 5)),
                  "retention_ms": draw(st.integers(-1, 10**9)), "retention_bytes": -1,
                  "queue": draw(st.none() | st.fixed_dictionaries({"max_deliveries": st.integers(0, 10)}))}
                 for t in topics]
    groups = draw(st.dictionaries(names, st.dictionaries(names, st.dictionaries(partitions, offsets, max_size=2),
                                                         max_size=2), max_size=3))
    return Manifest(kind=draw(st.sampled_from(["full", "incremental"])), created_ms=draw(offsets),
                    previous=draw(st.none() | st.just("0001-full")), topics=settings_, streams=streams, queues=queues,
                    groups=groups)


# What means something to the JSON and path decoders of a backup.
BACKUP_INTERESTING = [b"..", b"/", b"\x00", b"[", b"{", b"-1", b"null", b'"', b"1e999"]


def mutated(valid: bytes):
    return fuzzing.mutated(valid, BACKUP_INTERESTING)


def bounded(decode, data: bytes):
    """decode(data) or the CorruptBackup it raised, within the fuzz tests' memory and time bounds."""
    return fuzzing.bounded(decode, data, (CorruptBackup,))


def check_manifest(data: bytes) -> None:
    result = bounded(lambda d: decode_manifest(d, "m"), data)
    if isinstance(result, CorruptBackup):
        return
    assert decode_manifest(result.to_json().encode(), "m") == result  # a decode is a manifest create could write
    for t, parts in {**result.streams, **result.queues}.items():
        for p, entry in parts.items():
            assert entry["file"] in (stream_file(t, p), queue_file(t, p)) and ".." not in entry["file"].split("/")


@FUZZ
@given(manifest=manifests())
def test_valid_manifests_decode_to_themselves(manifest):
    """Goal: every manifest create could write decodes to itself."""
    assert decode_manifest(manifest.to_json().encode(), "m") == manifest


@FUZZ
@given(data=manifests().map(lambda m: m.to_json().encode()).flatmap(mutated))
def test_mutated_manifests_decode_correctly_or_are_corrupt(data):
    """Goal: a mutated manifest is CORRUPT_BACKUP or a manifest create could write, with only its own file paths."""
    check_manifest(data)


@FUZZ
@given(data=st.binary(max_size=400) | st.text(max_size=300).map(str.encode) |
       st.integers(1, 50_000).map(lambda depth: b'{"topics": ' + b"[" * depth + b"]" * depth + b"}"))
def test_random_bytes_and_deep_nesting_are_corrupt_manifests(data):
    """Goal: random bytes and deeply nested JSON are CORRUPT_BACKUP, within the memory bound."""
    check_manifest(data)


def index_bytes(names_: list[str], encrypted: bool) -> bytes:
    index = BackupIndex(names_, "ab" * 16, {"cipher": "AES-256-GCM", "key_id": KEY.key_id, "chunk_bytes": 64}
                        if encrypted else None)
    return index.to_json(KEY if encrypted else None).encode()


backup_names = st.lists(st.integers(1, 9999), max_size=5, unique=True).map(
    lambda ns: [f"{n:04d}-{'full' if i == 0 else 'incremental'}" for i, n in enumerate(ns)])


@FUZZ
@given(data=st.tuples(backup_names, st.booleans()).map(lambda a: index_bytes(*a)).flatmap(mutated))
def test_mutated_indexes_decode_correctly_or_are_corrupt(data):
    """Goal: a mutated index is CORRUPT_BACKUP or lists backup names only."""
    result = bounded(lambda d: decode_index(d, "i"), data)
    if not isinstance(result, CorruptBackup):
        assert all(n.split("-")[0].isdigit() and "/" not in n and ".." not in n for n in result.backups)
        assert decode_index(result.to_json(None).encode(), "i").backups == result.backups


lines = st.builds(lambda value, state, priority: queue_line(message_record(value), state=state, priority=priority),
                  st.binary(max_size=50), st.sampled_from(["ready", "delayed", "in_flight", "dead"]),
                  st.integers(-5, 5)).map(str.encode)


@FUZZ
@given(data=lines.flatmap(mutated) | st.binary(max_size=300))
def test_mutated_queue_lines_decode_correctly_or_are_corrupt(data):
    """Goal: a mutated or random queue line is CORRUPT_BACKUP or decodes to the fields it holds."""
    result = bounded(lambda d: decode_queue_line(d, "q"), data)
    if not isinstance(result, CorruptBackup):
        fields = json.loads(data)
        assert (result.state, result.priority, result.group) == (fields["state"], fields["priority"], fields["group"])


def seal(plaintext: bytes, chunk_bytes: int) -> bytes:
    out = io.BytesIO()
    writer = SealedWriter(out, KEY, "set", "0001-full/streams/t/0.batches", chunk_bytes)
    writer.write(plaintext)
    writer.close()
    return out.getvalue()


def unseal(data: bytes, tmp_path) -> bytes:
    path = tmp_path / "sealed"
    path.write_bytes(data)
    return b"".join(open_sealed(path, KEY, "set", "0001-full/streams/t/0.batches"))


@FUZZ
@given(plaintext=st.binary(max_size=300), chunk_bytes=st.integers(1, 64))
def test_sealed_files_round_trip(tmp_path_factory, plaintext, chunk_bytes):
    """Goal: any plaintext sealed at any chunk size opens to itself."""
    assert unseal(seal(plaintext, chunk_bytes), tmp_path_factory.mktemp("s")) == plaintext


@FUZZ
@given(case=st.tuples(st.binary(max_size=200), st.integers(1, 32)).flatmap(
    lambda a: st.tuples(st.just(a[0]), mutated(seal(*a)))))
def test_mutated_sealed_files_give_the_plaintext_or_are_corrupt(tmp_path_factory, case):
    """Goal: a mutated sealed file opens to the original plaintext or is CORRUPT_BACKUP, never to other bytes."""
    plaintext, data = case
    result = bounded(lambda d: unseal(d, tmp_path_factory.mktemp("s")), data)
    assert isinstance(result, CorruptBackup) or result == plaintext


def test_manifest_fields_are_what_create_writes():
    """The decoder's view of a manifest is the dataclass's fields (a new field needs a decoder rule)."""
    assert set(asdict(Manifest("full", 0))) | {"format"} == \
        set(json.loads(Manifest("full", 0).to_json()))
