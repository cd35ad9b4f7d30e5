"""Leader gossip: each round tells peers only what changed, a new peer and every full round get the whole list,
and the receiving table keeps a broker's entries while that broker is heard."""
from __future__ import annotations

from raftbus.broker.leaders import LeaderGossip, LeaderTable


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_round_sends_changes_to_known_peers_and_everything_to_a_new_one():
    gossip = LeaderGossip(full_every_rounds=30)
    gossip.peer_connected(2)
    first = gossip.messages({"a": (1, [1, 2]), "b": (3, [1])}, [2], {"disk_full": False})
    assert first[2] == {"disk_full": False, "leaders": [["a", 1, [1, 2]], ["b", 3, [1]]], "full": True}

    quiet = gossip.messages({"a": (1, [1, 2]), "b": (3, [1])}, [2], {})
    assert quiet[2] == {"leaders": [], "gone": [], "full": False}

    gossip.peer_connected(3)
    changed = gossip.messages({"a": (2, [1, 2]), "c": (1, [1])}, [2, 3], {})
    assert changed[2] == {"leaders": [["a", 2, [1, 2]], ["c", 1, [1]]], "gone": ["b"], "full": False}
    assert changed[3]["full"] and changed[3]["leaders"] == [["a", 2, [1, 2]], ["c", 1, [1]]]


def test_a_round_of_updates_names_only_what_may_have_changed_and_the_rest_stands():
    gossip = LeaderGossip(full_every_rounds=30)
    gossip.peer_connected(2)
    gossip.round({"a": (1, [1, 2]), "b": (3, [1])}, [2], {})
    named = gossip.round({"a": (1, [1, 2]), "c": (2, [1]), "x": None}, [2], {})  # "b" not named; "x" never told
    assert named[2] == {"leaders": [["c", 2, [1]]], "gone": [], "full": False}
    gone = gossip.round({"b": None}, [2], {})
    assert gone[2] == {"leaders": [], "gone": ["b"], "full": False}
    gossip.peer_connected(3)
    assert gossip.round({}, [3], {})[3]["leaders"] == [["a", 1, [1, 2]], ["c", 2, [1]]]


def test_every_full_round_sends_the_whole_list_to_every_peer():
    gossip = LeaderGossip(full_every_rounds=3)
    led = {"a": (1, [1])}
    fulls = [gossip.messages(led, [2], {})[2]["full"] for _ in range(6)]
    assert fulls == [False, False, True, False, False, True]


def test_the_table_applies_changes_and_a_full_list_replaces_a_brokers_entries():
    table = LeaderTable(stale_after_s=3.0, clock=Clock())
    table.apply_gossip(2, [("a", 1, [2, 3]), ("b", 1, [2])], [], full=True)
    table.apply_gossip(3, [("c", 4, [3])], [], full=True)
    assert table.get("a").leader_id == 2 and table.get("a").isr == (2, 3)

    table.apply_gossip(2, [("a", 1, [2])], ["b"], full=False)
    assert table.get("a").isr == (2,) and table.get("b") is None

    table.apply_gossip(2, [("d", 1, [2])], [], full=True)  # a full list drops what it no longer names
    assert table.get("a") is None and table.get("d").leader_id == 2
    assert table.get("c").leader_id == 3  # another broker's entries stay


def test_a_brokers_entries_stand_while_it_is_heard_and_go_stale_when_it_falls_silent():
    clock = Clock()
    table = LeaderTable(stale_after_s=3.0, clock=clock)
    table.apply_gossip(2, [("a", 1, [2])], [], full=True)
    for _ in range(5):  # empty rounds keep the entry alive, however old it is
        clock.now += 2.0
        table.apply_gossip(2, [], [], full=False)
    assert table.get("a").leader_id == 2
    clock.now += 3.5
    assert table.get("a") is None


def test_an_older_term_never_replaces_a_newer_leader_and_gone_only_removes_the_senders_entry():
    table = LeaderTable(clock=Clock())
    table.apply_gossip(3, [("a", 5, [3])], [], full=True)
    table.apply_gossip(2, [("a", 4, [2])], [], full=False)
    assert table.get("a").leader_id == 3
    table.apply_gossip(2, [], ["a"], full=False)
    assert table.get("a").leader_id == 3


def test_a_disconnected_broker_is_forgotten():
    table = LeaderTable(clock=Clock())
    table.apply_gossip(2, [("a", 1, [2])], [], full=True)
    table.forget_broker(2)
    assert table.get("a") is None
