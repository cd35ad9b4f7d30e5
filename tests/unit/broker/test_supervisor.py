"""Goal: `raftbus dev`'s supervisor says when a broker exits and starts it again after the restart delay (never
before), and with restarts off leaves it down; the other brokers are left alone either way."""
import signal
import sys

from raftbus.broker.supervisor import BrokerSupervisor, StopFlag, Supervised, exit_text, last_words

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


def test_an_exited_broker_is_announced_with_the_last_line_it_logged_in_that_run(tmp_path):
    """A broker that fails to start writes its reason as one line; the announcement quotes it (a JSON log record by
    its message and exception), and only what the exited process wrote counts, not an earlier run's lines."""
    log = tmp_path / "b1.log"
    log.write_text("error: INTERNAL: from an earlier run\n")
    says = "import sys; print('error: ADDRESS_IN_USE: 127.0.0.1:7070 (client port, listen) is in use', file=sys.stderr); sys.exit(1)"
    said, clock = [], Clock()
    broker = Supervised(1, [sys.executable, "-c", says], str(log))
    sup = BrokerSupervisor([broker], restart=False, restart_delay_ms=0, say=said.append, clock=clock)
    sup.start_all()
    broker.proc.wait(10)
    assert sup.exited() is broker
    assert sup.last_words(broker) == "exited with 1: error: ADDRESS_IN_USE: 127.0.0.1:7070 (client port, listen) is in use"
    sup.check()
    assert said == ["raftbus dev: broker 1 (pid %d) exited with 1 (error: ADDRESS_IN_USE: 127.0.0.1:7070 (client port, "
                    "listen) is in use); 0 of 1 brokers still serving (restarts are off)" % broker_pid(said)]
    silent = tmp_path / "b2.log"
    silent.write_text("error: from an earlier run\n")
    quiet = Supervised(2, EXITS, str(silent))
    BrokerSupervisor([quiet], restart=False, restart_delay_ms=0, say=said.append).start_all()
    quiet.proc.wait(10)
    assert last_words(str(silent), quiet.log_offset) == ""


def broker_pid(said) -> int:
    return int(said[0].split("(pid ")[1].split(")")[0])


def test_last_words_of_a_json_log_record_and_of_a_kill(tmp_path):
    log = tmp_path / "b.log"
    log.write_text('{"ts": 1, "level": "INFO", "msg": "started"}\n'
                   '{"ts": 2, "level": "ERROR", "msg": "broker failed to start", '
                   '"exc": "Traceback (most recent call last):\\n  ...\\nOSError: disk on fire"}\n\n')
    assert last_words(str(log)) == "broker failed to start: OSError: disk on fire"
    assert last_words(str(tmp_path / "missing.log")) == ""
    assert exit_text(-signal.SIGKILL) == "was killed by SIGKILL" and exit_text(3) == "exited with 3"


def test_a_stop_flag_waits_until_set_or_its_timeout():
    flag = StopFlag()
    assert not flag.is_set() and flag.wait(0.05) is False
    flag.set()
    assert flag.is_set() and flag.wait() is True and flag.wait(0) is True


def test_a_stop_flag_set_by_signal_handlers_while_the_main_thread_waits_never_blocks():
    """What `raftbus dev` and `raftbus broker start` do on Ctrl-C: the handler runs on the main thread wherever it
    is in its wait; with a lock inside set and wait (threading.Event) that can hang for good."""
    flag, handled = StopFlag(), []

    def handler(*_):
        handled.append(1)
        flag.set()

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        for _ in range(200):
            flag = StopFlag()
            signal.setitimer(signal.ITIMER_REAL, 0.0003)
            while not flag.wait(0.0001):
                pass
        assert len(handled) == 200
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
