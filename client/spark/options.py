"""The options of the raftbus Spark source, with Kafka's names, parsed and checked once.

Kafka's options: `bootstrap` (host:port[,...]; Kafka's `kafka.bootstrap.servers` is accepted too), exactly
one of `subscribe` (topics, comma-separated), `subscribePattern` (a regular expression matched against the
whole name of every stream topic) or `assign` (JSON {"topic": [0, 1]}), `startingOffsets` (earliest,
latest or JSON {"topic": {"0": 23, "1": -2}} with -2 = earliest and -1 = latest), `endingOffsets` (batch
reads only: latest or JSON, -1 = latest), `startingTimestamp` (ms since the epoch; every partition starts
at its first record at or after it, and it wins over startingOffsets as in Kafka), `maxOffsetsPerTrigger`,
`failOnDataLoss` (default true) and `includeHeaders` (default false). Partitions a JSON position leaves
out start at earliest and end at latest. Option names are case-insensitive; unknown ones are ignored.

raftbus's own: `fetchBytesMax` (bytes per fetch), `requestTimeoutMs` (per call, retries included),
`catchUpTimeoutMs` (how long a reader waits for a new leader's high watermark to reach a planned end
offset), `useArrow` (default true: executors hand Spark Arrow record batches; false: plain tuples).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from raftbus.client import settings
from raftbus.client.errors import InvalidArgument

EARLIEST = "earliest"
LATEST = "latest"
EARLIEST_OFFSET = -2  # in JSON positions, as in Kafka
LATEST_OFFSET = -1

# Defaults of raftbus's own options (units in the names).
SPARK_FETCH_BYTES_MAX = 4 * 1024 * 1024
SPARK_REQUEST_TIMEOUT_MS = settings.REQUEST_TIMEOUT_MS
SPARK_CATCH_UP_TIMEOUT_MS = 30_000
# Fetch attempts per read position when the router itself gives up on a retriable error (leader moves).
SPARK_FETCH_ATTEMPTS_MAX = 3
# How long one fetch may wait on the leader at the end of its log while a new leader catches up.
SPARK_FETCH_WAIT_MS = 500

TopicPartition = tuple[str, int]
# A position per partition: an offset, or EARLIEST_OFFSET / LATEST_OFFSET.
Positions = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class TopicSelection:
    """Which partitions the source reads: named topics, a name pattern, or assigned partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class Bound:
    """A starting or ending position: `default` (earliest/latest) for every partition not in `positions`."""

    default: str
    positions: tuple[tuple[TopicPartition, int], ...] = ()

    def position(self, tp: TopicPartition) -> int:
        """The offset, EARLIEST_OFFSET or LATEST_OFFSET for `tp`."""
        for known, offset in self.positions:
            if known == tp:
                return offset
        return EARLIEST_OFFSET if self.default == EARLIEST else LATEST_OFFSET


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap: str
    selection: TopicSelection
    starting: Bound
    ending: Bound
    starting_timestamp_ms: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    use_arrow: bool
    fetch_bytes_max: int
    request_timeout_ms: int
    catch_up_timeout_ms: int


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in options.items() if value is not None}


def parse_bool(name: str, text: str | None, default: bool) -> bool:
    if text is None:
        return default
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise InvalidArgument(f"option {name} must be true or false, not {text!r}")


def parse_positive(name: str, text: str | None, default: int | None, minimum: int = 1) -> int | None:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InvalidArgument(f"option {name} must be an integer >= {minimum}, not {text!r}")
    return value


def include_headers(options: Mapping[str, str]) -> bool:
    """Only includeHeaders, for DataSource.schema() (which runs before the other options are checked)."""
    return parse_bool("includeHeaders", _lower(options).get("includeheaders"), False)


def _json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"option {name} is not valid JSON: {exc}") from None


def parse_selection(opts: dict[str, str]) -> TopicSelection:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if opts.get(name, "").strip()]
    if len(given) != 1:
        raise InvalidArgument("give exactly one of the options subscribe, subscribePattern or assign")
    if given[0] == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in opts["subscribe"].split(",") if t.strip()))
        return TopicSelection(topics=topics)
    if given[0] == "subscribepattern":
        try:
            re.compile(opts["subscribepattern"])
        except re.error as exc:
            raise InvalidArgument(f"option subscribePattern is not a regular expression: {exc}") from None
        return TopicSelection(pattern=opts["subscribepattern"])
    assigned = _json("assign", opts["assign"])
    if not isinstance(assigned, dict) or not all(
            isinstance(parts, list) and all(type(p) is int and p >= 0 for p in parts) for parts in assigned.values()):
        raise InvalidArgument('option assign must be JSON like {"topic": [0, 1]}')
    return TopicSelection(assigned=tuple(sorted({(t, p) for t, parts in assigned.items() for p in parts})))


def parse_bound(name: str, text: str | None, default: str, json_default: str, allowed: tuple[int, ...]) -> Bound:
    """earliest, latest, or JSON {"topic": {"partition": offset}} (partitions left out: `json_default`);
    `allowed` are the special offsets the JSON may use."""
    if text is None:
        return Bound(default)
    if text.strip().lower() in (EARLIEST, LATEST):
        return Bound(text.strip().lower())
    parsed = _json(name, text)
    if not isinstance(parsed, dict):
        raise InvalidArgument(f'option {name} must be earliest, latest or JSON like {{"topic": {{"0": 42}}}}')
    positions = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise InvalidArgument(f"option {name}: topic {topic!r} needs an object of partition: offset")
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or type(offset) is not int or (offset < 0 and offset not in allowed):
                raise InvalidArgument(f"option {name}: {topic}/{partition}: {offset!r} is not an offset "
                                      f"(or one of {list(allowed)})")
            positions.append(((topic, int(partition)), offset))
    return Bound(json_default, tuple(sorted(positions)))


def parse_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Check every option the source knows; InvalidArgument names the first bad one."""
    opts = _lower(options)
    bootstrap = opts.get("bootstrap") or opts.get("kafka.bootstrap.servers") or settings.bootstrap_default()
    settings.parse_bootstrap(bootstrap)
    if streaming and "endingoffsets" in opts:
        raise InvalidArgument("option endingOffsets is for batch reads (spark.read) only")
    starting = parse_bound("startingOffsets", opts.get("startingoffsets"), LATEST if streaming else EARLIEST,
                           EARLIEST, (EARLIEST_OFFSET, LATEST_OFFSET) if streaming else (EARLIEST_OFFSET,))
    if not streaming and starting.default == LATEST and not starting.positions:
        raise InvalidArgument("startingOffsets=latest makes an empty batch read; use it with readStream")
    ending = parse_bound("endingOffsets", opts.get("endingoffsets"), LATEST, LATEST, (LATEST_OFFSET,))
    if ending.default == EARLIEST and not ending.positions:
        raise InvalidArgument("endingOffsets=earliest makes an empty batch read")
    return SourceOptions(
        bootstrap=bootstrap,
        selection=parse_selection(opts),
        starting=starting,
        ending=ending,
        starting_timestamp_ms=parse_positive("startingTimestamp", opts.get("startingtimestamp"), None, 0),
        max_offsets_per_trigger=parse_positive("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger"), None),
        fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failondataloss"), True),
        include_headers=parse_bool("includeHeaders", opts.get("includeheaders"), False),
        use_arrow=parse_bool("useArrow", opts.get("usearrow"), True),
        fetch_bytes_max=parse_positive("fetchBytesMax", opts.get("fetchbytesmax"), SPARK_FETCH_BYTES_MAX),
        request_timeout_ms=parse_positive("requestTimeoutMs", opts.get("requesttimeoutms"),
                                          SPARK_REQUEST_TIMEOUT_MS),
        catch_up_timeout_ms=parse_positive("catchUpTimeoutMs", opts.get("catchuptimeoutms"),
                                           SPARK_CATCH_UP_TIMEOUT_MS, 0),
    )
