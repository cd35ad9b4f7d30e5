"""Goal: a router that can reach no broker fails with BROKER_UNREACHABLE once every address has refused connections
for connect_timeout_ms (not at the request timeout), and a broker whose TLS does not fit the client's is named at
once, in both directions, instead of being retried; a manual clock and a scripted probe drive it."""
from types import SimpleNamespace

import grpc
import pytest

from raftbus.client import reachability
from raftbus.client.credentials import Credentials
from raftbus.client.errors import CODE_KEY, BrokerUnreachable, TlsMismatch, Unavailable
from raftbus.client.router import Connection, Router
from tests.unit.client.test_router import FakeClock, FakeRpcError, metadata


class Brokers:
    """Addresses that are down refuse (a transport UNAVAILABLE); the others answer GetMetadata and `fn` calls."""

    def __init__(self, down=(), probes=None):
        self.down = set(down)
        self.probes = probes or {}  # address -> Probe for reachable addresses that fail anyway (a TLS mismatch)
        self.probed: list[str] = []

    def connect(self, address: str) -> Connection:
        def get_metadata(request, timeout=None):
            if address in self.down or address in self.probes:
                raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
            answer = metadata({0: 1}, brokers=1)
            answer.brokers[0].address = "h1:1"
            return answer

        return Connection(address, SimpleNamespace(close=lambda: None), log=None,
                          admin=SimpleNamespace(GetMetadata=get_metadata))

    def probe(self, address: str, timeout_s: float) -> reachability.Probe:
        self.probed.append(address)
        if address in self.down:
            return reachability.Probe(address, False, reason="Connection refused")
        return self.probes.get(address, reachability.Probe(address, True, False))


def router(brokers: Brokers, clock: FakeClock, bootstrap="h1:1", credentials=Credentials(), **options) -> Router:
    return Router(bootstrap, connect=brokers.connect, probe=brokers.probe, credentials=credentials,
                  sleep=clock.sleep, clock=clock, request_timeout_ms=30_000, connect_timeout_ms=2_000, **options)


@pytest.mark.parametrize("call", ["refresh", "call_any", "call_controller"])
def test_a_refused_bootstrap_fails_at_the_connect_timeout_not_the_request_timeout(call):
    brokers, clock = Brokers(down={"h1:1"}), FakeClock()
    r = router(brokers, clock)
    started = clock()
    with pytest.raises(BrokerUnreachable, match="h1:1"):
        if call == "refresh":
            r.refresh()  # waits out the connect timeout itself
        else:
            getattr(r, call)(lambda conn: conn.admin.GetMetadata(None))
    waited = clock() - started
    assert 2.0 <= waited < 2.5, waited
    assert set(brokers.probed) == {"h1:1"}


def test_every_address_must_refuse_for_the_timeout():
    """One bootstrap address refusing while another answers is no failure; when both refuse, each has its own
    streak: the call fails once the later one has refused for the timeout."""
    brokers, clock = Brokers(down={"h1:1"}), FakeClock()
    r = router(brokers, clock, bootstrap="h1:1,h2:1")
    assert r.call_any(lambda conn: "answer") in ("answer",)
    clock.sleep(5.0)
    brokers.down.add("h2:1")
    started = clock()
    with pytest.raises(BrokerUnreachable, match="h1:1, h2:1"):
        r.call_any(lambda conn: conn.admin.GetMetadata(None))
    assert 2.0 <= clock() - started < 2.5


def test_an_address_that_answers_again_starts_a_new_streak():
    """refresh itself waits out the connect timeout (every caller meets a closed address alike); an answer in
    between ends the streak, so the next outage is given the whole timeout again."""
    brokers, clock = Brokers(down={"h1:1"}), FakeClock()
    r = router(brokers, clock)
    started = clock()
    with pytest.raises(BrokerUnreachable):
        r.refresh()
    assert 2.0 <= clock() - started < 2.5
    brokers.down.clear()
    r.refresh()  # reached: the streak ends
    brokers.down.add("h1:1")
    clock.sleep(10.0)
    started = clock()
    with pytest.raises(BrokerUnreachable):
        r.refresh()
    assert 2.0 <= clock() - started < 2.5


def test_a_refresh_that_reaches_a_broker_answering_an_error_does_not_wait():
    """Only refusals are waited out: a broker that answers, even with an error, is reachable."""
    brokers, clock = Brokers(probes={"h1:1": reachability.Probe("h1:1", True, False)}), FakeClock()
    r = router(brokers, clock)
    with pytest.raises(Unavailable) as raised:
        r.refresh()
    assert type(raised.value) is Unavailable and clock.sleeps == []


def test_an_error_a_broker_sent_is_not_probed():
    """UNAVAILABLE with a raftbus code comes from a broker (e.g. one stopping): it is reachable, nothing to probe."""
    brokers, clock = Brokers(), FakeClock()
    r = router(brokers, clock, retries=2)
    sent = FakeRpcError(grpc.StatusCode.UNAVAILABLE, "stopping", [(CODE_KEY, "UNAVAILABLE")])

    def stopping(conn):
        raise sent

    with pytest.raises(Unavailable):
        r.call_any(stopping)
    assert brokers.probed == []


@pytest.mark.parametrize("speaks_tls, client, words", [
    (True, Credentials(), "speaks TLS; pass --tls-ca"),
    (False, Credentials(tls=True), "does not speak TLS"),
])
def test_a_tls_mismatch_is_named_at_once_and_not_retried(speaks_tls, client, words):
    brokers = Brokers(probes={"h1:1": reachability.Probe("h1:1", True, speaks_tls)})
    clock = FakeClock()
    r = router(brokers, clock, credentials=client)
    with pytest.raises(TlsMismatch, match=words) as raised:
        r.call_controller(lambda conn: "answer")
    assert "h1:1" in raised.value.message
    assert clock.sleeps == [] and brokers.probed == ["h1:1"]


def test_no_tls_diagnosis_without_known_credentials():
    """A router given only a `connect` function does not know its channels' TLS: a failure stays UNAVAILABLE."""
    brokers = Brokers(probes={"h1:1": reachability.Probe("h1:1", True, True)})
    r = router(brokers, FakeClock(), credentials=None, retries=1)
    with pytest.raises(Unavailable) as raised:
        r.refresh()
    assert type(raised.value) is Unavailable


def test_probe_tells_refused_from_plaintext_from_tls(tmp_path):
    """The real probe on loopback: a closed port refuses, a listener that answers with non-TLS bytes is plaintext,
    one that answers with a TLS alert record is TLS, and one that closes without a byte is neither (a TLS client
    told "does not speak TLS" by a broker going away would stop retrying)."""
    import socket
    import threading

    def serve(answer: bytes | None) -> tuple[socket.socket, str]:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def run():
            conn, _ = server.accept()
            with conn:
                conn.recv(1024)
                if answer is not None:
                    conn.sendall(answer)

        threading.Thread(target=run, daemon=True).start()
        return server, f"127.0.0.1:{server.getsockname()[1]}"

    with socket.socket() as closed:  # bound, never listening, held until the probe is done: refused
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        assert reachability.probe(address, 1.0) == reachability.Probe(address, False, None, "Connection refused")
    plain, plain_address = serve(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00")  # an HTTP/2 SETTINGS frame
    tls, tls_address = serve(b"\x15\x03\x03\x00\x02\x02\x28")               # a TLS handshake_failure alert
    closing, closing_address = serve(None)  # accepts, reads, closes without a byte: a broker going away
    with plain, tls, closing:
        assert reachability.probe(plain_address, 2.0).speaks_tls is False
        assert reachability.probe(tls_address, 2.0).speaks_tls is True
        assert reachability.probe(closing_address, 2.0) == reachability.Probe(closing_address, True, None)


def test_the_asyncio_router_fails_at_the_connect_timeout_too():
    import asyncio

    from raftbus.client.aio.router import AsyncRouter

    brokers = Brokers(down={"h1:1"})

    def connect(address):
        sync = brokers.connect(address)

        async def get_metadata(request, timeout=None):
            return sync.admin.GetMetadata(request, timeout)

        return Connection(address, sync.channel, None, SimpleNamespace(GetMetadata=get_metadata))

    async def main():
        # asyncio.sleep paces its retries: the real clock, and a short timeout
        r = AsyncRouter("h1:1", probe=brokers.probe, connect_timeout_ms=300, tls_ca=False)
        r._connect = connect
        with pytest.raises(BrokerUnreachable):
            await r.call_controller(lambda conn: conn.admin.GetMetadata(None))

    asyncio.run(main())
    assert brokers.probed and set(brokers.probed) == {"h1:1"}


def test_admin_and_queues_take_the_connect_timeout_and_fail_on_a_closed_port():
    """Through the real probe and gRPC on loopback: a closed port is BROKER_UNREACHABLE, named, for either facade."""
    import socket

    from raftbus.client import Admin, Queues

    with socket.socket() as closed:  # bound, never listening, held while the facades try it: refused
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        with Admin(address, connect_timeout_ms=300, tls_ca=False) as admin:
            assert admin.router.connect_timeout_s == 0.3
            with pytest.raises(BrokerUnreachable, match=address):
                admin.list_topics()
        with Queues(address, connect_timeout_ms=300, tls_ca=False) as queues:
            with pytest.raises(BrokerUnreachable, match=address):
                queues.stats("jobs")
