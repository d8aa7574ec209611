"""The relay's count of what waits in the queue (`relay.ahead.PublishAhead`): it publishes nothing before
its first reading, never past its limit, lowers the limit to about `AHEAD_SECONDS` of the consumers' rate,
and raises it again when the queue runs dry."""

from __future__ import annotations

import pytest

from relay import ahead
from relay.ahead import PublishAhead


def test_nothing_is_published_before_the_first_reading_and_never_past_the_cap() -> None:
    gauge = PublishAhead(cap=100, batch=500)
    assert gauge.room() is None
    gauge.begin_reading()
    gauge.read(0)
    assert gauge.room() == 100
    gauge.published(100)
    assert gauge.room() is None, "held back at the cap"
    gauge.begin_reading()
    gauge.read(40)
    assert gauge.room() == 60


def test_a_cap_of_zero_means_no_bound() -> None:
    assert PublishAhead(cap=0, batch=500).room() == 500


def test_the_limit_follows_the_consumers_rate_and_grows_again_when_the_queue_runs_dry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(ahead.time, "monotonic", lambda: now[0])
    gauge = PublishAhead(cap=500, batch=500)
    gauge.begin_reading()
    gauge.read(500)
    for _ in range(20):  # the consumers take 16 messages every 0.1 s: 160/s
        now[0] += 0.1
        gauge.begin_reading()
        gauge.read(max(0, 500 - 16))
        gauge.published(16)
    assert 160 * ahead.AHEAD_SECONDS * 0.8 <= gauge.limit <= 160 * ahead.AHEAD_SECONDS * 1.2
    low = gauge.limit
    now[0] += 0.1
    gauge.begin_reading()
    gauge.read(0)
    assert gauge.limit >= 2 * low - 1
