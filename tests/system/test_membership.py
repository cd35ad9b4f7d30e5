"""System tests of cluster membership through real broker processes: a broker joins a running cluster."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raftbus.client import Admin, Producer, errors
from tests.helpers import BrokerProcess, wait_until
from tests.ports import reserve_ports
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system


def cli_json(*argv: str) -> dict:
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())", *argv, "--json"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def joining_broker(cluster, node_id: int, join: str, secure=None) -> BrokerProcess:
    """A broker that joins `cluster` at `join`; with `secure` (tests/system/secure.py) it gets a certificate of
    the cluster's CA and the same client-port security as the others."""
    broker = cluster.joining_broker(node_id, join)
    if secure is not None:
        from raftbus.broker.tls_dev import secure_broker_env, write_dev_pki

        pki = write_dev_pki(secure.tls_dir, [node_id])
        cert, key = pki.broker(node_id)
        broker.env = {**secure.cluster_env, "RAFTBUS_RAFT_TLS_CERT_FILE": str(cert), "RAFTBUS_RAFT_TLS_KEY_FILE": str(key),
                      "RAFTBUS_RAFT_TLS_CA_FILE": str(pki.ca_file),
                      **secure_broker_env(pki, node_id, Path(secure.admin_token_file))}
    return broker


@pytest.mark.parametrize("secure", [False, True], ids=["plaintext", "secure"])
def test_a_fourth_broker_joins_and_votes(tmp_path, secure):
    """A broker started with --join (no peers) is added as a learner, promoted to voter, and its acknowledgement
    is then needed: with one original broker stopped, the metadata group commits only through it. It stays a
    voter across a restart, and `raftbus cluster status --json` lists it. Secure: mutual TLS on the Raft port,
    TLS and tokens on the client port (the joining broker proves itself with the cluster's internal token)."""
    with running_cluster(tmp_path, secure=secure) as cluster:
        fourth = joining_broker(cluster, 4, cluster.broker(1).address, cluster.secure)
        try:
            fourth.start()
            with Admin(cluster.bootstrap) as admin:
                members = wait_until(lambda: 4 in admin.metadata_members().voters and admin.metadata_members(),
                                     60, 0.2, what="broker 4 promoted to voter")
                assert members.voters == (1, 2, 3, 4) and members.learners == ()
                wait_until(lambda: any(b.broker_id == 4 and b.alive for b in admin.cluster_status().brokers),
                           30, 0.2, what="broker 4 registered and alive")
            status = cli_json("cluster", "status", "--bootstrap", cluster.bootstrap)
            assert status["metadata_voters"] == [1, 2, 3, 4] and status["metadata_learners"] == []

            fourth.terminate()
            fourth.start()  # a restart: no peers, no second join; it comes back from its own data
            cluster.broker(1).terminate()  # 3 of 4 voters left: every commit needs broker 4
            bootstrap = ",".join(b.address for b in (cluster.broker(2), cluster.broker(3), fourth))
            with Admin(bootstrap) as admin:
                wait_until(lambda: admin.cluster_status().controller_id in (2, 3, 4), 60, 0.2,
                           what="a controller among the remaining voters")
                admin.create_topic("joined", partitions=2, replication_factor=3)
                with Producer(bootstrap) as producer:
                    offsets = [producer.send("joined", b"v%d" % i, partition=0).result(30).offset for i in range(5)]
                assert offsets == list(range(5))
                assert admin.metadata_members().voters == (1, 2, 3, 4)
        finally:
            fourth.kill()


class ProduceLoad:
    """Sends numbered records to partition 0 of `topic` from a thread until stopped; remembers every ack."""

    def __init__(self, bootstrap: str, topic: str):
        import threading

        self.topic = topic
        self.acked: dict[int, bytes] = {}
        self.failed = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(bootstrap, linger_ms=2)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            futures = []
            for _ in range(20):
                value = b"record-%08d" % number
                futures.append((value, self._producer.send(self.topic, value, partition=0)))
                number += 1
            for value, future in futures:
                try:
                    self.acked[future.result(60).offset] = value
                except Exception as exc:
                    self.failed += 1
                    self.errors.append(repr(exc))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        self._producer.close()


def read_partition(bootstrap: str, topic: str) -> dict[int, bytes]:
    from raftbus.client import Reader

    with Reader(bootstrap) as reader:
        return {r.offset: r.value for r in reader.iter_partition(topic, 0, stop_at_end=True)}


def test_reassign_under_produce_load_loses_nothing_and_replicas_agree(tmp_path):
    """`raftbus partitions reassign --wait` moves a partition, its leader included, onto a set with a new broker
    while a producer writes: every acknowledged record is read back at its offset, the new replicas hold identical
    logs (`topics verify`), and the broker that left deletes its replica."""
    with running_cluster(tmp_path) as cluster:
        fourth = joining_broker(cluster, 4, cluster.broker(1).address)
        try:
            fourth.start()
            bootstrap = cluster.bootstrap + "," + fourth.address
            with Admin(bootstrap) as admin:
                wait_until(lambda: 4 in admin.metadata_members().voters, 60, 0.2, what="broker 4 a voter")
                admin.create_topic("moving", partitions=1, replication_factor=3)
                before = admin.describe_topic("moving").partitions[0]
                leader = wait_until(lambda: admin.describe_topic("moving").partitions[0].leader_id, 30, 0.2,
                                    what="a leader of moving/0")
            missing = ({1, 2, 3, 4} - set(before.replicas)).pop()
            target = [r for r in before.replicas if r != leader] + [missing]
            load = ProduceLoad(bootstrap, "moving")
            wait_until(lambda: len(load.acked) >= 500, 60, 0.1, what="records acknowledged before the move")
            moved = cli_json("partitions", "reassign", "moving", "0", "--replicas", ",".join(map(str, target)),
                             "--throttle-bytes-per-s", "2000000", "--wait", "--bootstrap", bootstrap)
            assert moved["done"] and moved["replicas"] == target and moved["target"] == []
            after_move = len(load.acked)
            wait_until(lambda: len(load.acked) >= after_move + 200, 60, 0.1, what="records acknowledged after it")
            load.stop()
            assert load.failed == 0, load.errors[:3]
            stored = read_partition(bootstrap, "moving")
            lost = {o: v for o, v in load.acked.items() if stored.get(o) != v}
            assert not lost, f"{len(lost)} acknowledged records missing or changed, e.g. {list(lost.items())[:3]}"
            assert sorted(stored) == list(range(len(stored)))  # gapless offsets
            report = cli_json("topics", "verify", "moving", "--bootstrap", bootstrap)
            partition = report["partitions"][0]
            assert partition["replicas_agree"]
            assert sorted(r["broker_id"] for r in partition["replicas"]) == sorted(target)
            with Admin(bootstrap) as admin:
                assert admin.describe_topic("moving").partitions[0].replicas == tuple(target)
            left_dir = [b for b in (*cluster.brokers, fourth) if b.node_id == leader][0].data_dir / "partitions"
            wait_until(lambda: not any(left_dir.glob("p*")), 30, 0.2, what="the removed replica deleted")
        finally:
            fourth.kill()


def test_decommission_empties_a_broker_and_takes_it_out_of_the_voters(tmp_path):
    """`raftbus brokers decommission ID --wait` on the controller of a 4-broker cluster moves every replica off it
    and removes it from the metadata voters; once it is stopped, every record written before is read back and
    the three brokers left take writes."""
    with running_cluster(tmp_path) as cluster:
        fourth = joining_broker(cluster, 4, cluster.broker(1).address)
        try:
            fourth.start()
            everyone = (*cluster.brokers, fourth)
            bootstrap = ",".join(b.address for b in everyone)
            with Admin(bootstrap) as admin:
                wait_until(lambda: 4 in admin.metadata_members().voters, 60, 0.2, what="broker 4 a voter")
                admin.create_topic("spread", partitions=4, replication_factor=3)
                leaving = wait_until(lambda: admin.cluster_status().controller_id, 30, 0.2, what="a controller")
                assert any(leaving in p.replicas for p in admin.describe_topic("spread").partitions)
            with Producer(bootstrap) as producer:
                written = {(p, producer.send("spread", b"%d-%d" % (p, i), partition=p).result(30).offset)
                           for p in range(4) for i in range(50)}
            done = cli_json("brokers", "decommission", str(leaving), "--wait", "--bootstrap", bootstrap)
            assert done["done"] and done["replicas_left"] == 0 and not done["metadata_voter"]

            remaining = [b for b in everyone if b.node_id != leaving]
            bootstrap = ",".join(b.address for b in remaining)
            [b for b in everyone if b.node_id == leaving][0].terminate()
            with Admin(bootstrap) as admin:
                assert leaving not in admin.metadata_members().voters
                wait_until(lambda: leaving not in admin.metadata_members().learners, 60, 0.2,
                           what="the stopped broker removed from the metadata group's learners")
                assert all(leaving not in p.replicas and len(p.replicas) == 3
                           for p in admin.describe_topic("spread").partitions)
                wait_until(lambda: admin.cluster_status().controller_id in {b.node_id for b in remaining}, 60, 0.2,
                           what="a controller among the brokers left")
            from raftbus.client import Reader
            with Reader(bootstrap) as reader:
                stored = {(p, r.offset) for p in range(4) for r in reader.iter_partition("spread", p, stop_at_end=True)}
            assert written <= stored
            with Producer(bootstrap) as producer:
                assert producer.send("spread", b"after", partition=0).result(30).offset == 50
        finally:
            fourth.kill()


def test_a_reassignment_survives_the_controller_being_killed(tmp_path):
    """Bad replica lists and a second move of a moving partition get typed errors; kill -9 of the controller (a
    replica the move drops) right after it recorded a reassignment does not stop the move: the remaining brokers finish it, no record written before is lost, and the killed broker, restarted,
    deletes the replica it no longer holds."""
    with running_cluster(tmp_path) as cluster:
        fourth = joining_broker(cluster, 4, cluster.broker(1).address)
        try:
            fourth.start()
            everyone = {b.node_id: b for b in (*cluster.brokers, fourth)}
            bootstrap = ",".join(b.address for b in everyone.values())
            with Admin(bootstrap) as admin:
                wait_until(lambda: 4 in admin.metadata_members().voters, 60, 0.2, what="broker 4 a voter")
                admin.create_topic("failover", partitions=4, replication_factor=3)
                controller = wait_until(lambda: admin.cluster_status().controller_id, 30, 0.2, what="a controller")
                partitions = admin.describe_topic("failover").partitions
                moved = next(p for p in partitions if controller in p.replicas)
                target = [b for b in moved.replicas if b != controller] + \
                    [({1, 2, 3, 4} - set(moved.replicas)).pop()]
            with Producer(bootstrap) as producer:
                written = {producer.send("failover", b"%d" % i, partition=moved.partition).result(30).offset: b"%d" % i
                           for i in range(300)}
            with Admin(bootstrap) as admin:
                with pytest.raises(errors.UnknownBroker):
                    admin.reassign_partition("failover", moved.partition, [1, 2, 99])
                with pytest.raises(errors.InvalidReplicas):
                    admin.reassign_partition("failover", moved.partition, [])  # a replication factor of 0
                admin.reassign_partition("failover", moved.partition, target)
                with pytest.raises(errors.ReassignmentInProgress):
                    admin.reassign_partition("failover", moved.partition, list(moved.replicas))
            everyone[controller].kill()

            survivors = ",".join(b.address for n, b in everyone.items() if n != controller)
            with Admin(survivors) as admin:
                done = wait_until(lambda: admin.describe_reassignment("failover", moved.partition).done, 90, 0.3,
                                  what="the move finished without the old controller")
                assert done and admin.describe_topic("failover").partitions[moved.partition].replicas == tuple(target)
            from raftbus.client import Reader
            with Reader(survivors) as reader:
                stored = {r.offset: r.value for r in reader.iter_partition("failover", moved.partition,
                                                                            stop_at_end=True)}
            assert all(stored.get(offset) == value for offset, value in written.items())
            everyone[controller].start()
            group_dir = everyone[controller].data_dir / "partitions"
            topic_id = None
            with Admin(survivors) as admin:
                topic_id = admin.describe_topic("failover").topic_id
            wait_until(lambda: not (group_dir / f"p{topic_id}.{moved.partition}").exists(), 60, 0.2,
                       what="the restarted broker deleting the replica it no longer holds")
        finally:
            fourth.kill()


def join_call(bootstrap: str, broker_id: int, address: str, raft_address: str):
    """A JoinCluster call as a joining broker (or anyone with cluster-admin) makes it, to the controller."""
    from raftbus.client.router import Router
    from raftbus.client.wire import membership_pb2 as mpb
    from raftbus.client.wire import membership_pb2_grpc as mpb_grpc

    request = mpb.JoinClusterRequest(broker_id=broker_id, address=address, raft_address=raft_address)
    with Router(bootstrap) as router:
        return router.call_controller(
            lambda conn: mpb_grpc.MembershipStub(conn.channel).JoinCluster(request, timeout=30.0))


def test_fake_joins_leave_the_voters_and_the_controller_alone_also_after_a_restart(tmp_path):
    """Three JoinCluster calls naming addresses where no broker listens add three learners that never vote: the
    voters stay 1,2,3 and the cluster keeps its controller, also across a restart of all three brokers with the
    learners in their journals; each learner is removed once membership_join_catch_up_timeout_ms passes without it
    connecting, none is ever registered, and the cluster commits. A join of an existing id at another address is
    BROKER_ID_IN_USE."""
    import time

    bound_ms = 20_000  # outlasts a restart of all three brokers on a loaded machine, so the fakes are still there
    with running_cluster(tmp_path, env={"RAFTBUS_MEMBERSHIP_JOIN_CATCH_UP_TIMEOUT_MS": str(bound_ms)}) as cluster:
        held = reserve_ports(6)  # held and never listening: a connection there is refused (tests/ports.py)
        nowhere = held.ports
        for i, fake in enumerate((4, 5, 6)):
            answer = join_call(cluster.bootstrap, fake, f"127.0.0.1:{nowhere[2 * i]}",
                               f"127.0.0.1:{nowhere[2 * i + 1]}")
            assert list(answer.voters) == [1, 2, 3] and fake in answer.learners
        seen = set()

        def watch(admin, until=None):
            """Record (voters, has a controller) at each look; done when the fakes are gone (or at `until`)."""
            members = admin.metadata_members()
            seen.add((members.voters, members.controller_id is not None))
            return time.monotonic() >= until if until else members.learners == ()

        with Admin(cluster.bootstrap) as admin:
            watched_until = time.monotonic() + 3.0  # six promotion checks with three fake learners
            wait_until(lambda: watch(admin, watched_until), 30, 0.1, what="three seconds of watching")
            assert admin.metadata_members().learners == (4, 5, 6)

        for broker in cluster.brokers:
            broker.terminate()
        for broker in cluster.brokers:
            broker.start()
        with Admin(cluster.bootstrap) as admin:
            members = wait_until(lambda: (m := admin.metadata_members()).controller_id and m, 60, 0.2,
                                 what="a controller after the restart")
            assert members.voters == (1, 2, 3) and members.learners == (4, 5, 6)  # from the journals
            wait_until(lambda: watch(admin), 120, 0.1, what="the fake learners removed")
            assert seen == {((1, 2, 3), True)}, seen
            admin.create_topic("after-fakes", partitions=1, replication_factor=3)
            with Producer(cluster.bootstrap) as producer:
                assert producer.send("after-fakes", b"x", partition=0).result(30).offset == 0
            assert sorted(b.broker_id for b in admin.cluster_status().brokers) == [1, 2, 3]
            with pytest.raises(errors.RaftbusError) as taken:
                join_call(cluster.bootstrap, 2, f"127.0.0.1:{nowhere[0]}", f"127.0.0.1:{cluster.broker(2).raft_port}")
            assert taken.value.code == "BROKER_ID_IN_USE"
            members = admin.metadata_members()
            assert (members.voters, members.learners) == ((1, 2, 3), ())
        held.close()
