"""Goal: `--reset-offsets` targets resolve as kafka-consumer-groups does (explicit offsets clamped to the log) and a
missing, doubled or negative target is an InvalidArgument."""
import pytest

from raftbus.client.errors import InvalidArgument
from raftbus.client.groups.admin import OffsetResetSpec


@pytest.mark.parametrize("spec, at_time, expected", [
    (OffsetResetSpec(to_earliest=True), None, 5),
    (OffsetResetSpec(to_latest=True), None, 20),
    (OffsetResetSpec(to_offset=7), None, 7),
    (OffsetResetSpec(to_offset=2), None, 5),      # below the log start: clamped up
    (OffsetResetSpec(to_offset=99), None, 20),    # past the high watermark: clamped down
    (OffsetResetSpec(to_time_ms=1_000), 12, 12),
])
def test_targets_resolve_inside_the_log(spec, at_time, expected):
    spec.check()
    assert spec.offset_in(5, 20, at_time) == expected


@pytest.mark.parametrize("spec", [
    OffsetResetSpec(),
    OffsetResetSpec(to_earliest=True, to_latest=True),
    OffsetResetSpec(to_offset=3, to_time_ms=4),
    OffsetResetSpec(to_offset=-1),
    OffsetResetSpec(to_time_ms=-5),
])
def test_bad_targets_are_invalid_arguments(spec):
    with pytest.raises(InvalidArgument):
        spec.check()
