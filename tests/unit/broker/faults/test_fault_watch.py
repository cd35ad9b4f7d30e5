"""Goal: a broker's faults are visible — a stopped group answers NOT_SERVING in the gRPC health service (the
metadata group makes the whole broker NOT_SERVING), BrokerStats lists stopped groups and a full disk — and a
full disk refuses writes with DISK_FULL, hands leaderships away, and reopens disk-full-stopped groups once
there is room again."""
from collections import namedtuple

from grpc_health.v1 import health, health_pb2

from raftbus.broker.raft.disk import DiskSpace
from raftbus.broker.raft.faults import FaultWatch

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
StatVfs = namedtuple("StatVfs", "f_bavail f_frsize")


class Filesystem:
    def __init__(self, free_bytes):
        self.free_bytes = free_bytes

    def statvfs(self, path):
        return StatVfs(self.free_bytes // 4096, 4096)


class Group:
    def __init__(self, group_id, *, leader=False, stopped=None, disk_full=False):
        self.group_id, self.is_leader = group_id, leader
        self.stopped, self.stopped_disk_full = stopped, disk_full
        self.transport = namedtuple("T", "nodes")({2: object()})
        self.handed_over = 0

    def hand_over(self, target):
        self.handed_over += 1


def status(servicer, service):
    return servicer.Check(health_pb2.HealthCheckRequest(service=service), None).status


def watch(free_bytes, groups=()):
    fs = Filesystem(free_bytes)
    disk = DiskSpace("/data", 1000, statvfs=fs.statvfs)
    faults = FaultWatch(disk, {g.group_id: g for g in groups}, broker_group="meta")
    servicer = health.HealthServicer()
    servicer.set("", SERVING)
    faults.attach_health(servicer)
    return fs, faults, servicer


def test_a_stopped_partition_group_is_not_serving_but_the_broker_is():
    _, faults, servicer = watch(1 << 20)
    faults.on_group_stopped(Group("p1.0", stopped="fsync failed: EIO"))
    assert status(servicer, "p1.0") == NOT_SERVING and status(servicer, "") == SERVING
    assert faults.stats() == {"stopped_groups": ["p1.0"], "disk_full": False, "damaged_stores": []}


def test_a_stopped_metadata_group_makes_the_broker_not_serving():
    _, faults, servicer = watch(1 << 20)
    faults.on_group_stopped(Group("meta", stopped="applying entry 9 failed"))
    assert status(servicer, "") == NOT_SERVING


def test_a_group_stopped_before_health_exists_is_published_when_it_does():
    fs = Filesystem(1 << 20)
    faults = FaultWatch(DiskSpace("/data", 1000, statvfs=fs.statvfs), {}, broker_group="meta")
    faults.on_group_stopped(Group("p1.0", stopped="x"))
    servicer = health.HealthServicer()
    faults.attach_health(servicer)
    assert status(servicer, "p1.0") == NOT_SERVING


def test_a_full_disk_hands_led_groups_away_and_reopens_disk_full_stops_when_room_returns():
    led, followed = Group("p1.0", leader=True), Group("p1.1")
    fs, faults, servicer = watch(500, [led, followed])
    faults.check_disk()
    assert faults.stats()["disk_full"] and led.handed_over == 1 and followed.handed_over == 0
    faults.on_group_stopped(Group("p1.2", stopped="No space left on device", disk_full=True))
    faults.on_group_stopped(Group("p1.3", stopped="Input/output error"))
    faults.on_group_stopped(Group("meta", stopped="No space left on device", disk_full=True))
    assert faults.reopenable() == []  # not while the disk is full
    fs.free_bytes = 1 << 20
    faults.check_disk()
    assert not faults.stats()["disk_full"] and led.handed_over == 1
    assert faults.reopenable() == ["p1.2", "meta"]  # an I/O error waits for a broker restart
    faults.on_group_reopened("p1.2")
    faults.on_group_reopened("meta")
    assert status(servicer, "p1.2") == SERVING and status(servicer, "") == SERVING
    assert faults.stats()["stopped_groups"] == ["p1.3"]


def test_the_disk_is_full_below_the_bound_and_has_room_at_it():
    fs = Filesystem(4096 * 10)
    disk = DiskSpace("/data", 4096 * 10, statvfs=fs.statvfs)
    assert not disk.check() and not disk.full
    fs.free_bytes = 4096 * 9
    assert disk.check() and disk.full and disk.free_bytes == 4096 * 9


def test_a_stopped_group_no_longer_placed_here_is_forgotten():
    _, faults, servicer = watch(1 << 20)
    faults.on_group_stopped(Group("p1.0", stopped="x"))
    faults.on_open_failed("p1.1", "JournalCorrupt")
    faults.on_group_stopped(Group("meta", stopped="y"))
    faults.forget_unplaced({"p1.1"})
    assert faults.stats()["stopped_groups"] == ["meta", "p1.1"]
    assert status(servicer, "p1.0") == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


def test_a_damaged_store_is_reported_leads_elsewhere_and_is_cleared_by_a_rebuild():
    """Goal: a replica whose store failed its checksum is listed and NOT_SERVING, hands away a leadership it holds
    (on every loop check, so also one it wins later), and is back once `partitions rebuild` replaced its store."""
    led, follower = Group("p1.0", leader=True), Group("p1.1")
    _, faults, servicer = watch(1 << 20, [led, follower])
    faults.on_store_damaged("p1.0")
    faults.on_store_damaged("p1.1")
    assert faults.stats()["damaged_stores"] == ["p1.0", "p1.1"]
    assert status(servicer, "p1.0") == NOT_SERVING and status(servicer, "") == SERVING
    faults.lead_elsewhere()
    assert (led.handed_over, follower.handed_over) == (1, 0)
    faults.on_store_rebuilt("p1.0")
    faults.lead_elsewhere()
    assert led.handed_over == 1 and faults.stats()["damaged_stores"] == ["p1.1"]
    assert status(servicer, "p1.0") == SERVING


def test_a_damaged_metadata_store_is_reported_without_taking_the_broker_out_of_service():
    meta = Group("meta", leader=True)
    _, faults, servicer = watch(1 << 20, [meta])
    faults.on_store_damaged("meta")
    faults.lead_elsewhere()
    assert faults.stats()["damaged_stores"] == ["meta"] and status(servicer, "") == SERVING
    assert meta.handed_over == 0
    faults.forget_unplaced(set())
    assert faults.stats()["damaged_stores"] == ["meta"]
