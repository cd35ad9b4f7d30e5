"""Cluster metadata: brokers, topics, partition placement and the consumer groups' membership records.

Owns: `MetadataStateMachine` (state.py: applies metadata commands, plans group changes with
raftbus.broker.groups), `AdminService` (service.py: create, alter and delete topics, cluster views, broker
stats) and the Admin gRPC servicer (servicer.py); its settings sections (settings.py) and what it registers with
the assembly (feature.py): learner promotion, reassignment and decommission steps, the Raft transport's peers
(raft_peers.py) and this broker's registration (registration.py).
May import: the broker kernel (commands, context, grpc_server, model, clock), raftbus.broker.groups,
raftbus.broker.queues (a queue topic's settings), raftbus.client.{errors,wire}. Never log.
"""
