"""The metadata state machine: registered brokers, topics and partition placement, replicated by the metadata group.

Pure: time arrives inside commands and storage is reached only through the Store seam. Each command is first
planned in memory against the published state (a refusal becomes a typed error value and changes nothing),
then written with the applied Raft index and the store's content digest (broker/content_digest.py) in one store
transaction, then published as new immutable mappings.

Tables:
    meta     b"state" -> applied_index >q | next_topic_id >q | version >q
             b"content-digest" -> >Q, the sum of a CRC-32 per stored pair (every table, this pair left out)
    brokers  broker_id >q -> JSON of model.Broker
    topics   name (utf-8) -> JSON of model.Topic
    groups   name (utf-8) -> JSON of groups.ConsumerGroup (consumer groups: members, target, owners)
    tokens, acls   principals' token hashes and ACLs (see broker/security/state.py)
"""
from __future__ import annotations

import dataclasses
import json
import struct
from types import MappingProxyType
from typing import Mapping, NamedTuple

from raftbus.client import errors

from raftbus.broker import commands, content_digest, model
from raftbus.broker.metadata import reassignment_commands
from raftbus.broker.content_digest import DigestingTxn
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups import planning as group_planning
from raftbus.broker.groups.rules import ConsumerGroup
from raftbus.broker.queues.config import OPTIONS as QUEUE_OPTIONS
from raftbus.broker.security import commands as security_commands
from raftbus.broker.security import state as security_state

META, BROKERS, TOPICS = "meta", "brokers", "topics"
GROUPS = "groups"
STATE_KEY = b"state"
TOPIC_KINDS = ("stream", "queue")
QUEUE_ORDERINGS = ("priority", "fair")

_STATE = struct.Struct(">qqq")
_BROKER_KEY = struct.Struct(">q")


class _MetaState(NamedTuple):
    applied_index: int = 0
    next_topic_id: int = 1
    version: int = 0


class _Change(NamedTuple):
    """What one command changes; empty for refusals and no-ops."""

    broker: model.Broker | None = None
    topic: model.Topic | None = None
    deleted_topic: str | None = None
    next_topic_id: int | None = None
    groups: tuple = ()  # consumer groups: (name, new ConsumerGroup or None when deleted) pairs
    # queue topics: the dead-letter topic created or deleted with its source, in the same command
    companion: model.Topic | None = None
    deleted_companion: str | None = None
    security: security_state.SecurityChange | None = None  # tokens and ACLs

    @property
    def empty(self) -> bool:
        return self.broker is None and self.topic is None and self.deleted_topic is None


def _json(value) -> bytes:
    return json.dumps(value.to_dict(), separators=(",", ":"), sort_keys=True).encode()


class MetadataStateMachine:
    TABLES = (META, BROKERS, TOPICS, GROUPS, *security_state.TABLES)

    def __init__(self, store):
        self._store = store
        self._state = _MetaState()
        self._brokers: Mapping[int, model.Broker] = MappingProxyType({})
        self._topics: Mapping[str, model.Topic] = MappingProxyType({})
        self._groups: Mapping[str, ConsumerGroup] = MappingProxyType({})
        self._security = security_state.SecurityTables()
        self.reload()

    # ------------------------------------------------------------------ apply (the Raft thread)
    def apply(self, index: int, command: bytes):
        """Apply one committed command; returns a result or a typed error value.

        Planning reads only the published state, so any error it raises is decided by the command and is an
        answer. A failure of the store write propagates with nothing committed: the replica must stop applying
        rather than skip an entry the others applied (RaftGroup does that)."""
        if index <= self._state.applied_index:
            return None
        try:
            result, change = self._plan(index, *commands.decode(command))
        except errors.RaftbusError as refusal:
            result, change = refusal, _Change()
        except Exception as exc:  # a deterministic planning bug: every replica answers the same
            result, change = errors.InternalError(f"metadata command {index} failed: {exc!r}"), _Change()
        state = self._next_state(index, change)
        with self._store.write() as raw_txn:
            txn = DigestingTxn(raw_txn, self._digest, META)
            _write(txn, change, state)
            digest = txn.finish()
        self._publish(change, state)
        self._digest = digest
        self._digests.record(index, digest)
        return result

    def _next_state(self, index: int, change: _Change) -> _MetaState:
        state = self._state
        return _MetaState(
            applied_index=index,
            next_topic_id=change.next_topic_id or state.next_topic_id,
            version=state.version if change.empty else index,
        )

    def _publish(self, change: _Change, state: _MetaState) -> None:
        if change.broker is not None:
            self._brokers = MappingProxyType({**self._brokers, change.broker.broker_id: change.broker})
        if change.topic is not None:
            self._topics = MappingProxyType({**self._topics, change.topic.name: change.topic})
        if change.deleted_topic is not None:
            self._topics = MappingProxyType({n: t for n, t in self._topics.items() if n != change.deleted_topic})
        if change.groups:
            self._groups = _groups_after(self._groups, change.groups)
        if change.companion is not None:
            self._topics = MappingProxyType({**self._topics, change.companion.name: change.companion})
        if change.deleted_companion is not None:
            self._topics = MappingProxyType({n: t for n, t in self._topics.items()
                                             if n != change.deleted_companion})
        if change.security is not None:
            self._security = security_state.after(self._security, change.security)
        self._state = state

    # ------------------------------------------------------------------ planning (pure, may refuse)
    def _plan(self, index: int, kind: str, payload):
        if kind == commands.INVALID:
            raise payload
        if kind in group_commands.METADATA_KINDS:  # consumer groups
            result, changes = group_planning.plan_group_command(self._groups, self._topics, index, kind, payload)
            return result, _Change(groups=changes)
        if kind in security_commands.METADATA_KINDS:  # tokens and ACLs
            result, change = security_state.plan(self._security, kind, payload)
            return result, _Change(security=change)
        if kind in reassignment_commands.METADATA_KINDS:  # partition reassignment
            result, moved = reassignment_commands.plan(self._topics, self._brokers, kind, payload)
            return result, _Change(topic=moved)
        planner = {
            commands.REGISTER_BROKER: self._plan_register_broker,
            commands.CREATE_TOPIC: self._plan_create_topic,
            commands.DELETE_TOPIC: self._plan_delete_topic,
            commands.ALTER_PARTITIONS: self._plan_alter_partitions,
            commands.ALTER_TOPIC: self._plan_alter_topic,
            commands.SET_BROKER_STATE: self._plan_set_broker_state,
        }.get(kind)
        if planner is None:
            raise errors.InvalidArgument(f"{kind} is not a metadata command")
        result, change = planner(payload)
        self._check_limits(payload, change)
        if kind in (commands.ALTER_TOPIC, commands.SET_BROKER_STATE):  # no partition moves, no group changes
            return result, change
        return result, self._resettle_groups(index, payload, change)

    def _check_limits(self, payload: dict, change: _Change) -> None:
        """A created or grown topic must fit in the count limits its command carries (LimitReached)."""
        limits = model.CountLimits.from_command(payload.get("limits"))
        if limits is None or change.topic is None:
            return
        after = {**self._topics, change.topic.name: change.topic}
        if change.companion is not None:
            after[change.companion.name] = change.companion
        limits.check(after)

    def _resettle_groups(self, index: int, payload: dict, change: _Change) -> _Change:
        """Consumer groups subscribed to a created, grown or deleted topic get a new assignment."""
        name = change.topic.name if change.topic is not None else change.deleted_topic
        if name is None or not self._groups:
            return change
        topics = {n: t for n, t in self._topics.items() if n != change.deleted_topic}
        if change.topic is not None:
            topics[name] = change.topic
        changes = group_planning.resettle_after_topic_change(self._groups, topics, name, index, payload["now_ms"])
        return change._replace(groups=changes)

    def _plan_register_broker(self, p: dict):
        if p["broker_id"] < 0:
            raise errors.InvalidArgument("broker_id must be >= 0")
        known = self._brokers.get(p["broker_id"])
        metrics_url, kafka_address = p.get("metrics_url", ""), p.get("kafka_address", "")
        if not isinstance(metrics_url, str) or not isinstance(kafka_address, str):
            raise errors.InvalidArgument("metrics_url and kafka_address must be strings")
        if known is not None and (known.address, known.raft_address, known.metrics_url, known.kafka_address) == (
                p["address"], p["raft_address"], metrics_url, kafka_address):
            return None, _Change()
        broker = model.Broker(p["broker_id"], p["address"], p["raft_address"], p["now_ms"],
                              known.state if known is not None else model.ACTIVE,  # a restart keeps draining
                              metrics_url, kafka_address)
        return None, _Change(broker=broker)

    def _placeable(self) -> list[int]:
        """Brokers new partition replicas may go to (not one being decommissioned)."""
        return [b.broker_id for b in self._brokers.values() if b.placeable]

    def _plan_set_broker_state(self, p: dict):
        known = self._brokers.get(p["broker_id"])
        if known is None:
            raise errors.UnknownBroker(f"broker {p['broker_id']} is not registered")
        if p["state"] not in model.BROKER_STATES:
            raise errors.InvalidArgument(f"broker state must be one of {model.BROKER_STATES}, not {p['state']!r}")
        changed = dataclasses.replace(known, state=p["state"])
        return changed, _Change(broker=changed)

    def _plan_create_topic(self, p: dict):
        name = p["name"]
        model.validate_topic_name(name)
        if name in self._topics:
            raise errors.TopicExists(f"topic {name!r} already exists")
        if p["kind"] not in TOPIC_KINDS:
            raise errors.InvalidArgument(f"kind must be one of {TOPIC_KINDS}, not {p['kind']!r}")
        if p["partitions"] < 1:
            raise errors.InvalidPartitions("a topic needs at least one partition")
        if p["retention_ms"] < -1 or p["retention_bytes"] < -1:
            raise errors.InvalidArgument("retention_ms and retention_bytes must be >= 0, or -1 for unlimited")
        topic_id = self._state.next_topic_id
        placements = model.place_partitions(topic_id, 0, p["partitions"], p["replication_factor"],
                                          self._placeable())
        compaction = _compaction_config(p.get("compaction"), p["kind"], name)
        topic = model.Topic(name=name, topic_id=topic_id, kind=p["kind"], ordering=p["ordering"],
                            retention_ms=p["retention_ms"], retention_bytes=p["retention_bytes"],
                            created_ms=p["now_ms"], partitions=placements, compaction=compaction)
        if p["kind"] == "queue":
            return self._plan_queue_topic(topic, p)
        return topic, _Change(topic=topic, next_topic_id=topic_id + 1)

    def _plan_queue_topic(self, topic: model.Topic, p: dict):
        """A queue topic and its dead-letter topic `<name>.dlq` (same partitions; it never dead-letters)."""
        config = _queue_config(p.get("queue"))
        if topic.ordering not in QUEUE_ORDERINGS:
            raise errors.InvalidArgument(f"ordering must be one of {QUEUE_ORDERINGS}, not {topic.ordering!r}")
        dlq_name = model.dead_letter_name(topic.name)
        model.validate_topic_name(dlq_name)
        if dlq_name in self._topics:
            raise errors.TopicExists(f"topic {dlq_name!r} (the dead-letter topic of {topic.name!r}) already exists")
        dlq_id = topic.topic_id + 1
        placements = model.place_partitions(dlq_id, 0, len(topic.partitions), len(topic.partitions[0].replicas),
                                            self._placeable())
        dlq_config = dataclasses.replace(config, max_deliveries=0, max_in_flight_per_group=0, dead_letter_of=topic.name)
        dlq = dataclasses.replace(topic, name=dlq_name, topic_id=dlq_id, ordering="priority", partitions=placements,
                                  queue=dlq_config)
        source = dataclasses.replace(topic, queue=dataclasses.replace(config, dead_letter_topic=dlq_name))
        return source, _Change(topic=source, companion=dlq, next_topic_id=dlq_id + 1)

    def _plan_delete_topic(self, p: dict):
        topic = self._topics.get(p["name"])
        if topic is None:
            raise errors.UnknownTopic(f"topic {p['name']!r} does not exist")
        queue = topic.queue
        if queue is not None and queue.dead_letter_of in self._topics:
            raise errors.InvalidArgument(f"{topic.name!r} is the dead-letter topic of {queue.dead_letter_of!r}; "
                                         "delete that topic (its dead-letter topic goes with it)")
        companion = queue.dead_letter_topic if queue is not None and queue.dead_letter_topic in self._topics else None
        return None, _Change(deleted_topic=p["name"], deleted_companion=companion)

    def _plan_alter_partitions(self, p: dict):
        topic = self._topics.get(p["name"])
        if topic is None:
            raise errors.UnknownTopic(f"topic {p['name']!r} does not exist")
        current = len(topic.partitions)
        if p["partitions"] <= current:
            raise errors.InvalidPartitions(
                f"topic {topic.name!r} has {current} partitions; partitions can only grow")
        replication_factor = len(topic.partitions[0].replicas)
        added = model.place_partitions(topic.topic_id, current, p["partitions"] - current, replication_factor,
                                       self._placeable())
        grown = dataclasses.replace(topic, partitions=topic.partitions + added)
        return grown, _Change(topic=grown)

    def _plan_alter_topic(self, p: dict):
        topic = self._topics.get(p["name"])
        if topic is None:
            raise errors.UnknownTopic(f"topic {p['name']!r} does not exist")
        changes = dict(p["changes"])
        unknown = set(changes) - {"retention_ms", "retention_bytes", "timestamp_type", *QUEUE_OPTIONS,
                                  *model.COMPACTION_OPTIONS}
        if unknown or not changes:
            raise errors.InvalidArgument(f"alter_topic changes retention_ms, retention_bytes, timestamp_type, "
                                         f"compaction or queue options, not {sorted(unknown) or 'nothing'}")
        compaction = {n: changes.pop(n) for n in model.COMPACTION_OPTIONS if n in changes}
        retention = {n: changes.pop(n) for n in ("retention_ms", "retention_bytes") if n in changes}
        if any(not isinstance(v, int) or isinstance(v, bool) or v < -1 for v in retention.values()):
            raise errors.InvalidArgument("retention_ms and retention_bytes must be >= 0, or -1 for unlimited")
        if "timestamp_type" in changes:
            retention["timestamp_type"] = changes.pop("timestamp_type")
            if retention["timestamp_type"] not in model.TIMESTAMP_TYPES or topic.kind != "stream":
                raise errors.InvalidArgument(f"timestamp_type is one of {model.TIMESTAMP_TYPES}, on stream topics")
        altered = dataclasses.replace(topic, **retention)
        if compaction:
            merged = {**topic.compaction.to_dict(), **compaction}
            altered = dataclasses.replace(altered, compaction=_compaction_config(merged, topic.kind, topic.name))
        if changes:
            if topic.queue is None:
                raise errors.WrongTopicKind.queue_only(sorted(changes), topic.name, topic.kind)
            if topic.queue.dead_letter_of:
                raise errors.InvalidArgument(f"{topic.name!r} is the dead-letter topic of "
                                             f"{topic.queue.dead_letter_of!r}; its queue options follow that topic")
            altered = dataclasses.replace(altered, queue=dataclasses.replace(topic.queue, **changes).validate())
        return altered, _Change(topic=altered)

    # ------------------------------------------------------------------ reads (any thread)
    def applied_index(self) -> int:
        return self._state.applied_index

    @property
    def version(self) -> int:
        """The index of the last command that changed brokers or topics."""
        return self._state.version

    def brokers(self) -> Mapping[int, model.Broker]:
        return self._brokers

    def topics(self) -> Mapping[str, model.Topic]:
        return self._topics

    def topic(self, name: str) -> model.Topic | None:
        return self._topics.get(name)

    def groups(self) -> Mapping[str, ConsumerGroup]:
        return self._groups

    def group(self, name: str) -> ConsumerGroup | None:
        return self._groups.get(name)

    def security(self) -> security_state.SecurityTables:
        """Token hashes and ACLs as applied here (one immutable value, replaced on every change)."""
        return self._security

    def digest_at(self, index: int) -> int | None:
        """The content digest of the store once `index` was applied (None: not applied yet, or too long ago)."""
        return self._digests.at(index)

    def store_consistent(self) -> bool | None:
        """Whether the stored pairs still add up to the kept content digest (a full read of the store)."""
        with self._store.read() as txn:
            return content_digest.consistent(txn, self.TABLES, META)

    def reload(self) -> None:
        """Re-read everything from the store (after a snapshot restore)."""
        with self._store.read() as txn:
            self._digest = content_digest.kept_or_computed(txn, self.TABLES, META)
            raw = txn.get(META, STATE_KEY)
            state = _MetaState() if raw is None else _MetaState(*_STATE.unpack(raw))
            brokers = {b.broker_id: b for b in (model.Broker.from_dict(json.loads(v)) for _, v in txn.items(BROKERS))}
            topics = {t.name: t for t in (model.Topic.from_dict(json.loads(v)) for _, v in txn.items(TOPICS))}
            groups = {g.name: g for g in (ConsumerGroup.from_dict(json.loads(v)) for _, v in txn.items(GROUPS))}
            security = security_state.load(txn)
        self._brokers = MappingProxyType(brokers)
        self._topics = MappingProxyType(topics)
        self._groups = MappingProxyType(groups)
        self._security = security
        self._state = state
        self._digests = content_digest.DigestHistory(state.applied_index, self._digest)


def _write(txn, change: _Change, state: _MetaState) -> None:
    if change.broker is not None:
        txn.put(BROKERS, _BROKER_KEY.pack(change.broker.broker_id), _json(change.broker))
    if change.topic is not None:
        txn.put(TOPICS, change.topic.name.encode(), _json(change.topic))
    if change.deleted_topic is not None:
        txn.delete(TOPICS, change.deleted_topic.encode())
    for name, group in change.groups:
        if group is None:
            txn.delete(GROUPS, name.encode())
        else:
            txn.put(GROUPS, name.encode(), _json(group))
    if change.companion is not None:
        txn.put(TOPICS, change.companion.name.encode(), _json(change.companion))
    if change.deleted_companion is not None:
        txn.delete(TOPICS, change.deleted_companion.encode())
    if change.security is not None:
        security_state.write(txn, change.security)
    txn.put(META, STATE_KEY, _STATE.pack(*state))


def _groups_after(groups: Mapping[str, ConsumerGroup], changes) -> Mapping[str, ConsumerGroup]:
    updated = dict(groups)
    for name, group in changes:
        if group is None:
            updated.pop(name, None)
        else:
            updated[name] = group
    return MappingProxyType(updated)


def _queue_config(raw) -> model.QueueConfig:
    """The queue options of a create_topic command; InvalidArgument when missing or out of range."""
    if not isinstance(raw, dict):
        raise errors.InvalidArgument("a queue topic needs its queue options")
    try:
        config = model.QueueConfig.from_dict(raw)
    except TypeError as exc:
        raise errors.InvalidArgument(f"queue options are incomplete: {exc}") from None
    return dataclasses.replace(config, dead_letter_topic="", dead_letter_of="").validate()


def _compaction_config(fields, kind: str, name: str) -> model.CompactionConfig:
    """The compaction options of a create or alter command, checked (stream topics only)."""
    if fields is None:
        return model.CompactionConfig()
    if not isinstance(fields, dict) or set(fields) - set(model.COMPACTION_OPTIONS):
        raise errors.InvalidArgument(f"compaction options are {', '.join(model.COMPACTION_OPTIONS)}")
    config = model.CompactionConfig.from_dict(fields).validate()
    if kind != "stream" and config != model.CompactionConfig():
        raise errors.WrongTopicKind(f"only stream topics take a cleanup policy or compaction options; {name!r} is "
                                    f"a {kind} topic")
    return config
