"""One member of a Kafka consumer group, as a process the kafka tier starts, stops (SIGTERM: the client closes
and leaves the group) and kills (SIGKILL: the coordinator finds it gone after its session timeout).

    python -m tests.kafka.group_member CLIENT BOOTSTRAP TOPIC GROUP [--instance ID] [--protocol consumer]

CLIENT is confluent, kafka-python or aiokafka. The member reads from the group's committed offsets (earliest when
there is none), commits each record's offset synchronously and only then prints it, one JSON line per record:
{"p": partition, "o": offset, "v": value}; and {"assigned": [partitions]} after each assignment. So every record
printed is committed: a member stopped or killed between records leaves nothing read and uncommitted. A commit
refused during a rebalance (REBALANCE_IN_PROGRESS, as Kafka answers while the leader's assignment is awaited)
leaves the record unprinted and the member seeks back to it, so whoever owns the partition next reads it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

# the group tests' brokers accept sessions from 2 s (tests/kafka/test_groups.py, GROUP_ENV): a killed member's
# partitions move 3 s after its last heartbeat (--session-timeout-ms for a member that must outlive a restart)
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 500


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class Stop:
    def __init__(self):
        self.stopped = False
        signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, *_):
        self.stopped = True


def run_confluent(args, stop: Stop) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "client.id": args.name}
    if args.protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update({"session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                       "partition.assignment.strategy": args.assignor})
    if args.instance:
        config["group.instance.id"] = args.instance
    consumer = Consumer(config)

    held: set[int] = set()
    incremental = args.protocol == "consumer" or args.assignor == "cooperative-sticky"

    def assigned(c, partitions):  # the binding assigns (or adds, when cooperative) once this returns
        if not incremental:
            held.clear()
        held.update(p.partition for p in partitions)
        emit(assigned=sorted(held))

    def revoked(c, partitions):
        held.difference_update(p.partition for p in partitions)
        emit(revoked=sorted(p.partition for p in partitions))

    consumer.subscribe([args.topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    try:
        while not stop.stopped:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                emit(error=str(message.error()))
                continue
            try:
                consumer.commit(offsets=[TopicPartition(message.topic(), message.partition(), message.offset() + 1)],
                                asynchronous=False)
            except KafkaException as exc:
                emit(error=str(exc))
                try:
                    consumer.seek(TopicPartition(message.topic(), message.partition(), message.offset()))
                except KafkaException:
                    pass  # no longer assigned: its next owner starts from the committed offset
                continue
            emit(p=message.partition(), o=message.offset(), v=message.value().decode())
    finally:
        consumer.close()


def run_kafka_python(args, stop: Stop) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
    from kafka.errors import KafkaError

    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap.split(","), group_id=args.group, client_id=args.name,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                             group_instance_id=args.instance or None)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit(revoked=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned):
            emit(assigned=sorted(p.partition for p in assigned))

    consumer.subscribe([args.topic], listener=Listener())
    try:
        while not stop.stopped:
            for tp, messages in consumer.poll(200).items():
                for message in messages:
                    try:
                        consumer.commit({tp: OffsetAndMetadata(message.offset + 1, "", -1)})
                    except KafkaError as exc:
                        emit(error=repr(exc))
                        if tp in consumer.assignment():
                            consumer.seek(tp, message.offset)
                        break  # the partition's later records are read again after the seek
                    emit(p=tp.partition, o=message.offset, v=message.value.decode())
    finally:
        consumer.close()


async def run_aiokafka(args, stop: Stop) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError
    from aiokafka.structs import OffsetAndMetadata

    consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.name,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit(revoked=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned):
            emit(assigned=sorted(p.partition for p in assigned))

    await consumer.start()
    consumer.subscribe([args.topic], listener=Listener())
    try:
        while not stop.stopped:
            for tp, messages in (await consumer.getmany(timeout_ms=200)).items():
                for message in messages:
                    try:
                        await consumer.commit({tp: OffsetAndMetadata(message.offset + 1, "")})
                    except KafkaError as exc:
                        emit(error=repr(exc))
                        if tp in consumer.assignment():
                            consumer.seek(tp, message.offset)
                        break  # the partition's later records are read again after the seek
                    emit(p=tp.partition, o=message.offset, v=message.value.decode())
    finally:
        await consumer.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["confluent", "kafka-python", "aiokafka"])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--name", default="member")
    parser.add_argument("--instance", default="")
    parser.add_argument("--protocol", default="classic", choices=["classic", "consumer"])
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--session-timeout-ms", type=int, default=SESSION_TIMEOUT_MS, help="classic protocol only")
    args = parser.parse_args()
    stop = Stop()
    emit(started=args.name)
    if args.client == "confluent":
        run_confluent(args, stop)
    elif args.client == "kafka-python":
        run_kafka_python(args, stop)
    else:
        asyncio.run(run_aiokafka(args, stop))
    emit(closed=args.name)


if __name__ == "__main__":
    main()
