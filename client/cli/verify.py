"""`raftbus topics verify TOPIC [--json]`: compare every replica of every partition of a topic (stream or queue);
`raftbus partitions rebuild TOPIC PARTITION --broker N`: replace broker N's replica by a copy of the leader's;
`raftbus cluster verify [--json]`: compare the metadata store of every broker (broker/metadata/integrity.py).

For each partition of a stream topic the leader proposes a checkpoint (one Raft command); every replica records,
at that log index, its log start, high watermark and the checksum of its stored batches. For a queue topic the
leader names its applied index, and each replica answers the content digest of its store at that index (log start
and high watermark read 0). Each replica's broker then answers with its record and re-reads its store against the
kept checksum. The replicas agree when every one answered the
same checkpoint with the same record and a consistent store. Exit status 0 when every partition agrees, 1 if not.
"""
from __future__ import annotations

import argparse
import json

import grpc

from raftbus.client.errors import UnknownBroker, error_from_rpc
from raftbus.client.router import Router
from raftbus.client.wire import integrity_pb2 as ipb
from raftbus.client.wire import integrity_pb2_grpc as ipb_grpc
from raftbus.client.wire import raftbus_pb2 as pb

REPLICA_WAIT_MS = 10_000  # how long a replica may take to apply the checkpoint before it counts as behind
REBUILD_TIMEOUT_S = 600   # copying and installing a store image


def add_topic_verify(actions, common: argparse.ArgumentParser, bootstrap_of) -> None:
    verify = actions.add_parser("verify", parents=[common],
                                help="compare every replica of every partition (checksums at one log index)")
    verify.add_argument("name")
    verify.set_defaults(handler=lambda args: run_topics_verify(args, bootstrap_of(args)))


def add_partition_commands(sub, common: argparse.ArgumentParser, bootstrap_of):
    """The `partitions` command with `rebuild`; returns its sub-commands (reassign joins them)."""
    partitions = sub.add_parser("partitions", help="repair or move partition replicas")
    actions = partitions.add_subparsers(dest="partitions_command", required=True)
    rebuild = actions.add_parser("rebuild", parents=[common],
                                 help="replace one broker's replica by a copy of the leader's store")
    rebuild.add_argument("topic")
    rebuild.add_argument("partition", type=int)
    rebuild.add_argument("--broker", type=int, required=True, help="the broker whose replica is rebuilt")
    rebuild.set_defaults(handler=lambda args: run_partitions_rebuild(args, bootstrap_of(args)))
    return actions


def add_cluster_verify(actions, common: argparse.ArgumentParser, bootstrap_of) -> None:
    verify = actions.add_parser("verify", parents=[common],
                                help="compare the metadata store of every broker (checksums at one index)")
    verify.set_defaults(handler=lambda args: run_cluster_verify(args, bootstrap_of(args)))


def run_cluster_verify(args, bootstrap: str) -> int:
    with Router(bootstrap) as router:
        report = verify_metadata(router)
    if args.json:
        print(json.dumps(report))
    else:
        state = "agree" if report["replicas_agree"] else "DIFFER"
        print(f"metadata at index {report['index']}: replicas {state}")
        for r in report["replicas"]:
            if "error" in r:
                print(f"  broker {r['broker_id']}: {r['error']}")
                continue
            store = {True: "consistent", False: "CHANGED", None: "unchecked"}[r["store_consistent"]]
            print(f"  broker {r['broker_id']}: index {r['index']} digest {r['digest']} store {store}")
    return 0 if report["replicas_agree"] else 1


def verify_metadata(router: Router) -> dict:
    """{"index": I, "replicas_agree": bool, "replicas": [{"broker_id", "index", "applied_index", "digest",
    "store_consistent"} or {"broker_id", "error"}]}: every broker's metadata digest at the highest applied index
    any of them reported (applied means committed, so every replica reaches it)."""
    brokers = sorted(router.refresh().brokers.items())
    first = [metadata_digest(router, broker_id, address, 0, 0) for broker_id, address in brokers]
    applied = [r["applied_index"] for r in first if "error" not in r]
    index = max(applied, default=0)
    replicas = [metadata_digest(router, broker_id, address, index, REPLICA_WAIT_MS) for broker_id, address in brokers]
    return {"index": index, "replicas_agree": bool(applied) and replicas_agree(index, replicas),
            "replicas": replicas}


def metadata_digest(router: Router, broker_id: int, address: str, index: int, wait_ms: int) -> dict:
    record: dict = {"broker_id": broker_id}
    request = ipb.MetadataDigestRequest(index=index, max_wait_ms=wait_ms)
    try:
        r = ipb_grpc.IntegrityStub(router.connection(address).channel).MetadataDigest(
            request, timeout=router.request_timeout_s + wait_ms / 1000)
    except grpc.RpcError as exc:
        err = error_from_rpc(exc)
        return {**record, "error": f"{err.code}: {err.message}"}
    return {**record, "checkpoint_index": r.index, "index": r.index, "applied_index": r.applied_index,
            "log_start_offset": 0, "high_watermark": 0, "digest": f"{r.digest:016x}",
            "store_consistent": r.store_consistent if r.store_checked else None}


def run_partitions_rebuild(args, bootstrap: str) -> int:
    with Router(bootstrap) as router:
        address = router.refresh().brokers.get(args.broker)
        if address is None:
            raise UnknownBroker(f"broker {args.broker} is not registered")
        request = pb.RebuildReplicaRequest(topic=args.topic, partition=args.partition)
        try:
            r = router.connection(address).log.RebuildReplica(request, timeout=REBUILD_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None
    result = {"topic": args.topic, "partition": args.partition, "broker_id": r.broker_id,
              "source_broker_id": r.source_broker_id, "applied_index": r.applied_index, "image_bytes": r.image_bytes}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"rebuilt {args.topic}/{args.partition} on broker {r.broker_id} from broker {r.source_broker_id} "
              f"(index {r.applied_index}, {r.image_bytes} bytes)")
    return 0


def run_topics_verify(args, bootstrap: str) -> int:
    with Router(bootstrap) as router:
        report = verify_topic(router, args.name)
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 0 if all(p["replicas_agree"] for p in report["partitions"]) else 1


def verify_topic(router: Router, topic: str) -> dict:
    """{"topic": T, "partitions": [{"partition": P, "replicas_agree": bool, "index": I, "replicas": [...]}]}"""
    partitions = router.partitions_for(topic)
    return {"topic": topic, "partitions": [verify_partition(router, topic, p) for p in range(partitions)]}


def verify_partition(router: Router, topic: str, partition: int) -> dict:
    request = pb.CheckpointPartitionRequest(topic=topic, partition=partition)
    answer = router.call_partition(
        topic, partition, lambda conn: conn.log.CheckpointPartition(request, timeout=router.request_timeout_s))
    replicas = [replica_record(router, topic, partition, answer.index, ref) for ref in answer.replicas]
    return {"partition": partition, "replicas_agree": replicas_agree(answer.index, replicas), "index": answer.index,
            "replicas": replicas}


def replica_record(router: Router, topic: str, partition: int, index: int, ref: pb.ReplicaRef) -> dict:
    record: dict = {"broker_id": ref.broker_id}
    if not ref.address:
        return {**record, "error": "UNAVAILABLE: the broker's address is unknown"}
    request = pb.ReplicaCheckpointRequest(topic=topic, partition=partition, index=index,
                                          max_wait_ms=REPLICA_WAIT_MS)
    try:
        r = router.connection(ref.address).log.ReplicaCheckpoint(
            request, timeout=router.request_timeout_s + REPLICA_WAIT_MS / 1000)
    except grpc.RpcError as exc:
        err = error_from_rpc(exc)
        return {**record, "error": f"{err.code}: {err.message}"}
    return {**record, "checkpoint_index": r.index, "applied_index": r.applied_index,
            "log_start_offset": r.log_start_offset, "high_watermark": r.high_watermark,
            "digest": f"{r.digest:016x}" if r.digest_tracked else None,
            "store_consistent": r.store_consistent if r.store_checked else None}


def replicas_agree(index: int, replicas: list[dict]) -> bool:
    """Every replica answered this checkpoint, with one record, and none found its store changed."""
    if not replicas or any("error" in r or r["checkpoint_index"] != index for r in replicas):
        return False
    if any(r["store_consistent"] is False for r in replicas):
        return False
    return len({(r["log_start_offset"], r["high_watermark"], r["digest"]) for r in replicas}) == 1


def print_report(report: dict) -> None:
    for p in report["partitions"]:
        state = "agree" if p["replicas_agree"] else "DIFFER"
        print(f"{report['topic']}/{p['partition']} at index {p['index']}: replicas {state}")
        for r in p["replicas"]:
            if "error" in r:
                print(f"  broker {r['broker_id']}: {r['error']}")
                continue
            store = {True: "consistent", False: "CHANGED", None: "unchecked"}[r["store_consistent"]]
            print(f"  broker {r['broker_id']}: checkpoint {r['checkpoint_index']} log {r['log_start_offset']}.."
                  f"{r['high_watermark']} digest {r['digest'] or '-'} store {store}")
