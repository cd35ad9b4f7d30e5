"""The sticky assignor: which member of a consumer group should own which partition. Pure and deterministic.

Input: each member's subscribed topics, each existing topic's partition count, and the previous assignment.
Output: every partition of a subscribed topic goes to exactly one member subscribed to its topic, so that

- the load is balanced: no partition can move from a member to another subscribed member that has at least
  two fewer partitions (with identical subscriptions this means counts differ by at most one);
- as few partitions as possible move: a member keeps every previous partition it is still subscribed to
  unless it has more than its share. With identical subscriptions the number of moves is the minimum
  possible: the members that already hold the most keep the larger shares.

The result depends only on the values given, never on the order of the mappings.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, tuple[TopicPartition, ...]]


def assign(subscriptions: Mapping[str, Iterable[str]], partition_counts: Mapping[str, int],
           previous: Mapping[str, Iterable[TopicPartition]]) -> Assignment:
    """member -> sorted partitions; see the module docstring for the guarantees."""
    members = sorted(subscriptions)
    topics_of = {m: frozenset(t for t in subscriptions[m] if partition_counts.get(t, 0) > 0) for m in members}
    assignment = _kept(members, topics_of, partition_counts, previous)
    owned = {tp for tps in assignment.values() for tp in tps}
    subscribed = sorted({t for topics in topics_of.values() for t in topics})
    free = [(t, p) for t in subscribed for p in range(partition_counts[t]) if (t, p) not in owned]
    if members and len(set(topics_of.values())) == 1:
        _share_equally(members, assignment, free)
    else:
        eligible = {t: [m for m in members if t in topics_of[m]] for t in subscribed}
        _place_free(assignment, free, eligible)
        _rebalance(members, assignment, eligible)
    return {m: tuple(sorted(assignment[m])) for m in members}


def _kept(members: list[str], topics_of: dict, partition_counts: Mapping[str, int],
          previous: Mapping[str, Iterable[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """Each member's previous partitions that still exist and that it is still subscribed to (first claim wins)."""
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    claimed: set[TopicPartition] = set()
    for m in members:
        for topic, partition in sorted(set(previous.get(m, ()))):
            tp = (topic, partition)
            if topic in topics_of[m] and 0 <= partition < partition_counts[topic] and tp not in claimed:
                claimed.add(tp)
                assignment[m].append(tp)
    return assignment


def _share_equally(members: list[str], assignment: dict[str, list[TopicPartition]],
                   free: list[TopicPartition]) -> None:
    """Identical subscriptions: the members holding the most get the larger shares; excess goes to the rest."""
    total = len(free) + sum(len(tps) for tps in assignment.values())
    share, larger = divmod(total, len(members))
    by_load = sorted(members, key=lambda m: (-len(assignment[m]), m))
    quota = {m: share + (1 if i < larger else 0) for i, m in enumerate(by_load)}
    pool = list(free)
    for m in members:
        excess = len(assignment[m]) - quota[m]
        if excess > 0:
            kept = sorted(assignment[m])
            assignment[m], given = kept[:-excess], kept[-excess:]
            pool.extend(given)
    pool.sort()
    for m in members:
        need = quota[m] - len(assignment[m])
        if need > 0:
            assignment[m].extend(pool[:need])
            del pool[:need]


def _place_free(assignment: dict[str, list[TopicPartition]], free: list[TopicPartition],
                eligible: dict[str, list[str]]) -> None:
    """Give each free partition to its least-loaded subscriber (ties: lowest id), most constrained first.

    One heap of (load, member) per distinct subscriber list; loads only grow here, so a stale entry is simply
    refreshed when it reaches the top.
    """
    load = {m: len(tps) for m, tps in assignment.items()}
    heaps: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    for tp in sorted(free, key=lambda tp: (len(eligible[tp[0]]), tp)):
        subscribers = tuple(eligible[tp[0]])
        heap = heaps.get(subscribers)
        if heap is None:
            heap = heaps[subscribers] = [(load[m], m) for m in subscribers]
            heapq.heapify(heap)
        while heap[0][0] != load[heap[0][1]]:
            heapq.heapreplace(heap, (load[heap[0][1]], heap[0][1]))
        member = heap[0][1]
        assignment[member].append(tp)
        load[member] += 1
        heapq.heapreplace(heap, (load[member], member))


def _rebalance(members: list[str], assignment: dict[str, list[TopicPartition]],
               eligible: dict[str, list[str]]) -> None:
    """Move one partition at a time from a loaded member to a subscriber with two or more fewer, until none can.

    Every move lowers the sum of squared loads, so this ends.
    """
    load = {m: len(assignment[m]) for m in members}
    while True:
        move = _find_move(members, assignment, eligible, load)
        if move is None:
            return
        donor, tp, receiver = move
        assignment[donor].remove(tp)
        assignment[receiver].append(tp)
        load[donor] -= 1
        load[receiver] += 1


def _find_move(members: list[str], assignment: dict[str, list[TopicPartition]], eligible: dict[str, list[str]],
               load: dict[str, int]) -> tuple[str, TopicPartition, str] | None:
    """The most loaded donor (ties: lowest id), its highest partition that its topic's least-loaded subscriber
    (ties: lowest id) can take with two or more fewer partitions, and that subscriber."""
    if not members:
        return None
    lowest = min(load.values())
    least = {t: min(subscribers, key=lambda m: (load[m], m)) for t, subscribers in eligible.items()}
    for donor in sorted(members, key=lambda m: (-load[m], m)):
        if load[donor] < lowest + 2:
            return None
        able = {tp[0] for tp in assignment[donor] if load[least[tp[0]]] <= load[donor] - 2}
        if able:
            tp = max(tp for tp in assignment[donor] if tp[0] in able)
            return donor, tp, least[tp[0]]
    return None
