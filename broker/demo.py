"""The short demo `raftbus dev --demo` (and `make run`) runs against the fresh local cluster."""
from __future__ import annotations

import time


def run_demo(bootstrap: str, topic: str = "demo", records: int = 1000) -> None:
    from raftbus.client import Admin, Producer, Reader, errors

    with Admin(bootstrap) as admin:
        try:
            admin.create_topic(topic, partitions=3, replication_factor=3)
            print(f"demo: created topic {topic!r} (3 partitions, replication factor 3)", flush=True)
        except errors.TopicExists:
            print(f"demo: topic {topic!r} already exists", flush=True)
        started = time.monotonic()
        with Producer(bootstrap, linger_ms=5) as producer:
            futures = [producer.send(topic, f"hello {i}", key=f"user-{i % 10}") for i in range(records)]
            producer.flush()
            offsets = [f.result() for f in futures]
        elapsed = time.monotonic() - started
        print(f"demo: produced {len(offsets)} records in {elapsed * 1000:.0f} ms, acknowledged after majority commit",
              flush=True)
        with Reader(bootstrap) as reader:
            seen = sum(1 for _ in reader.iter_topic(topic, from_beginning=True, stop_at_end=True))
        print(f"demo: read back {seen} records from the beginning of {topic!r}", flush=True)
        status = admin.cluster_status()
        print(f"demo: controller is broker {status.controller_id}", flush=True)
        for info in admin.describe_topic(topic).partitions:
            print(f"demo:   {topic}/{info.partition} leader={info.leader_id} replicas={list(info.replicas)} "
                  f"isr={list(info.isr)}", flush=True)
    print(f"demo: try it yourself:  raftbus --bootstrap {bootstrap} consume {topic} --from-beginning --max 5",
          flush=True)
