"""Loopback ports of the servers tests start: bound to port 0 by the server itself, or held for a cluster.

No test picks a "free" port, releases it and hands the number to a process that binds it later: in between, an
outgoing connection's ephemeral port or another test's server (tests run in parallel) can take it, and the broker
fails with "Address already in use". Two ways remain, and each server uses the one it can:

- **A single server binds 127.0.0.1:0 and reports the port it got**: gRPC test servers (`build_server` returns
  it), the HTTP gateway and a lone broker (their ready line), metrics (`metrics_port` on a broker's ready line,
  the URL it registers).
- **A cluster's addresses are held by the harness** (`reserve_ports`, the broker's `ReservedPorts`): brokers
  with a static `--peers` list need every Raft address before the first one starts, and a broker killed -9 and
  restarted on its data dir must come back at the same Raft and client address. The harness binds each port on
  127.0.0.1:0 with SO_REUSEPORT and holds the socket, never listening, until the cluster stops; the brokers run
  with `listen_reuse_port` and bind the same ports beside it. While it is held, the kernel hands the port to no
  other bind to port 0 and to no outgoing connection, and a bind without SO_REUSEPORT fails, so nothing can take
  it during a restart; a connection while the broker is down is refused, as in production. The broker's check of
  its ports before it starts (broker/ports.py) binds as the broker does, beside the hold, so a held port is its
  own, and taken only while something listens there.

A test that needs a port taken by someone else binds it itself and keeps it bound while the broker tries; a closed
port is one the test holds without listening.

Why not the alternative, the harness binding each Raft socket and handing it to the broker as an inherited file
descriptor (socket activation): it keeps the Raft address, but gRPC Python cannot serve on a socket it is given,
so the client port would change on every restart. A client holding the old address would then dial a port anyone
may have taken since, another test's broker included, and the router would believe that cluster's metadata; and
while the broker is down its inherited Raft socket would still accept connections into the backlog, which
production brokers (bound by themselves) never do. Holding reservations keeps both addresses for the life of
the cluster with one mechanism, the one `raftbus dev --base-port 0` uses for its own brokers.
"""
from __future__ import annotations

from raftbus.broker.supervisor import ReservedPorts

__all__ = ["ReservedPorts", "reserve_ports", "REUSE_PORT_ENV"]

# The broker setting that makes a broker bind its client and Raft ports beside a reservation.
REUSE_PORT_ENV = {"RAFTBUS_LISTEN_REUSE_PORT": "true"}


def reserve_ports(count: int) -> ReservedPorts:
    """`count` loopback ports held until `.close()` (or the end of a `with` block)."""
    return ReservedPorts(count)
