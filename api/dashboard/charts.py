"""How the dashboard shows figures: ages, the refresh period, the throughput bars. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass

from outbox_bridge.core import clock
from outbox_bridge.jobstore.overview import Overview

DEFAULT_REFRESH_SECONDS = 5
MAX_REFRESH_SECONDS = 300


def refresh_seconds(raw: str | None) -> int:
    """The auto-refresh period asked for in `?refresh=`: 0 turns it off; bad values give the default."""
    try:
        value = int(raw) if raw is not None else DEFAULT_REFRESH_SECONDS
    except ValueError:
        return DEFAULT_REFRESH_SECONDS
    return min(max(value, 0), MAX_REFRESH_SECONDS)


def age(now: float, then: float | None) -> str:
    """How long ago `then` was, in the largest sensible unit: `42s`, `7m`, `3h`, `2d`."""
    if then is None:
        return "-"
    seconds = max(0.0, now - then)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    count: int
    title: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    baseline: float
    bars: list[Bar]
    total: int
    peak: int


def throughput_chart(view: Overview, now: float, *, width: int = 600, height: int = 140) -> Chart:
    """Bars for jobs finished per minute, oldest on the left, scaled to the busiest minute."""
    baseline = height - 20.0
    slots = max(1, len(view.throughput))
    slot = width / slots
    peak = max((n for _, n in view.throughput), default=0)
    bars = []
    for i, (start, count) in enumerate(view.throughput):
        bar_height = 0.0 if peak == 0 else (baseline - 16) * count / peak
        ago = max(0, round((now - start) / 60))
        title = f"{count} finished in the minute starting {ago} min ago ({clock.isoformat(start)})"
        bars.append(Bar(i * slot + 4, baseline - bar_height, slot - 8, bar_height, count, title))
    return Chart(width, height, baseline, bars, sum(b.count for b in bars), peak)
