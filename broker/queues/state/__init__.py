"""The queue partition's state machine, split by concern: records (row layout), tables, reads, fair rotation,
backoff, moves between states, retry and idempotency memory, and the command handlers (work.py).

Pure like every state machine: no clock, no randomness, no I/O besides the store it is given.
"""
