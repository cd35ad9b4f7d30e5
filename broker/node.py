"""NodeSettings: who this broker is, where it listens, the cluster it belongs to and how long it takes to stop."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.raft import cluster_secret as cluster_secret_policy
from raftbus.broker.section import at_least, parse_address, parse_peers, require, setting


@dataclass(frozen=True)
class NodeSettings:
    TITLE = "This broker and its cluster"

    node_id: int = setting(1, "this broker's id (1, 2, 3, ...): never changes, unique in the cluster")
    data_dir: str = setting("./data/broker-1", "the broker's own directory on persistent storage")
    listen: str = setting("127.0.0.1:7070", "client gRPC address")
    advertised_listen: str = setting("", 'address clients are told to use ("" = listen)')
    raft_listen: str = setting("127.0.0.1:7071", "peer Raft address; keep it on a private or loopback address")
    listen_reuse_port: bool = setting(False, "SO_REUSEPORT on the client and Raft listeners: binds ports held "
                                             "reserved for this broker (raftbus dev --base-port 0, port 0)")
    peers: str = setting("", '"id@host:port,..." Raft addresses of every broker, this one included')
    cluster_secret: str = setting(
        cluster_secret_policy.DEFAULT_SECRET, "authenticates Raft traffic; refused (with the default cluster_id) "
        "unless listen and raft_listen are loopback: see docs/security.md")
    cluster_id: str = setting(cluster_secret_policy.DEFAULT_CLUSTER_ID,
                              "salts the Raft key derived from cluster_secret; the same on every broker")
    cluster_secret_bytes_min: int = setting(32, "shortest cluster_secret accepted beyond loopback")
    cluster_secret_accepted: str = setting(
        "", "a second secret peers may prove (never sent): for rotating cluster_secret")
    shutdown_timeout_ms: int = setting(5000, "a stopping broker hands its leaderships over for at most half of "
                                             "this, then stops")

    # ------------------------------------------------------------------ derived
    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_address(self.listen)

    @property
    def client_address(self) -> str:
        return self.advertised_listen or self.listen

    @property
    def raft_address(self) -> tuple[str, int]:
        return parse_address(self.raft_listen)

    @property
    def peer_addresses(self) -> dict[int, tuple[str, int]]:
        peers = parse_peers(self.peers)
        peers.setdefault(self.node_id, self.raft_address)
        return peers

    @property
    def cluster_keys(self) -> cluster_secret_policy.ClusterKeys:
        """The keys of `cluster_secret`, one per purpose; nothing else sees the string itself."""
        return cluster_secret_policy.ClusterKeys.of(self.cluster_secret, self.cluster_id)

    @property
    def accepted_cluster_keys(self) -> list[cluster_secret_policy.ClusterKeys]:
        """The keys of `cluster_secret_accepted`: what peers prove or present under them is accepted, never sent
        (secret rotation)."""
        if not self.cluster_secret_accepted:
            return []
        return [cluster_secret_policy.ClusterKeys.of(self.cluster_secret_accepted, self.cluster_id)]

    @property
    def raft_secret(self) -> bytes:
        """The Raft handshake's key (`ClusterKeys.raft_handshake`)."""
        return self.cluster_keys.raft_handshake

    @property
    def raft_accepted_secrets(self) -> list[bytes]:
        """Raft keys of `cluster_secret_accepted`: proofs under them are accepted, never sent (secret rotation)."""
        return [keys.raft_handshake for keys in self.accepted_cluster_keys]

    @property
    def secret_problem(self) -> str | None:
        """Why `cluster_secret` (and `cluster_secret_accepted`) may not leave loopback, or None."""
        problem = cluster_secret_policy.secret_problem(self.cluster_secret, self.cluster_id,
                                                       self.cluster_secret_bytes_min)
        if not problem and self.cluster_secret_accepted:
            problem = cluster_secret_policy.secret_problem(self.cluster_secret_accepted, self.cluster_id,
                                                           self.cluster_secret_bytes_min)
            problem = problem and problem.replace("cluster_secret", "cluster_secret_accepted", 1)
        return problem

    @property
    def loopback_only(self) -> bool:
        """Whether every listener (listen, raft_listen) is on a loopback address."""
        return all(cluster_secret_policy.is_loopback(host) for host, _ in (self.listen_address, self.raft_address))

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        at_least(self, 1, "node_id")
        self.listen_address, self.raft_address  # noqa: B018 - parse errors surface here
        peers = self.peer_addresses
        require(peers[self.node_id] == self.raft_address,
                f"peers lists {peers[self.node_id]} for node {self.node_id} but raft_listen is {self.raft_listen}")
        self._validate_secret()

    def _validate_secret(self) -> None:
        problem = self.secret_problem
        require(not problem or self.loopback_only,
                f"refusing to listen beyond loopback (listen={self.listen}, raft_listen={self.raft_listen}): "
                f"{problem}. Set cluster_secret (RAFTBUS_CLUSTER_SECRET) to a random string of at least "
                f"{self.cluster_secret_bytes_min} bytes (`raftbus secret generate` makes one) and cluster_id "
                "(RAFTBUS_CLUSTER_ID) to a name of this cluster, the same on every broker")
