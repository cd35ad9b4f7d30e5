import sys

from raftbus.broker.main import main

sys.exit(main())
