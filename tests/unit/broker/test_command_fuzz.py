"""Property-based fuzz tests of the command codec (Hypothesis): every replicated command a state machine decodes
(log, metadata, consumer groups, security, queues), mutated or random, decodes to its kind and payload or to a
typed INVALID answer; the codec never raises, allocates in proportion to its input and never hangs."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raftbus.broker import commands
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.security import commands as security_commands
from raftbus.broker.security.acl import Acl
from raftbus.client import errors
from tests.fuzzing import FUZZ, bounded, mutated

POLICY = queue_commands.QueuePolicy()
ITEM = queue_commands.EnqueueItem(priority=3, deliver_at_ms=0, delivery_count=2, enqueued_ms=1_700_000_000_000,
                                  origin_id=17, group=b"g", idempotency_key=b"k1", last_error=b"boom",
                                  record=b"\x00record bytes")
VALID = [
    commands.encode_produce(1_700_000_000_000, b"producer-1", 5, 2, 1_700_000_000_001, b"\x01" * 40),
    commands.encode_trim(1_700_000_000_000, 60_000, 1 << 20, 86_400_000),
    commands.encode_start_at(42),
    commands.encode_create_topic(name="orders", kind="stream", ordering="partition", partitions=3,
                                 replication_factor=3, retention_ms=60_000, retention_bytes=-1, now_ms=1,
                                 limits={"topics_max": 10}),
    commands.encode_alter_topic(name="orders", changes={"retention_ms": 5}, now_ms=2),
    group_commands.encode_join_group(group="billing", member_id="m-1", client_id="c", topics=["orders"],
                                     session_timeout_ms=10_000, rebalance_timeout_ms=10_000, members_max=100,
                                     groups_max=100, now_ms=3),
    group_commands.encode_commit_offset(group="billing", member_id="m-1", generation=4, offset=99, metadata="x",
                                        reset=False, now_ms=4),
    security_commands.encode_create_token(principal="app", token_hash="ab" * 32, now_ms=5),
    security_commands.encode_grant_acl(Acl("app", "topic", "orders", "produce"), now_ms=6),
    queue_commands.encode_enqueue(7, POLICY, [ITEM, ITEM._replace(group=b"", origin_id=0)], producer_id=b"p",
                                  base_sequence=1),
    queue_commands.encode_lease(8, POLICY, 10, 1 << 20, 30_000),
    queue_commands.encode_nack(9, POLICY, [queue_commands.Nack(5, 1, 1000, b"error text")]),
]
KINDS_BY_PREFIX = {command[:1] for command in VALID}


@FUZZ
@given(st.sampled_from(VALID).flatmap(mutated))
def test_mutated_commands_decode_or_are_invalid(command):
    """A mutated command decodes to (kind, payload) or to (INVALID, a typed error), within the bounds."""
    kind, payload = bounded(commands.decode, command, ())
    if kind == commands.INVALID:
        assert isinstance(payload, errors.RaftbusError)


@FUZZ
@given(st.sampled_from(sorted(KINDS_BY_PREFIX)), st.binary(max_size=300))
def test_random_bodies_after_every_command_prefix_decode_or_are_invalid(prefix, body):
    """Random bytes after each command's leading byte decode or give a typed INVALID answer, within the bounds."""
    kind, payload = bounded(commands.decode, prefix + body, ())
    if kind == commands.INVALID:
        assert isinstance(payload, errors.RaftbusError)


@FUZZ
@given(st.sampled_from([c for c in VALID if c[:1] == b"Q"]).flatmap(mutated))
def test_mutated_queue_commands_decode_or_are_refused(command):
    """A mutated queue command (enqueues carry history fields) decodes or raises InvalidArgument / CorruptBatch,
    nothing else, within the bounds."""
    bounded(queue_commands.decode, command, (errors.InvalidArgument, errors.CorruptBatch))
