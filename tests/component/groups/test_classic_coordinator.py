"""Goal: the classic coordinator's periodic check does not take a join phase whose outcome is being committed for a
rebalance a previous coordinator left unfinished: the members it answered sync at the generation they were given."""
import asyncio
from concurrent.futures import Future

from raftbus.broker.groups.coordinator import ClassicCoordinator, CoordinatorSettings, JoinRequest
from tests.component.harness import InProcessBroker, MetadataGroup


class HoldingMetadataGroup(MetadataGroup):
    """The metadata group with a commit that takes its time: commands `hold` matches apply when `release` says."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.hold = lambda command: False
        self.held: list[tuple[bytes, Future]] = []

    def submit(self, command: bytes) -> Future:
        if not self.hold(command):
            return super().submit(command)
        future: Future = Future()
        self.held.append((command, future))
        return future

    def release(self) -> None:
        held, self.held = self.held, []
        for command, future in held:
            future.set_result(super().submit(command).result())


def _join(member_id: str = "", instance: str = "i-1") -> JoinRequest:
    return JoinRequest(group="static", member_id=member_id, instance_id=instance, client_id="c", client_host="h",
                       protocol_type="raw", protocols=(("range", b"m"),), session_timeout_ms=10_000,
                       rebalance_timeout_ms=10_000, version=5)


def test_a_check_while_the_join_phase_commits_its_outcome_starts_no_rebalance():
    broker = InProcessBroker(metadata_group_type=HoldingMetadataGroup)
    metadata = broker.metadata_group
    coordinator = ClassicCoordinator(broker.context, CoordinatorSettings(initial_rebalance_delay_ms=0))

    async def scenario():
        metadata.hold = lambda command: b'"type":"classic_complete_join"' in command
        joining = asyncio.ensure_future(coordinator.join(_join()))
        while not metadata.held:  # the member is committed; the join phase's outcome waits for its commit
            await asyncio.sleep(0)
        await coordinator.tick()
        metadata.release()
        answer = await joining
        assert answer.generation == broker.metadata_sm.group("static").generation
        assert coordinator.kafka_state(broker.metadata_sm.group("static")) == "CompletingRebalance"
        synced = await coordinator.sync("static", answer.member_id, "i-1", answer.generation, None, None,
                                        [(answer.member_id, b"s")])
        assert synced.assignment == b"s"
        await coordinator.tick()
        assert coordinator.kafka_state(broker.metadata_sm.group("static")) == "Stable"

    asyncio.run(scenario())
