"""How the dashboard shows figures: ages, the refresh period, the throughput bars, a job's row. Pure
functions."""

from __future__ import annotations

from dataclasses import dataclass

from outbox_bridge.core import clock
from outbox_bridge.core.durations import format_age, format_duration
from outbox_bridge.jobstore.conditions import LeaseOwners, lease_note
from outbox_bridge.jobstore.overview import Overview
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import State

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
    """How long ago `then` was, in the largest sensible unit: `42s`, `7m`, `3h`, `2d` (`-` for never)."""
    return "-" if then is None else format_age(now - then)


def run_time(job: Job, now: float) -> str:
    """How long `job` ran, from its first start (a retry keeps it): `0.4s` or `1m30s` to its end once it
    finished, `running for 12s` while it runs, `-` when it has not run to an end (never started, or
    waiting for another attempt)."""
    if job.state is State.RUNNING and job.started_at is not None:
        return f"running for {format_age(now - job.started_at)}"
    if job.started_at is None or job.finished_at is None:
        return "-"
    took = max(0.0, job.finished_at - job.started_at)
    return f"{took:.1f}s" if took < 10 else format_duration(took)


@dataclass(frozen=True)
class JobRow:
    """A job as the job list and the job page show it: who ran it last, how long it ran, and its lease
    (`worker_lost` when it is running and its worker is gone)."""

    job: Job
    worker: str
    duration: str
    lease: str
    worker_lost: bool


def job_row(job: Job, worker: str | None, owners: LeaseOwners, now: float) -> JobRow:
    """`job`'s row at `now`; `worker` is its latest attempt's, `owners` says whose leases are lost."""
    running = job.state is State.RUNNING
    lost = running and owners.worker_lost(job.lease_owner)
    lease = lease_note(job.lease_expires_at, now, worker_lost=lost) if running else ""
    return JobRow(job, worker or job.lease_owner or "", run_time(job, now), lease, lost)


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
