"""`python -m raftbus.broker start|dev` — what `raftbus broker start` and `raftbus dev` run."""
from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from raftbus.broker import ports as broker_ports
from raftbus.broker.supervisor import DEV_RESTART_DELAY_MS, BrokerSupervisor, ReservedPorts, StopFlag, Supervised
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


def broker_listeners(settings) -> list[broker_ports.Listener]:
    """The addresses `broker start` binds, by the setting that names each (unset and port 0 are left out); with
    listen_reuse_port the client, Raft and Kafka ports are checked as they are bound, beside a hold on them."""
    reuse = settings.node.listen_reuse_port
    named = [("client port, listen", settings.node.listen, reuse),
             ("Raft port, raft_listen", settings.node.raft_listen, reuse),
             ("metrics port, metrics_listen", settings.metrics.metrics_listen, False),
             ("Kafka port, kafka_listen", settings.kafka.kafka_listen, reuse)]
    return [broker_ports.Listener(role, address, reuse_port) for role, address, reuse_port in named if address]


START_HINT = ("stop it, or give this broker other addresses (--listen, --raft-listen, --metrics-listen, "
              "--kafka-listen)")


def pem_files(settings) -> list[tuple[str, str, str]]:
    """(setting, path, kind) of every PEM file the settings name."""
    from raftbus.client.credentials import CERTIFICATE, PRIVATE_KEY

    security, raft = settings.security, settings.raft
    files = [("tls_cert_file", security.tls_cert_file, CERTIFICATE), ("tls_key_file", security.tls_key_file, PRIVATE_KEY),
             ("tls_client_ca_file", security.tls_client_ca_file, CERTIFICATE),
             ("tls_ca_file", security.tls_ca_file, CERTIFICATE),
             ("raft_tls_cert_file", raft.tls_cert_file, CERTIFICATE),
             ("raft_tls_key_file", raft.tls_key_file, PRIVATE_KEY), ("raft_tls_ca_file", raft.tls_ca_file, CERTIFICATE)]
    return [(name, path, kind) for name, path, kind in files if path]


def check_files(settings) -> None:
    """The data dir can be made and written, and every certificate and key file exists, is readable and is PEM of
    its kind: InvalidArgument naming the setting otherwise, before anything starts (gRPC's TLS library would only
    log a bad file, at the first handshake)."""
    from raftbus.client.credentials import read_pem

    data_dir = Path(settings.node.data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise errors.InvalidArgument(f"data_dir {data_dir}: {exc.strerror}") from None
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise errors.InvalidArgument(f"data_dir {data_dir}: not writable by this user")
    for name, path, kind in pem_files(settings):
        read_pem(name, path, kind)


def start_broker(args) -> int:
    from raftbus.broker.heap import limit_malloc_arenas
    from raftbus.broker.settings import load_settings

    restrict_umask()  # every file the broker writes is owner-only (docs/security.md, "Data at rest")
    setup_logging(args.log_level)
    settings = load_settings(args.config, node_id=args.node_id, data_dir=args.data_dir, listen=args.listen,
                             raft_listen=args.raft_listen, peers=args.peers, join=args.join,
                             advertised_listen=args.advertised_listen, metrics_listen=args.metrics_listen,
                             kafka_listen=args.kafka_listen)
    limit_malloc_arenas(settings.storage.malloc_arenas_max)  # before any thread allocates (broker/heap.py)
    check_files(settings)
    settings, held = hold_port_zero(settings)
    try:
        listeners = broker_listeners(settings)
        broker_ports.check_free(listeners, hint=START_HINT)
        stop = StopFlag()
        for sig in (signal.SIGTERM, signal.SIGINT):  # before "ready": a SIGTERM right after it stops cleanly
            signal.signal(sig, lambda *_: stop.set())
        broker = _started(settings, listeners)
        print(json.dumps(ready_event(broker)), flush=True)
        stop.wait()
        broker.stop()
    finally:
        for reserved in held:
            reserved.close()
    return 0


def hold_port_zero(settings) -> tuple:
    """(settings, [ReservedPorts]): port 0 in listen or raft_listen replaced by a port the kernel picks, held by
    this process while it runs and bound beside the hold (listen_reuse_port), so every part of the broker (the
    addresses it registers, the join request) names the port it serves on. A broker that joins needs a Raft port
    it keeps across restarts: port 0 is refused there."""
    node = settings.node
    zero = [name for name, (_, port) in (("listen", node.listen_address), ("raft_listen", node.raft_address))
            if port == 0]
    if "raft_listen" in zero and settings.membership.join:
        raise errors.InvalidArgument("a broker that joins needs a fixed raft_listen port, not port 0")
    changes, held = {}, []
    try:
        for name in zero:
            host = getattr(node, name).rpartition(":")[0]
            held.append(ReservedPorts(1, host=host.strip("[]")))
            changes[name] = f"{host}:{held[-1].ports[0]}"
    except BaseException:
        for reserved in held:
            reserved.close()
        raise
    return (settings.replace(**changes, listen_reuse_port=True) if changes else settings), held


def ready_event(broker) -> dict:
    """The line a started broker prints: the addresses and ports it serves on."""
    node = broker.settings.node
    return {"event": "ready", "node_id": node.node_id, "listen": node.listen, "grpc_port": broker.grpc_port,
            "raft_listen": node.raft_listen, "raft_port": node.raft_address[1], "metrics_url": broker.metrics.url,
            "metrics_port": broker.metrics.port, "kafka_port": broker.features.kafka.port}


def _bind_failure(exc: BaseException, listeners: list[broker_ports.Listener]) -> errors.RaftbusError | None:
    """A port taken between the check and the bind (another process was quicker), named as the check names it.
    The broker binds its Raft port, then metrics, then the client port, then the Kafka port: a failed client bind
    says its address (gRPC); of the others the one bound later is checked first (an earlier one may be this
    broker's own by then).
    """
    grpc_bind = isinstance(exc, (RuntimeError, OSError)) and ("Failed to bind" in str(exc)
                                                              or "cannot listen on" in str(exc))
    if not grpc_bind and not (isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE):
        return None
    roles = ("client port",) if grpc_bind else ("Kafka port", "metrics port", "Raft port")
    for role in roles:
        for listener in listeners:
            if listener.role.startswith(role):
                try:
                    broker_ports.check_free([listener], hint=START_HINT)
                except errors.RaftbusError as taken:
                    return taken
    return None


def _started(settings, listeners):
    """The broker, started; a failure is one line on stderr and ends the process at once, so the threads a broker
    that failed half-way has started (its Raft transport) do not keep it running."""
    from raftbus.broker.server import Broker

    try:
        return Broker(settings).start()
    except Exception as exc:  # noqa: BLE001 - every start failure ends the process with one line
        failure = _bind_failure(exc, listeners) or exc
    if isinstance(failure, OSError):
        where = f" {failure.filename}" if failure.filename else ""
        failure = errors.InvalidArgument(f"broker {settings.node.node_id} cannot start: {failure.strerror}{where}")
    elif not isinstance(failure, errors.RaftbusError):
        logging.getLogger(__name__).error("broker failed to start", exc_info=failure)
        failure = errors.InternalError(f"broker {settings.node.node_id} failed to start: "
                                       f"{type(failure).__name__}: {failure}")
    print(f"error: {failure.code}: {failure.message}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def dev_ports(count: int, base_port: int) -> list[tuple[int, int]]:
    """(client port, Raft port) of each dev broker (see broker/ports.py for every port of one)."""
    return [(b.client, b.raft) for b in broker_ports.dev_broker_ports(count, base_port, 0)]


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


def dev_metrics_ports(count: int, metrics_base_port: int | None, base_port: int = 7070) -> list[int | None]:
    """One metrics port per broker from metrics_base_port on (None: from base_port + METRICS_PORT_OFFSET); none
    when it is 0."""
    return [b.metrics for b in broker_ports.dev_broker_ports(count, base_port, metrics_base_port)]


def dev_kafka_ports(count: int, kafka_base_port: int | None, base_port: int = 7070) -> list[int]:
    """One Kafka port per broker from kafka_base_port on (None: from base_port + KAFKA_PORT_OFFSET); none when it
    is 0."""
    return [b.kafka for b in broker_ports.dev_broker_ports(count, base_port, 0, kafka_base_port) if b.kafka]


def _dev_brokers(args, ports: list[broker_ports.DevBrokerPorts]) -> list[Supervised]:
    """The supervised broker processes on `ports`; on ports dev holds they bind beside the hold
    (listen_reuse_port), and a metrics or Kafka port 0 is one each broker picks."""
    peers = dev_peers(ports)
    data_dir = Path(args.data_dir)
    pki, secure_env = _secure_dev_env(data_dir, args.brokers) if args.secure else (None, {})
    brokers = []
    for broker in ports:
        node = broker.node_id
        cmd = [sys.executable, "-m", "raftbus.broker", "start", "--node-id", str(node),
               "--data-dir", str(data_dir / f"broker-{node}"), "--listen", f"127.0.0.1:{broker.client}",
               "--raft-listen", f"127.0.0.1:{broker.raft}", "--peers", peers, "--log-level", args.log_level]
        if broker.metrics is not None:
            cmd += ["--metrics-listen", f"127.0.0.1:{broker.metrics}"]
        if broker.kafka is not None:
            cmd += ["--kafka-listen", f"127.0.0.1:{broker.kafka}"]
        env = dev_broker_env(data_dir, node, raft_pki=pki)
        env.update(secure_env.get(node, {}))
        if broker.held:
            env["RAFTBUS_LISTEN_REUSE_PORT"] = "true"
        brokers.append(Supervised(node, cmd, str(data_dir / f"broker-{node}.log"), env=env))
    return brokers


DEV_HINT = "stop it, or give this cluster other ports (--base-port)"


def dev_peers(ports: list[broker_ports.DevBrokerPorts]) -> str:
    return ",".join(f"{b.node_id}@127.0.0.1:{b.raft}" for b in ports)


def run_dev(args) -> int:
    """A local N-broker cluster on loopback, one process per broker; a broker that exits is restarted after
    --restart-delay-ms (unless --no-restart) while the others keep serving; Ctrl-C stops it cleanly. Every port is
    checked free before anything starts, and the cluster is ready when its own brokers answer (node ids and the
    data dir's cluster id), never another cluster that holds the ports. --base-port 0: dev takes 2N client and
    Raft ports the kernel picks and holds them while it runs (ReservedPorts), so no other process can take one
    between a broker's exit and its restart; the brokers pick their metrics and Kafka ports, printed once ready."""
    problem = broker_ports.dev_port_problem(args.brokers, args.base_port, args.metrics_base_port,
                                            args.kafka_base_port)
    if problem:
        raise errors.InvalidArgument(problem)
    reserved = ReservedPorts(2 * args.brokers) if args.base_port == 0 else None
    try:
        ports = broker_ports.dev_broker_ports(args.brokers, args.base_port, args.metrics_base_port,
                                              args.kafka_base_port, held=reserved.ports if reserved else None)
        broker_ports.check_free([listener for b in ports for listener in b.listeners()], hint=DEV_HINT,
                                own_cluster_id=_known_cluster_id(Path(args.data_dir)))
        restrict_umask()  # the dev cluster's secrets, tokens, keys and logs are owner-only
        return _run_dev(args, private_dir(args.data_dir), ports)
    finally:
        if reserved is not None:
            reserved.close()


def _run_dev(args, data_dir: Path, ports: list[broker_ports.DevBrokerPorts]) -> int:
    supervisor = BrokerSupervisor(_dev_brokers(args, ports), restart=not args.no_restart,
                                  restart_delay_ms=args.restart_delay_ms, say=lambda text: print(text, flush=True))
    supervisor.start_all()
    addresses = {b.node_id: f"127.0.0.1:{b.client}" for b in ports}
    bootstrap = ",".join(addresses.values())
    for line in dev_address_lines(ports, data_dir):
        print(line, flush=True)
    if args.secure:
        print(f"raftbus dev: secure: TLS on both ports, tokens and ACLs; export RAFTBUS_TLS_CA={data_dir / 'ca.pem'} "
              f"RAFTBUS_TOKEN_FILE={data_dir / 'admin.token'}", flush=True)
    stop = StopFlag()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        _wait_ready(addresses, _dev_cluster_id(data_dir), stop, supervisor)
        if not stop.is_set():
            for line in _picked_port_lines(ports, bootstrap):
                print(line, flush=True)
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


def dev_address_lines(ports: list[broker_ports.DevBrokerPorts], data_dir: Path) -> list[str]:
    """What dev prints once its brokers are started: the bootstrap list, the Raft peers, and the Kafka and metrics
    addresses that are fixed (the ones the brokers pick are printed once ready)."""
    lines = [f"raftbus dev: {len(ports)} brokers, bootstrap {','.join(f'127.0.0.1:{b.client}' for b in ports)}, "
             f"logs in {data_dir}/broker-N.log", f"raftbus dev: Raft peers {dev_peers(ports)}"]
    kafka_ports = [b.kafka for b in ports if b.kafka]
    if kafka_ports:
        lines.append(f"raftbus dev: kafka-bootstrap {','.join(f'127.0.0.1:{p}' for p in kafka_ports)}")
    lines += [f"raftbus dev: broker {b.node_id} metrics http://127.0.0.1:{b.metrics}/metrics"
              for b in ports if b.metrics]
    return lines


def _picked_port_lines(ports: list[broker_ports.DevBrokerPorts], bootstrap: str) -> list[str]:
    """The Kafka and metrics addresses of the ports the brokers picked (port 0), as each registered them."""
    picked_kafka = any(b.kafka == 0 for b in ports)
    picked_metrics = {b.node_id for b in ports if b.metrics == 0}
    if not picked_kafka and not picked_metrics:
        return []
    from raftbus.client import Admin

    deadline = time.monotonic() + 30  # each broker registers its Kafka address and metrics URL once they serve
    with Admin(bootstrap) as admin:
        while True:
            brokers = sorted(admin.cluster_status().brokers, key=lambda b: b.broker_id)
            registered = [b.kafka_address for b in brokers if picked_kafka] + [
                b.metrics_url for b in brokers if b.broker_id in picked_metrics]
            if all(registered) or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
    lines = [f"raftbus dev: kafka-bootstrap {','.join(b.kafka_address for b in brokers)}"] if picked_kafka else []
    return lines + [f"raftbus dev: broker {b.broker_id} metrics {b.metrics_url}" for b in brokers
                    if b.broker_id in picked_metrics]


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


def _known_cluster_id(data_dir: Path) -> str:
    """The cluster id `raftbus dev` keeps in `data_dir`, "" before its first start (nothing is written here)."""
    from raftbus.broker.raft.cluster_secret import DEV_CREDENTIALS_FILE

    try:
        return json.loads((data_dir / DEV_CREDENTIALS_FILE).read_text())["cluster_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _dev_cluster_id(data_dir: Path) -> str:
    from raftbus.broker.raft.cluster_secret import dev_credentials

    return dev_credentials(data_dir)["cluster_id"]


def readiness(addresses: dict[int, str], cluster_id: str, answers: dict) -> tuple[bool, str]:
    """Whether a dev cluster is ready from what each of its addresses answered (node id -> ClusterStatus or the
    error): every address answers as the broker of that node id in `cluster_id`, and a controller is known with
    every broker registered. The second value says what is missing."""
    for node, address in addresses.items():
        status = answers.get(node)
        if not hasattr(status, "cluster_id"):
            return False, f"broker {node} at {address}: {status}"
        if status.cluster_id != cluster_id or status.answering_broker_id != node:
            raise errors.AddressInUse(
                f"{address} is answered by broker {status.answering_broker_id} of cluster "
                f"{status.cluster_id or '?'}, not broker {node} of this cluster ({cluster_id}); {DEV_HINT}")
    status = answers[next(iter(addresses))]
    if not status.controller_id or len(status.brokers) < len(addresses):
        return False, f"controller {status.controller_id}, {len(status.brokers)} of {len(addresses)} brokers"
    return True, "ready"


def _wait_ready(addresses: dict[int, str], cluster_id: str, stop: StopFlag, supervisor: BrokerSupervisor,
                timeout_s: float = 60.0) -> None:
    """Until every dev broker answers at its own address as itself (node id, cluster id) and a controller is
    elected; Unavailable, with the broker's last words, if one of them exits first."""
    from raftbus.client import Admin

    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while not stop.is_set() and time.monotonic() < deadline:
        exited = supervisor.exited()
        if exited:
            raise errors.Unavailable(f"broker {exited.node_id} exited before the cluster was ready: "
                                     f"{supervisor.last_words(exited)}")
        answers = {}
        for node, address in addresses.items():
            try:
                # a broker still starting refuses connections: ask again on the next round, not 2 s from now
                with Admin(address, request_timeout_ms=2_000, connect_timeout_ms=300) as admin:
                    answers[node] = admin.cluster_status()
            except errors.RaftbusError as exc:
                answers[node] = f"{exc.code}: {exc.message}"
        ready, last = readiness(addresses, cluster_id, answers)
        if ready:
            return
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
    dev.add_argument("--base-port", type=int, default=7070,
                     help="broker N's client port is this + 2(N - 1), its Raft port the next one; 0 = ports the "
                          "kernel picks, held by dev while it runs (metrics and Kafka then on ports the brokers pick)")
    dev.add_argument("--metrics-base-port", type=int, default=None,
                     help=f"broker N serves metrics on this port + N - 1 (default: --base-port + "
                          f"{broker_ports.METRICS_PORT_OFFSET}; 0 = no metrics)")
    dev.add_argument("--kafka-base-port", type=int, default=None,
                     help=f"broker N serves the Kafka protocol on this port + N - 1 (default: --base-port + "
                          f"{broker_ports.KAFKA_PORT_OFFSET}, 9092 from 7070; 0 = no Kafka port)")
    dev.add_argument("--demo", action="store_true", help="create a topic, produce and consume a few records")
    dev.add_argument("--secure", action="store_true",
                     help="TLS, tokens and ACLs on; writes ca.pem and admin.token into --data-dir")
    dev.add_argument("--log-level", default="INFO")
    dev.add_argument("--restart-delay-ms", type=int, default=DEV_RESTART_DELAY_MS,
                     help="wait before restarting a broker that exited")
    dev.add_argument("--no-restart", action="store_true", help="leave a broker that exited down")
    dev.set_defaults(run=run_dev)


class UsageParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line on stderr (what is wrong and where the help is) and exit status 2,
    instead of the usage synopsis followed by the error. Subcommand parsers inherit the class."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="raftbus broker")
    sub = parser.add_subparsers(dest="command", required=True)
    add_start_arguments(sub.add_parser("start", help="run one broker"))
    add_dev_arguments(sub.add_parser("dev", help="a local N-broker cluster on loopback (Ctrl-C stops it)"))
    return parser


# A path the user named that cannot be used as given: INVALID_ARGUMENT, as a missing --tls-ca file is.
PATH_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EEXIST,
               errno.ENAMETOOLONG, errno.ELOOP, errno.EROFS}


def os_error_line(exc: OSError) -> str:
    """An OS error as the one line the commands print: a path that cannot be used is INVALID_ARGUMENT naming it;
    others (a full disk, ...) say what the system said, and about which file."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename and exc.errno in PATH_ERRNOS:
        return f"error: {errors.InvalidArgument.code}: {exc.filename}: {reason}"
    return f"error: {exc.filename}: {reason}" if exc.filename else f"error: {reason}"


def run(args) -> int:
    """Run `broker start` or `dev` from parsed flags (add_start_arguments / add_dev_arguments): the exit code,
    with a broker's typed error or an OS error as one line on stderr."""
    try:
        return args.run(args)
    except errors.RaftbusError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(os_error_line(exc), file=sys.stderr)
        return 1


def main(argv=None) -> int:
    return run(build_parser().parse_args(argv))
