"""Where leaderships go: the leader gossip between brokers, each group's preferred leader, draining brokers and
the hand-over of a stopping broker. Imports the kernel and raft/ only."""
