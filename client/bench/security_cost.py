"""What TLS and authorization cost on produce: `python -m raftbus.bench.security_cost [--pairs N] [--records N]`.

Starts two local 3-broker clusters side by side, one plaintext (`raftbus dev`) and one secure (`raftbus dev
--secure`: TLS on the client port, bearer token, ACL check on every call), then runs `raftbus bench produce
--bootstrap ...` against each in turn, `pairs` times, so both see the same machine. Per run, one JSON line: the
bench's records/s and light-load latency, the CPU seconds the three brokers spent (BrokerStats before and after)
and the CPU seconds of the bench's client processes. The last line holds the medians of each mode.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from raftbus.client.admin import Admin
from raftbus.bench.runner import DevCluster
from raftbus.client.credentials import TLS_CA_ENV, TOKEN_FILE_ENV

MODES = ("plaintext", "secure")


def credentials(cluster: DevCluster) -> dict[str, str]:
    """The SDK variables of a cluster's admin (none for the plaintext one)."""
    if not cluster.secure:
        return {}
    return {TLS_CA_ENV: str(cluster.data_dir / "ca.pem"), TOKEN_FILE_ENV: str(cluster.data_dir / "admin.token")}


def broker_cpu_s(cluster: DevCluster) -> float:
    env = credentials(cluster)
    security = ({"tls_ca": env[TLS_CA_ENV], "token": Path(env[TOKEN_FILE_ENV]).read_text().strip()} if env
                else {"tls_ca": False})
    with Admin(cluster.bootstrap, **security) as admin:
        return sum(s.cpu_user_s + s.cpu_system_s for s in admin.broker_stats())


def one_run(mode: str, cluster: DevCluster, records: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (TLS_CA_ENV, TOKEN_FILE_ENV)}
    env.update(credentials(cluster))
    broker_before, client_before = broker_cpu_s(cluster), resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())", "bench",
               "produce", "--bootstrap", cluster.bootstrap, "--records", str(records)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        figures = json.loads(done.stdout)
    except ValueError:
        figures = {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return {"mode": mode, "load_avg_1m": round(load, 1), "records_per_s": figures.get("records_per_s"),
            "latency_p50_ms": figures.get("latency_p50_ms"), "latency_p99_ms": figures.get("latency_p99_ms"),
            "broker_cpu_s": round(broker_cpu_s(cluster) - broker_before, 2),
            "client_cpu_s": round(client_after.ru_utime + client_after.ru_stime
                                  - client_before.ru_utime - client_before.ru_stime, 2),
            **({"error": figures["error"]} if "error" in figures else {})}


def medians(runs: list[dict]) -> dict:
    summary = {}
    for mode in MODES:
        ok = [r for r in runs if r["mode"] == mode and "error" not in r]
        summary[mode] = {key: round(statistics.median(r[key] for r in ok), 3) if ok else None
                         for key in ("records_per_s", "latency_p50_ms", "latency_p99_ms", "broker_cpu_s",
                                     "client_cpu_s")}
        summary[mode]["runs"] = len(ok)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftbus.bench.security_cost")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="raftbus-security-cost-"))
    clusters = {mode: DevCluster(3, root / mode, secure=mode == "secure") for mode in MODES}
    saved = {k: os.environ.get(k) for k in (TLS_CA_ENV, TOKEN_FILE_ENV)}
    runs = []
    try:
        for cluster in clusters.values():
            cluster.start()
        for name, value in saved.items():  # DevCluster.start exported the secure cluster's variables: undo that
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for _ in range(args.pairs):
            for mode, cluster in clusters.items():
                runs.append(one_run(mode, cluster, args.records))
                print(json.dumps(runs[-1]), flush=True)
        print(json.dumps({"medians": medians(runs), "pairs": args.pairs, "records": args.records}), flush=True)
    finally:
        for cluster in clusters.values():
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
