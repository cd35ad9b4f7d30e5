"""`python -m raftbus.client.bench_peers ...`"""
import sys

from raftbus.client.bench_peers.cli import main

sys.exit(main())
