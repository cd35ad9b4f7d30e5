"""Goal: `raftbus bench kv` writes each key where Table reads it, and the peers' bucket uses the same keys."""
from raftbus.bench.kv import key_name, keys_by_partition
from raftbus.client.murmur2 import partition_for_key


def test_each_key_goes_to_the_partition_the_producers_partitioner_gives_it():
    dealt = keys_by_partition(1_000, 3)
    assert sorted(k for keys in dealt for k in keys) == sorted(key_name(i) for i in range(1_000))
    assert all(partition_for_key(k, 3) == p for p, keys in enumerate(dealt) for k in keys)
    assert all(keys for keys in dealt)


def test_keys_are_valid_nats_key_value_keys_of_one_length():
    names = {key_name(i) for i in (0, 9, 99_999_999)}
    assert {len(n) for n in names} == {12} and all(n.replace(b"-", b"").isalnum() for n in names)
