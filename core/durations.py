"""Spans of time as an operator types them: a whole number and one unit, `45s`, `30m`, `1h`, `2d`."""

from __future__ import annotations

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FORMAT = "a whole number and a unit: 45s, 30m, 1h or 2d"
MAX_SECONDS = 3650 * 86400
_DURATION = re.compile(r"([0-9]{1,9})([smhd])", re.ASCII)


def parse_duration(text: str) -> float:
    """The seconds `text` names (`FORMAT`, at most ten years); `ValueError` saying the format otherwise."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise ValueError(f"{text!r} is not a duration: use {FORMAT}")
    seconds = int(found.group(1)) * UNITS[found.group(2)]
    if seconds > MAX_SECONDS:
        raise ValueError(f"{text!r} is longer than ten years")
    return float(seconds)
