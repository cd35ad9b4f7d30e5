"""Goal: the content digest kept by each applied command always equals one recomputed from the store, is the same on
replicas that applied the same commands however they got there, and a value changed behind the state machine's
back shows as an inconsistent store."""
from __future__ import annotations

import random

import pytest

from raftbus.broker import content_digest
from raftbus.broker.metadata.state import TOPICS
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.content_digest import DIGEST_KEY, DigestHistory, DigestingTxn
from raftbus.broker.queues.state import runs
from raftbus.broker.queues.state import tables as q
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from tests.unit.broker.metadata.test_metadata_state_machine import Metadata
from tests.unit.broker.queues.harness import QueueHarness

TABLES = ("meta", "a", "b")


def recomputed(store, tables, digest_table="meta") -> int:
    with store.read() as txn:
        return content_digest.of_store(txn, tables, digest_table)


def kept(store, digest_table="meta") -> int:
    with store.read() as txn:
        return content_digest.load(txn.get(digest_table, DIGEST_KEY))


@pytest.mark.parametrize("seed", range(5))
def test_puts_and_deletes_keep_the_digest_equal_to_a_recompute(seed):
    rng = random.Random(seed)
    store = MemoryStore(TABLES)
    digest = 0
    fresh = iter(range(10**6))  # put_new_many's keys: never written before
    for _ in range(60):
        with store.write() as raw:
            txn = DigestingTxn(raw, digest, "meta")
            for _ in range(rng.randrange(1, 6)):
                table = rng.choice(TABLES)
                keys = [bytes([rng.randrange(8)]) for _ in range(3)]  # few keys: overwrites and duplicates
                op = rng.randrange(7)
                if op == 5:  # rewrite pairs read in this transaction, handing over what was read
                    held = [(bytes(k), bytes(v)) for k, v in raw.items(table) if bytes(k) != DIGEST_KEY][:3]
                    txn.replace_read_many(table, [(k, rng.randbytes(6)) for k, _ in held], [v for _, v in held])
                elif op == 6 and table != "meta":  # delete the first pairs, as read in this transaction
                    txn.delete_first_read(table, [(bytes(k), bytes(v)) for k, v in raw.items(table)][:2])
                elif op == 4:
                    txn.put_new_many(table, [(b"new%d" % next(fresh), rng.randbytes(5))
                                             for _ in range(rng.randrange(4))])
                elif op == 0:
                    txn.put(table, keys[0], rng.randbytes(4))
                elif op == 1:
                    txn.delete(table, keys[0])
                elif op == 2:
                    txn.put_many(table, [(k, rng.randbytes(3)) for k in keys])
                else:
                    txn.delete_many(table, keys)
            digest = txn.finish()
        assert kept(store) == digest == recomputed(store, TABLES)


def test_history_answers_the_digest_in_force_at_an_index():
    history = DigestHistory(10, 100, size_max=3)
    history.record(12, 120)
    history.record(15, 150)
    assert [history.at(i) for i in (10, 11, 12, 14, 15, 16)] == [100, 100, 120, 120, 150, None]
    history.record(16, 160)  # 10 falls out of the history
    assert history.at(11) is None and history.at(12) == 120
    history.reset(40, 400)
    assert history.at(16) is None and history.at(40) == 400


def drive_queue(harness: QueueHarness) -> None:
    harness.put(b"a", b"b", b"c", group=b"g1")
    harness.put(b"d", priority=3)
    leased = harness.lease(max_messages=2)
    harness.ack((leased[0].seq, 1))
    harness.advance(5_000)  # the other lease expires
    harness.delete(leased[-1].seq)
    harness.put(b"e", deliver_at_ms=harness.now_ms + 100)
    harness.lease(max_messages=1, visibility_ms=50)


def test_queue_replicas_agree_and_keep_a_consistent_digest(tmp_path):
    replicas = [QueueHarness(MemoryStore(q.TABLES)), QueueHarness(LmdbStore(str(tmp_path), q.TABLES, 1 << 24))]
    for replica in replicas:
        drive_queue(replica)
        assert replica.sm.store_consistent() is True
        assert kept(replica.store) == recomputed(replica.store, q.TABLES)
    index = replicas[0].index
    assert replicas[0].sm.digest_at(index) == replicas[1].sm.digest_at(index) is not None
    assert replicas[0].sm.digest_at(2) == replicas[1].sm.digest_at(2)
    reopened = QueueHarness(replicas[1].store)  # a restart reads the kept digest back
    assert reopened.sm.digest_at(index) == replicas[0].sm.digest_at(index)


def test_a_queue_value_changed_on_disk_makes_the_store_inconsistent():
    harness = QueueHarness(MemoryStore(q.TABLES))
    drive_queue(harness)
    with harness.store.write() as txn:  # behind the state machine's back
        key, value = next(iter(txn.items(q.MESSAGES)))
        txn.put(q.MESSAGES, key, bytes([value[0] ^ 1]) + bytes(value[1:]))
    assert harness.sm.store_consistent() is False


def test_a_store_without_a_kept_digest_gets_one_computed_and_then_kept():
    harness = QueueHarness(MemoryStore(q.TABLES))
    drive_queue(harness)
    with harness.store.write() as txn:
        txn.delete(q.META, DIGEST_KEY)  # as written before digests were kept
    assert harness.sm.store_consistent() is None
    later = QueueHarness(harness.store)
    later.index = harness.index
    later.put(b"f")
    assert later.sm.store_consistent() is True


def test_metadata_replicas_agree_and_a_changed_topic_is_found():
    replicas = [Metadata(MemoryStore(MetadataStateMachine.TABLES)) for _ in range(2)]
    for replica in replicas:
        replica.register(1, 2, 3)
        replica.create("orders")
        replica.create("jobs")
        replica.delete("orders")
        assert replica.sm.store_consistent() is True
    index = replicas[0].index
    assert replicas[0].sm.digest_at(index) == replicas[1].sm.digest_at(index) is not None
    assert replicas[0].sm.digest_at(index - 1) != replicas[0].sm.digest_at(index)
    with replicas[1].store.write() as txn:
        key, value = next(iter(txn.items(TOPICS)))
        txn.put(TOPICS, key, bytes(value).replace(b'"jobs"', b'"jobz"'))
    assert replicas[1].sm.store_consistent() is False


def drive_queue_runs(harness: QueueHarness) -> None:
    """Runs written, leased in part, acked in part, one opened by a nack, one gone with its last ack."""
    first = harness.put(*[b"r%d" % i for i in range(6)], priority=1)
    harness.put(*[b"s%d" % i for i in range(5)], priority=2)
    leased = harness.lease(max_messages=8)
    harness.ack(*[(m.seq, 1) for m in leased[:6]])
    harness.nack(leased[6].seq, 1, 0)
    harness.lease(max_messages=2)


def test_queue_replicas_with_runs_agree_and_a_changed_run_is_found(tmp_path):
    replicas = [QueueHarness(MemoryStore(q.TABLES), runs=True),
                QueueHarness(LmdbStore(str(tmp_path), q.TABLES, 1 << 24), runs=True)]
    for replica in replicas:
        drive_queue_runs(replica)
        assert replica.sm.store_consistent() is True
        assert kept(replica.store) == recomputed(replica.store, q.TABLES)
    assert replicas[0].sm.digest_at(replicas[0].index) == replicas[1].sm.digest_at(replicas[1].index) is not None
    replicas[0].put(*[b"t%d" % i for i in range(4)])
    with replicas[0].store.write() as txn:  # behind the state machine's back
        key, value = txn.first(runs.RUNS)
        txn.put(runs.RUNS, bytes(key), bytes(value[:-1]) + bytes([value[-1] ^ 1]))
    assert replicas[0].sm.store_consistent() is False
