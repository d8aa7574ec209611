"""The scheduler, firing the schedules' due slots: the leader (the relay that holds the relay role) looks
every `CHECK_SECONDS` and fires each schedule whose next slot has come, in a transaction of its own
(`jobstore.schedules.fire`), so that one schedule the store refuses holds back no other. A relay that does
not hold the role fires nothing; one that fires what another relay fired a moment before finds the slots'
keys taken and makes nothing.

Each time the relay takes the role it first brings the store's schedules in line with the ones its kinds
modules declare (`outbox_bridge.schedule`; `sync_declared`). A schedule marked declared that no module
declares any more is unmarked, with a warning, and runs on: removing a team's schedule is an operator's
call (`outbox-bridge schedules pause|remove`). Like the firings, these writes are not fenced by the role's
token: two relays that both believe they lead write the same declarations, and a slot's key still makes
one job of it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.recurrence import MISSED_AFTER_SECONDS, slot_text
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.schedules import DeclaredSchedule
from outbox_bridge.jobstore import db, schedules
from outbox_bridge.jobstore.schedules import Declared, Fired
from outbox_bridge.relay.loop import RelayLoop
from outbox_bridge.relay.services import PeriodicService

log = logging.getLogger("relay")

# How often the role's holder looks for due slots: a slot's job is made within this long of the slot.
CHECK_SECONDS = 1.0


@dataclass(frozen=True)
class Synced:
    """What bringing the declared schedules in did: what each declaration did to its schedule (`done`),
    the declarations it could not use and why (`refused`), and the schedules it unmarked (`undeclared`)."""

    done: list[tuple[DeclaredSchedule, Declared]] = field(default_factory=list)
    refused: list[tuple[DeclaredSchedule, str]] = field(default_factory=list)
    undeclared: list[tuple[str, str]] = field(default_factory=list)


def sync_declared(engine: Engine, settings: Settings, declared: Iterable[DeclaredSchedule]) -> Synced:
    """Bring the store's schedules in line with `declared`, each in a transaction of its own
    (`jobstore.schedules.declare`), a declaration read as `outbox-bridge schedules add` reads its options;
    then unmark the schedules marked declared that none of `declared` names (`schedules.undeclare`)."""
    synced = Synced()
    named = set()
    for declaration in declared:
        named.add((declaration.tenant, declaration.name))
        fields = _read(settings, declaration)
        if isinstance(fields, str):
            synced.refused.append((declaration, fields))
            continue
        actor = f"code:{declaration.module}"
        done = db.transact(engine, schedules.declare, **fields, now=clock.now(), actor=actor)
        synced.done.append((declaration, done))
    for stored in db.read(engine, schedules.list_all):
        key = (stored.tenant, stored.name)
        if stored.declared and key not in named:
            if db.transact(engine, schedules.undeclare, *key, clock.now(), actor="relay"):
                synced.undeclared.append(key)
    return synced


def _read(settings: Settings, declaration: DeclaredSchedule) -> dict[str, Any] | str:
    """The keyword arguments of `jobstore.schedules.add` for `declaration`, checked as the command line
    checks a new schedule (a kind the deployment accepts, a payload that fits it); else why not."""
    # Imported here: the request's rules read the api's payload models, which only this step of a relay needs.
    from outbox_bridge.api.schedule_request import ScheduleRefused, read_new_schedule

    d, recurrence = declaration, declaration.recurrence
    every = None if recurrence.every_seconds is None else str(recurrence.every_seconds)
    try:
        schedule = read_new_schedule(
            settings, tenant=d.tenant, name=d.name, kind=d.kind, payload=json.dumps(d.payload),
            cron=recurrence.cron, timezone=recurrence.timezone, every=every, priority=d.priority,
            catch_up="latest", now=clock.now(), owner=f"schedule:{d.name}", label=str,
        )  # fmt: skip
    except ScheduleRefused as exc:
        return str(exc)
    return schedule.fields()


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


def report_synced(synced: Synced) -> None:
    """Log what bringing the declared schedules in did: each schedule added, updated or marked, each
    declaration that could not be used, each schedule no longer declared (once: it is unmarked then)."""
    for declaration, done in synced.done:
        if done.action is not None:
            log.info("schedule %s: %s", _named(declaration), _said(done))
    for declaration, refusal in synced.refused:
        log.error("schedule %s is not kept in the store: %s", _named(declaration), refusal)
    for tenant, name in synced.undeclared:
        log.warning(
            "schedule %s/%s was declared in code and no kinds module declares it now: it runs on as an "
            "operator's schedule (`outbox-bridge schedules pause|remove %s --tenant %s`)",
            tenant,
            name,
            name,
            tenant,
        )
    unchanged = sum(done.action is None for _, done in synced.done)
    log.info(
        "declared schedules in line: %d in the store, %d of them as declared already, %d refused",
        len(synced.done),
        unchanged,
        len(synced.refused),
    )


def _named(declaration: DeclaredSchedule) -> str:
    return f"{declaration.tenant}/{declaration.name} (declared in {declaration.declared_in})"


def _said(done: Declared) -> str:
    if done.action == "update":
        return f"updated its {', '.join(done.changed)}"
    return "added" if done.action == "add" else "marked declared in code"


@dataclass(frozen=True)
class Round:
    """One look of the scheduler: the declared schedules brought in (None when it did not), the firings."""

    synced: Synced | None
    fired: list[Fired]


class Scheduler(PeriodicService[Round]):
    """`fire_due` every `CHECK_SECONDS` while `is_leader()`, after `sync_declared` of `declared` at the first
    look after each `elected()`; what they did is logged (`report_synced`, `report`)."""

    name = "schedules"

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        loop: RelayLoop,
        is_leader: Callable[[], bool],
        declared: Iterable[DeclaredSchedule] = (),
    ) -> None:
        super().__init__(loop, CHECK_SECONDS)
        self._settings = settings
        self._engine = engine
        self._is_leader = is_leader
        self._declared = tuple(declared)
        # Elections counted on the loop; the last one whose sync ran, on the store thread (a failed sync
        # runs again at the next look).
        self._elections = 0
        self._synced = 0

    def elected(self) -> None:
        """The relay took the relay role, or leads again: sync the declared schedules at the next look."""
        self._elections += 1

    def wanted(self) -> bool:
        return self._is_leader()

    def work(self) -> Round:
        election, synced = self._elections, None
        if election != self._synced:
            synced = sync_declared(self._engine, self._settings, self._declared)
            self._synced = election
        return Round(synced, fire_due(self._engine, self._settings))

    def done(self, result: Round) -> None:
        if result.synced is not None:
            report_synced(result.synced)
        report(result.fired)
