"""Queue topics: per-message work queues with priority, delay, fair groups, leases, retries and dead letters.

Owns: queue commands (commands.py), `QueueStateMachine` and its tables (state/), the topic's queue policy
(config.py), `QueueService` (service.py: enqueue, lease, ack, nack, extend, get, peek, delete, change priority,
stats), lease streams (streams.py), dead-letter moves and redrive (dead_letters.py), the forwarder that sends
dead letters to the `.dlq` topic's leader (forwarder.py), the proto options of a queue topic (options.py) and
the Queues gRPC servicer (servicer.py), its settings section (settings.py) and what it registers with the assembly,
the queue tick and the dead-letter mover (feature.py).
May import: the broker kernel (commands, context, grpc_server, model, clock), raftbus.client.{errors,records,
router,wire} and the shared codec raftbus.client.queues.{codec,ids}. Never log, groups or admin.
"""
