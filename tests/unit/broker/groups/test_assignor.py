"""Goal: the sticky assignor always gives every subscribed partition to exactly one subscriber, balances within
one (or as far as subscriptions allow), moves the fewest partitions possible, and is deterministic."""
import random

import pytest

from raftbus.broker.groups.assignor import assign


def kept_partitions(subscriptions, counts, previous):
    """member -> previous partitions it may keep (still exists, still subscribed, first claim wins)."""
    claimed, kept = set(), {}
    for m in sorted(subscriptions):
        kept[m] = set()
        for topic, partition in sorted(set(previous.get(m, ()))):
            ok = topic in subscriptions[m] and 0 <= partition < counts.get(topic, 0)
            if ok and (topic, partition) not in claimed:
                claimed.add((topic, partition))
                kept[m].add((topic, partition))
    return kept


def check_assignment(subscriptions, counts, previous, result):
    """Assert every invariant of an assignment; returns the number of partitions moved between live members."""
    assert sorted(result) == sorted(subscriptions)
    owners = {}
    for m, tps in result.items():
        assert list(tps) == sorted(set(tps)), f"{m}: partitions not sorted/unique"
        for tp in tps:
            assert tp not in owners, f"{tp} owned by {owners[tp]} and {m}"
            assert tp[0] in subscriptions[m], f"{m} got {tp} without subscribing to {tp[0]}"
            owners[tp] = m
    wanted = {(t, p) for m in subscriptions for t in subscriptions[m] for p in range(counts.get(t, 0))}
    assert set(owners) == wanted, f"unassigned: {sorted(wanted - set(owners))}, extra: {sorted(set(owners) - wanted)}"
    load = {m: len(tps) for m, tps in result.items()}
    for donor, tps in result.items():
        for tp in tps:
            better = [m for m in subscriptions if tp[0] in subscriptions[m] and load[m] <= load[donor] - 2]
            assert not better, f"{tp} could move from {donor} ({load[donor]}) to {better[0]} ({load[better[0]]})"
    kept = kept_partitions(subscriptions, counts, previous)
    moved = sum(1 for m in kept for tp in kept[m] if owners[tp] != m)
    live_subscriptions = {frozenset(t for t in s if counts.get(t, 0)) for s in subscriptions.values()}
    if len(live_subscriptions) == 1 and subscriptions:
        assert max(load.values()) - min(load.values()) <= 1
        assert moved == minimal_moves(kept, len(owners), sorted(subscriptions))
        for m in subscriptions:  # nobody both loses a partition it could keep and gains another one
            lost = any(owners[tp] != m for tp in kept[m])
            assert not (lost and set(result[m]) - kept[m]), f"{m} swapped partitions"
    assert assign(subscriptions, counts, previous) == result, "not deterministic"
    reordered = assign(dict(reversed(list(subscriptions.items()))), dict(reversed(list(counts.items()))),
                       {m: list(reversed(list(tps))) for m, tps in reversed(list(previous.items()))})
    assert reordered == result, "depends on mapping order"
    return moved


def minimal_moves(kept, total, members):
    """With identical subscriptions: the fewest kept partitions that must change owner to balance within one."""
    share, larger = divmod(total, len(members))
    by_load = sorted(members, key=lambda m: -len(kept[m]))
    quota = {m: share + (1 if i < larger else 0) for i, m in enumerate(by_load)}
    return sum(max(0, len(kept[m]) - quota[m]) for m in members)


def run(subscriptions, counts, previous=None):
    previous = previous or {}
    result = assign(subscriptions, counts, previous)
    moved = check_assignment(subscriptions, counts, previous, result)
    return result, moved


def test_empty_group_and_no_partitions():
    assert run({}, {"t": 3})[0] == {}
    assert run({"a": ["missing"]}, {"t": 3})[0] == {"a": ()}


def test_first_assignment_is_balanced():
    result, _ = run({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 7})
    assert sorted(len(tps) for tps in result.values()) == [2, 2, 3]


def test_new_member_of_a_stable_group_gets_its_share_by_minimal_moves():
    subs = {"a": ["t"], "b": ["t"]}
    stable, _ = run(subs, {"t": 6})
    grown, moved = run({**subs, "c": ["t"]}, {"t": 6}, stable)
    assert len(grown["c"]) == 2 and moved == 2
    assert set(grown["a"]) <= set(stable["a"]) and set(grown["b"]) <= set(stable["b"])


def test_leaving_member_partitions_go_to_the_rest_only():
    subs = {"a": ["t"], "b": ["t"], "c": ["t"]}
    stable, _ = run(subs, {"t": 9})
    shrunk, moved = run({"a": ["t"], "b": ["t"]}, {"t": 9}, stable)
    assert moved == 0
    assert set(stable["a"]) <= set(shrunk["a"]) and set(stable["b"]) <= set(shrunk["b"])


def test_added_partitions_keep_existing_owners():
    subs = {"a": ["t"], "b": ["t"]}
    stable, _ = run(subs, {"t": 4})
    grown, moved = run(subs, {"t": 7}, stable)
    assert moved == 0 and sum(len(v) for v in grown.values()) == 7


def test_deleted_topic_partitions_disappear():
    subs = {"a": ["t", "u"], "b": ["t", "u"]}
    stable, _ = run(subs, {"t": 3, "u": 3})
    after, _ = run(subs, {"t": 3}, stable)
    assert all(tp[0] == "t" for tps in after.values() for tp in tps)


def test_mixed_subscriptions_balance_as_far_as_allowed():
    subs = {"a": ["t"], "b": ["t", "u"], "c": ["u"]}
    result, _ = run(subs, {"t": 4, "u": 4})
    assert sorted(len(v) for v in result.values()) == [2, 3, 3]
    lopsided, _ = run(subs, {"t": 1, "u": 6})
    assert lopsided["a"] == (("t", 0),) and sorted(len(v) for v in lopsided.values()) == [1, 3, 3]


def test_previous_duplicates_and_foreign_partitions_are_ignored():
    previous = {"a": [("t", 0), ("t", 1), ("x", 0)], "b": [("t", 0), ("t", 9)]}
    result, _ = run({"a": ["t"], "b": ["t"]}, {"t": 2}, previous)
    assert result == {"a": (("t", 0),), "b": (("t", 1),)}


def test_more_members_than_partitions():
    result, _ = run({m: ["t"] for m in "abcde"}, {"t": 2})
    assert sorted(len(v) for v in result.values()) == [0, 0, 0, 1, 1]


def _random_event(rng, subscriptions, counts, homogeneous):
    event = rng.choice(["join", "join", "leave", "grow", "topic", "drop_topic", "resubscribe"])
    topics = sorted(counts) or ["t0"]
    if event == "join" or not subscriptions:
        member = f"m{rng.randrange(10_000)}"
        subscriptions[member] = list(topics) if homogeneous else rng.sample(topics, rng.randint(1, len(topics)))
    elif event == "leave":
        del subscriptions[rng.choice(sorted(subscriptions))]
    elif event == "grow" and counts:
        topic = rng.choice(sorted(counts))
        counts[topic] += rng.randint(1, 4)
    elif event == "topic":
        name = f"t{rng.randrange(6)}"
        counts.setdefault(name, rng.randint(1, 8))
        if homogeneous:
            for member in subscriptions:
                subscriptions[member] = sorted(set(subscriptions[member]) | {name})
    elif event == "drop_topic" and len(counts) > 1:
        counts.pop(rng.choice(sorted(counts)))
    elif event == "resubscribe" and not homogeneous:
        member = rng.choice(sorted(subscriptions))
        subscriptions[member] = rng.sample(topics, rng.randint(1, len(topics)))
    return event


@pytest.mark.parametrize("homogeneous", [True, False], ids=["same-topics", "mixed-topics"])
@pytest.mark.parametrize("seed", range(25))
def test_seeded_random_scenarios_keep_every_invariant(seed, homogeneous):
    rng = random.Random(seed)
    counts = {"t0": rng.randint(1, 12)}
    subscriptions: dict[str, list[str]] = {}
    previous: dict = {}
    for step in range(40):
        event = _random_event(rng, subscriptions, counts, homogeneous)
        result = assign(subscriptions, counts, previous)
        try:
            check_assignment(subscriptions, counts, previous, result)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} step {step} after {event}: {exc}") from None
        previous = dict(result)
