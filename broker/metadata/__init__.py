"""Cluster metadata: brokers, topics, partition placement and the consumer groups' membership records.

Owns: `MetadataStateMachine` (state.py: applies metadata commands, plans group changes with
raftbus.broker.groups), `AdminService` (service.py: create, alter and delete topics, cluster views, broker
stats) and the Admin gRPC servicer (servicer.py).
May import: the broker kernel (commands, context, grpc_server, model, clock), raftbus.broker.groups,
raftbus.broker.queues (a queue topic's settings), raftbus.client.{errors,wire}. Never log.
"""
