"""The scheduler, firing the schedules' due slots: the leader (the relay that holds the relay role) looks
every `CHECK_SECONDS` and fires each schedule whose next slot has come, in a transaction of its own
(`jobstore.schedules.fire`), so that one schedule the store refuses holds back no other. A relay that does
not hold the role fires nothing; one that fires what another relay fired a moment before finds the slots'
keys taken and makes nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.recurrence import MISSED_AFTER_SECONDS, slot_text
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, schedules
from outbox_bridge.jobstore.schedules import Fired
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.services import PeriodicService

log = logging.getLogger("relay")

# How often the role's holder looks for due slots: a slot's job is made within this long of the slot.
CHECK_SECONDS = 1.0


def fire_due(engine: Engine, settings: Settings) -> list[Fired]:
    """Fire every schedule due now; what each firing did."""
    now = clock.now()
    fired = []
    for tenant, name in db.read(engine, schedules.due, now):
        fired.append(
            db.transact(engine, schedules.fire, tenant, name, clock.now(), max_attempts=settings.max_attempts)
        )
    return fired


def report(fired: list[Fired]) -> None:
    """Log what the firings did: each job made, and the slots missed and left without a job."""
    for done in fired:
        schedule = f"{done.tenant}/{done.name}"
        for slot, job_id in done.made:
            log.info("schedule %s: slot %s -> job %s", schedule, slot_text(slot), job_id)
        if done.taken:
            log.info(
                "schedule %s: %d slots already had their jobs (fired before): %s",
                schedule,
                len(done.taken),
                ", ".join(slot_text(slot) for slot in done.taken),
            )
        if done.skipped:
            log.warning(
                "schedule %s: %d slots passed more than %.0fs before any relay could fire them: no job for "
                "them (its catch-up policy)",
                schedule,
                done.skipped,
                MISSED_AFTER_SECONDS,
            )


class Scheduler(PeriodicService[list[Fired]]):
    """`fire_due` every `CHECK_SECONDS` while `is_leader()`; what the firings did is logged (`report`)."""

    name = "schedules"

    def __init__(
        self, settings: Settings, engine: Engine, loop: RelayLoop, is_leader: Callable[[], bool]
    ) -> None:
        super().__init__(loop, CHECK_SECONDS)
        self._settings = settings
        self._engine = engine
        self._is_leader = is_leader

    def wanted(self) -> bool:
        return self._is_leader()

    def work(self) -> list[Fired]:
        return fire_due(self._engine, self._settings)

    def done(self, result: list[Fired]) -> None:
        report(result)
