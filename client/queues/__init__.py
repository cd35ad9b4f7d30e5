"""Queue topics in the SDK: the queue producer's routing and calls, `QueueConsumer` (leases, ack, nack,
extend), `Queues` (stats, peek, get, delete, change priority, redrive), message types, message ids and the
packed wire codec shared with the broker's stored layout.

May import: the SDK kernel (errors, records, router, settings, sender, wire). Never the SDK facades
(producer, consumer, reader, admin), cli, bench or spark.
"""
