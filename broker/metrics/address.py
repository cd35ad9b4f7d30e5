"""Where a broker's metrics can be scraped from, as told to clients (`raftbus cluster status`)."""
from __future__ import annotations

_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


def metrics_url(metrics_listen: str, client_address: str, bound_port: int) -> str:
    """http://HOST:PORT/metrics for a bound metrics server; "" when metrics are off.

    HOST is the metrics_listen host unless that is a wildcard (0.0.0.0, ::), in which case the host clients
    already reach the broker on (advertised_listen, else listen) is used; PORT is the port actually bound
    (metrics_listen may name port 0).
    """
    if not metrics_listen:
        return ""
    host = metrics_listen.rpartition(":")[0]
    if host in _WILDCARD_HOSTS:
        host = client_address.rpartition(":")[0]
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{bound_port}/metrics"
