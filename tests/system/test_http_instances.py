"""System test of consumer instances held by the gateway: one left unused leaves its group by itself."""
from __future__ import annotations

import pytest

from raftbus.client import Admin, errors
from raftbus.gateway.instances import ConsumerInstances, InstanceOptions
from tests.helpers import wait_until

pytestmark = pytest.mark.system


def test_an_idle_instance_leaves_its_group_and_is_dropped(cluster):
    """Goal: an instance unused for idle_ms is gone (UNKNOWN_MEMBER) and its member left the group."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("idle-topic", partitions=1, replication_factor=3)
        instances = ConsumerInstances(cluster.bootstrap, idle_ms=3_000, check_ms=100)
        try:
            instance = instances.create("idle-group", "sleepy", InstanceOptions(auto_offset_reset="earliest"))
            instances.subscribe(instance, ["idle-topic"])

            def joined():  # each get() counts as use, so the instance is not idle while this runs
                used = instances.get("idle-group", "sleepy")
                instances.poll(used, 200, 10)
                return instances.assignment(used)

            wait_until(joined, 30, 0, what="the instance's member owning the partition")
            assert len(admin.describe_group("idle-group").members) == 1
            wait_until(lambda: admin.describe_group("idle-group").members == (), 30, 0.1, what="member left")
            with pytest.raises(errors.UnknownMember):
                instances.get("idle-group", "sleepy")
        finally:
            instances.close()
