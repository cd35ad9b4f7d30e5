"""LeadershipSettings: how often brokers gossip the groups they lead, move leaderships to their preferred
replicas and hand them away while draining."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import require, setting


@dataclass(frozen=True)
class LeadershipSettings:
    TITLE = "Leaderships: the leader gossip, preferred leaders and draining brokers"

    leader_gossip_interval_ms: int = setting(1000, "each broker tells its peers what changed among the groups it "
                                                   "leads this often")
    leader_gossip_full_interval_ms: int = setting(30_000, "... and the whole list of them this often (and to a peer "
                                                          "that connects)")
    preferred_leader_check_interval_ms: int = setting(5000, "how often leaders hand their groups to the preferred "
                                                            "replica when it is up")
    drain_check_interval_ms: int = setting(500, "a draining broker hands its leaderships away this often until none "
                                                "is left")

    @property
    def leaders_stale_after_s(self) -> float:
        """What a broker told about the groups it leads stands this long after its last gossip (3 rounds)."""
        return max(3 * self.leader_gossip_interval_ms / 1000, 3.0)

    @property
    def full_every_rounds(self) -> int:
        return self.leader_gossip_full_interval_ms // self.leader_gossip_interval_ms

    def validate(self) -> None:
        require(0 < self.leader_gossip_interval_ms <= self.leader_gossip_full_interval_ms,
                "need 0 < leader_gossip_interval_ms <= leader_gossip_full_interval_ms")
