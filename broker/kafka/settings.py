"""KafkaSettings: the Kafka port (docs/kafka.md)."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import parse_address, require, setting


@dataclass(frozen=True)
class KafkaSettings:
    TITLE = "The Kafka port (docs/kafka.md): Kafka clients over the same partitions, offsets, limits and ACLs"

    kafka_listen: str = setting("", 'host:port of the Kafka protocol port ("" = off; port 0 = any)')
    kafka_advertised_listen: str = setting("", 'the address Metadata answers name ("" = kafka_listen)')
    kafka_connections_max: int = setting(1000, "open Kafka connections; one more is closed at once")
    kafka_connections_per_address_max: int = setting(100, "... from one source address")
    kafka_in_flight_per_connection_max: int = setting(100, "unanswered requests per connection; past it the "
                                                           "connection stops reading")
    kafka_request_bytes_max: int = setting(100 * 1024 * 1024, "one request frame; a longer one closes the "
                                                               "connection")
    kafka_request_read_timeout_ms: int = setting(30_000, "a frame that stops arriving for this long closes the "
                                                         "connection")
    kafka_connection_idle_ms: int = setting(600_000, "a connection silent for this long is closed")
    kafka_fetch_sessions_max: int = setting(1000, "incremental fetch sessions kept by one broker (the oldest idle "
                                                  "one goes)")
    kafka_group_initial_rebalance_delay_ms: int = setting(3_000, "a classic group's first members wait this long "
                                                                 "for others before the first generation (0 = not)")
    kafka_heartbeat_hold_ms: int = setting(3_000, "a classic member's Heartbeat is answered when a rebalance starts, "
                                                  "when a later request arrives on its connection, or after this "
                                                  "long (at most a third of its session timeout; 0 = at once)")
    kafka_heartbeats_held_max: int = setting(1_000, "Heartbeats held at once by the coordinator; more are answered "
                                                    "at once")
    kafka_group_state_bytes_max: int = setting(1024 * 1024, "a classic group's members' protocols and assignments "
                                                            "(Kafka's group record limit)")
    kafka_offset_calls_max: int = setting(16, "threads carrying a coordinator's offset calls to partition leaders")
    kafka_unauthenticated_request_bytes_max: int = setting(64 * 1024, "with auth_enabled: one request frame "
                                                                      "before SASL (or a client certificate) "
                                                                      "authenticated the connection; a longer "
                                                                      "one closes it")
    kafka_authentication_timeout_ms: int = setting(10_000, "with auth_enabled: a connection not authenticated "
                                                           "this long after it opened (TLS and SASL) is closed")

    @property
    def kafka_address(self) -> str:
        """The Kafka port's address as clients should dial it ("" when the port is off)."""
        return (self.kafka_advertised_listen or self.kafka_listen) if self.kafka_listen else ""

    def validate(self) -> None:
        for address in (self.kafka_listen, self.kafka_advertised_listen):
            if address:
                parse_address(address)
        for name in ("kafka_connections_max", "kafka_connections_per_address_max", "kafka_in_flight_per_connection_max",
                     "kafka_request_bytes_max", "kafka_request_read_timeout_ms", "kafka_connection_idle_ms",
                     "kafka_fetch_sessions_max", "kafka_group_state_bytes_max", "kafka_heartbeats_held_max",
                     "kafka_offset_calls_max", "kafka_unauthenticated_request_bytes_max", "kafka_authentication_timeout_ms"):
            require(getattr(self, name) >= 1, f"{name} must be >= 1")
        require(self.kafka_group_initial_rebalance_delay_ms >= 0, "kafka_group_initial_rebalance_delay_ms must be >= 0")
        require(self.kafka_heartbeat_hold_ms >= 0, "kafka_heartbeat_hold_ms must be >= 0")
        require(self.kafka_unauthenticated_request_bytes_max <= self.kafka_request_bytes_max,
                "kafka_unauthenticated_request_bytes_max must not exceed kafka_request_bytes_max")
