"""`python -m raftbus.broker start|dev` — what `raftbus broker start` and `raftbus dev` run."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from raftbus.broker.supervisor import DEV_RESTART_DELAY_MS, BrokerSupervisor, Supervised
from raftbus.broker.storage.private import private_dir, restrict_umask
from raftbus.client import errors

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name,
                 "msg": record.getMessage()}
        entry.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def start_broker(args) -> int:
    from raftbus.broker.server import Broker
    from raftbus.broker.settings import load_settings

    restrict_umask()  # every file the broker writes is owner-only (docs/security.md, "Data at rest")
    setup_logging(args.log_level)
    settings = load_settings(args.config, node_id=args.node_id, data_dir=args.data_dir, listen=args.listen,
                             raft_listen=args.raft_listen, peers=args.peers, join=args.join,
                             advertised_listen=args.advertised_listen, metrics_listen=args.metrics_listen,
                             kafka_listen=args.kafka_listen)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before "ready": a SIGTERM right after it stops cleanly
        signal.signal(sig, lambda *_: stop.set())
    broker = Broker(settings).start()
    print(json.dumps({"event": "ready", "node_id": settings.node.node_id, "listen": settings.node.listen,
                      "grpc_port": broker.grpc_port, "raft_listen": settings.node.raft_listen,
                      "metrics_url": broker.metrics.url, "kafka_port": broker.features.kafka.port}), flush=True)
    stop.wait()
    broker.stop()
    return 0


def dev_ports(count: int, base_port: int) -> list[tuple[int, int]]:
    return [(base_port + 2 * i, base_port + 2 * i + 1) for i in range(count)]


def dev_broker_env(data_dir: Path, node: int, raft_pki=None) -> dict[str, str]:
    """The environment of development broker `node`: the data dir's own random cluster secret and id (made on
    first use, reused on restart) and, given a `tls_dev.DevPki`, mutual TLS on the Raft port with its certificate."""
    from raftbus.broker.raft.cluster_secret import dev_credentials

    credentials = dev_credentials(data_dir)
    env = {**os.environ, "RAFTBUS_CLUSTER_SECRET": credentials["cluster_secret"],
           "RAFTBUS_CLUSTER_ID": credentials["cluster_id"]}
    if raft_pki is not None:
        cert, key = raft_pki.broker(node)
        env.update(RAFTBUS_RAFT_TLS_CERT_FILE=str(cert), RAFTBUS_RAFT_TLS_KEY_FILE=str(key),
                   RAFTBUS_RAFT_TLS_CA_FILE=str(raft_pki.ca_file))
    return env


def dev_metrics_ports(count: int, metrics_base_port: int) -> list[int | None]:
    """One metrics port per broker from metrics_base_port on; none when it is 0."""
    return [metrics_base_port + i if metrics_base_port else None for i in range(count)]


def dev_kafka_ports(count: int, kafka_base_port: int) -> list[int]:
    """One Kafka port per broker from kafka_base_port on; none when it is 0."""
    return [kafka_base_port + i for i in range(count)] if kafka_base_port else []


def _dev_brokers(args) -> list[Supervised]:
    ports = dev_ports(args.brokers, args.base_port)
    metrics_ports = dev_metrics_ports(args.brokers, args.metrics_base_port)
    kafka_ports = dev_kafka_ports(args.brokers, args.kafka_base_port)
    peers = ",".join(f"{i + 1}@127.0.0.1:{raft}" for i, (_, raft) in enumerate(ports))
    data_dir = Path(args.data_dir)
    pki, secure_env = _secure_dev_env(data_dir, args.brokers) if args.secure else (None, {})
    brokers = []
    for i, (grpc_port, raft_port) in enumerate(ports):
        node = i + 1
        cmd = [sys.executable, "-m", "raftbus.broker", "start", "--node-id", str(node),
               "--data-dir", str(data_dir / f"broker-{node}"), "--listen", f"127.0.0.1:{grpc_port}",
               "--raft-listen", f"127.0.0.1:{raft_port}", "--peers", peers, "--log-level", args.log_level]
        if metrics_ports[i] is not None:
            cmd += ["--metrics-listen", f"127.0.0.1:{metrics_ports[i]}"]
        if kafka_ports:
            cmd += ["--kafka-listen", f"127.0.0.1:{kafka_ports[i]}"]
        env = dev_broker_env(data_dir, node, raft_pki=pki)
        env.update(secure_env.get(node, {}))
        brokers.append(Supervised(node, cmd, str(data_dir / f"broker-{node}.log"), env=env))
    return brokers


def run_dev(args) -> int:
    """A local N-broker cluster on loopback, one process per broker; a broker that exits is restarted after
    --restart-delay-ms (unless --no-restart) while the others keep serving; Ctrl-C stops it cleanly."""
    restrict_umask()  # the dev cluster's secrets, tokens, keys and logs are owner-only
    data_dir = private_dir(args.data_dir)
    metrics_ports = dev_metrics_ports(args.brokers, args.metrics_base_port)
    supervisor = BrokerSupervisor(_dev_brokers(args), restart=not args.no_restart,
                                  restart_delay_ms=args.restart_delay_ms, say=lambda text: print(text, flush=True))
    supervisor.start_all()
    bootstrap = ",".join(f"127.0.0.1:{g}" for g, _ in dev_ports(args.brokers, args.base_port))
    print(f"raftbus dev: {args.brokers} brokers, bootstrap {bootstrap}, logs in {data_dir}/broker-N.log", flush=True)
    kafka_ports = dev_kafka_ports(args.brokers, args.kafka_base_port)
    if kafka_ports:
        print(f"raftbus dev: kafka-bootstrap {','.join(f'127.0.0.1:{p}' for p in kafka_ports)}", flush=True)
    if args.secure:
        print(f"raftbus dev: secure: TLS on both ports, tokens and ACLs; export RAFTBUS_TLS_CA={data_dir / 'ca.pem'} "
              f"RAFTBUS_TOKEN_FILE={data_dir / 'admin.token'}", flush=True)
    for node, port in enumerate(metrics_ports, start=1):
        if port is not None:
            print(f"raftbus dev: broker {node} metrics http://127.0.0.1:{port}/metrics", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        _wait_ready(bootstrap, args.brokers, stop, supervisor.processes)
        print("raftbus dev: cluster ready (Ctrl-C stops it)", flush=True)
        if args.demo and not stop.is_set():
            from raftbus.broker.demo import run_demo

            run_demo(bootstrap)
        while not stop.wait(0.5):
            supervisor.check()
    finally:
        supervisor.stop_all(signal.SIGTERM)
        print("raftbus dev: stopped", flush=True)
    return 0


def _secure_dev_env(data_dir: Path, brokers: int):
    """(DevPki, {node: client-port settings}) of `raftbus dev --secure`: the development PKI (mutual TLS on the Raft
    port, server TLS on the client port), `ca.pem` and the admin token in the data dir, all kept across restarts;
    the dev process itself (readiness, demo) uses them through RAFTBUS_TLS_CA and RAFTBUS_TOKEN_FILE."""
    from raftbus.broker import tls_dev

    ca_file, token_file = data_dir / "ca.pem", data_dir / "admin.token"
    ids = list(range(1, brokers + 1))
    pki = tls_dev.write_dev_pki(data_dir / "tls", ids)
    ca_file.write_bytes(Path(pki.ca_file).read_bytes())
    if not token_file.exists():
        tls_dev.write_token_file(token_file)
    os.environ.update(RAFTBUS_TLS_CA=str(ca_file), RAFTBUS_TOKEN_FILE=str(token_file))
    return pki, {node: tls_dev.secure_broker_env(pki, node, token_file) for node in ids}


def _wait_ready(bootstrap: str, brokers: int, stop: threading.Event, procs, timeout_s: float = 60.0) -> None:
    """Until the cluster answers with every broker and a controller; Unavailable if one of `procs` exits first
    (a broker that cannot bind its port must not let another cluster on those ports pass for this one)."""
    from raftbus.client import Admin

    deadline = time.monotonic() + timeout_s
    last = None
    while not stop.is_set() and time.monotonic() < deadline:
        exited = [proc for proc in procs if proc.poll() is not None]
        if exited:
            raise errors.Unavailable(f"broker pid {exited[0].pid} exited with {exited[0].returncode} before the "
                                     "cluster was ready (is another cluster using these ports?)")
        try:
            with Admin(bootstrap) as admin:
                status = admin.cluster_status()
                if status.controller_id and len(status.brokers) >= brokers:
                    return
                last = status
        except errors.RaftbusError as exc:
            last = exc
        time.sleep(0.3)
    if not stop.is_set():
        raise errors.Unavailable(f"cluster not ready after {timeout_s:.0f} s (last: {last})")


def add_start_arguments(start: argparse.ArgumentParser) -> None:
    """The flags of `raftbus broker start` (declared here only; the `raftbus` command uses this function)."""
    start.add_argument("--config", help="per-broker TOML settings file")
    start.add_argument("--node-id", type=int)
    start.add_argument("--data-dir")
    start.add_argument("--listen", help="client gRPC address host:port")
    start.add_argument("--advertised-listen", help="address clients should use, if not --listen")
    start.add_argument("--raft-listen", help="peer Raft address host:port (private or loopback)")
    start.add_argument("--peers", help="id@host:port,... Raft addresses of all brokers")
    start.add_argument("--join", help="client address host:port of a running cluster to join (instead of --peers)")
    start.add_argument("--metrics-listen", help="host:port serving Prometheus metrics at /metrics")
    start.add_argument("--kafka-listen", help="host:port of the Kafka protocol port (Kafka clients)")
    start.add_argument("--log-level", default=os.environ.get("RAFTBUS_LOG_LEVEL", "INFO"))
    start.set_defaults(run=start_broker)


def add_dev_arguments(dev: argparse.ArgumentParser) -> None:
    """The flags of `raftbus dev` (declared here only; the `raftbus` command uses this function)."""
    dev.add_argument("--brokers", type=int, default=3)
    dev.add_argument("--data-dir", default="./data")
    dev.add_argument("--base-port", type=int, default=7070)
    dev.add_argument("--metrics-base-port", type=int, default=9570,
                     help="broker N serves metrics on this port + N - 1 (0 = no metrics)")
    dev.add_argument("--kafka-base-port", type=int, default=9092,
                     help="broker N serves the Kafka protocol on this port + N - 1 (0 = no Kafka port)")
    dev.add_argument("--demo", action="store_true", help="create a topic, produce and consume a few records")
    dev.add_argument("--secure", action="store_true",
                     help="TLS, tokens and ACLs on; writes ca.pem and admin.token into --data-dir")
    dev.add_argument("--log-level", default="INFO")
    dev.add_argument("--restart-delay-ms", type=int, default=DEV_RESTART_DELAY_MS,
                     help="wait before restarting a broker that exited")
    dev.add_argument("--no-restart", action="store_true", help="leave a broker that exited down")
    dev.set_defaults(run=run_dev)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftbus broker")
    sub = parser.add_subparsers(dest="command", required=True)
    add_start_arguments(sub.add_parser("start", help="run one broker"))
    add_dev_arguments(sub.add_parser("dev", help="a local N-broker cluster on loopback (Ctrl-C stops it)"))
    return parser


def run(args) -> int:
    """Run `broker start` or `dev` from parsed flags (add_start_arguments / add_dev_arguments): the exit code,
    with a broker's typed error or an OS error as one line on stderr."""
    try:
        return args.run(args)
    except errors.RaftbusError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def main(argv=None) -> int:
    return run(build_parser().parse_args(argv))
