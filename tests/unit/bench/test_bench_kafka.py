"""Goal: the Kafka port's light-load latency is timed to each delivery report as librdkafka hands it over, which it
does only inside poll() or flush(): a thread waits in poll() while the sender sleeps between sends, so no report
waits for the next send, and every acknowledged record is timed once."""
import threading

from raftbus.bench import kafka as kafka_bench
from raftbus.client import settings


class HeldReports:
    """librdkafka's contract for delivery reports: queued by its own threads, run by whoever calls poll()."""

    def __init__(self):
        self._ready = threading.Condition()
        self._reports = []
        self.produced = 0
        self.served_on: set[str] = set()

    def __len__(self):
        with self._ready:
            return len(self._reports)

    def list_topics(self, topic, timeout):
        return None

    def produce(self, topic, value, on_delivery):
        self.produced += 1
        with self._ready:
            self._reports.append(on_delivery)
            self._ready.notify_all()

    def poll(self, timeout):
        with self._ready:
            if not self._reports:
                self._ready.wait(timeout)
            reports, self._reports = self._reports, []
        for report in reports:
            self.served_on.add(threading.current_thread().name)
            report(None, None)
        return len(reports)

    def flush(self, timeout):
        self.served_on.add("flush")
        return 0


def test_reports_are_served_by_a_polling_thread_not_by_the_next_send(monkeypatch):
    producer = HeldReports()
    monkeypatch.setattr(kafka_bench, "_producer", lambda kafka, linger_ms: producer)
    monkeypatch.setattr(settings, "BENCH_LIGHT_LOAD_RATE_PER_S", 200)
    monkeypatch.setattr(settings, "BENCH_LIGHT_LOAD_DURATION_MS", 100)

    latencies_ms = kafka_bench.light_load_latencies_ms("127.0.0.1:9092", "t", 100)

    assert producer.produced == 20
    assert len(latencies_ms) == 20 and all(latency >= 0 for latency in latencies_ms)
    assert producer.served_on == {"kafka-delivery-reports", "flush"}
    assert not any(t.name == "kafka-delivery-reports" for t in threading.enumerate())
