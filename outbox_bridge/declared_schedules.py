"""`outbox_bridge.schedule`: a schedule declared in code, next to the kinds, when a kinds module is imported:

    outbox_bridge.schedule("nightly", kind="export", tenant="acme", payload={"rows": 10}, cron="0 2 * * *")

A declaration only records the schedule in this process (`handlers.schedules`). The relay that holds the
relay role loads the kinds modules and brings the store's schedules in line with what they declare each
time it takes the role (`relay.schedules.sync_declared`): it adds a schedule that is missing, updates one
that differs, and marks both declared in code. What can be checked without the deployment is checked here,
so that a wrong name, cron expression, interval, time zone or priority stops the import with one line;
whether the kind is one the deployment accepts and the payload fits it is checked as `outbox-bridge
schedules add` checks it, by the relay, which logs a declaration it cannot use and goes on with the others.
It lives above the kinds' floor, as `outbox_bridge.kind`'s `enqueue` does: a name is a tenant's name as the
api reads it."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from outbox_bridge.api.auth import NAME_RULE, is_valid_name
from outbox_bridge.core import clock
from outbox_bridge.core.durations import parse_duration
from outbox_bridge.core.recurrence import Recurrence
from outbox_bridge.handlers.base import KindError
from outbox_bridge.handlers.schedules import DeclaredSchedule, register
from outbox_bridge.jobstore.priorities import LABELS


def schedule(
    name: str,
    *,
    kind: str,
    tenant: str,
    payload: dict[str, Any] | BaseModel,
    cron: str | None = None,
    every: str | float | timedelta | None = None,
    timezone: str = "UTC",
    priority: str | None = None,
) -> DeclaredSchedule:
    """Declare the schedule `name` of `tenant`: a job of `kind` with `payload` for every slot of `cron` (read
    in `timezone`) or of `every` (a duration such as "10m", a number of seconds or a `timedelta`, counted
    from the Unix epoch), at `priority` (the kind's default when None). `KindError` saying what is wrong,
    and for a (tenant, name) declared twice, naming both places."""
    where = _caller()
    said = f"schedule {tenant}/{name} (in {where})"
    for field, value in (("tenant", tenant), ("name", name)):
        if not is_valid_name(value):
            raise KindError(f"{said}: the {field} must be {NAME_RULE}")
    if priority not in (None, *LABELS):
        raise KindError(f"{said}: priority must be 'high', 'normal' or 'low'")
    new = DeclaredSchedule(
        tenant=tenant,
        name=name,
        kind=kind,
        payload=_payload(said, payload),
        recurrence=_recurrence(said, cron, every, timezone),
        priority=priority,
        declared_in=where,
    )
    return register(new)


def _recurrence(
    said: str, cron: str | None, every: str | float | timedelta | None, timezone: str
) -> Recurrence:
    """The slots, as `schedules add` reads them: a cron expression in a time zone or an interval of whole
    seconds (a time zone other than UTC goes with a cron expression only), with a first slot to come."""
    try:
        seconds = None if every is None else _seconds(every)
        zone = timezone if cron is not None or timezone != "UTC" else None
        recurrence = Recurrence.of(cron=cron, timezone=zone, every_seconds=seconds)
        recurrence.first_after(clock.now())
    except ValueError as exc:
        raise KindError(f"{said}: {exc}") from None
    return recurrence


def _seconds(every: str | float | timedelta) -> int:
    """`every` in whole seconds; `ValueError` for anything else."""
    if isinstance(every, str):
        return parse_duration(every)
    seconds = every.total_seconds() if isinstance(every, timedelta) else every
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds != int(seconds):
        raise ValueError(f"every {every!r} is not a whole number of seconds")
    return int(seconds)


def _payload(said: str, payload: dict[str, Any] | BaseModel) -> dict[str, Any]:
    """A copy of the payload as JSON reads it (a model as its JSON fields), so that later changes to the
    object given change nothing."""
    document = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
    if not isinstance(document, dict):
        raise KindError(f"{said}: the payload must be a JSON object (a dict or the kind's model)")
    try:
        copied: dict[str, Any] = json.loads(json.dumps(document, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise KindError(f"{said}: the payload is not JSON: {exc}") from None
    return copied


def _caller() -> str:
    """Where `schedule` was called from: `module:line`."""
    frame = sys._getframe(2)
    return f"{frame.f_globals.get('__name__', '?')}:{frame.f_lineno}"
