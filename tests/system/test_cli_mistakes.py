"""System test: every mistake a user makes with the `raftbus` command gets one line on stderr and a non-zero exit,
never a traceback, and the same mistake gets the same error code whichever command makes it: bad arguments to
every command, unknown brokers, topics, partitions, groups and messages, the wrong kind of topic, taken ports,
missing, unreadable and non-PEM files, a closed port and a TLS mismatch, against a real broker."""
from __future__ import annotations

import argparse
import socket
import ssl
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from raftbus.broker.tls_dev import write_dev_pki
from raftbus.cli import app as cli
from raftbus.client import Admin, Producer
from tests.helpers import LocalCluster
from tests.ports import reserve_ports
from tests.system.conftest import wait_cluster_ready

pytestmark = pytest.mark.system

RAFTBUS = str(Path(sys.executable).with_name("raftbus"))


# ---------------------------------------------------------------------- every command, bad arguments

def leaf_commands(parser: argparse.ArgumentParser, path=()) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(argv prefix, parser) of every command that runs something (the leaves of the subcommand tree)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += leaf_commands(sub, (*path, name))
    return found or [(path, parser)]


def bad_arguments() -> list[list[str]]:
    """For every leaf command: an unknown flag, a missing required argument, and a bad value for each typed flag."""
    cases = []
    for path, parser in leaf_commands(cli.build_parser()):
        cases.append([*path, "--no-such-flag"])
        cases.append(list(path))  # without its required arguments (a command that needs none is skipped below)
        for action in parser._actions:
            if action.option_strings and action.type in (int, float) and action.nargs is None:
                cases.append([*path, action.option_strings[0], "not-a-number"])
    return cases


@pytest.mark.parametrize("argv", bad_arguments(), ids=lambda argv: " ".join(argv))
def test_bad_arguments_to_every_command_are_one_line_and_exit_2(argv, capfd, monkeypatch):
    monkeypatch.setenv("RAFTBUS_BOOTSTRAP", "127.0.0.1:1")  # a command that parses must not reach a cluster
    parser = cli.build_parser()
    try:
        parser.parse_args(argv)
        cli.check_usage(parser, parser.parse_args(argv))
        return  # complete as given (e.g. `topics list`): not a bad argument
    except SystemExit:
        capfd.readouterr()
    assert cli.main(argv) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("error: raftbus") and err.rstrip().endswith("--help)"), err


# ---------------------------------------------------------------------- a real broker: the same mistake, the same code

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("cli"), brokers=1)
    try:
        cluster.start()
        wait_cluster_ready(cluster)
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("events", partitions=2, replication_factor=1)
            admin.create_topic("jobs", partitions=2, replication_factor=1, kind="queue")
        with Producer(cluster.bootstrap) as producer:
            producer.send("events", b"x", partition=0).result(30)
        yield cluster
    finally:
        cluster.stop()


# Each mistake and the one code every command that makes it answers.
MISTAKES = {
    "UNKNOWN_BROKER": [
        "brokers drain 42", "brokers undrain 42", "brokers decommission 42",
        "partitions reassign events 0 --replicas 1,42", "partitions rebuild events 0 --broker 42"],
    "UNKNOWN_TOPIC": [
        "topics describe nope", "topics delete nope", "topics alter nope --retention-ms 1", "topics verify nope",
        "produce nope --value x", "consume nope --timeout-ms 100", "queues stats nope", "queues peek nope",
        "queues get nope 1", "queues redrive nope", "groups reset-offsets g --topic nope --to-earliest",
        "partitions reassign nope 0 --replicas 1", "partitions rebuild nope 0 --broker 1"],
    "UNKNOWN_PARTITION": [
        "consume events --partition 9 --timeout-ms 100", "produce events --partition 9 --value x",
        "groups reset-offsets g --topic events --partitions 9 --to-earliest",
        "partitions reassign events 9 --replicas 1", "partitions rebuild events 9 --broker 1",
        "queues peek jobs --partition 9"],
    "WRONG_TOPIC_KIND": [
        "queues stats events", "queues peek events", "queues get events 1", "queues redrive events",
        "consume jobs --group g --timeout-ms 100", "consume jobs --from-beginning --timeout-ms 100",
        "produce events --priority 1 --value x", "produce events --delay-ms 5 --value x",
        "groups reset-offsets g --topic jobs --to-earliest",
        "topics create streamy --ordering fair --replication-factor 1",
        "topics create streamy --max-deliveries 3 --replication-factor 1", "topics alter events --max-deliveries 3"],
    "UNKNOWN_GROUP": ["groups describe nope"],
    "UNKNOWN_MESSAGE": ["queues get jobs 999999", "queues change-priority jobs 999999 --priority 1",
                        "queues delete jobs 999999"],
    "INVALID_NAME": ["topics create bad!name", "groups describe bad!name",
                     "consume events --group bad!name --timeout-ms 100"],
    "TOPIC_EXISTS": ["topics create events", "topics create events --replication-factor 1 --partitions 2"],
    "INVALID_PARTITIONS": ["topics alter events --partitions 1", "topics create fresh --partitions 0"],
    "INVALID_REPLICATION_FACTOR": ["topics create fresh --replication-factor 9"],
    "OFFSET_OUT_OF_RANGE": ["consume events --partition 0 --offset 999999 --timeout-ms 100"],
    "INVALID_ARGUMENT": ["backup verify /nonexistent", "backup create /proc/nonexistent/dir"],
}


def one_line(argv, env=None, timeout_s=120) -> str:
    done = subprocess.run([RAFTBUS, *argv], capture_output=True, text=True, timeout=timeout_s, env=env)
    assert done.returncode != 0, (argv, done.stdout)
    assert len(done.stderr.splitlines()) == 1, (argv, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stderr.strip()


def one_line_in_process(argv, capfd) -> str:
    """`one_line` through the command's own entry point in this process (what the console script calls)."""
    capfd.readouterr()
    code = cli.main(argv)
    out, err = capfd.readouterr()
    assert code != 0, (argv, out)
    assert len(err.splitlines()) == 1, (argv, err)
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize("code, command", [(code, command) for code, commands in MISTAKES.items()
                                           for command in commands], ids=lambda value: str(value))
def test_the_same_mistake_gets_the_same_code_from_every_command(broker, code, command, capfd):
    """Each command runs in this process (the console script is a call of `main`); the first command of each code
    also runs as the `raftbus` process a user starts, so the exit status and stderr of a real process are checked
    once per code."""
    argv = ["--bootstrap", broker.bootstrap, *command.split()]
    line = one_line(argv) if command == MISTAKES[code][0] else one_line_in_process(argv, capfd)
    assert line.startswith(f"error: {code}: "), (command, line)


# ---------------------------------------------------------------------- files, ports and connections

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    pki = write_dev_pki(root / "pki", [1])
    (root / "not.pem").write_text("hello\n")
    (root / "token").write_text("rbt_x\n")
    return root, pki


def file_mistakes(root: Path, pki) -> list[tuple[list[str], str]]:
    cert, key = pki.broker(1)
    return [
        (["--tls-ca", str(root / "missing.pem")], f"error: INVALID_ARGUMENT: --tls-ca {root / 'missing.pem'}: No such "
                                                  "file or directory"),
        (["--tls-ca", str(root)], f"error: INVALID_ARGUMENT: --tls-ca {root}: Is a directory"),
        (["--tls-ca", str(root / "not.pem")], f"error: INVALID_ARGUMENT: --tls-ca {root / 'not.pem'} is not a PEM "
                                              "certificate"),
        (["--tls-ca", str(pki.ca_file), "--tls-cert", str(cert), "--tls-key", str(root / "not.pem")],
         f"error: INVALID_ARGUMENT: --tls-key {root / 'not.pem'} is not a PEM private key"),
        (["--token-file", str(root / "missing")], f"error: INVALID_ARGUMENT: --token-file {root / 'missing'}: No such "
                                                  "file or directory"),
        (["--token-file", str(root)], f"error: INVALID_ARGUMENT: --token-file {root}: Is a directory"),
    ]


def test_missing_unreadable_and_non_pem_files_are_named_by_their_flag(broker, files):
    root, pki = files
    for flags, expected in file_mistakes(root, pki):
        assert one_line(["topics", "list", "--bootstrap", broker.bootstrap, *flags]) == expected


def test_the_same_files_from_the_environment_are_named_by_their_variable(broker, files):
    root, _ = files
    env = {"PATH": "/usr/bin:/bin", "RAFTBUS_TLS_CA": str(root / "not.pem")}
    assert one_line(["topics", "list", "--bootstrap", broker.bootstrap], env=env) == (
        f"error: INVALID_ARGUMENT: RAFTBUS_TLS_CA {root / 'not.pem'} is not a PEM certificate")


def test_broker_start_names_bad_files_and_taken_ports(broker, files, tmp_path):
    """broker start names a bad file or a taken port in one line, dev a taken base port; the ports not taken are
    port 0 (the broker holds ones the kernel picks)."""
    root, pki = files
    start = ["broker", "start", "--node-id", "1", "--data-dir", str(tmp_path / "b"),
             "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--peers", "1@127.0.0.1:0"]
    assert one_line([*start, "--config", str(root / "missing.toml")]) == (
        f"error: INVALID_ARGUMENT: config file {root / 'missing.toml'} does not exist")
    env = {"PATH": "/usr/bin:/bin", "RAFTBUS_TLS_CERT_FILE": str(root / "not.pem"),
           "RAFTBUS_TLS_KEY_FILE": str(pki.broker(1)[1])}
    assert one_line(start, env=env) == f"error: INVALID_ARGUMENT: tls_cert_file {root / 'not.pem'} is not a PEM certificate"
    env = {"PATH": "/usr/bin:/bin", "RAFTBUS_RAFT_TLS_CERT_FILE": str(root), "RAFTBUS_RAFT_TLS_KEY_FILE": "k",
           "RAFTBUS_RAFT_TLS_CA_FILE": "c"}
    assert one_line(start, env=env) == f"error: INVALID_ARGUMENT: raft_tls_cert_file {root}: Is a directory"
    (tmp_path / "file").write_text("x")
    assert one_line([*start[:5], str(tmp_path / "file" / "d"), *start[6:]]) == (
        f"error: INVALID_ARGUMENT: data_dir {tmp_path / 'file' / 'd'}: Not a directory")
    taken = broker.brokers[0]
    line = one_line([*start[:7], taken.address, *start[8:]])
    assert line.startswith(f"error: ADDRESS_IN_USE: {taken.address} (client port, listen) is in use by another "
                           "raftbus cluster")
    line = one_line(["dev", "--data-dir", str(tmp_path / "dev"), "--base-port", str(taken.grpc_port)])
    assert line.startswith(f"error: ADDRESS_IN_USE: {taken.address} (client port of broker 1) is in use by another "
                           "raftbus cluster")
    assert not (tmp_path / "dev").exists()


def test_a_closed_port_fails_with_broker_unreachable():
    """Every command fails at a closed port with BROKER_UNREACHABLE (a port this test holds without listening:
    connections are refused, and nothing else can take it meanwhile)."""
    commands = (["topics", "list"], ["cluster", "status"], ["groups", "list"], ["brokers", "drain", "1"],
                ["consume", "events", "--timeout-ms", "100"], ["produce", "events", "--value", "x"],
                ["queues", "stats", "jobs"], ["topics", "verify", "events"])
    with reserve_ports(1) as closed, ThreadPoolExecutor(len(commands)) as pool:  # each waits its connect timeout
        address = f"127.0.0.1:{closed.ports[0]}"
        lines = pool.map(lambda command: one_line(["--bootstrap", address, *command]), commands)
        for command, line in zip(commands, lines):
            assert line.startswith(f"error: BROKER_UNREACHABLE: cannot connect to {address} (connection refused or "
                                   "timed out for 2 s"), command


@pytest.fixture
def tls_server(files):
    """A TLS server with the dev PKI's broker certificate, answering handshakes (then closing) on a thread."""
    _, pki = files
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*pki.broker(1))
    context.set_alpn_protocols(["h2"])
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()


def test_tls_mismatches_are_named_in_both_directions(broker, files, tls_server):
    _, pki = files
    assert one_line(["--bootstrap", tls_server, "topics", "list"]) == (
        f"error: TLS_MISMATCH: the broker at {tls_server} speaks TLS; pass --tls-ca FILE (tls_ca= in the SDK, "
        "RAFTBUS_TLS_CA) with the CA that signed its certificate")
    assert one_line(["--bootstrap", broker.bootstrap, "--tls-ca", str(pki.ca_file), "topics", "list"]) == (
        f"error: TLS_MISMATCH: the broker at {broker.bootstrap} does not speak TLS; drop --tls-ca and --tls-cert "
        "(tls_ca=, tls_cert= in the SDK; RAFTBUS_TLS_CA, RAFTBUS_TLS_CERT)")
    other = write_dev_pki(files[0] / "other-pki", [1])
    assert one_line(["--bootstrap", tls_server, "--tls-ca", str(other.ca_file), "topics", "list"]).startswith(
        f"error: TLS_MISMATCH: the certificate of the broker at {tls_server} does not verify against the CA given")
