"""`outbox-bridge worker`: one process of the SQLite-only baseline.

It runs `concurrency` claiming threads (see `baseline.pool`), one lease keeper that renews every lease the
process holds, and one lease sweeper. SIGTERM or SIGINT stops it cleanly: no new claims at once, running jobs
get `shutdown_grace_seconds` to finish, what is still held after that is released, and the process exits 0.
A job whose external effect has started cannot be released and is waited for a while longer; if it still
has not finished, the process exits 1 and the job's expired lease is settled by a sweeper. A second signal
cuts the waiting short."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from sqlalchemy import Connection, Engine, select
from sqlalchemy.engine import make_url

from baseline.handback import Handback
from baseline.pool import ClaimPool
from baseline.sweeping import SweepLoop
from core.settings import Settings
from jobstore import db
from jobstore.schema import jobs
from worker.lease import LeaseKeeper

log = logging.getLogger(__name__)

# After handing jobs back, how long their attempts get to notice (a kind checks its lease between steps).
RELEASE_SETTLE_SECONDS = 2.0
SIGNAL_POLL_SECONDS = 0.1
EXIT_CLEAN, EXIT_LEFT_JOBS, EXIT_STORE_NOT_READY = 0, 1, 2


class StopSignals:
    """SIGTERM and SIGINT, counted. The handler only appends to a list: it may interrupt the main thread
    anywhere, even while that thread holds a lock, so it must not take one."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum).name)

    def wait(self) -> str:
        """Block until the first signal; returns its name. Sleeps in short steps, so it is always bounded."""
        while not self.received:
            time.sleep(SIGNAL_POLL_SECONDS)
        return self.received[0]

    def urgent(self) -> bool:
        """A second signal arrived: stop waiting for running jobs."""
        return len(self.received) > 1


class BaselineProcess:
    """The threads of one worker process, started together and stopped in order."""

    def __init__(self, engine: Engine, settings: Settings, *, concurrency: int) -> None:
        self.settings = settings
        self.stopping = threading.Event()
        self.keeper = LeaseKeeper(engine, settings)
        self.pool = ClaimPool(
            engine,
            settings,
            self.keeper,
            concurrency=concurrency,
            stopping=self.stopping,
        )
        self.sweeper = SweepLoop(engine, settings, self.stopping)

    def start(self) -> BaselineProcess:
        self.keeper.start()
        self.pool.start()
        self.sweeper.start()
        return self

    def shutdown(self, urgent: Callable[[], bool] = lambda: False) -> int:
        """Stop claiming now; let running jobs finish within the grace period (cut short by `urgent()`);
        then release what is still held. A job whose external effect started cannot be released: it gets
        up to `max(grace, lease)` more to finish. Returns 0 when nothing was left running, else 1 (such a
        job's lease runs out and a sweeper settles it as `unknown`)."""
        self.stopping.set()
        grace = self.settings.shutdown_grace_seconds
        log.info("stopping: no new claims; up to %.1fs for %d running job(s)", grace, self._running_jobs())
        if not self.pool.join(grace, urgent):
            self._hand_back(urgent)
        left = [held for held in self.keeper.held() if not held.lost]
        self.keeper.stop()
        self.sweeper.join(timeout=1.0)
        for held in left:
            log.error(
                "job %s epoch %d left running: its lease will expire", held.claim.job_id, held.claim.epoch
            )
        code = EXIT_LEFT_JOBS if left else EXIT_CLEAN
        counts = self.pool.tally.snapshot()
        log.info(
            "stopped: %d job(s) run (%s); exit %d", sum(counts.values()), _listed(counts) or "none", code
        )
        return code

    def _hand_back(self, urgent: Callable[[], bool]) -> None:
        handed = self.pool.hand_back_held()
        log.info(
            "grace period over: handed back %s", _listed({k.value: n for k, n in handed.items()}) or "none"
        )
        wait = RELEASE_SETTLE_SECONDS
        if handed[Handback.MUST_FINISH]:
            wait = max(self.settings.shutdown_grace_seconds, self.settings.lease_seconds)
            log.info(
                "waiting up to %.1fs for %d job(s) with an external effect in flight",
                wait,
                handed[Handback.MUST_FINISH],
            )
        self.pool.join(wait, urgent)

    def _running_jobs(self) -> int:
        return len(self.keeper.held())


def run(settings: Settings, *, concurrency: int) -> int:
    """Run a baseline worker process until SIGTERM or SIGINT; returns the exit code (0: clean stop,
    1: a job was left running, 2: the store is not initialised or not reachable)."""
    engine = db.make_engine(settings, pool_size=concurrency + 3, max_overflow=concurrency)
    signals = StopSignals().install()
    try:
        if not _store_ready(engine):
            return EXIT_STORE_NOT_READY
        process = BaselineProcess(engine, settings, concurrency=concurrency).start()
        log.info("started: %s", summary(settings, concurrency))
        log.info("%s received", signals.wait())
        return process.shutdown(signals.urgent)
    finally:
        signals.restore()
        engine.dispose()


def summary(settings: Settings, concurrency: int) -> str:
    """The settings a worker runs with, in one line, without secrets."""
    store = make_url(settings.database_url).render_as_string(hide_password=True)
    return (
        f"concurrency={concurrency} store={store} synchronous={settings.sqlite_synchronous} "
        f"lease={settings.lease_seconds}s sweep_every={settings.sweep_interval_seconds}s "
        f"grace={settings.shutdown_grace_seconds}s lock_timeout={settings.store_lock_timeout_seconds}s "
        f"max_attempts={settings.max_attempts} kinds={','.join(settings.allowed_kinds)}"
    )


def _listed(counts: dict[str, int]) -> str:
    return ", ".join(f"{name}={n}" for name, n in counts.items())


def _probe(conn: Connection) -> None:
    conn.execute(select(jobs.c.id).limit(1)).first()


def _store_ready(engine: Engine) -> bool:
    try:
        db.read(engine, _probe)
    except db.StoreUnavailable as exc:
        log.error("store not ready (%s): run `outbox-bridge db init` first", exc)
        return False
    return True
