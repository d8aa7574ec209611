"""The relay's count of what waits in the queue (`relay.backpressure.Backpressure`): it publishes nothing
before its first reading, never past its limit, lowers the limit to about `AHEAD_SECONDS` of the consumers'
rate, and raises it again when the queue runs dry."""

from __future__ import annotations

import pytest

from outbox_bridge.relay import backpressure
from outbox_bridge.relay.backpressure import Backpressure


def test_nothing_is_published_before_the_first_reading_and_never_past_the_cap() -> None:
    gauge = Backpressure(cap=100, batch=500)
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
    assert Backpressure(cap=0, batch=500).room() == 500


def test_the_limit_follows_the_consumers_rate_and_grows_again_when_the_queue_runs_dry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(backpressure.time, "monotonic", lambda: now[0])
    gauge = Backpressure(cap=500, batch=500)
    gauge.begin_reading()
    gauge.read(500)
    for _ in range(20):  # the consumers take 16 messages every 0.1 s: 160/s
        now[0] += 0.1
        gauge.begin_reading()
        gauge.read(max(0, 500 - 16))
        gauge.published(16)
    assert 160 * backpressure.AHEAD_SECONDS * 0.8 <= gauge.limit <= 160 * backpressure.AHEAD_SECONDS * 1.2
    low = gauge.limit
    for _ in range(4):  # dry at every reading for longer than AHEAD_SECONDS, messages published between
        gauge.published(low)
        now[0] += 0.1
        gauge.begin_reading()
        gauge.read(0)
    assert gauge.limit >= 2 * low - 1


def _clocked(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(backpressure.time, "monotonic", lambda: now[0])
    return now


def test_a_queue_emptied_by_the_consumers_prefetch_does_not_open_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = _clocked(monkeypatch)
    gauge = Backpressure(cap=500, batch=500)
    gauge.begin_reading()
    gauge.read(0)
    start = gauge.limit
    gauge.published(start)  # a backlog arrives: the relay publishes its start...
    now[0] += 0.02
    gauge.begin_reading()
    gauge.read(0)  # ...and the consumers' prefetch takes all of it at once
    assert gauge.limit == start
    gauge.published(start)
    now[0] += 0.02
    gauge.begin_reading()
    gauge.read(0)  # and the next lot too: a prefetch of over 200, filling in 40 ms
    assert gauge.limit == start
    gauge.published(start)
    now[0] += 0.02
    gauge.begin_reading()
    gauge.read(start - 28)  # the prefetch takes 28 more: a fill, not a rate (it would read as 1,400/s)
    assert gauge.limit == start
    now[0] += 0.02
    gauge.begin_reading()
    gauge.read(start - 29)  # slow jobs: with the prefetch full, one goes in 20 ms (50/s)
    assert gauge.limit == backpressure.FLOOR, "the measured rate, not the prefetch, sets the window"
    assert gauge.room() is None


def test_an_empty_queue_with_nothing_published_says_nothing_of_the_consumers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = _clocked(monkeypatch)
    gauge = Backpressure(cap=500, batch=500)
    for _ in range(5):
        now[0] += 0.02
        gauge.begin_reading()
        gauge.read(0)
    assert gauge.limit == backpressure.START


def test_a_rate_read_before_a_quiet_spell_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    now = _clocked(monkeypatch)
    gauge = Backpressure(cap=500, batch=500)
    gauge.begin_reading()
    gauge.read(0)
    for _ in range(200):  # noop jobs: the queue runs dry at every reading, the window opens to the cap
        gauge.published(gauge.room() or 0)
        now[0] += 0.02
        gauge.begin_reading()
        gauge.read(0)
    assert gauge.limit == 500
    now[0] += backpressure.RATE_GAP_SECONDS  # quiet; then a backlog of slow jobs arrives
    assert gauge.limit == backpressure.START
    assert gauge.room() == backpressure.START
