"""When a schedule's slots fall, and which due slots a firing makes jobs of. Pure: no store, no clock.

A slot is an instant in whole seconds. A cron expression (read by `croniter`) names its slots in a time zone:
they are that zone's wall-clock times, converted to UTC. On the night a zone's clocks go back, a wall-clock
time that comes twice is one slot when the expression names its hours (`30 2 * * *` runs once) and two when
it takes every hour (`0 * * * *` runs each real hour); a time the clocks skip when they go forward runs at
the first wall-clock time after the gap (`30 2 * * *` at 03:00 that day). An interval (`every`) counts its
slots from the Unix epoch: `every 1h` falls on the hour in UTC, `every 10m` on :00, :10, ... whenever the
schedule was added.

`plan` decides what a firing does: every slot due within the last `MISSED_AFTER_SECONDS` makes a job (a
firing that comes late by a moment loses none); an older slot was missed (no relay fired it in time: they
were all down, or none held the relay role) and makes a job only under the `latest` policy, and then only
the latest of them, when no slot is due within that window.

What `of` refuses keeps that promise: a slot must be the same instant at every computation (a random `R` or
hashed `H` field is not), the expression is the five fields the docs name (croniter's sixth would read
seconds, where other crons read them first, and a seventh a year, which ends a schedule), and the zone is
an IANA name. `first_after` refuses an expression that has no slot within `FIRST_SLOT_WITHIN_YEARS`
(February 30th, April 31st): it would never fire.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadDateError, croniter

from outbox_bridge.core.durations import format_duration

# A slot a firing reaches later than this is missed. Longer than a relay takes to fire a due slot (it looks
# every half second) and than a standby takes to take the relay role over from a relay that died.
MISSED_AFTER_SECONDS = 10.0
# A slot is a whole second, so an interval is at least one.
SHORTEST_INTERVAL_SECONDS = 1
# A cron expression's first slot comes within this many years, or the expression is refused: longer than
# the eight years between two February 29ths, shorter than any wait worth a schedule.
FIRST_SLOT_WITHIN_YEARS = 10
# The longest time zone name read: IANA's longest is 32 characters.
MAX_TIMEZONE_CHARACTERS = 64
# The fields of a cron expression, as the docs name them.
CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")


class UnknownZone(ValueError):
    """The time zone of a cron expression is not one `Recurrence.of` reads; the message says why."""


class CatchUp(StrEnum):
    """What a schedule makes of the slots it missed: the latest of them, or none."""

    LATEST = "latest"
    NONE = "none"


@dataclass(frozen=True)
class Recurrence:
    """A cron expression in a time zone (`cron`, `timezone`), or a fixed interval (`every_seconds`)."""

    cron: str | None = None
    timezone: str | None = None
    every_seconds: int | None = None

    @classmethod
    def of(cls, *, cron: str | None, timezone: str | None, every_seconds: int | None) -> Recurrence:
        """The recurrence these options name; `ValueError` saying what is wrong: neither or both of a cron
        expression and an interval, a time zone with an interval, a zone that is not an IANA name this
        system knows, an expression that is not five fields (or an alias such as `@daily`), a random (`R`)
        or hashed (`H`) field, an expression `croniter` does not read, an interval under a second."""
        if (cron is None) == (every_seconds is None):
            raise ValueError("give a cron expression or an interval, not both and not neither")
        if every_seconds is not None:
            if timezone is not None:
                raise ValueError("a time zone goes with a cron expression; an interval counts in UTC")
            if every_seconds < SHORTEST_INTERVAL_SECONDS:
                raise ValueError(f"an interval is at least {SHORTEST_INTERVAL_SECONDS}s")
            return cls(every_seconds=every_seconds)
        assert cron is not None
        zone = timezone or "UTC"
        _check_zone(zone)
        _check_fields(cron)
        if not croniter.is_valid(cron):
            raise ValueError(f"{cron!r} is not a cron expression (such as '0 9 * * 1-5')")
        return cls(cron=cron, timezone=zone)

    def describe(self) -> str:
        """`every 1h`, or `cron 0 9 * * * (Europe/Berlin)`."""
        if self.every_seconds is not None:
            return f"every {format_duration(self.every_seconds)}"
        return f"cron {self.cron} ({self.timezone})"

    def first_after(self, t: float) -> float:
        """The first slot later than `t`, as `next_after`; `ValueError` when a cron expression has none
        within `FIRST_SLOT_WITHIN_YEARS` of `t` (a day no month has, such as `0 0 30 2 *`): the check of a
        new schedule, whose first slot this is."""
        if self.cron is not None:
            try:
                croniter(
                    self.cron, self._wall(t), max_years_between_matches=FIRST_SLOT_WITHIN_YEARS
                ).get_next()
            except CroniterBadDateError:
                raise ValueError(
                    f"{self.cron!r} has no slot in the next {FIRST_SLOT_WITHIN_YEARS} years: it would "
                    "never fire (as on February 30th)"
                ) from None
        return self.next_after(t)

    def next_after(self, t: float) -> float:
        """The first slot later than `t`."""
        if self.every_seconds is not None:
            return float((math.floor(t / self.every_seconds) + 1) * self.every_seconds)
        found = self._cron_from(math.floor(t))
        while True:
            slot = found.get_next(datetime).timestamp()
            if self._is_slot(slot):
                return slot

    def latest_at_or_before(self, t: float) -> float:
        """The last slot at or before `t`."""
        if self.every_seconds is not None:
            return float(math.floor(t / self.every_seconds) * self.every_seconds)
        found = self._cron_from(math.floor(t) + 1)
        while True:
            slot = found.get_prev(datetime).timestamp()
            if self._is_slot(slot):
                return slot

    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone or "UTC")

    def _cron_from(self, second: int) -> croniter:
        return croniter(self.cron, self._wall(second))

    def _wall(self, t: float) -> datetime:
        return datetime.fromtimestamp(math.floor(t), self._zone())

    def _is_slot(self, instant: float) -> bool:
        """Whether an instant `croniter` found is a slot: not the second pass of a wall-clock time the
        clocks repeat (the same wall-clock time read as its first pass is earlier), unless the expression
        runs every hour. Read from the instant: the `fold` of what `croniter` returns is not to be trusted."""
        wall = datetime.fromtimestamp(instant, self._zone())
        return wall.replace(fold=0).timestamp() == instant or self._every_hour()

    def _every_hour(self) -> bool:
        return bool(croniter(self.cron).expanded[1] == ["*"])


def _check_zone(zone: str) -> None:
    """`UnknownZone` unless `zone` names an IANA time zone this system knows. Its length is bounded before
    anything looks it up, and `localtime` (whatever the host's clock is set to) is not one: every relay
    must read a slot the same."""
    if len(zone) > MAX_TIMEZONE_CHARACTERS:
        raise UnknownZone(
            f"a time zone is an IANA name of at most {MAX_TIMEZONE_CHARACTERS} characters (such as "
            f"Europe/Berlin), not one of {len(zone)}"
        )
    if zone == "localtime" or zone not in _known_zones():
        raise UnknownZone(f"{zone!r} is not a time zone this system knows (such as Europe/Berlin)")


@cache
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


def _check_fields(cron: str) -> None:
    """`ValueError` for a cron expression whose slot is not fixed (a random `R` or hashed `H` field: each
    reading draws another, so a slot would move and its key with it) or that is not the five fields
    `CRON_FIELDS` (an alias such as `@daily` is one word)."""
    fields = cron.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        return
    if len(fields) != len(CRON_FIELDS):
        raise ValueError(
            f"{cron!r} is not a cron expression of five fields ({' '.join(CRON_FIELDS)}), such as "
            "'0 9 * * 1-5'"
        )
    for name, field in zip(CRON_FIELDS, fields, strict=True):
        if field[:1] in ("R", "r", "H", "h"):  # no month or weekday name starts so
            raise ValueError(
                f"{cron!r} has a random or hashed {name} ({field!r}), which moves its slots each time "
                "they are computed: one job per slot needs fixed slots"
            )


@dataclass(frozen=True)
class Firing:
    """What one firing of a schedule does: a job for each of `slots` (oldest first), `skipped` slots
    missed and left without one, and the schedule's next slot after it (`next_slot`, later than now)."""

    slots: tuple[float, ...]
    skipped: int
    next_slot: float


def plan(
    recurrence: Recurrence,
    next_slot: float,
    now: float,
    catch_up: CatchUp,
    missed_after: float = MISSED_AFTER_SECONDS,
) -> Firing:
    """What a firing at `now` does for a schedule whose next unfired slot is `next_slot`."""
    if next_slot > now:
        return Firing((), 0, next_slot)
    horizon = now - missed_after
    slot = next_slot if next_slot > horizon else recurrence.next_after(horizon)
    current: list[float] = []
    while slot <= now:
        current.append(slot)
        slot = recurrence.next_after(slot)
    if next_slot > horizon:
        return Firing(tuple(current), 0, slot)
    latest_missed = recurrence.latest_at_or_before(horizon)
    missed = _count(recurrence, next_slot, latest_missed)
    if catch_up is CatchUp.LATEST and not current:
        return Firing((latest_missed,), missed - 1, slot)
    return Firing(tuple(current), missed, slot)


def _count(recurrence: Recurrence, first: float, last: float, most: int = 1000) -> int:
    """How many slots lie from `first` to `last` (both slots), counted up to `most`."""
    if recurrence.every_seconds is not None:
        return round((last - first) / recurrence.every_seconds) + 1
    count, slot = 1, first
    while slot < last and count < most:
        slot = recurrence.next_after(slot)
        count += 1
    return count


def slot_text(slot: float) -> str:
    """A slot as RFC 3339 in UTC, to the second: `2026-12-05T09:00:00Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(slot))


def slot_key(name: str, slot: float) -> str:
    """The idempotency key of the job a schedule makes for `slot`, in the schedule's tenant."""
    return f"schedule:{name}:{slot_text(slot)}"
