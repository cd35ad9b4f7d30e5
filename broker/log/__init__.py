"""Stream partitions: the replicated log of record batches, one Raft group and one LMDB file per partition.

Owns: `PartitionStateMachine` (state.py: batches under their base offset, the idempotent producer's sequences,
retention trims, committed offsets applied through the log), `LogService` (service.py: produce, fetch,
list offsets, retention), the Log gRPC servicer (servicer.py) and the pipelined produce stream
(produce_stream.py), its settings section (settings.py) and what it registers with the assembly, retention on the
partitions led here (feature.py). Produce and trim commands are in the shared codec (raftbus.broker.commands).
May import: the broker kernel (commands, context, grpc_server, model, clock), raftbus.broker.groups (committed
offsets live in the partition), raftbus.client.{errors,records,wire}.
"""
