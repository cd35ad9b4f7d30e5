"""Goal: queue-only options given for a stream topic are refused as WRONG_TOPIC_KIND in one wording, whether the
producer (SDK and CLI), topic creation or topic alteration meets them: "only queue topics take X", naming the
topic when it is known."""
from __future__ import annotations

import pytest

from raftbus.broker.queues.config import resolve_queue_options
from raftbus.broker.settings import QueueSettings
from raftbus.client import errors
from raftbus.client.producer import reject_queue_options


@pytest.mark.parametrize("refuse, message", [
    (lambda: reject_queue_options(priority=1, topic="orders"),
     "only queue topics take priority; 'orders' is a stream topic: leave it out"),
    (lambda: reject_queue_options(priority=1, group="acme", topic="orders"),
     "only queue topics take priority, group; 'orders' is a stream topic: leave them out"),
    (lambda: resolve_queue_options(QueueSettings(), "stream", max_deliveries=5, backoff_base_ms=None),
     "only queue topics take max_deliveries; this is a stream topic: leave it out"),
])
def test_one_wording_for_queue_options_on_a_stream_topic(refuse, message):
    with pytest.raises(errors.WrongTopicKind) as refused:
        refuse()
    assert refused.value.code == "WRONG_TOPIC_KIND" and refused.value.message == message


def test_queue_options_on_a_queue_topic_pass():
    reject_queue_options(topic="jobs")
    assert resolve_queue_options(QueueSettings(), "queue", max_deliveries=5)["max_deliveries"] == 5
