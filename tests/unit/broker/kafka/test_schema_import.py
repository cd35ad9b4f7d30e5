"""A broker process does not pay for kio's Hypothesis strategies (broker/kafka/schema.py)."""
from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import raftbus.broker.kafka.schema
from kio.static import _phantom
print("hypothesis" in sys.modules, _phantom.hypothesis is None)
import hypothesis.strategies
print("importable")
"""


def test_a_broker_imports_kio_without_loading_hypothesis_and_leaves_it_importable():
    """Goal: kio imported by the broker registers no Hypothesis strategies (a third of a broker's start when
    Hypothesis is installed, as in the test environment), and Hypothesis can still be imported afterwards."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["False True", "importable"]


def test_a_process_that_imported_hypothesis_first_keeps_kios_strategies():
    """Goal: the hiding applies only where Hypothesis is not loaded yet; a test process keeps kio as it is."""
    probe = "import hypothesis.strategies\n" + PROBE
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["True False", "importable"]
