"""A new schedule read from the text an operator typed, on the command line (`outbox-bridge schedules add`) or
in the dashboard's add form, and checked before anything is written: names as tenants' names go, a cron
expression in a time zone or an interval (`core.recurrence`), and each slot's job as `POST /jobs` takes one
(`accept_fields`: a kind the deployment accepts, a payload that fits it). One reading for both, so both
refuse the same things in the same words, each naming a field as its own surface names it (`label`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from outbox_bridge.api import payloads
from outbox_bridge.api.auth import NAME_RULE, is_valid_name
from outbox_bridge.api.problems import ProblemError
from outbox_bridge.api.schemas import JobCreate
from outbox_bridge.api.submission import accept_fields
from outbox_bridge.core.durations import parse_duration
from outbox_bridge.core.recurrence import CatchUp, Recurrence, UnknownZone, slot_key
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.priorities import Priority

# How a surface names a field in what it says: `--every` on the command line, `Every` on the page.
Label = Callable[[str], str]


class ScheduleRefused(ValueError):
    """The fields do not make a schedule; the message says which field and why, in one line."""


@dataclass(frozen=True)
class NewSchedule:
    """A schedule ready for `jobstore.schedules.add`: its payload as the kind reads it."""

    tenant: str
    name: str
    kind: str
    payload: dict[str, Any]
    priority: Priority
    recurrence: Recurrence
    catch_up: CatchUp
    concurrency_key: str | None = None

    def fields(self) -> dict[str, Any]:
        """The keyword arguments of `jobstore.schedules.add`, but for `now` and `actor`."""
        return {
            "tenant": self.tenant, "name": self.name, "kind": self.kind, "payload": self.payload,
            "priority": self.priority, "recurrence": self.recurrence, "catch_up": self.catch_up,
            "concurrency_key": self.concurrency_key,
        }  # fmt: skip


def read_new_schedule(
    settings: Settings,
    *,
    tenant: str,
    name: str,
    kind: str,
    payload: str,
    cron: str | None,
    timezone: str | None,
    every: str | None,
    priority: str | None,
    catch_up: str,
    now: float,
    owner: str,
    label: Label,
    concurrency_key: str | None = None,
) -> NewSchedule:
    """The schedule the fields name, or `ScheduleRefused` for the first thing wrong with them (checked in
    the order of the arguments: names, slots, catch-up, then the slots' job; a `priority` of None is the
    kind's default). Writes nothing; whether the name is taken is the store's to say (`ScheduleExists`)."""
    _check_name(label("tenant"), tenant)
    _check_name(label("name"), name)
    recurrence = _recurrence(cron, timezone, every, now, label)
    try:
        policy = CatchUp(catch_up)
    except ValueError:
        raise ScheduleRefused(f"{label('catch_up')} must be latest or none") from None
    job = _job_fields(settings, tenant, name, kind, payload, priority, concurrency_key, now, owner, label)
    return NewSchedule(
        tenant=tenant, name=name, kind=job["kind"], payload=job["payload"], priority=job["priority"],
        recurrence=recurrence, catch_up=policy, concurrency_key=job["concurrency_key"],
    )  # fmt: skip


def _check_name(field: str, value: str) -> None:
    if not is_valid_name(value):
        raise ScheduleRefused(f"{field} must be {NAME_RULE}")


def _recurrence(
    cron: str | None, timezone: str | None, every: str | None, now: float, label: Label
) -> Recurrence:
    """The recurrence the options name, with a first slot after `now` (`Recurrence.first_after`)."""
    try:
        seconds = None if every is None else parse_duration(every)
    except ValueError as exc:
        raise ScheduleRefused(f"{label('every')} {exc}") from None
    try:
        recurrence = Recurrence.of(cron=cron, timezone=timezone, every_seconds=seconds)
        recurrence.first_after(now)
    except UnknownZone as exc:
        raise ScheduleRefused(f"{label('timezone')}: {exc}") from None
    except ValueError as exc:
        raise ScheduleRefused(f"{label('cron' if every is None else 'every')}: {exc}") from None
    return recurrence


def _job_fields(
    settings: Settings,
    tenant: str,
    name: str,
    kind: str,
    payload: str,
    priority: str | None,
    concurrency_key: str | None,
    now: float,
    owner: str,
    label: Label,
) -> dict[str, Any]:
    """The slots' job as `POST /jobs` would take it (the kind accepted, the payload as the kind reads it),
    or `ScheduleRefused` saying why the api would refuse it."""
    try:
        document = payloads.loads(payload)
    except ValueError as exc:
        raise ScheduleRefused(f"{label('payload')} is not JSON: {exc}") from None
    except ProblemError as exc:
        raise ScheduleRefused(_problem(exc)) from None
    try:
        fields = {"kind": kind, "payload": document, "priority": priority}
        if concurrency_key is not None:
            fields["concurrency_key"] = concurrency_key
        request = JobCreate.model_validate(fields)
        # The rules of `POST /jobs` and `enqueue`, under a key such as the slots' (nothing is written here).
        return accept_fields(request, settings, now, tenant=tenant, owner=owner, key=slot_key(name, 0))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ScheduleRefused(f"{label(str(first['loc'][0]))}: {first['msg']}") from None
    except ProblemError as exc:
        raise ScheduleRefused(_problem(exc)) from None


def _problem(exc: ProblemError) -> str:
    """What the api's problem says, in one line: its detail and the first places it names."""
    issues = exc.extensions.get("errors") or []
    where = "; ".join(f"{'.'.join(map(str, i['loc'][1:]))}: {i['msg']}" for i in issues[:3])
    return f"{exc.detail.rstrip('.')}{f': {where}' if where else ''}"
