"""Durations as an operator types them: `7d`, `12h`, `30m`, `90s`, combinations such as `1h30m`, or a
plain number of seconds; and as a page or a table shows an age or a time left (`format_age`)."""

from __future__ import annotations

import re

UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_WHOLE = re.compile(r"(?:\d+[dhms])+")
_PART = re.compile(r"(\d+)([dhms])")
FORMAT = "a duration such as 7d, 12h, 30m, 90s or 1h30m (d: days, h: hours, m: minutes, s: seconds)"
MAX_SECONDS = 3650 * 86_400


def parse_duration(text: str) -> int:
    """The seconds `text` names: units from largest to smallest, each at most once, or digits alone for
    seconds. `ValueError` saying what is accepted for anything else, for a duration of zero and for one
    longer than ten years."""
    cleaned = text.strip().lower()
    if cleaned.isdigit():
        seconds = int(cleaned)
    elif _WHOLE.fullmatch(cleaned):
        parts = _PART.findall(cleaned)
        units = [unit for _, unit in parts]
        if units != sorted(set(units), key=list(UNITS).index):
            raise ValueError(f"{text!r} is not {FORMAT}: give each unit once, largest first")
        seconds = sum(int(number) * UNITS[unit] for number, unit in parts)
    else:
        raise ValueError(f"{text!r} is not {FORMAT}")
    if seconds <= 0:
        raise ValueError(f"{text!r} is no time at all: give {FORMAT}")
    if seconds > MAX_SECONDS:
        raise ValueError(f"{text!r} is longer than ten years")
    return seconds


def format_duration(seconds: float) -> str:
    """`seconds` the way `parse_duration` reads it, in whole seconds: 604800 -> `7d`, 5400 -> `1h30m`."""
    left = round(seconds)
    parts = []
    for unit, size in UNITS.items():
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"


def format_age(seconds: float) -> str:
    """`seconds` in the largest unit it reaches, whole and rounded down: `42s`, `7m`, `3h`, `2d`. How ages
    ("42s ago") and times left ("expires in 12s") read in `status`, `jobs list` and the dashboard; a
    negative span reads as `0s`."""
    left = max(0.0, seconds)
    for unit, size in UNITS.items():
        if left >= size:
            return f"{int(left // size)}{unit}"
    return "0s"
