"""Goal: `raftbus dev` derives every port from --base-port (two clusters on different bases never share one) or,
with --base-port 0, runs on ports it holds; a taken port is found before anything starts and named with who answers
there (a raftbus broker's client, Raft or metrics port, or another process), while a port held for the server
(bound beside with listen_reuse_port) is its own; `dev` is ready only when its own brokers answer, and a port taken
between the check and the bind is named as the check names it.

No port here is picked and released: a free one is held by the test (ReservedPorts, checked as a server bound
beside it checks it, or a socket bound with SO_REUSEADDR and never listening, beside which a server that binds with
SO_REUSEADDR, as the check and every raftbus listener do, binds too)."""
import errno
import http.server
import socket
import struct
import threading
from concurrent import futures

import grpc
import pytest

from raftbus.broker import main as broker_main
from raftbus.broker import ports
from raftbus.broker.raft.hub import HELLO, MAGIC
from raftbus.broker.settings import load_settings
from raftbus.broker.supervisor import ReservedPorts
from raftbus.client import errors
from raftbus.client.admin import ClusterStatus
from raftbus.client.reachability import split_address
from raftbus.client.wire import raftbus_pb2 as pb
from raftbus.client.wire import raftbus_pb2_grpc as pb_grpc


def test_every_dev_port_follows_the_base_port():
    default = ports.dev_broker_ports(3, 7070)
    assert [(b.client, b.raft, b.metrics, b.kafka) for b in default] == [
        (7070, 7071, 9570, 9092), (7072, 7073, 9571, 9093), (7074, 7075, 9572, 9094)]
    other = ports.dev_broker_ports(3, 17070)
    assert [(b.metrics, b.kafka) for b in other] == [(19570, 19092), (19571, 19093), (19572, 19094)]
    used = {p for cluster in (default, other) for b in cluster for p in b.ports}
    assert len(used) == 24  # two clusters, nothing shared
    assert [(b.metrics, b.kafka) for b in ports.dev_broker_ports(2, 7070, 0, 0)] == [(None, None)] * 2
    assert [(b.metrics, b.kafka) for b in ports.dev_broker_ports(2, 7070, 8000, 8100)] == [(8000, 8100),
                                                                                          (8001, 8101)]
    assert [listener.role for listener in default[1].listeners()] == [
        "client port of broker 2", "Raft port of broker 2", "metrics port of broker 2", "Kafka port of broker 2"]
    assert not any(listener.reuse_port for b in default for listener in b.listeners())


def test_base_port_zero_runs_on_held_ports_and_ports_the_brokers_pick():
    held = [41000, 41001, 41002, 41003]
    picked = ports.dev_broker_ports(2, 0, held=held)
    assert [(b.client, b.raft, b.metrics, b.kafka, b.held) for b in picked] == [
        (41000, 41001, 0, 0, True), (41002, 41003, 0, 0, True)]
    assert [(listener.address, listener.reuse_port) for listener in picked[1].listeners()] == [
        ("127.0.0.1:41002", True), ("127.0.0.1:41003", True), ("127.0.0.1:0", False), ("127.0.0.1:0", True)]
    assert picked[0].ports == [41000, 41001]  # port 0 is no fixed port
    fixed = ports.dev_broker_ports(2, 0, 8000, 0, held=held)  # a metrics base port given: fixed, and checked
    assert [(b.metrics, b.kafka) for b in fixed] == [(8000, None), (8001, None)]
    assert [(b.client, b.raft) for b in ports.dev_broker_ports(2, 0)] == [(0, 0), (0, 0)]  # before dev holds them
    with pytest.raises(ValueError):
        ports.dev_broker_ports(2, 0, held=held[:3])
    with pytest.raises(ValueError):
        ports.dev_broker_ports(2, 7070, held=held)


def test_dev_prints_the_derived_addresses_and_gives_each_broker_its_ports(tmp_path):
    derived = ports.dev_broker_ports(3, 17070)
    assert broker_main.dev_address_lines(derived, tmp_path) == [
        f"raftbus dev: 3 brokers, bootstrap 127.0.0.1:17070,127.0.0.1:17072,127.0.0.1:17074, logs in "
        f"{tmp_path}/broker-N.log",
        "raftbus dev: Raft peers 1@127.0.0.1:17071,2@127.0.0.1:17073,3@127.0.0.1:17075",
        "raftbus dev: kafka-bootstrap 127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094",
        "raftbus dev: broker 1 metrics http://127.0.0.1:19570/metrics",
        "raftbus dev: broker 2 metrics http://127.0.0.1:19571/metrics",
        "raftbus dev: broker 3 metrics http://127.0.0.1:19572/metrics"]
    args = broker_main.build_parser().parse_args(["dev", "--data-dir", str(tmp_path), "--base-port", "17070"])
    brokers = broker_main._dev_brokers(args, derived)
    second = brokers[1].argv
    flags = {flag: second[second.index(flag) + 1] for flag in ("--listen", "--raft-listen", "--metrics-listen",
                                                               "--kafka-listen", "--peers")}
    assert flags == {"--listen": "127.0.0.1:17072", "--raft-listen": "127.0.0.1:17073",
                     "--metrics-listen": "127.0.0.1:19571", "--kafka-listen": "127.0.0.1:19093",
                     "--peers": "1@127.0.0.1:17071,2@127.0.0.1:17073,3@127.0.0.1:17075"}
    assert "RAFTBUS_LISTEN_REUSE_PORT" not in brokers[1].env


def test_with_base_port_zero_dev_prints_the_held_addresses_and_its_brokers_bind_beside_them(tmp_path):
    picked = ports.dev_broker_ports(2, 0, held=[41000, 41001, 41002, 41003])
    assert broker_main.dev_address_lines(picked, tmp_path) == [
        f"raftbus dev: 2 brokers, bootstrap 127.0.0.1:41000,127.0.0.1:41002, logs in {tmp_path}/broker-N.log",
        "raftbus dev: Raft peers 1@127.0.0.1:41001,2@127.0.0.1:41003"]  # metrics and Kafka: once ready
    args = broker_main.build_parser().parse_args(["dev", "--data-dir", str(tmp_path), "--base-port", "0",
                                                  "--brokers", "2"])
    first = broker_main._dev_brokers(args, picked)[0]
    assert first.env["RAFTBUS_LISTEN_REUSE_PORT"] == "true"
    assert [first.argv[first.argv.index(flag) + 1] for flag in ("--listen", "--raft-listen", "--metrics-listen",
                                                                "--kafka-listen")] == [
        "127.0.0.1:41000", "127.0.0.1:41001", "127.0.0.1:0", "127.0.0.1:0"]


@pytest.mark.parametrize("count, base, metrics, problem", [
    (3, 7070, None, None),
    (3, 0, None, None),
    (3, 0, 70000, "outside 1-65535"),
    (3, -2, 0, "outside 1-65535"),
    (0, 7070, None, "--brokers must be >= 1"),
    (3, 65533, 0, "outside 1-65535"),
    (3, 7070, 7073, "overlaps"),
    (3, 7070, 9092, "overlaps"),  # metrics on the derived Kafka ports
])
def test_dev_port_problems(count, base, metrics, problem):
    found = ports.dev_port_problem(count, base, metrics)
    assert (found is None) if problem is None else (problem in found)


@pytest.fixture
def held(monkeypatch):
    """A loopback port held by a listening socket that never answers: each question to it times out, after 0.3 s."""
    monkeypatch.setattr(ports, "WHO_ANSWERS_TIMEOUT_S", 0.3)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield f"127.0.0.1:{sock.getsockname()[1]}", sock
    sock.close()


@pytest.fixture
def reserved():
    """A loopback port held for a server that binds beside the hold (listen_reuse_port)."""
    with ReservedPorts(1) as hold:
        yield f"127.0.0.1:{hold.ports[0]}"


@pytest.fixture
def vacant():
    """A loopback port this test holds bound with SO_REUSEADDR, never listening: free for a server that binds with
    SO_REUSEADDR (as the check does), and for nobody's port 0 or outgoing connection meanwhile."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_bind_problem(held, vacant):
    address, _ = held
    assert ports.bind_problem(address).errno == errno.EADDRINUSE
    assert ports.bind_problem(address, reuse_port=True).errno == errno.EADDRINUSE
    assert ports.bind_problem(vacant) is None
    assert ports.bind_problem("127.0.0.1:0") is None
    assert ports.bind_problem("192.0.2.1:7070").errno == errno.EADDRNOTAVAIL  # not an address of this host


def test_a_port_held_for_the_server_is_its_own_until_something_listens_there(reserved, monkeypatch):
    monkeypatch.setattr(ports, "WHO_ANSWERS_TIMEOUT_S", 0.3)  # the server beside the hold never answers
    assert ports.bind_problem(reserved, reuse_port=True) is None  # the hold, never listening: free to bind beside
    assert ports.bind_problem(reserved).errno == errno.EADDRINUSE  # a server binding without SO_REUSEPORT cannot
    ports.check_free([ports.Listener("client port of broker 1", reserved, reuse_port=True)], hint="")
    beside = socket.socket()  # another server of this user, bound beside the hold and serving
    beside.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    beside.bind(split_address(reserved))
    beside.listen()
    try:
        assert ports.bind_problem(reserved, reuse_port=True).errno == errno.EADDRINUSE
        with pytest.raises(errors.AddressInUse, match=f"{reserved} \\(client port of broker 1\\) is in use by "
                                                      "another process; use --base-port"):
            ports.check_free([ports.Listener("client port of broker 1", reserved, reuse_port=True)],
                             hint="use --base-port")
    finally:
        beside.close()
    assert ports.bind_problem(reserved, reuse_port=True) is None


def test_a_broker_checks_its_client_raft_and_kafka_ports_as_it_binds_them():
    fixed = load_settings(listen="127.0.0.1:7070", raft_listen="127.0.0.1:7071", metrics_listen="127.0.0.1:9570",
                          kafka_listen="127.0.0.1:9092")
    assert [(listener.role, listener.reuse_port) for listener in broker_main.broker_listeners(fixed)] == [
        ("client port, listen", False), ("Raft port, raft_listen", False),
        ("metrics port, metrics_listen", False), ("Kafka port, kafka_listen", False)]
    beside = fixed.replace(listen_reuse_port=True)
    assert [listener.reuse_port for listener in broker_main.broker_listeners(beside)] == [True, True, False, True]


def test_a_port_held_by_another_process_is_named_with_the_hint(held, reserved, vacant):
    address, _ = held
    listeners = [ports.Listener("client port of broker 1", reserved, reuse_port=True),
                 ports.Listener("metrics port of broker 1", vacant), ports.Listener("Raft port", address)]
    with pytest.raises(errors.AddressInUse) as raised:
        ports.check_free(listeners, hint="use --base-port")
    assert raised.value.message == f"{address} (Raft port) is in use by another process; use --base-port"
    with pytest.raises(errors.InvalidArgument, match="cannot listen on 192.0.2.1:7070 \\(client port\\)"):
        ports.check_free([ports.Listener("client port", "192.0.2.1:7070")], hint="")
    ports.check_free([ports.Listener("client port", vacant)], hint="")


class Status(pb_grpc.AdminServicer):
    def ClusterStatus(self, request, context):
        return pb.ClusterStatusResponse(cluster_id="dev-0123", answering_broker_id=2, controller_id=1)


def test_a_raftbus_client_port_tells_its_cluster_and_broker():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_AdminServicer_to_server(Status(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        address = f"127.0.0.1:{port}"
        assert ports.who_answers(address) == "another raftbus cluster (cluster_id dev-0123, broker 2)"
        assert ports.who_answers(address, own_cluster_id="dev-0123").startswith(
            "broker 2 of this data dir's own cluster (cluster_id dev-0123)")
    finally:
        server.stop(None)


def test_a_raftbus_raft_port_and_metrics_port_tell_their_broker(held):
    raft = socket.socket()
    raft.bind(("127.0.0.1", 0))
    raft.listen()

    def greet():
        conn, _ = raft.accept()
        with conn:
            conn.sendall(HELLO.pack(MAGIC, 3, bytes(32)))
            conn.recv(1)

    threading.Thread(target=greet, daemon=True).start()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"# TYPE raftbus_broker_id gauge\nraftbus_broker_id 2.0\n"
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    metrics = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    try:
        assert ports.who_answers(f"127.0.0.1:{raft.getsockname()[1]}") == "the Raft port of raftbus broker 3"
        assert ports.who_answers(f"127.0.0.1:{metrics.server_port}") == "the metrics endpoint of raftbus broker 2"
    finally:
        metrics.shutdown()
        metrics.server_close()
        raft.close()
    assert struct.calcsize(">7sI32s") == HELLO.size  # the hello the check reads is the hub's


def status(node: int, cluster_id: str = "dev-a", controller: int = 1, brokers: int = 3) -> ClusterStatus:
    return ClusterStatus(brokers=tuple(range(brokers)), controller_id=controller, topics=(),
                         answering_broker_id=node, cluster_id=cluster_id)


ADDRESSES = {1: "127.0.0.1:7070", 2: "127.0.0.1:7072", 3: "127.0.0.1:7074"}


def test_dev_is_ready_only_when_its_own_brokers_answer():
    ready = {n: status(n) for n in ADDRESSES}
    assert broker_main.readiness(ADDRESSES, "dev-a", ready) == (True, "ready")
    waiting = {**ready, 2: "BROKER_UNREACHABLE: cannot connect"}
    assert broker_main.readiness(ADDRESSES, "dev-a", waiting) == (False, "broker 2 at 127.0.0.1:7072: "
                                                                         "BROKER_UNREACHABLE: cannot connect")
    assert not broker_main.readiness(ADDRESSES, "dev-a", {n: status(n, controller=0) for n in ADDRESSES})[0]
    assert not broker_main.readiness(ADDRESSES, "dev-a", {n: status(n, brokers=2) for n in ADDRESSES})[0]
    with pytest.raises(errors.AddressInUse, match="127.0.0.1:7074 is answered by broker 3 of cluster dev-b, not "
                                                  "broker 3 of this cluster \\(dev-a\\)"):
        broker_main.readiness(ADDRESSES, "dev-a", {**ready, 3: status(3, cluster_id="dev-b")})
    with pytest.raises(errors.AddressInUse, match="127.0.0.1:7072 is answered by broker 1"):
        broker_main.readiness(ADDRESSES, "dev-a", {**ready, 2: status(1)})


def test_a_port_taken_between_the_check_and_the_bind_is_named(held, reserved, vacant):
    address, _ = held
    client = [ports.Listener("client port, listen", address),
              ports.Listener("Raft port, raft_listen", reserved, reuse_port=True)]
    taken = broker_main._bind_failure(RuntimeError(f"Failed to bind to address {address}; set GRPC_VERBOSITY"),
                                      client)
    assert isinstance(taken, errors.AddressInUse) and taken.message.startswith(f"{address} (client port, listen)")
    raft = [ports.Listener("client port, listen", reserved, reuse_port=True),
            ports.Listener("Raft port, raft_listen", address), ports.Listener("metrics port, metrics_listen", vacant)]
    taken = broker_main._bind_failure(OSError(errno.EADDRINUSE, "Address already in use"), raft)
    assert taken.message.startswith(f"{address} (Raft port, raft_listen) is in use")
    kafka = [*raft[:1], ports.Listener("Kafka port, kafka_listen", address)]
    taken = broker_main._bind_failure(OSError(errno.EADDRINUSE, "Address already in use"), kafka)
    assert taken.message.startswith(f"{address} (Kafka port, kafka_listen) is in use")
    assert broker_main._bind_failure(OSError(errno.ENOENT, "No such file"), raft) is None


def test_start_checks_its_data_dir_and_pem_files_first(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    with pytest.raises(errors.InvalidArgument, match=f"data_dir {a_file}/d: Not a directory"):
        broker_main.check_files(load_settings(data_dir=str(a_file / "d")))
    settings = load_settings(data_dir=str(tmp_path / "d"), tls_cert_file=str(not_pem), tls_key_file=str(not_pem))
    with pytest.raises(errors.InvalidArgument, match=f"tls_cert_file {not_pem} is not a PEM certificate"):
        broker_main.check_files(settings)
    settings = load_settings(data_dir=str(tmp_path / "d"), raft_tls_cert_file=str(tmp_path / "missing.pem"),
                             raft_tls_key_file=str(not_pem), raft_tls_ca_file=str(not_pem))
    with pytest.raises(errors.InvalidArgument, match="raft_tls_cert_file .*missing.pem: No such file"):
        broker_main.check_files(settings)
