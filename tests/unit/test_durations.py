"""Durations as `jobs prune --older-than`, `jobs requeue --since` and the dashboard filter read them."""

from __future__ import annotations

import pytest

from outbox_bridge.core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7d", 7 * 86_400),
        ("12h", 12 * 3_600),
        ("30m", 1_800),
        ("90s", 90),
        ("1h30m", 5_400),
        ("2d12h", 216_000),
        ("1d2h3m4s", 93_784),
        ("3600", 3_600),
        (" 7D ", 7 * 86_400),
    ],
)
def test_a_duration_is_read_as_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "7x", "7 d", "1.5h", "-3d", "7days", "h7", "30m1h", "1h1h"])
def test_anything_else_is_refused_saying_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="duration such as 7d"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0", "0s", "0d0h"])
def test_a_duration_of_zero_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="no time at all"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"), [(604_800, "7d"), (5_400, "1h30m"), (90, "1m30s"), (0, "0s"), (93_784, "1d2h3m4s")]
)
def test_a_duration_is_written_as_it_is_read(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text
    if seconds:
        assert parse_duration(text) == seconds


def test_more_than_ten_years_is_refused() -> None:
    with pytest.raises(ValueError, match="ten years"):
        parse_duration("3651d")
