"""Goal: murmur2 and the key partitioner give exactly Kafka's results (vectors from Kafka's UtilsTest)."""
import pytest

from raftbus.client.murmur2 import KeyHashes, murmur2, partition_for_key

KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (bytes([12, 42, 56, 24, 109, 111]), 274204207),
    (b"", 275646681),
]


@pytest.mark.parametrize("data,expected", KAFKA_VECTORS)
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_partition_for_key_masks_the_sign_bit_like_kafka():
    assert partition_for_key(b"21", 1_000_000) == (-973932308 & 0x7FFFFFFF) % 1_000_000
    for n in (1, 3, 7, 100):
        for key in (b"", b"a", b"order-42", "ключ".encode()):
            assert 0 <= partition_for_key(key, n) < n


def test_remembered_key_hashes_pick_the_same_partitions_and_stay_bounded():
    hashes = KeyHashes(entries_max=50)
    keys = [f"key-{i}".encode() * (i % 7) for i in range(120)] + [bytes(range(256)) * 2]
    for _ in range(2):  # the second round reads remembered hashes (and refills after each clear)
        for key in keys:
            for n in (1, 3, 300):
                assert hashes.partition(key, n) == partition_for_key(key, n)
            assert len(hashes._hashes) <= 50
