"""Component tests: a stream topic's cleanup policy and compaction knobs, set at create and by alter."""
from __future__ import annotations

import pytest

from raftbus.broker import model
from raftbus.client import errors
from tests.component.harness import ServiceBroker


@pytest.fixture
def broker():
    return ServiceBroker()


def test_a_topic_is_created_with_delete_and_the_default_knobs(broker):
    """Goal: a stream topic created without compaction options has Kafka's defaults and the delete policy."""
    view = broker.create_topic("plain", partitions=1)
    assert view.topic.compaction == model.CompactionConfig()
    assert view.topic.compaction.cleanup_policy == "delete" and view.topic.compaction.deletes


def test_compaction_options_are_kept_at_create_and_changed_by_alter(broker):
    """Goal: create keeps the policy and knobs given; alter changes only those named and keeps the others."""
    view = broker.create_topic("table", partitions=1, compaction={"cleanup_policy": "compact",
                                                                 "min_compaction_lag_ms": 5_000})
    assert view.topic.compaction.compacted and not view.topic.compaction.deletes
    assert view.topic.compaction.min_compaction_lag_ms == 5_000
    altered = broker.admin.alter_topic("table", compaction={"delete_retention_ms": 60_000,
                                                            "cleanup_policy": "compact,delete"})
    config = altered.topic.compaction
    assert (config.cleanup_policy, config.delete_retention_ms, config.min_compaction_lag_ms) == \
        ("compact,delete", 60_000, 5_000)
    assert broker.admin.describe_topic("table").topic.compaction == config
    back = broker.admin.alter_topic("table", compaction={"cleanup_policy": "delete"})
    assert back.topic.compaction.cleanup_policy == "delete"


@pytest.mark.parametrize("options, error", [
    ({"cleanup_policy": "shred"}, errors.InvalidArgument),
    ({"cleanup_policy": "compact", "min_compaction_lag_ms": -1}, errors.InvalidArgument),
    ({"cleanup_policy": "compact", "min_compaction_lag_ms": 10, "max_compaction_lag_ms": 5}, errors.InvalidArgument),
    ({"cleanup_policy": "compact", "segment_bytes": 0}, errors.InvalidArgument),
    ({"cleanup_policy": "compact", "delete_retention_ms": "1"}, errors.InvalidArgument),
    ({"segment_size": 1}, errors.InvalidArgument),
])
def test_bad_compaction_options_are_refused_and_create_nothing(broker, options, error):
    """Goal: every bad compaction option has its typed error and leaves no topic behind."""
    with pytest.raises(error):
        broker.admin.create_topic("t", partitions=1, compaction=options)
    assert broker.admin.list_topics() == []


def test_a_queue_topic_takes_no_cleanup_policy(broker):
    """Goal: compaction options on a queue topic are WRONG_TOPIC_KIND, at create and at alter."""
    with pytest.raises(errors.WrongTopicKind):
        broker.admin.create_topic("jobs", partitions=1, kind="queue", compaction={"cleanup_policy": "compact"})
    broker.create_topic("jobs", partitions=1, kind="queue")
    with pytest.raises(errors.WrongTopicKind):
        broker.admin.alter_topic("jobs", compaction={"cleanup_policy": "compact"})
    with pytest.raises(errors.InvalidArgument):
        broker.admin.alter_topic("jobs", compaction={"cleanup_policy": "nope"})


def test_the_metadata_state_machine_refuses_bad_compaction_in_a_command(broker):
    """Goal: a create command carrying a bad cleanup policy is refused where it is applied, not only at the API."""
    from raftbus.broker import commands
    from raftbus.broker.context import wait_result
    command = commands.encode_create_topic(name="raw", kind="stream", ordering="", partitions=1,
                                           replication_factor=1, retention_ms=-1, retention_bytes=-1, now_ms=1,
                                           compaction={"cleanup_policy": "sometimes"})
    with pytest.raises(errors.InvalidArgument, match="cleanup_policy"):
        wait_result(broker.context.metadata_group.submit(command), 5)
    assert broker.admin.list_topics() == []
