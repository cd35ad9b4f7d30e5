"""Goal: the producer batches, partitions, orders, sequences and retries correctly, driven by a fake transport."""
import threading
import time

import pytest

from raftbus.client.errors import (
    BatchTooLarge,
    InvalidArgument,
    NotLeader,
    OutOfOrderSequence,
    Overloaded,
    RecordTooLarge,
    UnknownPartition,
    UnknownProducerId,
    UnknownTopic,
)
from raftbus.client.murmur2 import partition_for_key
from raftbus.client.producer import Producer
from raftbus.client.records import decode_batch
from raftbus.client.wire import raftbus_pb2 as pb


def wait_until(predicate, timeout_s=5.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value {value!r}")
        time.sleep(0.002)


class FakeTransport:
    """Records every request; the test answers them one by one through `complete`/`fail`."""

    def __init__(self, partitions=None, retriable_delay_s=0.0):
        self.partitions = partitions or {"t": 3}
        self.retriable_delay_s = retriable_delay_s
        self.lock = threading.Lock()
        self.pending: list[tuple[pb.ProduceRequest, object]] = []
        self.sent: list[pb.ProduceRequest] = []
        self.taken: list[tuple[pb.ProduceRequest, object]] = []  # handed to the test, not answered yet
        self.next_offset: dict[tuple[str, int], int] = {}

    def partitions_for(self, topic):
        if topic not in self.partitions:
            raise UnknownTopic(topic)
        return self.partitions[topic]

    def send(self, request, done):
        with self.lock:
            self.sent.append(request)
            self.pending.append((request, done))

    def retry_delay_s(self, err, attempt, topic, partition):
        return self.retriable_delay_s if err.retriable else None

    def close(self):
        pass

    def take(self, count=1):
        wait_until(lambda: len(self.pending) >= count, what=f"{count} pending requests")
        with self.lock:
            taken, self.pending = self.pending[:count], self.pending[count:]
            self.taken.extend(taken)
        return taken

    def complete(self, item):
        with self.lock:
            if item in self.taken:
                self.taken.remove(item)
        request, done = item
        tp = (request.topic, request.partition)
        base = self.next_offset.get(tp, 0)
        self.next_offset[tp] = base + request.record_count
        done(pb.ProduceResponse(topic=request.topic, partition=request.partition, base_offset=base), None)

    def fail(self, item, err):
        with self.lock:
            self.taken.remove(item)
        item[1](None, err)

    def complete_all(self):
        while True:
            with self.lock:
                items, self.pending, self.taken = self.taken + self.pending, [], []
            if not items:
                return
            for item in items:
                self.complete(item)


def shutdown(producer, transport):
    """Close the producer while answering whatever it still sends."""
    closer = threading.Thread(target=producer.close)
    closer.start()
    while closer.is_alive():
        transport.complete_all()
        closer.join(0.01)


@pytest.fixture
def transport():
    return FakeTransport()


def make_producer(transport, **options):
    options.setdefault("linger_ms", 0)
    return Producer(transport=transport, **options)


def test_linger_holds_a_small_batch_until_it_expires(transport):
    producer = make_producer(transport, linger_ms=60_000)
    future = producer.send("t", b"v", partition=0)
    time.sleep(0.05)
    assert transport.sent == []
    flusher = threading.Thread(target=producer.flush, args=(5,))
    flusher.start()
    transport.complete(transport.take()[0])
    flusher.join()
    assert future.result(1).offset == 0
    producer.close()


def test_short_linger_sends_without_flush(transport):
    producer = make_producer(transport, linger_ms=20)
    started = time.monotonic()
    future = producer.send("t", b"v", partition=1)
    item, = transport.take()
    assert time.monotonic() - started >= 0.015
    transport.complete(item)
    assert future.result(5).offset == 0
    shutdown(producer, transport)


def test_full_batch_is_sent_at_once_despite_linger(transport):
    producer = make_producer(transport, linger_ms=60_000, batch_bytes_max=200)
    futures = [producer.send("t", bytes(50), partition=0) for _ in range(5)]
    (request, _done), = transport.take()
    assert request.record_count == 2  # 68 bytes per record: a third would pass 200
    assert futures[0].done() is False
    shutdown(producer, transport)


def test_at_most_max_in_flight_batches_per_partition_in_order_with_sequences(transport):
    producer = make_producer(transport, batch_bytes_max=100, max_in_flight_per_partition=2)
    futures = [producer.send("t", bytes(40), partition=2) for _ in range(6)]  # 58 bytes each: one per batch
    first, second = transport.take(2)
    time.sleep(0.02)
    assert transport.pending == []  # a third waits for an answer
    assert [first[0].base_sequence, second[0].base_sequence] == [0, 1]
    assert first[0].producer_id == second[0].producer_id == producer.producer_id and len(producer.producer_id) == 16
    transport.complete(first)
    (third,) = transport.take()
    assert third[0].base_sequence == 2
    for item in (second, third):
        transport.complete(item)
    for expected_sequence in range(3, 6):
        (item,) = transport.take()
        assert item[0].base_sequence == expected_sequence
        transport.complete(item)
    assert [f.result(1).offset for f in futures] == list(range(6))
    producer.close()


def test_a_failure_drains_the_partition_then_resends_in_sequence_order(transport):
    producer = make_producer(transport, batch_bytes_max=100, max_in_flight_per_partition=3)
    futures = [producer.send("t", bytes(40), partition=0) for _ in range(4)]
    a, b, c = transport.take(3)
    transport.fail(b, NotLeader("moved"))
    time.sleep(0.02)
    assert transport.pending == []  # nothing new while a and c are unanswered
    transport.fail(c, OutOfOrderSequence("gap"))
    transport.complete(a)
    b2, c2, d = transport.take(3)
    assert [r.base_sequence for r, _ in (b2, c2, d)] == [1, 2, 3]
    assert (b2[0].records, c2[0].records) == (b[0].records, c[0].records)
    for item in (b2, c2, d):
        transport.complete(item)
    assert [f.result(1).offset for f in futures] == [0, 1, 2, 3]
    producer.close()


def test_a_batch_failing_for_good_fails_later_failed_ones_and_restarts_the_partition(transport):
    producer = make_producer(transport, batch_bytes_max=100, max_in_flight_per_partition=2)
    doomed, later, queued = [producer.send("t", bytes(40), partition=0) for _ in range(3)]
    a, b = transport.take(2)
    transport.fail(b, NotLeader("moved"))
    transport.fail(a, UnknownPartition("gone"))
    with pytest.raises(UnknownPartition):
        doomed.result(1)
    with pytest.raises(UnknownPartition):
        later.result(1)  # never resent after an earlier batch was lost: order (and exactly-once) would break
    (restart,) = transport.take()
    assert restart[0].base_sequence == 0 and restart[0].producer_id != a[0].producer_id
    transport.complete(restart)
    assert queued.result(1).offset == 0
    producer.close()


def test_a_later_batch_refused_as_unknown_producer_waits_for_the_earlier_one(transport):
    """A failover refuses the first batch (no leader yet) and the new leader refuses the next one as coming from
    an unknown producer: both go again in order, under the same id and sequences, and both succeed."""
    producer = make_producer(transport, batch_bytes_max=100, max_in_flight_per_partition=2)
    futures = [producer.send("t", bytes(40), partition=0) for _ in range(2)]
    a, b = transport.take(2)
    transport.fail(a, NotLeader("moved"))
    transport.fail(b, UnknownProducerId("no state"))
    a2, b2 = transport.take(2)
    assert [(r.producer_id, r.base_sequence) for r, _ in (a2, b2)] == [(a[0].producer_id, 0), (a[0].producer_id, 1)]
    transport.complete(a2)
    transport.complete(b2)
    assert [f.result(1).offset for f in futures] == [0, 1]
    producer.close()


def test_unknown_producer_after_every_earlier_batch_acked_restarts_sequences_without_failing(transport):
    """The partition forgot the producer (idle expiry): the refused batch and those behind it go again under a
    fresh producer id from sequence 0, and no future fails."""
    producer = make_producer(transport, batch_bytes_max=100, max_in_flight_per_partition=2)
    first = producer.send("t", bytes(40), partition=0)
    transport.complete(transport.take()[0])
    later = [producer.send("t", bytes(40), partition=0) for _ in range(3)]
    b, c = transport.take(2)
    assert (b[0].base_sequence, c[0].base_sequence) == (1, 2)
    transport.fail(b, UnknownProducerId("expired"))
    transport.fail(c, UnknownProducerId("expired"))
    b2, c2 = transport.take(2)
    fresh = b2[0].producer_id
    assert fresh != b[0].producer_id and (b2[0].base_sequence, c2[0].base_sequence) == (0, 1)
    assert (b2[0].records, c2[0].records) == (b[0].records, c[0].records)
    transport.complete(b2)
    transport.complete(c2)
    (d,) = transport.take()
    assert (d[0].producer_id, d[0].base_sequence) == (fresh, 2)
    transport.complete(d)
    assert first.result(1).offset == 0 and [f.result(1).offset for f in later] == [1, 2, 3]
    producer.close()


def test_partitions_are_in_flight_at_the_same_time(transport):
    producer = make_producer(transport)
    for p in range(3):
        producer.send("t", b"x", partition=p)
    items = transport.take(3)
    assert sorted(r.partition for r, _ in items) == [0, 1, 2]
    for item in items:
        transport.complete(item)
    producer.close()


def test_futures_resolve_to_consecutive_offsets_and_records_round_trip(transport):
    producer = make_producer(transport, linger_ms=60_000)
    futures = [producer.send("t", f"v{i}", key=None, partition=0, headers={"h": "x"}) for i in range(3)]
    flusher = threading.Thread(target=producer.flush)
    flusher.start()
    transport.next_offset[("t", 0)] = 40
    (item,) = transport.take()
    transport.complete(item)
    flusher.join()
    assert [f.result().offset for f in futures] == [40, 41, 42]
    assert [v for _, _, v, _ in decode_batch(item[0].records)] == [b"v0", b"v1", b"v2"]
    assert item[0].max_timestamp_ms == max(f.result().timestamp_ms for f in futures)
    producer.close()


@pytest.mark.parametrize("error", [NotLeader("moved", leader_id=2, leader_address="h:2"), OutOfOrderSequence("x")])
def test_retried_batch_keeps_its_sequence_and_bytes(transport, error):
    producer = make_producer(transport)
    first = producer.send("t", b"a", partition=0)
    transport.complete(transport.take()[0])
    future = producer.send("t", b"b", partition=0)
    (item,) = transport.take()
    request = item[0]
    transport.fail(item, error)
    (retry, _), = items = transport.take()
    assert retry.base_sequence == request.base_sequence == 1
    assert retry.records == request.records
    transport.complete(items[0])
    assert (first.result(1).offset, future.result(1).offset) == (0, 1)
    producer.close()


def test_non_retriable_error_fails_the_batch_and_does_not_advance_the_sequence(transport):
    producer = make_producer(transport)
    doomed = producer.send("t", b"a", partition=0)
    (item,) = transport.take()
    request = item[0]
    transport.fail(item, UnknownPartition("gone"))
    with pytest.raises(UnknownPartition):
        doomed.result(1)
    producer.send("t", b"b", partition=0)
    (next_request, _), = transport.take()
    assert next_request.base_sequence == request.base_sequence == 0
    shutdown(producer, transport)


def test_delivery_timeout_fails_a_batch_that_keeps_failing(transport):
    producer = make_producer(transport, delivery_timeout_ms=50)
    future = producer.send("t", b"a", partition=0)
    (item,) = transport.take()
    time.sleep(0.06)
    transport.fail(item, NotLeader("x"))
    with pytest.raises(NotLeader):
        future.result(1)
    producer.close()


def test_keyed_records_go_to_the_murmur2_partition(transport):
    producer = make_producer(transport)
    for key in (b"k1", "k2", b"k3"):  # murmur2 spreads these over partitions 2, 0, 1
        producer.send("t", b"v", key=key)
    items = transport.take(3)
    keys = {decode_batch(r.records)[0][1]: r.partition for r, _ in items}
    assert keys == {k: partition_for_key(k, 3) for k in (b"k1", b"k2", b"k3")}
    assert sorted(keys.values()) == [0, 1, 2]
    shutdown(producer, transport)


def test_keyless_records_stick_to_a_partition_until_its_batch_closes(transport):
    producer = make_producer(transport, linger_ms=60_000, batch_bytes_max=100)
    for _ in range(4):
        producer.send("t", bytes(40))  # 58 bytes: each record closes the previous batch
    requests = [r for r, _ in transport.take(3)]
    assert [r.partition for r in requests] == [0, 1, 2]
    shutdown(producer, transport)


def test_input_errors_raise_from_send(transport):
    producer = make_producer(transport, batch_bytes_max=100)
    with pytest.raises(RecordTooLarge):
        producer.send("t", bytes(200))
    with pytest.raises(InvalidArgument, match="queue topics"):
        producer.send("t", b"v", priority=1)
    with pytest.raises(InvalidArgument, match="queue topics"):
        producer.send("t", b"v", group="g", deliver_at_ms=5)
    with pytest.raises(InvalidArgument):
        producer.send("t", 42)
    with pytest.raises(InvalidArgument):
        producer.send("t", b"v", key=3.5)
    with pytest.raises(UnknownPartition):
        producer.send("t", b"v", partition=3)
    with pytest.raises(UnknownTopic):
        producer.send("nope", b"v")
    producer.close()


def test_full_buffer_blocks_then_raises_overloaded(transport):
    producer = make_producer(transport, linger_ms=60_000, batch_bytes_max=100, buffer_bytes_max=120,
                             max_block_ms=50)
    producer.send("t", bytes(40), partition=0)
    producer.send("t", bytes(40), partition=0)
    started = time.monotonic()
    with pytest.raises(Overloaded):
        producer.send("t", bytes(40), partition=0)
    assert time.monotonic() - started >= 0.045
    shutdown(producer, transport)


def test_keyless_records_fill_the_buffer_then_raise_overloaded(transport):
    """Keyless bytes records after a batch's first go through send()'s fast path: it counts buffer room too,
    here while the sticky batch itself still has room (58 bytes per record)."""
    producer = make_producer(transport, linger_ms=60_000, batch_bytes_max=200, buffer_bytes_max=200,
                             max_block_ms=50)
    producer.send("t", bytes(40), partition=1)
    producer.send("t", bytes(40), partition=1)
    producer.send("t", bytes(40))
    with pytest.raises(Overloaded):
        producer.send("t", bytes(40))
    assert producer._buffer_used_bytes == 3 * 58
    shutdown(producer, transport)


def test_every_kind_of_send_keeps_send_order_in_one_batch(transport):
    """Keyless bytes records (send()'s fast path) and records with a key, headers or a str value (the general
    path) land in one batch in send order, with their own timestamps and consecutive offsets."""
    transport.partitions["one"] = 1
    producer = make_producer(transport, linger_ms=60_000)
    futures = [producer.send("one", b"a"), producer.send("one", b"b"), producer.send("one", "c"),
               producer.send("one", b"d", key=b"k"), producer.send("one", b"e"),
               producer.send("one", b"f", headers={"h": "x"}), producer.send("one", b"g")]
    flusher = threading.Thread(target=producer.flush, args=(10,))
    flusher.start()
    (item,) = transport.take()
    transport.complete(item)
    flusher.join(10)
    records = decode_batch(item[0].records)
    assert [v for _, _, v, _ in records] == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    assert [k for _, k, _, _ in records] == [None, None, None, b"k", None, None, None]
    assert [f.result(0).offset for f in futures] == list(range(7))
    assert [f.result(0).timestamp_ms for f in futures] == [ts for ts, _, _, _ in records]
    assert item[0].max_timestamp_ms == max(ts for ts, _, _, _ in records)
    producer.close()


def test_send_batch_sends_one_request_after_queued_records(transport):
    producer = make_producer(transport, linger_ms=60_000)
    single = producer.send("t", b"first", partition=1)
    bulk = producer.send_batch("t", 1, [b"a", ("k", "b"), None])
    (first, _), = items = transport.take()
    transport.complete(items[0])
    (second, _), = items = transport.take()
    assert (first.record_count, second.record_count, second.base_sequence) == (1, 3, 1)
    assert decode_batch(second.records)[1][1:3] == (b"k", b"b")
    transport.complete(items[0])
    assert (single.result(1).offset, bulk.result(1).offset) == (0, 1)
    with pytest.raises(BatchTooLarge):
        make_producer(transport, batch_bytes_max=50).send_batch("t", 0, [bytes(100)])
    producer.close()


def test_close_flushes_pending_records(transport):
    producer = make_producer(transport, linger_ms=60_000)
    future = producer.send("t", b"v", partition=0)
    closer = threading.Thread(target=producer.close)
    closer.start()
    transport.complete(transport.take()[0])
    closer.join(5)
    assert future.result(0).offset == 0 and not closer.is_alive()


def test_flush_returns_only_after_every_future_and_its_callbacks_are_done(transport):
    """Goal: after flush() every future it covered is done and its callbacks have run (histories rely on it)."""
    producer = make_producer(transport, linger_ms=60_000)
    seen = []
    futures = [producer.send("t", b"v", partition=0) for _ in range(3)]
    for future in futures:
        future.add_done_callback(lambda f: (time.sleep(0.05), seen.append(f.result().offset)))
    answering = threading.Thread(target=lambda: transport.complete(transport.take()[0]))
    answering.start()
    producer.flush(5)
    assert sorted(seen) == [0, 1, 2]
    answering.join(5)
    producer.close()


def test_per_record_sends_keep_order_and_sequences_across_batches(transport):
    """Goal: keyless per-record sends spread over sticky batches; per partition the batches carry consecutive
    sequences and the records in send order, and every future gets the offset its record landed at."""
    producer = make_producer(transport, batch_bytes_max=300, linger_ms=0)
    values = [f"r{i:03d}".encode() for i in range(60)]  # 22 bytes each: 13 per batch
    futures = [producer.send("t", value) for value in values]
    producer_flush = threading.Thread(target=producer.flush, args=(10,))
    producer_flush.start()
    while producer_flush.is_alive():
        transport.complete_all()
        producer_flush.join(0.01)
    by_partition: dict[int, list] = {}
    for request in transport.sent:
        by_partition.setdefault(request.partition, []).append(request)
    assert len(by_partition) == 3 and len(transport.sent) >= 5
    landed = {}
    for partition, requests in by_partition.items():
        sequence = 0
        for request in requests:
            assert request.base_sequence == sequence
            sequence += request.record_count
        records = [v for r in requests for _, _, v, _ in decode_batch(r.records)]
        assert records == sorted(records)  # send order within the partition
        landed.update({value: (partition, offset) for offset, value in enumerate(records)})
    assert sorted(landed) == values
    assert [(f.result(0).partition, f.result(0).offset) for f in futures] == [landed[v] for v in values]
    producer.close()


def test_a_retried_batch_runs_each_records_callback_once(transport):
    producer = make_producer(transport, linger_ms=60_000, retries=5)
    futures = [producer.send("t", b"v", partition=1) for _ in range(3)]
    calls = []
    for future in futures:
        future.add_done_callback(lambda f: calls.append(f.result().offset))
    flusher = threading.Thread(target=producer.flush, args=(10,))
    flusher.start()
    (item,) = transport.take()
    transport.fail(item, NotLeader("moved"))
    (again,) = transport.take()
    assert again[0].base_sequence == item[0].base_sequence and again[0].records == item[0].records
    transport.complete(again)
    flusher.join(10)
    assert calls == [0, 1, 2]
    producer.close()


def test_keyless_records_follow_a_change_in_the_partition_count(transport):
    producer = make_producer(transport, linger_ms=60_000)
    transport.partitions["t"] = 5
    first = producer.send("t", b"v")
    transport.partitions["t"] = 1
    second = producer.send("t", b"v")
    shutdown(producer, transport)
    assert second.result(0).partition == 0
    assert 0 <= first.result(0).partition < 5


def test_with_linger_0_a_record_for_an_idle_partition_is_sent_by_send_itself(transport):
    """Goal: linger 0 and nothing in flight for the partition: send() hands the batch to the transport before it
    returns (no hand-off to the sender thread); with a batch in flight the next one waits its turn, in sequence."""
    producer = make_producer(transport, linger_ms=0)
    first = producer.send("t", b"a", partition=1)
    assert [r.base_sequence for r in transport.sent] == [0]  # already sent, by this thread
    second = producer.send("t", b"b", partition=1)
    third = producer.send("t", b"c", partition=1)
    (item,) = transport.take()
    transport.complete(item)
    shutdown(producer, transport)
    requests = [r for r in transport.sent if r.partition == 1]
    assert [r.base_sequence for r in requests] == [sum(r.record_count for r in requests[:i]) for i in
                                                   range(len(requests))]
    assert [f.result(0).offset for f in (first, second, third)] == [0, 1, 2]
    assert [v for r in requests for _, _, v, _ in decode_batch(r.records)] == [b"a", b"b", b"c"]
