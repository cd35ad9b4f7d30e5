"""Goal: `raftbus broker start` with its client port beyond loopback and auth off refuses to start before it binds
anything, with one line naming the setting, exit status 1."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system


def test_a_broker_beyond_loopback_without_auth_refuses_to_start_in_one_line(tmp_path):
    env = {**os.environ, "RAFTBUS_CLUSTER_SECRET": "0123456789abcdef" * 4, "RAFTBUS_CLUSTER_ID": "exposure"}
    command = [sys.executable, "-m", "raftbus.broker", "start", "--node-id", "1", "--data-dir", str(tmp_path / "d"),
               "--listen", "0.0.0.0:1", "--raft-listen", "127.0.0.1:1", "--peers", "1@127.0.0.1:1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: INVALID_ARGUMENT: refusing to serve without authentication beyond loopback "
                           "(listen=0.0.0.0:1)") and "allow_insecure_network" in line and "auth_enabled" in line
