"""How a worker process stops, whichever way its work arrives.

Stop taking work; let running jobs finish within `shutdown_grace_seconds`; hand back what is still held
(queued again for another worker, its attempt not counted); wait up to `max(grace, lease)` for the jobs
that could not be handed back (an external effect started, so the attempt must end, not be repeated; or
the store did not answer); then report the jobs left running (their leases run out and a sweeper settles
them) and say the exit code. A second signal (`urgent()`) cuts each wait short."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.worker.process import EXIT_CLEAN, EXIT_LEFT_JOBS
from outbox_bridge.worker.release import Release

log = logging.getLogger(__name__)

# After handing jobs back, how long their attempts get to notice (a kind checks its lease between steps).
RELEASE_SETTLE_SECONDS = 2.0


class Drainable(Protocol):
    """What a worker mode does at each step of the shutdown."""

    def stop_taking_work(self) -> None:
        """Claim nothing more; returns once no new job can start."""

    def wait_idle(self, timeout: float, urgent: Callable[[], bool]) -> bool:
        """Wait for the running jobs to end, at most `timeout` seconds or until `urgent()`; whether they
        did."""

    def release_held(self) -> Counter[Release]:
        """Give back every job still running (`worker.release.release_all`); what became of them."""

    def running_claims(self) -> list[Claim]:
        """The jobs still running here under a lease this process holds."""


def _never() -> bool:
    return False


def drain(mode: Drainable, settings: Settings, urgent: Callable[[], bool] = _never) -> int:
    """Stop `mode` as this module says; returns the exit code (`EXIT_LEFT_JOBS` when a job was left
    running)."""
    grace = settings.shutdown_grace_seconds
    mode.stop_taking_work()
    log.info("stopping: no new claims; up to %.1fs for %d running job(s)", grace, len(mode.running_claims()))
    if not mode.wait_idle(grace, urgent):
        _release_held(mode, settings, urgent)
    left = mode.running_claims()
    for claim in left:
        log.error("job %s epoch %d left running: its lease will expire", claim.job_id, claim.epoch)
    return EXIT_LEFT_JOBS if left else EXIT_CLEAN


def _release_held(mode: Drainable, settings: Settings, urgent: Callable[[], bool]) -> None:
    handed = mode.release_held()
    log.info("grace period over: handed back %s", listed({k.value: n for k, n in handed.items()}) or "none")
    kept = handed.total() - handed[Release.RELEASED]
    wait = RELEASE_SETTLE_SECONDS
    if kept:
        wait = max(settings.shutdown_grace_seconds, settings.lease_seconds)
        log.info(
            "waiting up to %.1fs for %d job(s) not handed back (%d with an external effect in flight)",
            wait,
            kept,
            handed[Release.MUST_FINISH],
        )
    mode.wait_idle(wait, urgent)


def listed(counts: dict[str, int]) -> str:
    """`name=n, ...` in the order given."""
    return ", ".join(f"{name}={n}" for name, n in counts.items())
