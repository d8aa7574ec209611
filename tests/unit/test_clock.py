"""`clock.isoformat` gives exactly the text `datetime` would, to the millisecond, for every timestamp."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_bridge.core import clock


def by_datetime(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@given(st.floats(min_value=0, max_value=253_402_300_799.999, allow_nan=False))
def test_any_timestamp_from_1970_to_9999_reads_as_datetime_gives_it(ts: float) -> None:
    assert clock.isoformat(ts) == by_datetime(ts)


@given(st.integers(min_value=0, max_value=4_102_444_800), st.sampled_from([-1, 0, 1]))
def test_fractions_at_a_rounding_edge_read_as_datetime_gives_them(second: int, step: int) -> None:
    # The microsecond rounds half to even; a fraction that rounds up to a whole second carries over.
    for edge in (0.0005, 0.9995, 0.9999995, 0.0000005, 0.5):
        ts = math.nextafter(second + edge, math.inf) if step > 0 else second + edge
        ts = math.nextafter(ts, -math.inf) if step < 0 else ts
        assert clock.isoformat(ts) == by_datetime(ts)


def test_the_same_second_twice_and_then_the_next_each_read_right() -> None:
    assert clock.isoformat(1_700_000_000.25) == "2023-11-14T22:13:20.250Z"
    assert clock.isoformat(1_700_000_000.9999) == "2023-11-14T22:13:20.999Z"
    assert clock.isoformat(1_700_000_001.0) == "2023-11-14T22:13:21.000Z"
    assert clock.isoformat(None) is None


@pytest.mark.parametrize("ts", [-1.5, 253_402_300_800.0 - 0.0001, 1e11])
def test_a_timestamp_outside_the_formatted_range_reads_or_fails_as_datetime(ts: float) -> None:
    try:
        expected = by_datetime(ts)
    except (OverflowError, ValueError, OSError) as exc:
        with pytest.raises(type(exc)):
            clock.isoformat(ts)
        return
    assert clock.isoformat(ts) == expected
