"""System tests of queue topics: real broker processes, workers leasing and acking while a leader is killed -9,
many workers on one partition, dead letters moved across brokers and redriven, delayed delivery, the CLI.

The tests share one cluster per mode (plaintext, then secure), each on a queue topic of its own; the one that kills
a broker runs last on its cluster."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import pytest

from raftbus.client import Admin, Producer, QueueConsumer, Queues, errors
from tests.helpers import running_cluster, wait_until

pytestmark = pytest.mark.system


@pytest.fixture(scope="module", params=["plaintext", "secure"])
def cluster(request, tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp(f"queues-{request.param}"),
                         secure=request.param == "secure") as running:
        yield running


def create_queue(bootstrap: str, topic: str, partitions: int, **options) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=3, kind="queue", **options)


def enqueue(bootstrap: str, topic: str, count: int, **fields) -> dict[bytes, int]:
    """Unique values -> message ids, all acknowledged by the brokers."""
    with Producer(bootstrap, linger_ms=5) as producer:
        futures = {f"job-{i}".encode(): producer.send(topic, f"job-{i}", priority=i % 7, **fields)
                   for i in range(count)}
        producer.flush()
    return {value: future.result().message_id for value, future in futures.items()}


class Worker:
    """A QueueConsumer on a thread: every delivery and every ack outcome is recorded."""

    def __init__(self, name: str, bootstrap: str, topic: str, ledger: "Ledger", **consumer_options):
        self.name = name
        self.ledger = ledger
        self.consumer = QueueConsumer(bootstrap, topics=[topic], **consumer_options)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"worker-{name}")
        self.error: BaseException | None = None

    def start(self) -> "Worker":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for message in self.consumer.poll(0.2):
                    self.ledger.delivered(self.name, message)
                    message.ack().add_done_callback(lambda f, m=message: self.ledger.settled(m, f))
        except BaseException as exc:  # reported by the test
            self.error = exc


class Ledger:
    """What the workers saw: deliveries per value and ack outcomes per value."""

    def __init__(self):
        self._lock = threading.Lock()
        self.deliveries: dict[bytes, list[tuple[str, int]]] = defaultdict(list)
        self.acks_ok: Counter = Counter()
        self.acks_failed: dict[bytes, list[str]] = defaultdict(list)

    def delivered(self, worker: str, message) -> None:
        with self._lock:
            self.deliveries[message.value].append((worker, message.delivery_count))

    def settled(self, message, future) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.acks_ok[message.value] += 1
            else:
                self.acks_failed[message.value].append(getattr(error, "code", repr(error)))

    @property
    def acked(self) -> int:
        with self._lock:
            return len(self.acks_ok)


def queue_empty(bootstrap: str, topic: str):
    with Queues(bootstrap) as queues:
        stats = queues.stats(topic)
    busy = (stats.ready, stats.delayed, stats.in_flight, stats.dead, stats.dead_lettered)
    return busy == (0, 0, 0, 0, 0) and stats


def leader_of(bootstrap: str, topic: str, partition: int) -> int | None:
    with Admin(bootstrap) as admin:
        return admin.describe_topic(topic).partitions[partition].leader_id


def check_every_message_gone(bootstrap: str, topic: str, ids: dict[bytes, int]) -> None:
    with Queues(bootstrap) as queues:
        for mid in ids.values():
            with pytest.raises(errors.UnknownMessage):
                queues.get(topic, mid)


def test_many_workers_compete_on_one_partition(cluster):
    """Eight workers leasing one partition each get a share, and every message is delivered and acked once."""
    topic = "work-shared"
    create_queue(cluster.bootstrap, topic, partitions=1)
    ids = enqueue(cluster.bootstrap, topic, 800)
    ledger = Ledger()
    workers = [Worker(str(i), cluster.bootstrap, topic, ledger, prefetch=5, lease_batch_messages=5).start()
               for i in range(8)]
    try:
        wait_until(lambda: ledger.acked == len(ids), 60, what="every message acked")
    finally:
        for worker in workers:
            worker.stop()
    assert all(w.error is None for w in workers), [w.error for w in workers]
    assert all(len(d) == 1 for d in ledger.deliveries.values()), "each message delivered once"
    assert set(ledger.acks_ok) == set(ids) and set(ledger.acks_ok.values()) == {1}
    busy = Counter(worker for d in ledger.deliveries.values() for worker, _ in d)
    assert len(busy) >= 2, f"deliveries by worker: {busy}"
    assert queue_empty(cluster.bootstrap, topic)


def test_dead_letters_move_to_the_dead_letter_topic_and_redrive_back(cluster):
    """A message nacked max_deliveries times lands in its dead-letter topic (<topic>.dlq) (whichever broker leads it) with its history,
    and redrive brings it back with a fresh delivery count."""
    topic = "work-dead"
    create_queue(cluster.bootstrap, topic, partitions=3, max_deliveries=2, backoff_base_ms=10, backoff_max_ms=20)
    ids = enqueue(cluster.bootstrap, topic, 3, group="acme")
    with Queues(cluster.bootstrap) as queues:
        partition = next(iter(ids.values())) >> 40

        def fail_deliveries():
            for message in queues.lease(topic, partition, 10, max_wait_ms=200):
                message.nack(reason=f"failed {message.delivery_count}").result()
            return len(queues.peek(f"{topic}.dlq", partition, max_messages=10)) == len(ids)

        wait_until(fail_deliveries, 30, interval_s=0.05, what="every message dead-lettered")
        dead = queues.peek(f"{topic}.dlq", partition, max_messages=10)
        assert {m.value for m in dead} == set(ids)
        assert {(m.delivery_count, m.last_error, m.group) for m in dead} == {(2, "failed 2", "acme")}
        assert {m.origin_id for m in dead} == set(ids.values())
        assert queues.stats(topic).dead_lettered == 3
        assert queues.redrive(topic) == 3
        back = queues.peek(topic, partition, max_messages=10)
        assert {m.value for m in back} == set(ids) and {m.delivery_count for m in back} == {0}
        assert queues.stats(topic).dead_lettered == 0


def test_delayed_message_is_streamed_when_due_and_idempotency_keys_deduplicate(cluster):
    """A delayed message reaches a waiting consumer at its time, not before; a repeated idempotency key returns
    the original message id."""
    topic = "work-delayed"
    create_queue(cluster.bootstrap, topic, partitions=1)
    deliver_at_ms = time.time_ns() // 1_000_000 + 1_500
    with Producer(cluster.bootstrap) as producer:
        first = producer.send(topic, b"later", deliver_at_ms=deliver_at_ms, idempotency_key="order-1").result()
        again = producer.send(topic, b"later", deliver_at_ms=deliver_at_ms, idempotency_key="order-1").result()
    assert again.message_id == first.message_id and again.duplicate and not first.duplicate
    with QueueConsumer(cluster.bootstrap, topics=topic) as consumer:
        received = wait_until(lambda: consumer.poll(0.5), 20, what="the delayed message")
        received_ms = time.time_ns() // 1_000_000
        assert [m.value for m in received] == [b"later"] and received_ms >= deliver_at_ms
        received[0].ack().result()


def raftbus_cli(bootstrap: str, *argv: str, stdin: str | None = None) -> str:
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
               "--bootstrap", bootstrap, *argv]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_produces_consumes_and_inspects_a_queue(cluster):
    """`raftbus topics create --kind queue`, `produce --priority`, `queues stats|peek`, and `consume` with acks."""
    topic = "work-cli"
    raftbus_cli(cluster.bootstrap, "topics", "create", topic, "--kind", "queue", "--partitions", "1",
                "--max-deliveries", "3")
    raftbus_cli(cluster.bootstrap, "produce", topic, "--priority", "5", stdin="low\n")
    raftbus_cli(cluster.bootstrap, "produce", topic, "--priority", "1", "--group", "acme", stdin="high\n")
    stats = json.loads(raftbus_cli(cluster.bootstrap, "--json", "queues", "stats", topic))
    assert stats["ready"] == 2 and {g["group"] for g in stats["groups"]} == {"", "acme"}
    peeked = [json.loads(line) for line in raftbus_cli(cluster.bootstrap, "--json", "queues", "peek", topic)
              .splitlines()]
    assert [m["value"] for m in peeked] == ["high", "low"]
    consumed = raftbus_cli(cluster.bootstrap, "--json", "consume", topic, "--max", "2")
    assert [json.loads(line)["value"] for line in consumed.splitlines()] == ["high", "low"]
    wait_until(lambda: queue_empty(cluster.bootstrap, topic), 10, what="acked by the CLI")


def test_consumer_of_whole_topics_leases_from_partitions_added_later(cluster):
    """A queue grown from 1 to 3 partitions under a running consumer: its next metadata check opens lease
    streams on the new partitions, and what is enqueued there is delivered and acknowledged."""
    topic = "work-grown"
    create_queue(cluster.bootstrap, topic, partitions=1)
    with QueueConsumer(cluster.bootstrap, topics=[topic], partitions_check_ms=200) as consumer:
        assert consumer.poll(0.2) == []
        with Admin(cluster.bootstrap) as admin:
            assert len(admin.alter_partitions(topic, 3).partitions) == 3
        with Producer(cluster.bootstrap) as producer:
            sent = {producer.send(topic, f"on-{p}", partition=p).result().message_id: p for p in (1, 2)}
        leased = {}

        def both_leased():
            for message in consumer.poll(0.2):
                leased[message.message_id] = message.partition
                message.ack().result(10)
            return len(leased) == len(sent)

        wait_until(both_leased, 20, what="messages on the added partitions leased")
        assert leased == sent
    wait_until(lambda: queue_empty(cluster.bootstrap, topic), 10, what="acked from the added partitions")


def test_leader_kill_while_workers_lease_and_ack_loses_nothing(cluster):
    """Killing -9 a partition leader while four workers lease and ack leaves no message lost, none stuck in the
    queue and none acked twice: leases live on in the replicated state and late acks are refused."""
    topic = "work-failover"
    create_queue(cluster.bootstrap, topic, partitions=2, max_deliveries=0, backoff_base_ms=50, backoff_max_ms=200)
    ids = enqueue(cluster.bootstrap, topic, 1500)
    ledger = Ledger()
    workers = [Worker(str(i), cluster.bootstrap, topic, ledger, visibility_ms=4_000, prefetch=20).start()
               for i in range(4)]
    try:
        wait_until(lambda: ledger.acked >= 300, 60, what="acks before the kill")
        victim = leader_of(cluster.bootstrap, topic, 0)
        acked_at_kill = ledger.acked
        cluster.broker(victim).kill()
        wait_until(lambda: leader_of(cluster.bootstrap, topic, 0) not in (None, 0, victim), 30,
                   what="a new leader for partition 0")
        wait_until(lambda: queue_empty(cluster.bootstrap, topic), 90, interval_s=0.5, what="every message settled")
        # the queue is empty once the last acks are applied; their answers may still be on the way to the workers
        wait_until(lambda: ledger.acked == len(ids) or None, 30, interval_s=0.2, what="every ack answered")
    except AssertionError:
        if ledger.acked != len(ids):
            failed = {v: codes for v, codes in ledger.acks_failed.items() if v not in ledger.acks_ok}
            raise AssertionError(f"{len(ids) - ledger.acked} messages without a successful ack; failed acks of "
                                 f"some of them: {dict(list(failed.items())[:5])}") from None
        raise
    finally:
        for worker in workers:
            worker.stop()
    assert all(w.error is None for w in workers), [w.error for w in workers]
    assert set(ledger.deliveries) == set(ids), "every enqueued message was delivered"
    twice = [v for v, n in ledger.acks_ok.items() if n > 1]
    assert not twice, f"acked twice: {twice[:5]}"
    # An ack whose answer was lost with the old leader is retried on the new one and answered as first applied
    # (settler id + batch sequence), so every message ends with exactly one successful ack.
    assert set(ledger.acks_ok) == set(ids), f"{len(set(ids) - set(ledger.acks_ok))} messages without an ack"
    assert acked_at_kill < len(ids) / 2, "the leader died while most of the work was still to do"
    check_every_message_gone(cluster.bootstrap, topic, ids)
