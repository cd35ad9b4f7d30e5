"""Consumer groups: membership and sticky assignment in the metadata group, committed offsets in each partition.

Owns: group commands (commands.py, registered with the shared codec), the sticky assignor (assignor.py), the
pure group rules and planning (state.py, planning.py), committed offsets as stored in a partition
(offset_state.py), `GroupService` (service.py: join, sync, heartbeat, leave), heartbeats (heartbeats.py),
`OffsetService` (offset_service.py: commit and read offsets, fencing by generation), the Groups gRPC
servicer (servicer.py), its settings section (settings.py) and what it registers with the assembly, member and
offset expiry (feature.py).
May import: the broker kernel (commands, context, grpc_server, model, clock), raftbus.client.{errors,wire}.
Never log, queues or admin.
"""
