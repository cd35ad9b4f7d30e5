"""Goal: every queue command round-trips through the binary codec, and malformed bytes decode to typed errors."""
import pytest

from raftbus.broker.clock import Stamp
from raftbus.broker.queues import commands as queue_commands
from raftbus.client import errors

POLICY = queue_commands.QueuePolicy(7, 10, 20, 3, 40, 50, 60)
ITEMS = [queue_commands.EnqueueItem(-5, 123, 2, 99, 1 << 40 | 5, b"a.b", b"key", b"err", b"\x00record"),
         queue_commands.EnqueueItem(2**31 - 1, 0, 0, 0, 0, b"", b"", b"", b"")]


@pytest.mark.parametrize("command, op, body", [
    (queue_commands.encode_enqueue(5, POLICY, ITEMS, producer_id=b"p" * 16, base_sequence=9), queue_commands.ENQUEUE,
     queue_commands.Enqueue(b"p" * 16, 9, tuple(ITEMS))),
    (queue_commands.encode_enqueue(5, POLICY, ITEMS, runs=True), queue_commands.ENQUEUE_RUNS, queue_commands.Enqueue(b"", 0, tuple(ITEMS))),
    (queue_commands.encode_lease(5, POLICY, 10, 1000, 30_000), queue_commands.LEASE, queue_commands.Lease(10, 1000, 30_000)),
    (queue_commands.encode_ack(5, POLICY, [(1, 1), (2**64 - 1, 7)]), queue_commands.ACK, queue_commands.Settle(b"", 0, [(1, 1), (2**64 - 1, 7)])),
    (queue_commands.encode_ack(5, POLICY, [(1, 1)], settler_id=b"s" * 16, sequence=3), queue_commands.ACK,
     queue_commands.Settle(b"s" * 16, 3, [(1, 1)])),
    (queue_commands.encode_ack_packed(5, POLICY, bytes.fromhex("000000000000000a 00000002 00000000000000ff 00000001"),
                          settler_id=b"s", sequence=4), queue_commands.ACK, queue_commands.Settle(b"s", 4, [(10, 2), (255, 1)])),
    (queue_commands.encode_nack(5, POLICY, [queue_commands.Nack(3, 1, queue_commands.BACKOFF, b""), queue_commands.Nack(4, 2, 500, b"why")], settler_id=b"c",
                    sequence=9), queue_commands.NACK,
     queue_commands.Settle(b"c", 9, [queue_commands.Nack(3, 1, queue_commands.BACKOFF, b""), queue_commands.Nack(4, 2, 500, b"why")])),
    (queue_commands.encode_extend(5, POLICY, [(3, 1, 100)]), queue_commands.EXTEND, [(3, 1, 100)]),
    (queue_commands.encode_delete(5, POLICY, [3, 4]), queue_commands.DELETE, [3, 4]),
    (queue_commands.encode_dead_remove(5, POLICY, [8]), queue_commands.DEAD_REMOVE, [8]),
    (queue_commands.encode_change(5, POLICY, 3, -1, None), queue_commands.CHANGE, queue_commands.Change(3, -1, None)),
    (queue_commands.encode_change(5, POLICY, 3, None, 77), queue_commands.CHANGE, queue_commands.Change(3, None, 77)),
    (queue_commands.encode_tick(5, POLICY), queue_commands.TICK, None),
])
def test_round_trip(command, op, body):
    assert queue_commands.decode(command) == queue_commands.QueueCommand(op, 5, POLICY, body)


def test_a_stamp_in_a_new_leaders_grace_carries_the_leases_it_keeps():
    in_grace = Stamp(now_ms=5, held_ms=1, anchor_ms=3, grace_ends_ms=9)
    command = queue_commands.encode_ack(in_grace, POLICY, [(1, 1)])
    assert command[:1] == b"q"
    assert queue_commands.decode(command) == queue_commands.QueueCommand(
        queue_commands.ACK, 5, POLICY, queue_commands.Settle(b"", 0, [(1, 1)]), (1, 3))
    after = queue_commands.encode_tick(in_grace._replace(now_ms=9), POLICY)
    assert after == queue_commands.encode_tick(9, POLICY) and queue_commands.decode(after).kept_leases is None
    with pytest.raises(errors.InvalidArgument):
        queue_commands.decode(command[:20])


def test_packed_leases_give_their_seqs():
    packed = queue_commands.PackedLeases(bytes.fromhex("000000000000000a 00000002 00000000000000ff 00000001"))
    assert packed.seqs() == (10, 255)


@pytest.mark.parametrize("bad", [
    b"", b"Q", b"P" + bytes(60), queue_commands.encode_tick(5, POLICY).replace(b"QK", b"Q?", 1),
    queue_commands.encode_ack(5, POLICY, [(1, 1)]) + b"\x00",
    queue_commands.encode_nack(5, POLICY, [queue_commands.Nack(3, 1, 0, b"why")])[:-1],
    queue_commands.encode_enqueue(5, POLICY, ITEMS)[:-3],
    queue_commands.encode_enqueue(5, POLICY, []),
    queue_commands.encode_change(5, POLICY, 1, 1, None)[:-1],
])
def test_malformed_commands_raise_typed_errors(bad):
    with pytest.raises(errors.InvalidArgument):
        queue_commands.decode(bad)


def test_packed_acks_must_hold_whole_leases():
    with pytest.raises(errors.InvalidArgument):
        queue_commands.encode_ack_packed(5, POLICY, bytes(13))


@pytest.mark.parametrize("group, ok", [
    (b"", True), (b"a", True), (b"acme.web.alice", True), (b"caf\xc3\xa9", True),
    (b".a", False), (b"a.", False), (b"a..b", False), (b"a\x01b", False), (b"\x00", False),
])
def test_group_rules(group, ok):
    if ok:
        queue_commands.check_group(group)
    else:
        with pytest.raises(errors.InvalidArgument):
            queue_commands.check_group(group)


def test_an_ack_body_gives_its_seq_keys_and_counts_in_order():
    leases = queue_commands.decode(queue_commands.encode_ack(5, POLICY, [(10, 2), (2**64 - 1, 7), (3, 1)])).body.items
    assert leases.seq_keys_and_counts() == ((b"\0" * 7 + b"\x0a", b"\xff" * 8, b"\0" * 7 + b"\x03"), (2, 7, 1))
    assert len(leases) == 3 and leases[1] == (2**64 - 1, 7) and leases[-1] == (3, 1) and leases[1:] == [
        (2**64 - 1, 7), (3, 1)]
    with pytest.raises(IndexError):
        leases[3]
