"""Goal: the security-cost benchmark summarizes each mode by the medians of its successful runs only."""
from raftbus.bench.security_cost import medians


def run(mode, rate, broker_cpu_s, **extra):
    return {"mode": mode, "records_per_s": rate, "latency_p50_ms": 1.0, "latency_p99_ms": 2.0,
            "broker_cpu_s": broker_cpu_s, "client_cpu_s": 1.0, **extra}


def test_medians_per_mode_skip_failed_runs():
    runs = [run("plaintext", 100, 5.0), run("plaintext", 300, 7.0), run("plaintext", 200, 6.0),
            run("secure", 90, 5.5), run("secure", 0, 0.0, error="OUT_OF_ORDER_SEQUENCE"), run("secure", 110, 6.5)]
    summary = medians(runs)
    assert summary["plaintext"]["records_per_s"] == 200 and summary["plaintext"]["runs"] == 3
    assert summary["secure"]["records_per_s"] == 100 and summary["secure"]["broker_cpu_s"] == 6.0
    assert summary["secure"]["runs"] == 2


def test_a_mode_without_a_successful_run_has_no_figures():
    summary = medians([run("plaintext", 100, 5.0)])
    assert summary["secure"]["records_per_s"] is None and summary["secure"]["runs"] == 0
