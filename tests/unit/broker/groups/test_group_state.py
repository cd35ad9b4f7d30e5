"""Goal: consumer-group commands in the metadata state machine keep one owner per partition, hand partitions over
only after release, bump the generation on every assignment change, re-settle after topic changes, and fence
stale or foreign members."""
import pytest

from raftbus.broker import commands
from raftbus.broker.groups import commands as group_commands
from raftbus.broker.groups import rules
from raftbus.broker.metadata.state import MetadataStateMachine
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.storage.memory_store import MemoryStore
from raftbus.client import errors

G = "readers"


class Metadata:
    def __init__(self, store):
        self.sm = MetadataStateMachine(store)
        self.index = self.sm.applied_index()

    def apply(self, command):
        self.index += 1
        return self.sm.apply(self.index, command)

    def topic(self, name="orders", partitions=4, kind="stream"):
        return self.apply(commands.encode_create_topic(name=name, kind=kind, ordering="", partitions=partitions,
                                                       replication_factor=1, retention_ms=-1, retention_bytes=-1,
                                                       now_ms=1))

    def join(self, member, topics=("orders",), group=G, now_ms=100, members_max=100, groups_max=100,
             session_timeout_ms=10_000, rebalance_timeout_ms=20_000, client_id="c"):
        return self.apply(group_commands.encode_join_group(
            group=group, member_id=member, client_id=client_id, topics=list(topics),
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            members_max=members_max, groups_max=groups_max, now_ms=now_ms))

    def leave(self, member, group=G):
        return self.apply(group_commands.encode_leave_group(group=group, member_id=member, now_ms=200))

    def expire(self, *members, group=G):
        return self.apply(group_commands.encode_expire_members(group=group, member_ids=members, now_ms=300))

    def release(self, member, partitions=None, generation=None, group=G):
        group_now = self.sm.group(group)
        partitions = group_now.revoking(member) if partitions is None else partitions
        generation = group_now.generation if generation is None else generation
        return self.apply(group_commands.encode_release_partitions(group=group, member_id=member, generation=generation,
                                                       partitions=partitions, now_ms=400))

    @property
    def group(self):
        return self.sm.group(G)


@pytest.fixture
def meta():
    metadata = Metadata(MemoryStore(MetadataStateMachine.TABLES))
    metadata.apply(commands.encode_register_broker(broker_id=1, address="h:1", raft_address="h:2", now_ms=1))
    metadata.topic()
    return metadata


def check_one_owner_each(group):
    """Owners cover every target partition, each partition has one owner, and owners are members."""
    for tp, owner in group.owners.items():
        assert owner.member_id in group.members, f"{tp} owned by departed {owner.member_id}"
    targets = [tp for m in group.members.values() for tp in m.target]
    assert len(targets) == len(set(targets))
    assert set(targets) <= set(group.owners)


def test_first_member_owns_everything_at_the_join_index(meta):
    group = meta.join("a")
    assert isinstance(group, rules.ConsumerGroup) and meta.group == group
    assert group.generation == meta.index and group.state == rules.STABLE
    assert group.owned_by("a") == tuple(("orders", p) for p in range(4))
    assert all(o.since_generation == meta.index for o in group.owners.values())


def test_new_member_waits_until_the_old_owner_releases(meta):
    meta.join("a")
    first = meta.group.generation
    joined = meta.join("b")
    assert joined.generation > first and joined.state == rules.REBALANCING
    assert joined.owned_by("b") == () and len(joined.pending("b")) == 2
    assert set(joined.revoking("a")) == set(joined.pending("b"))
    assert joined.members["a"].revoking_since_ms == 100
    check_one_owner_each(joined)
    released = meta.release("a")
    assert released.generation > joined.generation and released.state == rules.STABLE
    assert set(released.owned_by("b")) == set(joined.pending("b"))
    assert all(released.owners[tp].since_generation == released.generation for tp in released.owned_by("b"))
    assert released.members["a"].revoking_since_ms == -1
    check_one_owner_each(released)


def test_release_ignores_partitions_still_in_the_target_or_not_owned(meta):
    meta.join("a")
    meta.join("b")
    keep = meta.group.members["a"].target[0]
    before = meta.group
    assert meta.release("a", partitions=[keep, ("orders", 99), ("other", 0)]) is before
    assert meta.group.generation == before.generation


def test_leave_frees_partitions_for_the_rest_at_once(meta):
    meta.join("a")
    meta.join("b")
    meta.release("a")
    left = meta.leave("b")
    assert left.owned_by("a") == tuple(("orders", p) for p in range(4)) and left.state == rules.STABLE
    assert isinstance(meta.leave("b"), errors.UnknownMember)
    assert isinstance(meta.leave("x", group="nope"), errors.UnknownGroup)


def test_expiry_removes_listed_members_and_ignores_gone_ones(meta):
    meta.join("a")
    meta.join("b")
    expired = meta.expire("a", "ghost")
    assert sorted(expired.members) == ["b"] and len(expired.owned_by("b")) == 4
    last = meta.expire("b")
    assert last.members == {} and last.owners == {} and last.state == rules.EMPTY
    assert last.empty_since_ms == 300 and last.topics == ("orders",)  # kept: describe still shows its offsets


def test_rejoin_with_same_subscription_keeps_the_generation(meta):
    meta.join("a")
    generation = meta.group.generation
    again = meta.join("a", now_ms=150, session_timeout_ms=12_000)
    assert again.generation == generation and again.members["a"].joined_ms == 150
    assert again.members["a"].session_timeout_ms == 12_000


def test_resubscribe_moves_partitions_of_dropped_topics(meta):
    meta.topic("audit", partitions=2)
    meta.join("a", topics=("orders", "audit"))
    changed = meta.join("a", topics=("audit",))
    assert changed.members["a"].target == (("audit", 0), ("audit", 1))
    assert {tp[0] for tp in changed.revoking("a")} == {"orders"}  # held until released, like any revocation
    released = meta.release("a")
    assert released.owned_by("a") == (("audit", 0), ("audit", 1)) and released.state == rules.STABLE


def test_alter_partitions_assigns_new_partitions(meta):
    meta.join("a")
    meta.join("b")
    meta.release("a")
    before = meta.group
    meta.apply(commands.encode_alter_partitions(name="orders", partitions=6, now_ms=500))
    after = meta.group
    assert after.generation == meta.index > before.generation
    assert sorted(len(after.owned_by(m)) for m in "ab") == [3, 3]
    assert set(before.owned_by("a")) <= set(after.owned_by("a"))
    check_one_owner_each(after)


def test_delete_topic_drops_its_partitions_and_recreate_assigns_again(meta):
    meta.topic("audit", partitions=2)
    meta.join("a", topics=("orders", "audit"))
    meta.apply(commands.encode_delete_topic(name="audit", now_ms=600))
    assert all(tp[0] == "orders" for tp in meta.group.owners)
    meta.topic("audit", partitions=3)
    assert sum(1 for tp in meta.group.owners if tp[0] == "audit") == 3


def test_queue_topics_are_never_assigned(meta):
    meta.topic("jobs", kind="queue")
    group = meta.join("a", topics=("orders", "jobs"))
    assert all(tp[0] == "orders" for tp in group.owners)


@pytest.mark.parametrize("kwargs, error", [
    ({"group": "bad name"}, errors.InvalidName),
    ({"group": ""}, errors.InvalidName),
    ({"member": ""}, errors.InvalidArgument),
    ({"member": "has space"}, errors.InvalidArgument),
    ({"topics": ()}, errors.InvalidArgument),
    ({"session_timeout_ms": 0}, errors.InvalidSessionTimeout),
    ({"groups_max": 0}, errors.GroupLimitReached),
])
def test_join_refusals_change_nothing(meta, kwargs, error):
    member = kwargs.pop("member", "a")
    assert isinstance(meta.join(member, **kwargs), error)
    assert dict(meta.sm.groups()) == {}


def test_members_max_is_enforced_for_new_members_only(meta):
    meta.join("a", members_max=1)
    assert isinstance(meta.join("b", members_max=1), errors.GroupLimitReached)
    assert not isinstance(meta.join("a", members_max=1, now_ms=999), errors.RaftbusError)


def test_delete_group_only_when_empty(meta):
    meta.join("a")
    assert isinstance(meta.apply(group_commands.encode_delete_group(group=G, now_ms=1)), errors.InvalidArgument)
    meta.leave("a")
    assert meta.apply(group_commands.encode_delete_group(group=G, now_ms=1)) is None and meta.group is None
    assert isinstance(meta.apply(group_commands.encode_delete_group(group=G, now_ms=1)), errors.UnknownGroup)
    recreated = meta.join("a")
    assert recreated.generation == meta.index  # still above every generation of the deleted group


def test_group_commands_do_not_bump_the_topic_version(meta):
    version = meta.sm.version
    meta.join("a")
    assert meta.sm.version == version


def test_groups_survive_reopen(tmp_path):
    store = LmdbStore(str(tmp_path / "meta"), MetadataStateMachine.TABLES, 1 << 20)
    first = Metadata(store)
    first.apply(commands.encode_register_broker(broker_id=1, address="h:1", raft_address="h:2", now_ms=1))
    first.topic()
    first.join("a")
    group = first.join("b")
    store.close()
    store = LmdbStore(str(tmp_path / "meta"), MetadataStateMachine.TABLES, 1 << 20)
    try:
        assert Metadata(store).sm.group(G) == group
    finally:
        store.close()


# ---------------------------------------------------------------------- fencing
@pytest.fixture
def settled(meta):
    meta.join("a")
    meta.join("b")
    meta.release("a")
    return meta


@pytest.mark.parametrize("case, error", [
    ("owner", None),
    ("owner-older-generation-still-owning", None),
    ("not-owner", errors.PartitionNotAssigned),
    ("unknown-member", errors.UnknownMember),
    ("unknown-group", errors.UnknownGroup),
    ("replica-behind", errors.MetadataBehind),
    ("no-generation", errors.StaleGeneration),
    ("before-ownership", errors.StaleGeneration),
])
def test_check_owner(settled, case, error):
    group = settled.group
    applied = settled.sm.applied_index()
    b_tp = group.owned_by("b")[0]
    a_tp = group.owned_by("a")[0]
    args = {
        "owner": (group, applied, G, "b", group.generation, b_tp),
        "owner-older-generation-still-owning": (group, applied, G, "a", group.owners[a_tp].since_generation, a_tp),
        "not-owner": (group, applied, G, "a", group.generation, b_tp),
        "unknown-member": (group, applied, G, "zz", group.generation, b_tp),
        "unknown-group": (None, applied, "nope", "b", group.generation, b_tp),
        "replica-behind": (group, group.generation - 1, G, "b", group.generation, b_tp),
        "no-generation": (group, applied, G, "b", 0, b_tp),
        "before-ownership": (group, applied, G, "b", group.owners[b_tp].since_generation - 1, b_tp),
    }[case]
    if error is None:
        rules.check_owner(*args)
    else:
        with pytest.raises(error):
            rules.check_owner(*args)


def test_overdue_members_by_session_rebalance_timeout_and_grace(meta):
    meta.join("a", now_ms=1_000, session_timeout_ms=5_000, rebalance_timeout_ms=3_000)
    meta.join("b", now_ms=1_000, session_timeout_ms=5_000)
    group = meta.group
    assert group.members["a"].revoking_since_ms == 1_000
    assert rules.overdue_members(group, {"a": 3_500, "b": 3_500}, 0, 4_000) == []
    assert rules.overdue_members(group, {"a": 3_500, "b": 3_500}, 0, 4_001) == ["a"]  # held revoked too long
    assert rules.overdue_members(group, {"a": 8_000}, 0, 8_500) == ["a", "b"]
    assert rules.overdue_members(group, {}, 8_000, 8_500) == []  # a new controller's grace period
    assert rules.overdue_members(group, {"b": 9_000}, 0, 9_000) == ["a"]


def test_group_round_trips_through_json(settled):
    group = settled.group
    assert rules.ConsumerGroup.from_dict(group.to_dict()) == group


@pytest.mark.parametrize("command", [
    b'J{"type":"join_group","group":"readers"}',
    b'J{"type":"leave_group","group":"readers","member_id":7,"now_ms":1}',
    b'J{"type":"expire_members","group":"readers","member_ids":[1,2],"now_ms":1}',
    b'J{"type":"release_partitions","group":"readers","member_id":"a","generation":1,"partitions":[["orders"]],'
    b'"now_ms":1}',
    b'J{"type":"release_partitions","group":"readers","member_id":"a","generation":1,"partitions":[[1,"x"]],'
    b'"now_ms":1}',
    b'J{"type":"join_group","group":"readers","member_id":"b","client_id":"c","topics":[3],'
    b'"session_timeout_ms":1,"rebalance_timeout_ms":1,"members_max":9,"groups_max":9,"now_ms":1}',
])
def test_malformed_group_commands_are_error_values_and_change_nothing(meta, command):
    meta.join("a")
    before = meta.group
    assert isinstance(meta.apply(command), errors.InvalidArgument)
    assert meta.group == before and meta.sm.applied_index() == meta.index


def register(meta, topics, group="restored", groups_max=100, now_ms=300):
    return meta.apply(group_commands.encode_register_group(group=group, topics=list(topics), groups_max=groups_max,
                                                           now_ms=now_ms))


def test_register_creates_an_empty_group_holding_its_topics_and_adds_topics_to_an_empty_one(meta):
    meta.topic("payments", partitions=1)
    created = register(meta, ["orders"])
    assert (created.state, created.topics, created.empty_since_ms, created.generation) == ("empty", ("orders",), 300, 0)
    grown = register(meta, ["payments", "orders"], now_ms=400)
    assert grown.topics == ("orders", "payments") and grown.changed_ms == 400 and grown.empty_since_ms == 300
    assert register(meta, ["orders"], now_ms=500) is meta.sm.group("restored")  # nothing new: unchanged


def test_register_leaves_a_group_with_members_as_they_made_it(meta):
    meta.topic("payments", partitions=1)
    meta.join("a")
    before = meta.sm.group(G)
    assert register(meta, ["payments"], group=G) == before


@pytest.mark.parametrize("topics, groups_max, error", [
    (["nope"], 100, errors.UnknownTopic),
    ([], 100, errors.InvalidArgument),
    (["orders"], 0, errors.GroupLimitReached),
])
def test_register_refusals_change_nothing(meta, topics, groups_max, error):
    assert isinstance(register(meta, topics, groups_max=groups_max), error)
    assert meta.sm.group("restored") is None
