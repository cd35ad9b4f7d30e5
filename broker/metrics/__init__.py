"""Prometheus metrics of one broker: served in the text format on `metrics_listen` ("" = off).

Most values are read from the broker's live state at scrape time (collectors.py); what cannot be read back
later — client traffic, gRPC calls, Raft role changes — is counted as it happens (traffic.py, calls.py).
The broker builds an `exporter.MetricsExporter` from its section (settings.py); Raft groups keep their own latency histograms
(broker/raft/latency.py).
"""
