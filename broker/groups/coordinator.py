"""The group coordinator of Kafka's classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), on the controller.

Every broker's Kafka port names the controller (the metadata group's leader) as every group's coordinator; the
coordinator runs on the Kafka port's asyncio loop, so all of its in-memory state is confined to that loop and
needs no lock. What a group is (its members, their protocols, the generation, the leader's assignment) is
replicated by the metadata group through the rules of broker/groups/classic.py; what is kept here in memory is
only what a coordinator's death may lose at the cost of a rejoin:

- the join phase in progress (`_Round`): which members sent JoinGroup again and with which protocols, waiting
  until every member has (or the rebalance timeout passed, or, for a group that was empty, the initial delay);
- members told MEMBER_ID_REQUIRED that have not joined with their id yet (`_pending`, for a session timeout);
- SyncGroup requests of followers waiting for their leader's assignment, and who has synced since the join
  phase completed (members that do not sync within the rebalance timeout are removed, as Kafka does);
- heartbeat times (`HeartbeatTable`; a new coordinator gives every member a full session timeout of grace);
- held heartbeats (`heartbeat`): a member's Heartbeat waits here, for up to heartbeat_hold_ms, until a join phase
  starts, so members rejoin when a member joins instead of at their next heartbeat.

Answers follow Kafka's coordinator: UNKNOWN_MEMBER_ID (`UnknownMember`), ILLEGAL_GENERATION (`StaleGeneration`),
REBALANCE_IN_PROGRESS (`RebalanceInProgress`), FENCED_INSTANCE_ID (`FencedInstanceId`),
INCONSISTENT_GROUP_PROTOCOL (`InconsistentGroupProtocol`), MEMBER_ID_REQUIRED (`JoinAnswer.member_id_required`);
a broker that is not the controller raises NotLeader (the Kafka port answers NOT_COORDINATOR).
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from raftbus.client import errors

from raftbus.broker.context import BrokerContext
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups import rules
from raftbus.broker.groups.classic_state import COMPLETING, PREPARING, STABLE, ClassicMember, Protocols
from raftbus.broker.groups.heartbeats import HeartbeatTable

log = logging.getLogger(__name__)
_NOT_PRINTABLE = re.compile(r"[^\x21-\x7e]")
CLIENT_ID_IN_MEMBER_ID_MAX = 200
UNKNOWN_GENERATION = -1


@dataclass(frozen=True)
class CoordinatorSettings:
    """The coordinator's bounds, from GroupSettings and KafkaSettings."""

    session_timeout_min_ms: int = 6_000
    session_timeout_max_ms: int = 1_800_000
    group_members_max: int = 1_000
    groups_max: int = 10_000
    initial_rebalance_delay_ms: int = 3_000  # kafka_group_initial_rebalance_delay_ms
    heartbeat_hold_ms: int = 3_000  # kafka_heartbeat_hold_ms
    heartbeats_held_max: int = 1_000  # kafka_heartbeats_held_max
    state_bytes_max: int = 1024 * 1024  # kafka_group_state_bytes_max


class JoinRequest(NamedTuple):
    group: str
    member_id: str  # "" for a new member
    instance_id: str  # "" for a dynamic member
    client_id: str
    client_host: str
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    version: int  # JoinGroup's version: v4+ asks new members to join again with their id, v9+ skips assignment


class JoinAnswer(NamedTuple):
    member_id: str
    generation: int = UNKNOWN_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple = ()  # (member_id, instance_id, metadata) of every member, for the leader only
    skip_assignment: bool = False
    member_id_required: bool = False


class SyncAnswer(NamedTuple):
    protocol_type: str
    protocol_name: str
    assignment: bytes


@dataclass
class _Round:
    """A join phase in progress: who has joined again, in the order they did."""

    started_s: float
    deadline_s: float
    initial: bool  # the group was empty: wait initial_rebalance_delay_ms for more members before completing
    joined: dict[str, tuple[JoinRequest, asyncio.Future]] = field(default_factory=dict)


@dataclass
class _Syncing:
    """After a join phase: which members have sent SyncGroup for `generation`, and who waits for the leader."""

    generation: int
    deadline_s: float
    synced: set[str] = field(default_factory=set)
    waiting: dict[str, asyncio.Future] = field(default_factory=dict)


def member_id_for(client_id: str, instance_id: str = "") -> str:
    """Kafka's member ids: the client id (the instance id of a static member), a dash and a UUID; only printable
    ASCII is kept of the client id."""
    prefix = _NOT_PRINTABLE.sub("_", instance_id or client_id or "consumer")[:CLIENT_ID_IN_MEMBER_ID_MAX]
    return f"{prefix}-{uuid.uuid4()}"


class ClassicCoordinator:
    def __init__(self, context: BrokerContext, settings: CoordinatorSettings, *, clock_s=time.monotonic):
        self.context = context
        self.settings = settings
        self.heartbeats = HeartbeatTable()
        self._clock_s = clock_s
        self._locks: dict[str, asyncio.Lock] = {}
        self._rounds: dict[str, _Round] = {}
        self._syncing: dict[str, _Syncing] = {}
        self._pending: dict[str, dict[str, float]] = {}  # group -> new member id -> deadline (MEMBER_ID_REQUIRED)
        self._leaving: dict[str, asyncio.Task] = {}  # group -> expiry in flight
        self._held: dict[str, set[asyncio.Future]] = {}  # group -> held heartbeats' wake-up futures
        self._held_count = 0

    # ------------------------------------------------------------------ JoinGroup
    async def join(self, request: JoinRequest) -> JoinAnswer:
        self._require_coordinator()
        self._validate_join(request)
        async with self._lock(request.group):
            waiter = await self._join_locked(request)
        if isinstance(waiter, JoinAnswer):
            return waiter
        return await waiter

    def _validate_join(self, r: JoinRequest) -> None:
        s = self.settings
        rules.validate_group_name(r.group)
        if not s.session_timeout_min_ms <= r.session_timeout_ms <= s.session_timeout_max_ms:
            raise errors.InvalidSessionTimeout(f"session timeout {r.session_timeout_ms} ms is outside "
                                               f"[{s.session_timeout_min_ms}, {s.session_timeout_max_ms}]")
        if not r.protocol_type or not r.protocols:
            raise errors.InconsistentGroupProtocol("a member names its protocol type and at least one protocol")
        size = sum(len(n) + len(m) for n, m in r.protocols)
        if size > s.state_bytes_max:
            raise errors.GroupStateTooLarge(f"the member's protocols take {size} bytes "
                                            f"(kafka_group_state_bytes_max={s.state_bytes_max})")

    async def _join_locked(self, r: JoinRequest):
        group = self.context.metadata_sm.group(r.group)
        classic = self._check_protocols(group, r)
        if not r.member_id:
            new_id = member_id_for(r.client_id, r.instance_id)
            if r.instance_id and classic is not None and classic.static_member(r.instance_id) is not None:
                return await self._replace_static(group, r._replace(member_id=new_id))
            if not r.instance_id and r.version >= 4:  # KIP-394: join again with this id
                pending = self._pending.setdefault(r.group, {})
                if len(pending) >= self.settings.group_members_max:
                    raise errors.GroupLimitReached(f"{len(pending)} members of group {r.group!r} have not joined "
                                                   "with their member id yet")
                pending[new_id] = self._clock_s() + r.session_timeout_ms / 1000
                return JoinAnswer(member_id=new_id, member_id_required=True)
            return await self._add_member(r._replace(member_id=new_id))
        if r.member_id in self._pending.get(r.group, {}):
            del self._pending[r.group][r.member_id]
            return await self._add_member(r)
        member = self._known_member(group, r.group, r.member_id, r.instance_id)
        return await self._rejoin(group, member, r)

    def _check_protocols(self, group, r: JoinRequest):
        """The group's classic state when the member fits it; InconsistentGroupProtocol when it does not."""
        if group is None or not group.members:
            return group.classic if group is not None and group.protocol == rules.CLASSIC else None
        if group.protocol != rules.CLASSIC:
            raise errors.InconsistentGroupProtocol(
                f"group {r.group!r} is in use by members of the {group.protocol} protocol")
        classic = group.classic
        if classic.protocol_type != r.protocol_type:
            raise errors.InconsistentGroupProtocol(f"group {r.group!r} has protocol type "
                                                   f"{classic.protocol_type!r}, not {r.protocol_type!r}")
        names = {n for n, _ in r.protocols}
        others = [m for m in classic.members.values() if m.member_id != r.member_id]
        if others and not set.intersection(names, *({n for n, _ in m.protocols} for m in others)):
            raise errors.InconsistentGroupProtocol(f"the member supports none of the protocols the members of "
                                                   f"group {r.group!r} share")
        return classic

    def _known_member(self, group, name: str, member_id: str, instance_id: str) -> ClassicMember:
        """Kafka's validateMember: a static member's instance id must still map to this member id."""
        classic = group.classic if group is not None and group.protocol == rules.CLASSIC else None
        if instance_id and classic is not None:
            static = classic.static_member(instance_id)
            if static is not None and static.member_id != member_id:
                raise errors.FencedInstanceId(f"instance {instance_id!r} of group {name!r} is now member "
                                              f"{static.member_id!r}")
        if classic is None or member_id not in classic.members:
            raise errors.UnknownMember(f"member {member_id!r} is not in group {name!r}; join again")
        return classic.members[member_id]

    async def _add_member(self, r: JoinRequest):
        """A new member: committed (classic_join), then it waits in the group's join phase."""
        group = await self._commit(group_commands.encode_classic_join(
            group=r.group, member_id=r.member_id, instance_id=r.instance_id, client_id=r.client_id,
            client_host=r.client_host, protocol_type=r.protocol_type, protocols=r.protocols,
            session_timeout_ms=r.session_timeout_ms, rebalance_timeout_ms=r.rebalance_timeout_ms,
            members_max=self.settings.group_members_max, groups_max=self.settings.groups_max,
            now_ms=self.context.clock.now_ms()))
        self._check_state_size(group)
        log.info("kafka member joined", extra={"group": r.group, "member": r.member_id,
                                               "instance": r.instance_id or None})
        return await self._wait_in_round(group, r, new_member=True)

    async def _replace_static(self, group, r: JoinRequest):
        """A static member back under a new member id: it replaces its predecessor, which is fenced. A stable
        group whose selected protocol stays the same keeps its generation and assignment (no rebalance)."""
        old = group.classic.static_member(r.instance_id)
        previous_leader = group.classic.leader
        changed = await self._commit(group_commands.encode_classic_join(
            group=r.group, member_id=r.member_id, instance_id=r.instance_id, client_id=r.client_id,
            client_host=r.client_host, protocol_type=r.protocol_type, protocols=r.protocols,
            session_timeout_ms=r.session_timeout_ms, rebalance_timeout_ms=r.rebalance_timeout_ms,
            members_max=self.settings.group_members_max, groups_max=self.settings.groups_max,
            now_ms=self.context.clock.now_ms()))
        self._fence(r.group, old.member_id, errors.FencedInstanceId(
            f"instance {r.instance_id!r} of group {r.group!r} joined again as member {r.member_id!r}"))
        self.heartbeats.beat(r.group, r.member_id, self.context.clock.now_ms())
        log.info("kafka static member rejoined", extra={"group": r.group, "member": r.member_id,
                                                        "instance": r.instance_id,
                                                        "rebalance": changed.classic.phase != STABLE})
        if changed.classic.phase == STABLE and r.group not in self._rounds:
            classic = changed.classic
            if r.version >= 9:
                leader = classic.leader == r.member_id
                return self._join_answer(changed, r.member_id, leader, skip_assignment=leader)
            return self._join_answer(changed, r.member_id, False)._replace(
                leader=old.member_id if previous_leader == old.member_id else classic.leader)
        return await self._wait_in_round(changed, r, new_member=True)

    async def _rejoin(self, group, member: ClassicMember, r: JoinRequest):
        """A known member joins again: during a join phase it waits for it; otherwise a changed protocol list or the
        leader's JoinGroup starts one, and an unchanged follower gets the current generation back."""
        classic = group.classic
        self.heartbeats.beat(r.group, r.member_id, self.context.clock.now_ms())
        if r.group in self._rounds or classic.phase == PREPARING:
            return await self._wait_in_round(group, r)
        same = tuple(member.protocols) == tuple(r.protocols)
        if classic.phase == COMPLETING and same:
            return self._join_answer(group, r.member_id, classic.leader == r.member_id)
        if classic.phase == STABLE and same and classic.leader != r.member_id:
            return self._join_answer(group, r.member_id, False)
        return await self._wait_in_round(group, r)

    async def _wait_in_round(self, group, r: JoinRequest, new_member: bool = False):
        """Join the group's join phase (starting one when none runs) and return the future of the answer."""
        join_round = self._round_of(group)
        known = join_round.joined.pop(r.member_id, None)
        if known is not None and not known[1].done():
            known[1].set_exception(errors.UnknownMember(f"member {r.member_id!r} sent JoinGroup again"))
        future = asyncio.get_running_loop().create_future()
        join_round.joined[r.member_id] = (r, future)
        if join_round.initial and new_member:  # a new member of a group that was empty: wait for more
            limit = join_round.started_s + self._rebalance_timeout_s(group)
            join_round.deadline_s = min(max(join_round.deadline_s, self._clock_s()
                                            + self.settings.initial_rebalance_delay_ms / 1000), limit)
        await self._maybe_complete(r.group)
        return future

    def _round_of(self, group) -> _Round:
        join_round = self._rounds.get(group.name)
        if join_round is None:
            now = self._clock_s()
            # a group without a generation of members yet (new, or empty again): its first members come together
            initial = group.classic.leader == "" and self.settings.initial_rebalance_delay_ms > 0
            wait_s = self.settings.initial_rebalance_delay_ms / 1000 if initial else self._rebalance_timeout_s(group)
            join_round = self._rounds[group.name] = _Round(started_s=now, deadline_s=now + wait_s, initial=initial)
            self._end_syncing(group.name, errors.RebalanceInProgress(f"group {group.name!r} is rebalancing"))
            self._wake_held(group.name)
            log.info("kafka group rebalancing", extra={"group": group.name, "generation": group.generation})
        return join_round

    def _rebalance_timeout_s(self, group) -> float:
        timeouts = [m.rebalance_timeout_ms for m in group.classic.members.values()] if group.classic else []
        return max(timeouts or [60_000]) / 1000

    async def _maybe_complete(self, name: str, *, deadline_passed: bool = False) -> None:
        """Complete the join phase once every member has joined again (not before the initial delay of a group
        that was empty), or when its deadline passed."""
        join_round = self._rounds.get(name)
        group = self.context.metadata_sm.group(name)
        if join_round is None or group is None or group.classic is None:
            return
        everyone = set(group.classic.members) <= set(join_round.joined) and not self._pending.get(name)
        if not deadline_passed and (join_round.initial or not everyone):
            return
        if not join_round.joined and any(m.instance_id for m in group.classic.members.values()):
            join_round.deadline_s = self._clock_s() + self._rebalance_timeout_s(group)  # static members away
            return
        await self._complete(name, join_round)

    async def _complete(self, name: str, join_round: _Round) -> None:
        """Commit the join phase's outcome and answer its members. The round stays in `_rounds` until the commit
        settles: the group is PREPARING until it applies, and the periodic check takes a PREPARING group without a
        round for a rebalance a previous coordinator left unfinished."""
        joined = [(m, r.protocols, r.session_timeout_ms, r.rebalance_timeout_ms)
                  for m, (r, _) in join_round.joined.items()]
        try:
            group = await self._commit(group_commands.encode_classic_complete_join(
                group=name, members=joined, now_ms=self.context.clock.now_ms()))
        except errors.RaftbusError as exc:
            if self._rounds.get(name) is join_round:
                del self._rounds[name]
            for _, future in join_round.joined.values():
                _settle(future, exc)
            return
        if self._rounds.get(name) is join_round:
            del self._rounds[name]
        classic = group.classic
        log.info("kafka group generation", extra={"group": name, "generation": group.generation,
                                                  "members": len(classic.members), "leader": classic.leader,
                                                  "protocol": classic.protocol_name})
        if classic.members:
            self._syncing[name] = _Syncing(group.generation, self._clock_s() + self._rebalance_timeout_s(group))
        now_ms = self.context.clock.now_ms()
        for member_id, (r, future) in join_round.joined.items():
            if member_id not in classic.members:
                _settle(future, errors.UnknownMember(f"member {member_id!r} left group {name!r}"))
                continue
            self.heartbeats.beat(name, member_id, now_ms)
            _settle(future, self._join_answer(group, member_id, classic.leader == member_id))

    def _join_answer(self, group, member_id: str, leader: bool, skip_assignment: bool = False) -> JoinAnswer:
        classic = group.classic
        members = tuple((m.member_id, m.instance_id or None, m.metadata_of(classic.protocol_name))
                        for m in classic.members.values()) if leader else ()
        return JoinAnswer(member_id=member_id, generation=group.generation, protocol_type=classic.protocol_type,
                          protocol_name=classic.protocol_name, leader=classic.leader, members=members,
                          skip_assignment=skip_assignment)

    # ------------------------------------------------------------------ SyncGroup
    async def sync(self, name: str, member_id: str, instance_id: str, generation: int, protocol_type: str | None,
                   protocol_name: str | None, assignments) -> SyncAnswer:
        """The member's assignment of `generation`; the leader's call carries everyone's (member_id, bytes)."""
        self._require_coordinator()
        rules.validate_group_name(name)
        async with self._lock(name):
            group = self._live_group(name)
            self._known_member(group, name, member_id, instance_id)
            classic = group.classic
            if generation != group.generation:
                raise errors.StaleGeneration(f"generation {generation} is not group {name!r}'s ({group.generation})")
            if (protocol_type and protocol_type != classic.protocol_type) or \
                    (protocol_name and protocol_name != classic.protocol_name):
                raise errors.InconsistentGroupProtocol(f"group {name!r} uses {classic.protocol_type}/"
                                                       f"{classic.protocol_name}")
            if name in self._rounds or classic.phase == PREPARING:
                raise errors.RebalanceInProgress(f"group {name!r} is rebalancing: join again")
            self.heartbeats.beat(name, member_id, self.context.clock.now_ms())
            if classic.phase == STABLE:
                self._synced(name, group.generation, member_id)
                return SyncAnswer(classic.protocol_type, classic.protocol_name, classic.members[member_id].assignment)
            syncing = self._synced(name, group.generation, member_id)
            if member_id == classic.leader:
                return await self._store_assignment(group, member_id, assignments, syncing)
            future = asyncio.get_running_loop().create_future()
            known = syncing.waiting.pop(member_id, None)
            if known is not None:
                _settle(known, errors.RebalanceInProgress("SyncGroup sent again"))
            syncing.waiting[member_id] = future
        return await future

    def _synced(self, name: str, generation: int, member_id: str) -> _Syncing:
        syncing = self._syncing.get(name)
        if syncing is None or syncing.generation != generation:
            syncing = self._syncing[name] = _Syncing(generation, self._clock_s() + self._rebalance_timeout_s(
                self.context.metadata_sm.group(name)))
        syncing.synced.add(member_id)
        return syncing

    async def _store_assignment(self, group, member_id: str, assignments, syncing: _Syncing) -> SyncAnswer:
        name, classic = group.name, group.classic
        by_member = {m: bytes(a) for m, a in assignments if m in classic.members}
        size = classic.state_bytes() - sum(len(m.assignment) for m in classic.members.values()) + \
            sum(len(a) for a in by_member.values())
        try:
            if size > self.settings.state_bytes_max:
                raise errors.GroupStateTooLarge(f"group {name!r} with this assignment takes {size} bytes "
                                                f"(kafka_group_state_bytes_max={self.settings.state_bytes_max})")
            stored = await self._commit(group_commands.encode_classic_sync(
                group=name, member_id=member_id, generation=group.generation, assignments=sorted(by_member.items()),
                now_ms=self.context.clock.now_ms()))
        except errors.RaftbusError as exc:
            log.warning("kafka group assignment refused", extra={"group": name, "reason": exc.message})
            self._end_syncing(name, exc)
            if isinstance(exc, errors.GroupStateTooLarge):
                self._round_of(group)  # as Kafka does: everyone joins again
            raise
        log.info("kafka group stable", extra={"group": name, "generation": stored.generation})
        for waiting_id, future in syncing.waiting.items():
            member = stored.classic.members.get(waiting_id)
            _settle(future, SyncAnswer(stored.classic.protocol_type, stored.classic.protocol_name,
                                       member.assignment) if member is not None
                    else errors.UnknownMember(f"member {waiting_id!r} left group {name!r}"))
        syncing.waiting.clear()
        return SyncAnswer(stored.classic.protocol_type, stored.classic.protocol_name,
                          stored.classic.members[member_id].assignment)

    def _end_syncing(self, name: str, error: errors.RaftbusError) -> None:
        syncing = self._syncing.pop(name, None)
        if syncing is not None:
            for future in syncing.waiting.values():
                _settle(future, error)

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup
    async def heartbeat(self, name: str, member_id: str, instance_id: str, generation: int, *,
                        released: asyncio.Future | None = None) -> None:
        """Raises what Kafka's coordinator answers: UnknownMember, FencedInstanceId, StaleGeneration, or
        RebalanceInProgress while a join phase runs (the member must join again).

        With `released` (done once a later request arrives on the member's connection), the heartbeat of a member
        in good standing is held: answered when a join phase starts (RebalanceInProgress), when the member is
        removed or fenced, when this broker stops being the coordinator, when `released` is done, or after
        heartbeat_hold_ms (at most a third of the member's session timeout). A member so learns of a rebalance
        when it starts rather than at its next heartbeat, which a client sends on its own timer."""
        member = self._beat(name, member_id, instance_id, generation)
        hold_ms = min(self.settings.heartbeat_hold_ms, member.session_timeout_ms // 3)
        if released is None or released.done() or hold_ms <= 0 or \
                self._held_count >= self.settings.heartbeats_held_max:
            return
        woken = asyncio.get_running_loop().create_future()
        self._held.setdefault(name, set()).add(woken)
        self._held_count += 1
        try:
            await asyncio.wait((woken, released), timeout=hold_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._held_count -= 1
            held = self._held.get(name)
            if held is not None:
                held.discard(woken)
                if not held:
                    del self._held[name]
        self._beat(name, member_id, instance_id, generation)

    def _beat(self, name: str, member_id: str, instance_id: str, generation: int) -> ClassicMember:
        self._require_coordinator()
        rules.validate_group_name(name)
        group = self._live_group(name)
        member = self._known_member(group, name, member_id, instance_id)
        if generation != group.generation:
            raise errors.StaleGeneration(f"generation {generation} is not group {name!r}'s ({group.generation})")
        self.heartbeats.beat(name, member_id, self.context.clock.now_ms())
        if name in self._rounds or group.classic.phase == PREPARING:
            raise errors.RebalanceInProgress(f"group {name!r} is rebalancing: join again")
        return member

    def _wake_held(self, name: str | None = None) -> None:
        """Answer the held heartbeats of group `name` (of every group when None): something changed for them."""
        for held in ([self._held.get(name, ())] if name is not None else list(self._held.values())):
            for woken in held:
                if not woken.done():
                    woken.set_result(None)

    async def leave(self, name: str, members) -> list[errors.RaftbusError | None]:
        """Members (member_id, instance_id) leaving: None for each that left, else its error."""
        self._require_coordinator()
        rules.validate_group_name(name)
        async with self._lock(name):
            group = self.context.metadata_sm.group(name)
            outcomes: list[errors.RaftbusError | None] = []
            leaving = []
            for member_id, instance_id in members:
                try:
                    if not member_id and instance_id and group is not None and group.classic is not None:
                        static = group.classic.static_member(instance_id)
                        member_id = static.member_id if static is not None else ""
                    if member_id in self._pending.get(name, {}):
                        del self._pending[name][member_id]
                    else:
                        leaving.append(self._known_member(group, name, member_id, instance_id).member_id)
                    outcomes.append(None)
                except errors.RaftbusError as exc:
                    outcomes.append(exc)
            if leaving:
                await self._remove(name, leaving, "left")
            else:
                await self._maybe_complete(name)
        return outcomes

    async def _remove(self, name: str, member_ids, why: str) -> None:
        """Members out of the group (committed); the others join again, or the phase in progress completes."""
        group = await self._commit(group_commands.encode_classic_leave(group=name, member_ids=member_ids,
                                                                       now_ms=self.context.clock.now_ms()))
        log.info("kafka members removed", extra={"group": name, "members": list(member_ids), "reason": why})
        for member_id in member_ids:
            self._fence(name, member_id, errors.UnknownMember(f"member {member_id!r} {why} group {name!r}"))
        if not group.members:
            self._rounds.pop(name, None)
            self._syncing.pop(name, None)
            return
        self._round_of(group)
        await self._maybe_complete(name)

    def _fence(self, name: str, member_id: str, error: errors.RaftbusError) -> None:
        """A member that is gone: its JoinGroup and SyncGroup waiting here get `error`, its held heartbeat its
        answer."""
        self._wake_held(name)
        join_round = self._rounds.get(name)
        if join_round is not None and member_id in join_round.joined:
            _settle(join_round.joined.pop(member_id)[1], error)
        syncing = self._syncing.get(name)
        if syncing is not None and member_id in syncing.waiting:
            _settle(syncing.waiting.pop(member_id), error)

    # ------------------------------------------------------------------ the periodic check (listener loop)
    async def tick(self) -> None:
        """Expire silent members and pending ids, complete join phases past their deadline, remove members that did
        not sync in time; on a broker that is not (or no longer) the controller, drop everything."""
        if not self.context.metadata_group.is_leader:
            if self._rounds or self._syncing or self._pending:
                self.drop_all(self.context.not_leader(self.context.metadata_group.leader_id, "the metadata group"))
            self.heartbeats.lost_leadership()
            self._wake_held()
            return
        now_ms, now_s = self.context.clock.now_ms(), self._clock_s()
        since_ms = self.heartbeats.leading_since(now_ms)
        for name, group in list(self.context.metadata_sm.groups().items()):
            if group.protocol != rules.CLASSIC or group.classic is None:
                continue
            await self._check_group(name, group, now_ms, since_ms, now_s)
        groups = self.context.metadata_sm.groups()
        for name in [n for n in self._rounds if n not in groups]:
            self._rounds.pop(name)
        self.heartbeats.keep_only({n: set(g.members) for n, g in groups.items() if g.protocol == rules.CLASSIC})

    async def _check_group(self, name: str, group, now_ms: int, since_ms: int, now_s: float) -> None:
        pending = self._pending.get(name, {})
        for member_id in [m for m, deadline in pending.items() if deadline <= now_s]:
            del pending[member_id]
        if group.classic.phase == PREPARING and name not in self._rounds:
            self._round_of(group)  # a rebalance a previous coordinator left unfinished
        if group.classic.phase == COMPLETING and name not in self._syncing and name not in self._rounds:
            self._syncing[name] = _Syncing(group.generation, now_s + self._rebalance_timeout_s(group))
        if name in self._leaving and not self._leaving[name].done():
            return
        silent = self._silent_members(name, group, now_ms, since_ms)
        syncing = self._syncing.get(name)
        if not silent and syncing is not None and syncing.generation == group.generation and \
                group.classic.phase == COMPLETING and syncing.deadline_s <= now_s:
            silent = sorted(set(group.classic.members) - syncing.synced)
            why = "did not sync in time with"
        else:
            why = "timed out of"
        if silent:
            self._leaving[name] = asyncio.ensure_future(self._expire(name, silent, why))
            return
        join_round = self._rounds.get(name)
        if join_round is not None and join_round.deadline_s <= now_s:
            async with self._lock(name):
                if self._rounds.get(name) is join_round:
                    await self._maybe_complete(name, deadline_passed=True)

    def _silent_members(self, name: str, group, now_ms: int, since_ms: int) -> list[str]:
        """Members past their session timeout, except those waiting here in JoinGroup or SyncGroup."""
        last = self.heartbeats.last_of(name)
        waiting = set(self._rounds[name].joined) if name in self._rounds else set()
        if name in self._syncing:
            waiting |= set(self._syncing[name].waiting)
        return [m.member_id for m in group.classic.members.values() if m.member_id not in waiting and
                now_ms - max(m.joined_ms, last.get(m.member_id, -1), since_ms) > m.session_timeout_ms]

    async def _expire(self, name: str, member_ids: list[str], why: str) -> None:
        try:
            async with self._lock(name):
                group = self.context.metadata_sm.group(name)
                gone = [m for m in member_ids if group is not None and m in group.members]
                if gone:
                    await self._remove(name, gone, why)
        except errors.RaftbusError as exc:
            log.info("kafka member expiry not committed", extra={"group": name, "reason": exc.message})

    def drop_all(self, error: errors.RaftbusError) -> None:
        """This broker stopped being the coordinator: every waiting request gets `error` (NOT_COORDINATOR)."""
        for join_round in self._rounds.values():
            for _, future in join_round.joined.values():
                _settle(future, error)
        for syncing in self._syncing.values():
            for future in syncing.waiting.values():
                _settle(future, error)
        self._rounds.clear()
        self._syncing.clear()
        self._pending.clear()
        self._wake_held()

    # ------------------------------------------------------------------ views for DescribeGroups and ListGroups
    def kafka_state(self, group) -> str:
        """Kafka's name of a classic group's state, with the join phase running here."""
        if not group.members:
            return "Empty"
        if group.name in self._rounds or group.classic.phase == PREPARING:
            return "PreparingRebalance"
        return "CompletingRebalance" if group.classic.phase == COMPLETING else "Stable"

    # ------------------------------------------------------------------ helpers
    def _require_coordinator(self) -> None:
        self.context.require_controller()

    def _live_group(self, name: str):
        group = self.context.metadata_sm.group(name)
        if group is None or group.protocol != rules.CLASSIC or group.classic is None or not group.members:
            raise errors.UnknownMember(f"group {name!r} has no members of Kafka's classic protocol; join first")
        return group

    def _check_state_size(self, group) -> None:
        size = group.classic.state_bytes()
        if size > self.settings.state_bytes_max:
            log.warning("kafka group over kafka_group_state_bytes_max", extra={"group": group.name, "bytes": size})

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            if len(self._locks) > 4 * self.settings.groups_max:
                self._locks = {n: v for n, v in self._locks.items() if v.locked()}
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _commit(self, command: bytes):
        """The group after a metadata command committed here; a typed error when refused or not committed."""
        future = self.context.metadata_group.submit(command)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), self.context.commit_timeout_s)
        except asyncio.TimeoutError:
            raise errors.RequestTimedOut(f"not committed within {self.context.commit_timeout_s:.1f} s") from None
        if isinstance(result, errors.RaftbusError):
            raise result
        return result


def _settle(future: asyncio.Future, outcome) -> None:
    """Resolve a waiting request's future (an error or an answer), unless its caller went away."""
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
