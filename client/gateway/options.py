"""What an operator sets when starting a gateway (`raftbus http` flags): who anonymous callers are, which Host and
Origin headers it serves, and its bounds. Every bound has its unit in its name; defaults are in settings.py."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.client.errors import InvalidArgument

from raftbus.gateway import settings

WILDCARD_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class GatewayOptions:
    # The principal callers without a bearer token act as; empty: they get 401. On a cluster that checks tokens it
    # needs `anonymous_token_file`, a token of that principal (checked when the gateway starts and on each recheck).
    anonymous: str = ""
    anonymous_token_file: str = ""
    # Host header names served (a name, or name:port to pin the port; "*" serves any); empty: the listen host and
    # the loopback names.
    allowed_hosts: tuple[str, ...] = ()
    # Origin headers served besides the gateway's own (the one its Host names): scheme://host[:port].
    allowed_origins: tuple[str, ...] = ()
    request_body_bytes_max: int = settings.REQUEST_BODY_BYTES_MAX
    connections_max: int = settings.CONNECTIONS_MAX
    connections_per_address_max: int = settings.CONNECTIONS_PER_ADDRESS_MAX
    token_client_sets_max: int = settings.TOKEN_CLIENT_SETS_MAX
    token_client_sets_per_principal_max: int = settings.TOKEN_CLIENT_SETS_PER_PRINCIPAL_MAX
    token_recheck_ms: int = settings.TOKEN_RECHECK_MS
    consumer_instances_max: int = settings.CONSUMER_INSTANCES_MAX
    consumer_instances_per_principal_max: int = settings.CONSUMER_INSTANCES_PER_PRINCIPAL_MAX

    def __post_init__(self):
        for name in ("request_body_bytes_max", "connections_max", "connections_per_address_max",
                     "token_client_sets_max", "token_client_sets_per_principal_max", "token_recheck_ms",
                     "consumer_instances_max", "consumer_instances_per_principal_max"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.anonymous_token_file and not self.anonymous:
            raise InvalidArgument("--anonymous-token-file needs --anonymous: the principal that token belongs to")
        for origin in self.allowed_origins:
            if "://" not in origin or origin.endswith("/"):
                raise InvalidArgument(f"an allowed origin is scheme://host[:port], not {origin!r}")

    def hosts_for(self, *listen_hosts: str) -> tuple[str, ...]:
        """The Host names served: the configured list, else the listen host's names (as given and as bound, unless
        a wildcard) and the loopback names."""
        if self.allowed_hosts:
            return tuple(h.lower() for h in self.allowed_hosts)
        own = tuple(h.lower() for h in listen_hosts if h not in WILDCARD_HOSTS)
        return tuple(dict.fromkeys(own + settings.LOOPBACK_HOSTS))
