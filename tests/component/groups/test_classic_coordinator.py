"""Goal: the classic coordinator's periodic check does not take a join phase whose outcome is being committed for a
rebalance a previous coordinator left unfinished: the members it answered sync at the generation they were given.
A member's held heartbeat is answered when a join phase starts, when its connection has a later request, when the
coordinator loses the metadata group, or when its hold ends; past heartbeats_held_max, heartbeats are not held."""
import asyncio
from concurrent.futures import Future

import pytest

from raftbus.broker.groups.coordinator import ClassicCoordinator, CoordinatorSettings, JoinRequest
from raftbus.client import errors
from tests.component.harness import InProcessBroker, MetadataGroup

ANSWERED_WITHIN_S = 10  # far below the hold of the heartbeats below (60 s): an answer by then was not the hold's end


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


def _member(member_id: str = "", protocols=(("range", b"m"),)) -> JoinRequest:
    return JoinRequest(group="held", member_id=member_id, instance_id="", client_id="c", client_host="h",
                       protocol_type="consumer", protocols=protocols, session_timeout_ms=180_000,
                       rebalance_timeout_ms=10_000, version=5)


async def _stable_member(coordinator) -> tuple[str, int]:
    """A member alone in a stable group "held": (member id, generation)."""
    member_id = (await coordinator.join(_member())).member_id  # MEMBER_ID_REQUIRED
    joined = await coordinator.join(_member(member_id))
    await coordinator.sync("held", member_id, "", joined.generation, None, None, [(member_id, b"all")])
    return member_id, joined.generation


def _held_coordinator(broker, **settings) -> ClassicCoordinator:
    return ClassicCoordinator(broker.context, CoordinatorSettings(initial_rebalance_delay_ms=0,
                                                                  heartbeat_hold_ms=60_000, **settings))


async def _held_beat(coordinator, member_id: str, generation: int, released=None) -> asyncio.Future:
    """A heartbeat of the member in flight (released when `released` is done; a future never done by default),
    given the time to reach the coordinator."""
    released = released if released is not None else asyncio.get_running_loop().create_future()
    beat = asyncio.ensure_future(coordinator.heartbeat("held", member_id, "", generation, released=released))
    await asyncio.sleep(0.05)
    return beat


def test_a_held_heartbeat_is_answered_rebalance_in_progress_when_a_member_joins():
    broker = InProcessBroker()
    coordinator = _held_coordinator(broker)

    async def scenario():
        member_id, generation = await _stable_member(coordinator)
        beat = await _held_beat(coordinator, member_id, generation)
        assert not beat.done()  # held: nothing changed
        newcomer = (await coordinator.join(_member())).member_id
        joining = asyncio.ensure_future(coordinator.join(_member(newcomer)))
        with pytest.raises(errors.RebalanceInProgress):
            await asyncio.wait_for(beat, ANSWERED_WITHIN_S)
        rejoined = await coordinator.join(_member(member_id))
        assert (await joining).generation == rejoined.generation > generation

    asyncio.run(scenario())


def test_a_held_heartbeat_is_answered_at_once_when_its_connection_has_a_later_request_or_it_is_removed():
    broker = InProcessBroker()
    coordinator = _held_coordinator(broker)

    async def scenario():
        member_id, generation = await _stable_member(coordinator)
        released = asyncio.get_running_loop().create_future()
        beat = await _held_beat(coordinator, member_id, generation, released)
        released.set_result(None)
        assert await asyncio.wait_for(beat, ANSWERED_WITHIN_S) is None
        beat = await _held_beat(coordinator, member_id, generation)
        assert await coordinator.leave("held", [(member_id, "")]) == [None]
        with pytest.raises(errors.UnknownMember):
            await asyncio.wait_for(beat, ANSWERED_WITHIN_S)

    asyncio.run(scenario())


def test_a_held_heartbeat_is_answered_not_coordinator_when_the_broker_loses_the_metadata_group():
    broker = InProcessBroker()
    coordinator = _held_coordinator(broker)

    async def scenario():
        member_id, generation = await _stable_member(coordinator)
        beat = await _held_beat(coordinator, member_id, generation)
        broker.metadata_group.set_leader(2)
        await coordinator.tick()
        with pytest.raises(errors.NotLeader):
            await asyncio.wait_for(beat, ANSWERED_WITHIN_S)

    asyncio.run(scenario())


def test_a_heartbeat_is_held_until_its_hold_ends_and_not_past_heartbeats_held_max():
    broker = InProcessBroker()
    coordinator = ClassicCoordinator(broker.context, CoordinatorSettings(
        initial_rebalance_delay_ms=0, heartbeat_hold_ms=300, heartbeats_held_max=1))

    async def scenario():
        member_id, generation = await _stable_member(coordinator)
        pending = asyncio.get_running_loop().create_future
        first = asyncio.ensure_future(coordinator.heartbeat("held", member_id, "", generation, released=pending()))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(coordinator.heartbeat("held", member_id, "", generation, released=pending()))
        await asyncio.sleep(0.05)
        assert second.done() and second.result() is None  # one is held already: answered at once
        assert not first.done()
        assert await asyncio.wait_for(first, ANSWERED_WITHIN_S) is None  # the 300 ms hold ended

    asyncio.run(scenario())
