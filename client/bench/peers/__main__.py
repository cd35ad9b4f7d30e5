"""`python -m raftbus.bench.peers ...`"""
import sys

from raftbus.bench.peers.cli import main

sys.exit(main())
