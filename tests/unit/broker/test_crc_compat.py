"""Goal: the CRC-32 the broker computes (ISA-L's, through isal) is zlib's, value for value, so the journals, meta
slots and digests written by brokers that used zlib still check out and replicas of both kinds agree."""
import os
import random
import struct
import zlib

from raftbus.broker import content_digest
from raftbus.broker.log import digest
from raftbus.broker.raft import journal, meta_slots


def samples():
    rng = random.Random(7)
    for size in (0, 1, 3, 15, 16, 17, 100, 4095, 65_536, (1 << 20) + 13):
        yield os.urandom(size), rng.getrandbits(32)


def test_journal_record_crc_is_zlibs():
    for data, seed in samples():
        index, term = seed, seed >> 3
        expected = zlib.crc32(data, zlib.crc32(struct.pack(">QQ", index, term)))
        assert journal._crc(index, term, data) == expected
        assert journal._crc(index, term, memoryview(data)) == expected


def test_stored_batch_and_store_pair_terms_are_zlibs():
    for data, seed in samples():
        key = seed.to_bytes(8, "big")
        assert digest.batch_term(key, data) == zlib.crc32(data, zlib.crc32(key))
        table_seed = zlib.crc32(b"ready")
        assert content_digest.pair_term("ready", key, data) == zlib.crc32(data, zlib.crc32(key, table_seed))


def test_a_meta_slot_written_with_zlibs_crc_decodes():
    slot = bytearray(meta_slots.encode_slot(9, {"term": 4, "votedFor": None}))
    data = bytes(slot[meta_slots._HEADER.size:])
    crc = zlib.crc32(struct.pack(">QI", 9, len(data)) + data)
    assert meta_slots._HEADER.unpack_from(slot)[3] == crc
    assert meta_slots.decode_slot(bytes(slot)) == (9, {"term": 4, "votedFor": None})
    slot[-1] ^= 1
    assert meta_slots.decode_slot(bytes(slot)) is None
