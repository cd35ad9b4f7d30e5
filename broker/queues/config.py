"""Queue topic options: defaults and bounds from the queue settings (QueueSettings), and the policy stamped into commands."""
from __future__ import annotations

from raftbus.client import errors

from raftbus.broker import model
from raftbus.broker.queues.commands import QueuePolicy

OPTIONS = ("max_deliveries", "backoff_base_ms", "backoff_max_ms", "max_in_flight_per_group", "idempotency_window_ms")


def resolve_queue_options(settings, kind: str, **given) -> dict | None:
    """The queue options of a new topic (None for a stream topic): given values, else the broker defaults.

    InvalidArgument for queue options on a stream topic or a value outside its bounds.
    """
    named = {name: value for name, value in given.items() if value is not None}
    unknown = set(given) - set(OPTIONS)
    if unknown:
        raise errors.InvalidArgument(f"unknown queue options: {sorted(unknown)}")
    if kind != "queue":
        if named:
            raise errors.WrongTopicKind.queue_only(sorted(named), kind=kind)
        return None
    options = {name: named.get(name, getattr(settings, f"queue_default_{name}")) for name in OPTIONS}
    model.QueueConfig(**options).validate()
    _check(options["max_deliveries"] <= settings.queue_max_deliveries_max,
           f"max_deliveries must be at most queue_max_deliveries_max={settings.queue_max_deliveries_max}")
    _check(options["backoff_max_ms"] <= settings.queue_backoff_ceiling_ms,
           f"backoff_max_ms must be at most queue_backoff_ceiling_ms={settings.queue_backoff_ceiling_ms}")
    low, high = settings.queue_idempotency_window_min_ms, settings.queue_idempotency_window_max_ms
    _check(low <= options["idempotency_window_ms"] <= high,
           f"idempotency_window_ms must be between queue_idempotency_window_min_ms={low} and "
           f"queue_idempotency_window_max_ms={high}")
    return options


def check_altered_options(settings, **given) -> dict:
    """The queue options an alter sets (None = unchanged), each within the broker's bounds; the metadata state
    machine then checks the merged config (e.g. backoff_max_ms >= backoff_base_ms)."""
    named = {name: value for name, value in given.items() if value is not None}
    unknown = set(named) - set(OPTIONS)
    if unknown:
        raise errors.InvalidArgument(f"unknown queue options: {sorted(unknown)}")
    for name, value in named.items():
        _check(isinstance(value, int) and value >= 0, f"queue option {name} must be an integer >= 0")
    _check(named.get("max_deliveries", 0) <= settings.queue_max_deliveries_max,
           f"max_deliveries must be at most queue_max_deliveries_max={settings.queue_max_deliveries_max}")
    _check(named.get("backoff_max_ms", 0) <= settings.queue_backoff_ceiling_ms,
           f"backoff_max_ms must be at most queue_backoff_ceiling_ms={settings.queue_backoff_ceiling_ms}")
    if "idempotency_window_ms" in named:
        low, high = settings.queue_idempotency_window_min_ms, settings.queue_idempotency_window_max_ms
        _check(low <= named["idempotency_window_ms"] <= high,
               f"idempotency_window_ms must be between queue_idempotency_window_min_ms={low} and "
               f"queue_idempotency_window_max_ms={high}")
    return named


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise errors.InvalidArgument(message)


def policy_for(topic, settings, producer_idle_ms: int) -> QueuePolicy:
    """The policy a leader stamps into the commands of `topic`'s partitions."""
    config = topic.queue
    if config is None:
        raise errors.WrongTopicKind(f"topic {topic.name!r} is a {topic.kind} topic, not a queue topic")
    return QueuePolicy(
        max_deliveries=config.max_deliveries, backoff_base_ms=config.backoff_base_ms,
        backoff_max_ms=config.backoff_max_ms, max_in_flight_per_group=config.max_in_flight_per_group,
        idempotency_window_ms=config.idempotency_window_ms, producer_idle_ms=producer_idle_ms,
        due_per_command_max=settings.queue_due_per_command_max)
