"""`python -m raftbus.client.bench.peers ...`"""
import sys

from raftbus.client.bench.peers.cli import main

sys.exit(main())
