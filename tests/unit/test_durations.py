"""`--since` and the dashboard's time filter take a whole number and one unit; anything else is refused
with the format in the message."""

from __future__ import annotations

import pytest

from core.durations import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"), [("45s", 45), ("30m", 1800), ("1h", 3600), ("2d", 172800), (" 2H ", 7200), ("0m", 0)]
)
def test_a_duration_is_a_whole_number_and_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1", "h", "1.5h", "-1h", "1h30m", "2w", "yesterday", "2026-12-01"])
def test_anything_else_is_refused_with_the_format(text: str) -> None:
    with pytest.raises(ValueError, match="45s, 30m, 1h or 2d"):
        parse_duration(text)


def test_more_than_ten_years_is_refused() -> None:
    with pytest.raises(ValueError, match="ten years"):
        parse_duration("3651d")
