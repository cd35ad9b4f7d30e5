"""Consumer groups as a part of the broker: the Groups service and servicer; the controller expires silent members
and long-empty groups, and partition leaders drop the committed offsets of groups gone for offsets_retention_ms."""
from __future__ import annotations

import logging

from raftbus.broker.context import BrokerContext
from raftbus.broker.groups.offset_service import OffsetService
from raftbus.broker.groups.service import GroupService
from raftbus.broker.groups.servicer import group_servicers
from raftbus.broker.groups.settings import GroupSettings

log = logging.getLogger(__name__)


class GroupsFeature:
    def __init__(self, context: BrokerContext, settings: GroupSettings):
        self.context = context
        self.settings = settings
        self.service = GroupService(context, settings)
        self.offsets = OffsetService(context, settings)

    def register(self, registry) -> None:
        registry.serve(group_servicers(self.service, self.offsets))
        # heartbeats long-poll on metadata changes: applied commands and leadership changes wake them
        registry.on_applied(self.service.on_metadata_event)
        registry.on_leadership(self.service.on_metadata_event)
        registry.every("offset expiry", self.settings.offsets_retention_check_interval_ms, self.expire_offsets)
        registry.every("member expiry", self.settings.group_expiry_check_interval_ms, self.service.expire_due)

    def expire_offsets(self) -> None:
        """Committed offsets of groups that no longer exist, past offsets_retention_ms, on partitions led here."""
        live_groups = set(self.context.metadata_sm.groups())
        for replica, _topic in self.context.led_partitions("stream"):
            try:
                self.offsets.expire_if_due(replica, live_groups)
            except Exception:
                log.exception("offset expiry check failed", extra={"group": replica.group_id})
