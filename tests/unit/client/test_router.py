"""Goal: the router caches partition leaders, follows NOT_LEADER hints, refreshes metadata on transient errors
and gives up with the typed error once its retry budget or deadline is spent, driven by a fake connection layer."""
import threading
import time
from types import SimpleNamespace

import grpc
import pytest

from raftbus.client.errors import (
    CODE_KEY,
    LEADER_ADDRESS_KEY,
    LEADER_ID_KEY,
    LeaderNotAvailable,
    NotLeader,
    Overloaded,
    RequestTimedOut,
    Unavailable,
    UnknownPartition,
    UnknownTopic,
)
from raftbus.client.router import Connection, Router
from raftbus.client.wire import raftbus_pb2 as pb


class FakeRpcError(grpc.RpcError):
    """What a failed grpc call raises: a status, details and trailing metadata."""

    def __init__(self, status=grpc.StatusCode.UNAVAILABLE, details="", metadata=()):
        super().__init__(details)
        self._status, self._details, self._metadata = status, details, tuple(metadata)

    def code(self):
        return self._status

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._metadata


def not_leader_rpc(leader_id=None, leader_address=None) -> FakeRpcError:
    metadata = [(CODE_KEY, "NOT_LEADER")]
    if leader_id is not None:
        metadata.append((LEADER_ID_KEY, str(leader_id)))
    if leader_address is not None:
        metadata.append((LEADER_ADDRESS_KEY, leader_address))
    return FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "not the leader", metadata)


def metadata(leaders: dict[int, int], controller_id: int = 1, brokers: int = 3) -> pb.MetadataResponse:
    """Metadata for brokers b1..bN and a topic "t" whose partition p is led by leaders[p]."""
    return pb.MetadataResponse(
        brokers=[pb.BrokerInfo(broker_id=i, address=f"b{i}") for i in range(1, brokers + 1)],
        controller_id=controller_id,
        topics=[pb.TopicInfo(name="t", partitions=[pb.PartitionInfo(partition=p, leader_id=leader, replicas=[1, 2, 3])
                                                   for p, leader in leaders.items()])],
    )


class FakeCluster:
    """Brokers by address: GetMetadata answers `self.metadata` (or raises for addresses listed as down)."""

    def __init__(self, answer: pb.MetadataResponse, down=()):
        self.metadata = answer
        self.down = set(down)
        self.metadata_asked: list[str] = []

    def connect(self, address: str) -> Connection:
        def get_metadata(request, timeout=None):
            self.metadata_asked.append(address)
            if address in self.down:
                raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")
            return self.metadata

        return Connection(address, SimpleNamespace(close=lambda: None), log=None,
                          admin=SimpleNamespace(GetMetadata=get_metadata))


class FakeClock:
    """A manual clock; sleeping advances it and is recorded."""

    def __init__(self):
        self.now_s = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds


class Script:
    """An RPC body: records the broker it ran on and plays the next scripted outcome for that broker."""

    def __init__(self, outcomes=None):
        self.outcomes = {address: list(items) for address, items in (outcomes or {}).items()}
        self.visited: list[str] = []

    def __call__(self, conn: Connection):
        self.visited.append(conn.address)
        pending = self.outcomes.get(conn.address)
        outcome = pending.pop(0) if pending else f"ok from {conn.address}"
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def make_router(cluster: FakeCluster, clock: FakeClock, bootstrap="b1", **overrides) -> Router:
    options = {"request_timeout_ms": 30_000, "retries": 5, "retry_backoff_ms": 50, "retry_backoff_max_ms": 1_000,
               "retry_backoff_leader_max_ms": 1_000}
    options.update(overrides)
    return Router(bootstrap, connect=cluster.connect, sleep=clock.sleep, clock=clock, **options)


@pytest.fixture
def clock():
    return FakeClock()


def test_partition_calls_use_the_cached_leader(clock):
    """Calls go to each partition's leader, and metadata is fetched once for many calls."""
    cluster = FakeCluster(metadata({0: 1, 1: 2}))
    router = make_router(cluster, clock)
    script = Script()
    answers = [router.call_partition("t", p, script) for p in (0, 1, 0, 1)]
    assert script.visited == ["b1", "b2", "b1", "b2"]
    assert answers[1] == "ok from b2"
    assert cluster.metadata_asked == ["b1"]
    assert clock.sleeps == []


def test_not_leader_hint_with_address_is_followed_at_once_and_cached(clock):
    """A NOT_LEADER answer naming the leader's address is retried there without delay and remembered."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock)
    script = Script({"b1": [not_leader_rpc(leader_id=7, leader_address="b7")]})
    assert router.call_partition("t", 0, script) == "ok from b7"
    assert router.call_partition("t", 0, script) == "ok from b7"
    assert script.visited == ["b1", "b7", "b7"]
    assert clock.sleeps == []
    assert cluster.metadata_asked == ["b1"]


def test_not_leader_hint_with_only_an_id_uses_the_broker_map(clock):
    """A NOT_LEADER answer carrying only the leader's id is resolved through the known broker addresses."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock)
    script = Script({"b1": [NotLeader("moved", leader_id=3)]})
    assert router.call_partition("t", 0, script) == "ok from b3"
    assert script.visited == ["b1", "b3"]
    assert clock.sleeps == []


def test_not_leader_without_hint_refreshes_metadata(clock):
    """A NOT_LEADER answer with no hint forgets the leader, backs off and asks the cluster again."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock)
    script = Script({"b1": [not_leader_rpc()]})
    cluster_after = metadata({0: 2})

    def moved(conn):
        cluster.metadata = cluster_after
        return script(conn)

    assert router.call_partition("t", 0, moved) == "ok from b2"
    assert script.visited == ["b1", "b2"]
    assert cluster.metadata_asked == ["b1", "b1"]
    assert clock.sleeps == [0.05]


@pytest.mark.parametrize("error", [
    FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"),
    FakeRpcError(grpc.StatusCode.UNAVAILABLE, "election", [(CODE_KEY, "LEADER_NOT_AVAILABLE")]),
    Unavailable("broker stopping"),
    LeaderNotAvailable("election running"),
], ids=["grpc-unavailable", "grpc-leader-not-available", "typed-unavailable", "typed-leader-not-available"])
def test_transient_errors_refresh_metadata_and_back_off(clock, error):
    """UNAVAILABLE and LEADER_NOT_AVAILABLE make the router refresh its map and retry on the new leader."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock)
    router.refresh()
    cluster.metadata = metadata({0: 3})
    script = Script({"b1": [error]})
    assert router.call_partition("t", 0, script) == "ok from b3"
    assert script.visited == ["b1", "b3"]
    assert cluster.metadata_asked == ["b1", "b1"]
    assert clock.sleeps == [0.05]


def test_retry_budget_exhausted_raises_the_typed_error(clock):
    """A leader that stays unreachable is tried retries + 1 times with growing backoff, then Unavailable is raised."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock, retries=3)
    script = Script({"b1": [FakeRpcError(grpc.StatusCode.UNAVAILABLE, "refused")] * 10})
    with pytest.raises(Unavailable) as caught:
        router.call_partition("t", 0, script)
    assert caught.value.code == "UNAVAILABLE"
    assert script.visited == ["b1"] * 4
    assert clock.sleeps == [0.05, 0.1, 0.2]


def test_deadline_stops_retries_before_the_budget(clock):
    """Retries stop when the next backoff would pass request_timeout_ms, even with budget left."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock, retries=20, request_timeout_ms=120)
    script = Script({"b1": [Unavailable("refused")] * 10})
    with pytest.raises(Unavailable):
        router.call_partition("t", 0, script)
    assert clock.sleeps == [0.05]
    assert len(script.visited) == 2


def test_non_retriable_errors_are_raised_at_once(clock):
    """An error the router cannot fix (here UNKNOWN_TOPIC from the broker) is raised without a retry."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock)
    error = FakeRpcError(grpc.StatusCode.NOT_FOUND, "gone", [(CODE_KEY, "UNKNOWN_TOPIC")])
    script = Script({"b1": [error]})
    with pytest.raises(UnknownTopic, match="gone"):
        router.call_partition("t", 0, script)
    assert script.visited == ["b1"]
    assert clock.sleeps == []


def test_unknown_topic_and_partition(clock):
    """A topic missing after a refresh is UnknownTopic; a partition number past the end is UnknownPartition."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock)
    with pytest.raises(UnknownTopic):
        router.call_partition("missing", 0, Script())
    assert cluster.metadata_asked == ["b1", "b1"]
    with pytest.raises(UnknownPartition):
        router.call_partition("t", 5, Script())


def test_controller_calls_follow_the_hint(clock):
    """Controller calls go to the metadata leader and move to the broker a NOT_LEADER answer names."""
    cluster = FakeCluster(metadata({0: 1}, controller_id=1))
    router = make_router(cluster, clock)
    script = Script({"b1": [not_leader_rpc(leader_id=2, leader_address="b2")]})
    assert router.call_controller(script) == "ok from b2"
    assert router.call_controller(script) == "ok from b2"
    assert script.visited == ["b1", "b2", "b2"]
    assert clock.sleeps == []


def test_call_any_moves_to_the_next_broker(clock):
    """call_any tries the next bootstrap broker when one is unreachable."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock, bootstrap="b1,b2")
    script = Script({"b1": [FakeRpcError(grpc.StatusCode.UNAVAILABLE, "refused")]})
    assert router.call_any(script) == "ok from b2"
    assert script.visited == ["b1", "b2"]


def test_metadata_comes_from_the_first_bootstrap_broker_that_answers(clock):
    """A bootstrap broker that is down is skipped when fetching metadata."""
    cluster = FakeCluster(metadata({0: 2}), down={"down:1"})
    router = make_router(cluster, clock, bootstrap="down:1,b1")
    assert router.call_partition("t", 0, Script()) == "ok from b2"
    assert cluster.metadata_asked == ["down:1", "b1"]


def test_stale_metadata_is_refreshed(clock):
    """The cached map is fetched again once it is older than metadata_max_age_ms."""
    cluster = FakeCluster(metadata({0: 1}))
    router = make_router(cluster, clock, metadata_max_age_ms=1_000)
    script = Script()
    router.call_partition("t", 0, script)
    cluster.metadata = metadata({0: 2})
    clock.now_s += 2.0
    router.call_partition("t", 0, script)
    assert script.visited == ["b1", "b2"]
    assert cluster.metadata_asked == ["b1", "b1"]


def test_bouncing_not_leader_hints_back_off_after_the_first_ones():
    """Goal: brokers mid-election that point at each other do not make a call burn its retries in a tight loop."""
    router = Router("h:1", retries=10, retry_backoff_ms=50, retry_backoff_max_ms=1_000,
                    retry_backoff_leader_max_ms=1_000, connect=lambda a: None)
    router._map.brokers.update({1: "h:1", 2: "h:2"})
    delays = [router.note_failure(NotLeader("moved", leader_id=1 + attempt % 2, leader_address=f"h:{1 + attempt % 2}"),
                                  attempt, topic="t", partition=0) for attempt in range(1, 6)]
    assert delays == [0.0, 0.0, 0.05, 0.1, 0.2]


def test_leader_changes_are_retried_at_a_shorter_cap_than_overload():
    """Goal: a producer finds a new leader soon after an election (retries at most retry_backoff_leader_max_ms
    apart), while an overloaded or timed-out broker is still given up to retry_backoff_max_ms between retries."""
    router = Router("h:1", retries=10, retry_backoff_ms=50, retry_backoff_max_ms=1_000,
                    retry_backoff_leader_max_ms=250, connect=lambda a: None)
    for err in (Unavailable("refused"), LeaderNotAvailable("election running")):
        assert [router.note_failure(err, attempt, topic="t", partition=0) for attempt in range(1, 7)] == \
            [0.05, 0.1, 0.2, 0.25, 0.25, 0.25]
    for err in (Overloaded("busy"), RequestTimedOut("slow")):
        assert [router.note_failure(err, attempt, topic="t", partition=0) for attempt in range(1, 7)] == \
            [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    capped = Router("h:1", retry_backoff_ms=50, retry_backoff_max_ms=100, retry_backoff_leader_max_ms=250,
                    connect=lambda a: None)
    assert capped.note_failure(Unavailable("refused"), 5, topic="t", partition=0) == 0.1


def test_leader_changes_are_retried_at_most_100_ms_apart_by_default():
    """Goal: with the SDK's defaults, an election that ends just after a retry is found within 100 ms (the retries
    of a leader change come 50, 100, 100, ... ms apart), and a partition keeps being retried for about 15 s."""
    router = Router("h:1", connect=lambda a: None)
    delays = [router.note_failure(Unavailable("refused"), attempt, topic="t", partition=0) for attempt in range(1, 7)]
    assert delays == [0.05, 0.1, 0.1, 0.1, 0.1, 0.1]
    assert 14 <= sum(router.note_failure(LeaderNotAvailable("election"), attempt, topic="t", partition=0)
                     for attempt in range(1, router.retries + 1)) <= 16


def test_concurrent_refreshes_share_one_metadata_request():
    """Goal: callers that ask for a refresh while one is running share the next one (at most two requests for
    twelve callers), and none takes a map fetched before its own call."""
    cluster = FakeCluster(metadata({0: 1}))
    answer = cluster.connect

    started, release = threading.Event(), threading.Event()

    def slow_connect(address):
        conn = answer(address)
        get = conn.admin.GetMetadata

        def get_metadata(request, timeout=None):
            started.set()
            release.wait(5)
            return get(request, timeout)

        return Connection(address, conn.channel, log=None, admin=SimpleNamespace(GetMetadata=get_metadata))

    router = Router("b1", connect=slow_connect)
    first = threading.Thread(target=router.refresh)
    first.start()
    assert started.wait(5)
    cluster.metadata = metadata({0: 2})  # what the refreshes asked for after this point must see
    maps = []
    waiters = [threading.Thread(target=lambda: maps.append(router.refresh())) for _ in range(12)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.1)
    release.set()
    for thread in (first, *waiters):
        thread.join(5)
    assert len(cluster.metadata_asked) == 2
    assert len(maps) == 12 and all(m.topics["t"][0].leader_id == 2 for m in maps)


def test_concurrent_async_refreshes_share_one_metadata_request():
    """Goal: AsyncRouter shares refreshes the same way: coroutines that ask while one runs share the next one."""
    import asyncio

    from raftbus.client.aio.router import AsyncRouter

    asked = []

    async def main():
        release = asyncio.Event()
        answers = [metadata({0: 1}), metadata({0: 2})]

        async def get_metadata(request, timeout=None):
            answer = answers[len(asked)]
            asked.append(answer)
            await release.wait()
            return answer

        router = AsyncRouter("b1")
        router.connection = lambda address: SimpleNamespace(admin=SimpleNamespace(GetMetadata=get_metadata))
        first = asyncio.ensure_future(router.refresh())
        while not asked:
            await asyncio.sleep(0)
        waiters = [asyncio.ensure_future(router.refresh()) for _ in range(12)]
        await asyncio.sleep(0.01)
        release.set()
        await first
        maps = await asyncio.gather(*waiters)
        return [m.topics["t"][0].leader_id for m in maps]

    assert asyncio.run(main()) == [2] * 12
    assert len(asked) == 2
