"""System test: a consumer group of real OS processes on 3 real brokers, with members and the controller killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from raftbus.client import Admin, Producer
from tests.group_history import GroupHistory
from tests.helpers import wait_until
from tests.history import History
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system

TOPIC = "events"
GROUP = "workers"
PARTITIONS = 6
SESSION_TIMEOUT_MS = 3000
ROUND_RECORDS = 50
ROUND_PAUSE_S = 0.05
SENDS_MAX = 200_000
REPO_ROOT = Path(__file__).resolve().parents[2]
# Short group timers so member deaths are noticed within seconds (the defaults are Kafka's 45 s / 3 s).
BROKER_ENV = {"RAFTBUS_SESSION_TIMEOUT_MIN_MS": "1000", "RAFTBUS_HEARTBEAT_INTERVAL_MS": "300",
              "RAFTBUS_GROUP_EXPIRY_CHECK_INTERVAL_MS": "200"}


@pytest.fixture
def group_cluster(tmp_path):
    with running_cluster(tmp_path, env=BROKER_ENV) as cluster:
        yield cluster


class Member:
    """One `python -m tests.system.group_member` process, stopped by pid."""

    def __init__(self, root: Path, index: int, bootstrap: str):
        self.journal = root / f"member-{index}.jsonl"
        log = open(root / f"member-{index}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.system.group_member", "--bootstrap", bootstrap, "--group", GROUP,
             "--topic", TOPIC, "--out", str(self.journal), "--session-timeout-ms", str(SESSION_TIMEOUT_MS)],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log)
        log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


class PacedProducer:
    """Sends uniquely valued, keyed records at a steady pace from a thread; outcomes go to History."""

    def __init__(self, bootstrap: str, history: History):
        self.history = history
        self.producer = Producer(bootstrap, linger_ms=2)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        self.producer.close()

    def _run(self) -> None:
        sent = 0
        try:
            while not self._stop.is_set() and sent < SENDS_MAX:
                futures = []
                for _ in range(ROUND_RECORDS):
                    value = f"rec-{sent}".encode()
                    future = self.producer.send(TOPIC, value, key=str(sent % 23))
                    self.history.track(value, future)
                    futures.append(future)
                    sent += 1
                for future in futures:
                    future.exception(timeout=150)
                self._stop.wait(ROUND_PAUSE_S)
        except BaseException as exc:  # reported by the test
            self.error = exc


def processed(members: list[Member]) -> int:
    return len(GroupHistory.read([m.journal for m in members]).processed)


def live_owners_cover_every_partition(members: list[Member], live: list[Member]):
    """Some generation in which the live members' owned sets together cover every partition."""
    history = GroupHistory.read([m.journal for m in live])
    by_generation: dict[int, set[int]] = {}
    for (_, generation), partitions in history.owned.items():
        by_generation.setdefault(generation, set()).update(partitions)
    newest = max(by_generation, default=0)
    return by_generation.get(newest) == set(range(PARTITIONS)) and newest


def each_member_owns_a_share(members: list[Member]):
    """A generation in which every one of `members` owns partitions and together they own every partition."""
    history = GroupHistory.read([m.journal for m in members])
    by_generation: dict[int, dict] = {}
    for (member, generation), partitions in history.owned.items():
        if partitions:
            by_generation.setdefault(generation, {})[member] = set(partitions)
    newest = max(by_generation, default=0)
    owners = by_generation.get(newest, {})
    return len(owners) == len(members) and set().union(*owners.values()) == set(range(PARTITIONS)) and newest


def progress_after(members: list[Member], count: int, what: str, timeout_s: float = 30.0) -> None:
    start = processed(members)
    wait_until(lambda: processed(members) >= start + count, timeout_s, 0.2, what=what)


def controller_of(bootstrap: str) -> int | None:
    with Admin(bootstrap) as admin:
        return admin.cluster_status().controller_id


def test_members_and_controller_die_while_records_flow_and_nothing_is_lost(group_cluster, tmp_path):
    """Four member processes consume while records flow; two members are killed -9 and two added, and the
    controller broker is killed -9: every acknowledged record is processed at least once at its offset, no
    partition has two owners in one generation, no live member is expired by the failover (grace period), and
    the group ends caught up with nothing left to consume."""
    bootstrap = group_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    history = History()
    load = PacedProducer(bootstrap, history)
    members = [Member(tmp_path, i, bootstrap) for i in range(4)]
    everyone = list(members)
    try:
        wait_until(lambda: each_member_owns_a_share(members), 60, 0.2, what="four members sharing every partition")
        progress_after(everyone, 500, "records processed by the first four members")

        members[0].kill()  # a member dies: its partitions move once its session expires
        live = members[1:]
        wait_until(lambda: live_owners_cover_every_partition(everyone, live), 30, 0.2,
                   what="the dead member's partitions taken over")
        progress_after(everyone, 500, "records processed after the first kill")

        joiner = Member(tmp_path, 4, bootstrap)  # a member joins a stable group and gets its share
        everyone.append(joiner)
        live.append(joiner)
        wait_until(lambda: GroupHistory.read([joiner.journal]).processed, 30, 0.2, what="the new member consuming")

        controller = controller_of(bootstrap)
        group_cluster.broker(controller).kill()  # the controller dies: members keep their partitions (grace)
        survivors = ",".join(b.address for b in group_cluster.brokers if b.node_id != controller)
        wait_until(lambda: controller_of(survivors) not in (None, controller), 30, 0.2, what="a new controller")
        progress_after(everyone, 500, "records processed after the controller kill", timeout_s=45)

        members[1].kill()
        live.remove(members[1])
        late = Member(tmp_path, 5, bootstrap)
        everyone.append(late)
        live.append(late)
        wait_until(lambda: live_owners_cover_every_partition(everyone, live), 30, 0.2,
                   what="partitions shared by the members left after the second kill")
        wait_until(lambda: GroupHistory.read([late.journal]).processed, 30, 0.2, what="the late member consuming")
        progress_after(everyone, 500, "records processed after the second kill")
    finally:
        load.stop()
    assert load.error is None, load.error
    assert history.acked_count > 2000
    with history._lock:
        acked = dict(history.acked)
    wait_until(lambda: {v.decode() for v in acked} <= GroupHistory.read([m.journal for m in everyone]).values(),
               60, 0.5, what="every acknowledged record processed")

    def caught_up():
        with Admin(survivors) as admin:
            group = admin.describe_group(GROUP)
        return all(p.lag_records == 0 for p in group.partitions) and len(group.partitions) == PARTITIONS and group

    described = wait_until(caught_up, 30, 0.5, what="committed offsets at the end of every partition")
    assert len(described.members) == len(live) and described.state == "stable"
    for member in live:
        member.terminate()
    with Admin(survivors) as admin:
        assert admin.describe_group(GROUP).state == "empty"  # members that close leave the group
    figures = GroupHistory.read([m.journal for m in everyone]).check(acked)
    assert figures["members"] == 6 and figures["distinct"] >= len(acked)
    rejoined = [m.journal.name for m in everyone if len(GroupHistory.read([m.journal]).member_ids()) != 1]
    assert not rejoined, f"members expired and joined again (no grace after the controller failover?): {rejoined}"
    print(f"group history: {figures}, acknowledged {len(acked)}")
