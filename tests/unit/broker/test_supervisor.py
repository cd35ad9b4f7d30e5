"""Goal: `raftbus dev`'s supervisor says when a broker exits and starts it again after the restart delay (never
before), and with restarts off leaves it down; the other brokers are left alone either way."""
import signal
import sys

from raftbus.broker.supervisor import BrokerSupervisor, Supervised

EXITS = [sys.executable, "-c", "import sys; sys.exit(3)"]
RUNS = [sys.executable, "-c", "import time; time.sleep(60)"]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def supervisor(tmp_path, restart, said):
    clock = Clock()
    brokers = [Supervised(1, RUNS, str(tmp_path / "b1.log")), Supervised(2, EXITS, str(tmp_path / "b2.log"))]
    sup = BrokerSupervisor(brokers, restart=restart, restart_delay_ms=2000, say=said.append, clock=clock)
    sup.start_all()
    brokers[1].proc.wait(10)
    return sup, brokers, clock


def test_an_exited_broker_is_announced_and_restarted_after_the_delay(tmp_path):
    said = []
    sup, (running, exiting), clock = supervisor(tmp_path, True, said)
    try:
        first = exiting.proc
        sup.check()
        assert said == ["raftbus dev: broker 2 (pid %d) exited with 3; 1 of 2 brokers still serving; "
                        "restarting it in 2 s" % first.pid]
        clock.now += 1.9
        sup.check()
        assert exiting.proc is first and exiting.restarts == 0
        clock.now += 0.2
        sup.check()
        assert exiting.proc is not first and exiting.restarts == 1
        assert said[-1] == "raftbus dev: restarting broker 2 (restart 1)"
        assert running.proc.poll() is None and running.restarts == 0
    finally:
        sup.stop_all(signal.SIGTERM)


def test_with_restarts_off_an_exited_broker_stays_down(tmp_path):
    said = []
    sup, (running, exiting), clock = supervisor(tmp_path, False, said)
    try:
        sup.check()
        clock.now += 60
        sup.check()
        assert exiting.proc is None and exiting.restarts == 0
        assert said == [said[0]] and said[0].endswith("(restarts are off)")
        assert running.proc.poll() is None
    finally:
        sup.stop_all(signal.SIGTERM)
