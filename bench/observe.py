"""What the benchmark reads back from the store: how many of a phase's jobs have finished, and when each
was created, started and finished.

It reads through a plain engine of its own, so its queries never show up in the store counters that the
cost figures come from."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, func, select

from outbox_bridge.jobstore.schema import jobs, outbox, state_is
from outbox_bridge.jobstore.states import TERMINAL, State

if TYPE_CHECKING:
    import numpy as np

TERMINAL_VALUES = [s.value for s in TERMINAL]
PERCENTILES = (50, 95, 99)


class PhaseTimeout(Exception):
    """A phase's jobs did not all finish within its bound."""


@dataclass(frozen=True)
class Progress:
    succeeded: int
    other_terminal: int

    @property
    def finished(self) -> int:
        return self.succeeded + self.other_terminal


@dataclass(frozen=True)
class Timings:
    """Per-job times in seconds since the epoch, for the jobs of one phase that succeeded."""

    created: np.ndarray
    started: np.ndarray
    finished: np.ndarray

    def __len__(self) -> int:
        return len(self.created)


class StoreWatch:
    def __init__(self, database_url: str) -> None:
        self.engine: Engine = create_engine(database_url)

    def close(self) -> None:
        self.engine.dispose()

    def stored(self, tenant: str) -> int:
        """How many jobs of `tenant` the store holds, in any state."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).where(jobs.c.tenant == tenant)).scalar_one())

    def progress(self, tenant: str) -> Progress:
        query = (
            select(jobs.c.state, func.count())
            .where(jobs.c.tenant == tenant, jobs.c.state.in_(TERMINAL_VALUES))
            .group_by(jobs.c.state)
        )
        with self.engine.connect() as conn:
            counts = {str(state): int(n) for state, n in conn.execute(query).all()}
        succeeded = counts.pop(State.SUCCEEDED.value, 0)
        return Progress(succeeded, sum(counts.values()))

    def unfinished(self, tenant: str) -> int:
        """How many jobs of `tenant` are still queued or running: a range of the queued and of the running
        jobs' tenant indexes, which shrink as they finish, where counting the finished jobs reads every one
        of them."""
        queued, running = (
            select(func.count()).where(state_is(state), jobs.c.tenant == tenant).scalar_subquery()
            for state in (State.QUEUED, State.RUNNING)
        )
        query = select(queued + running)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def wait_finished(
        self,
        tenant: str,
        expected: Callable[[], int] | int,
        timeout: float,
        stop: threading.Event,
        poll: float = 0.05,
    ) -> Progress:
        """Wait until `expected` jobs of `tenant` are terminal; `PhaseTimeout` past `timeout` seconds. While
        some are unfinished it counts only those (`unfinished`): counting the finished ones took 8 ms of
        PostgreSQL's time a poll in a 5,000-job burst (20 polls a second), taken from the work it measures;
        the unfinished ones take about half."""
        deadline = time.monotonic() + timeout
        while True:
            want = expected() if callable(expected) else expected
            if not self.unfinished(tenant):
                progress = self.progress(tenant)
                if progress.finished >= want:
                    return progress
            if time.monotonic() >= deadline:
                progress = self.progress(tenant)
                raise PhaseTimeout(f"{tenant}: {progress.finished} of {want} jobs finished in {timeout:.0f}s")
            if stop.wait(poll):
                raise KeyboardInterrupt

    def timings(self, tenant: str) -> Timings:
        import numpy as np

        query = select(jobs.c.created_at, jobs.c.started_at, jobs.c.finished_at).where(
            jobs.c.tenant == tenant, state_is(State.SUCCEEDED)
        )
        with self.engine.connect() as conn:
            rows = np.array(conn.execute(query).all(), dtype=float).reshape(-1, 3)
        return Timings(rows[:, 0], rows[:, 1], rows[:, 2])

    def outbox_pending(self) -> int:
        query = select(func.count()).select_from(outbox).where(outbox.c.published_at.is_(None))
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar() or 0)


def percentiles_ms(seconds: np.ndarray) -> dict[str, float | None]:
    """p50/p95/p99 and max of `seconds`, in milliseconds (None when there is nothing to measure)."""
    found: dict[str, float | None] = dict.fromkeys([*(f"p{p}" for p in PERCENTILES), "max"])
    if len(seconds) == 0:
        return found
    import numpy as np

    ms = seconds * 1000.0
    found.update({f"p{p}": round(float(np.percentile(ms, p)), 3) for p in PERCENTILES})
    found["max"] = round(float(ms.max()), 3)
    return found


def cdf_ms(seconds: np.ndarray, points: int = 201) -> list[float]:
    """The distribution as `points` evenly spaced quantiles (0 to 100 %), in milliseconds, for the plots."""
    if len(seconds) == 0:
        return []
    import numpy as np

    quantiles = np.linspace(0, 100, points)
    return [round(float(v), 3) for v in np.percentile(seconds * 1000.0, quantiles)]


def throughput(t: Timings) -> dict[str, float | int | None]:
    """Accepted-to-succeeded jobs/s: jobs over the span from the first accept to the last success; and
    the accept rate over the span of the accepts."""
    if len(t) == 0:
        return {"jobs": 0, "jobs_per_second": None, "accepts_per_second": None, "seconds": None}
    span = float(t.finished.max() - t.created.min())
    accept_span = float(t.created.max() - t.created.min())
    return {
        "jobs": len(t),
        "seconds": round(span, 3),
        "jobs_per_second": round(len(t) / span, 1) if span > 0 else None,
        "accepts_per_second": round(len(t) / accept_span, 1) if accept_span > 0 else None,
    }
