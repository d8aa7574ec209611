"""When a schedule's slots fall and which of them a firing makes jobs of (`core.recurrence`): intervals from
the epoch, cron expressions in a time zone across both changes of daylight saving time, and the catch-up
policies after downtime."""

from __future__ import annotations

from datetime import datetime

import pytest

from outbox_bridge.core.recurrence import (
    MISSED_AFTER_SECONDS,
    CatchUp,
    Firing,
    Recurrence,
    UnknownZone,
    plan,
    slot_key,
    slot_text,
)


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def slots_after(recurrence: Recurrence, start: str, count: int) -> list[str]:
    found, t = [], at(start)
    for _ in range(count):
        t = recurrence.next_after(t)
        found.append(slot_text(t))
    return found


def every(seconds: int) -> Recurrence:
    return Recurrence.of(cron=None, timezone=None, every_seconds=seconds)


def cron(expression: str, zone: str = "UTC") -> Recurrence:
    return Recurrence.of(cron=expression, timezone=zone, every_seconds=None)


def test_an_interval_falls_on_multiples_of_itself_from_the_epoch() -> None:
    assert slots_after(every(600), "2026-12-05T09:07:30+00:00", 3) == [
        "2026-12-05T09:10:00Z",
        "2026-12-05T09:20:00Z",
        "2026-12-05T09:30:00Z",
    ]
    assert every(600).next_after(at("2026-12-05T09:10:00+00:00")) == at("2026-12-05T09:20:00+00:00")
    assert every(600).latest_at_or_before(at("2026-12-05T09:10:00+00:00")) == at("2026-12-05T09:10:00+00:00")


def test_a_daily_time_in_berlin_moves_in_utc_when_the_clocks_go_forward_and_back() -> None:
    nine = cron("0 9 * * *", "Europe/Berlin")
    assert slots_after(nine, "2026-03-27T12:00:00+00:00", 3) == [
        "2026-03-28T08:00:00Z",  # CET, +01:00
        "2026-03-29T07:00:00Z",  # CEST from that night on, +02:00
        "2026-03-30T07:00:00Z",
    ]
    assert slots_after(nine, "2026-10-24T12:00:00+00:00", 2) == [
        "2026-10-25T08:00:00Z",
        "2026-10-26T08:00:00Z",
    ]
    assert nine.latest_at_or_before(at("2026-03-29T06:59:59+00:00")) == at("2026-03-28T08:00:00+00:00")


def test_a_time_the_clocks_repeat_is_one_slot_and_a_skipped_one_runs_after_the_gap() -> None:
    half_past_two = cron("30 2 * * *", "Europe/Berlin")
    # 02:30 comes twice on 25 October (00:30Z in CEST, 01:30Z in CET): one slot, the first.
    assert slots_after(half_past_two, "2026-10-24T12:00:00+00:00", 2) == [
        "2026-10-25T00:30:00Z",
        "2026-10-26T01:30:00Z",
    ]
    assert half_past_two.latest_at_or_before(at("2026-10-25T01:45:00+00:00")) == at(
        "2026-10-25T00:30:00+00:00"
    )
    # 02:30 does not exist on 29 March: the slot is the first wall-clock time after the gap, 03:00 CEST.
    assert slots_after(half_past_two, "2026-03-28T12:00:00+00:00", 2) == [
        "2026-03-29T01:00:00Z",
        "2026-03-30T00:30:00Z",
    ]


def test_an_hourly_expression_runs_every_real_hour_through_the_repeated_one() -> None:
    hourly = cron("0 * * * *", "Europe/Berlin")
    assert slots_after(hourly, "2026-10-24T23:30:00+00:00", 3) == [
        "2026-10-25T00:00:00Z",  # 02:00 CEST
        "2026-10-25T01:00:00Z",  # 02:00 CET, the same wall-clock time an hour later
        "2026-10-25T02:00:00Z",
    ]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"cron": "61 * * * *", "timezone": None, "every_seconds": None}, "not a cron expression"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus", "every_seconds": None}, "not a time zone"),
        ({"cron": "* * * * *", "timezone": "../etc/passwd", "every_seconds": None}, "not a time zone"),
        ({"cron": None, "timezone": "UTC", "every_seconds": 60}, "a time zone goes with a cron"),
        ({"cron": None, "timezone": None, "every_seconds": None}, "not both and not neither"),
        ({"cron": "* * * * *", "timezone": None, "every_seconds": 60}, "not both and not neither"),
        ({"cron": None, "timezone": None, "every_seconds": 0}, "at least 1s"),
    ],
)
def test_what_is_not_a_recurrence_is_refused_saying_why(options: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Recurrence.of(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "expression",
    ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *", "*/5 * 30,31 2 *", "0 0 * 2 1#5"],
    ids=["february-30", "april-31", "31st-of-short-months", "every-5-minutes-of-february-30", "next-in-2044"],
)
def test_an_expression_with_no_slot_within_ten_years_is_refused_as_one_that_never_fires(
    expression: str,
) -> None:
    recurrence = cron(expression)
    with pytest.raises(ValueError, match=r"no slot in the next 10 years: it would never fire") as refused:
        recurrence.first_after(at("2026-12-07T12:00:00+00:00"))
    assert "\n" not in str(refused.value)


def test_a_leap_day_has_its_first_slot_even_across_the_eight_years_without_one() -> None:
    leap_day = cron("0 0 29 2 *")
    assert slot_text(leap_day.first_after(at("2026-12-07T12:00:00+00:00"))) == "2028-02-29T00:00:00Z"
    assert slot_text(leap_day.first_after(at("2096-03-01T00:00:00+00:00"))) == "2104-02-29T00:00:00Z"
    assert slot_text(every(3600).first_after(at("2026-12-07T12:30:00+00:00"))) == "2026-12-07T13:00:00Z"


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("R R * * *", "random or hashed minute ('R')"),
        ("0 R * * *", "random or hashed hour ('R')"),
        ("0 0 r(1-28) * *", "random or hashed day-of-month ('r(1-28)')"),
        ("R/15 * * * *", "random or hashed minute ('R/15')"),
        ("H 9 * * *", "random or hashed minute ('H')"),
    ],
)
def test_a_random_or_hashed_field_is_refused_since_its_slot_moves_at_each_computation(
    expression: str, says: str
) -> None:
    with pytest.raises(ValueError, match=r"one job per slot needs fixed slots") as refused:
        cron(expression)
    assert says in str(refused.value)


@pytest.mark.parametrize(
    "expression", ["0 9 * * * 30", "0 9 * * *  * 2030", "0 9 *"], ids=["seconds", "year", "three"]
)
def test_an_expression_of_other_than_five_fields_is_refused(expression: str) -> None:
    with pytest.raises(ValueError, match=r"not a cron expression of five fields \(minute hour"):
        cron(expression)


def test_names_aliases_and_the_extensions_croniter_reads_to_fixed_days_are_taken() -> None:
    for expression in ("0 9 * mar-apr fri", "0 9 * * thu", "@daily", "0 9 L * *", "0 9 * * 1#2"):
        assert cron(expression).cron == expression
    assert slots_after(cron("0 9 * * thu"), "2026-12-07T00:00:00+00:00", 1) == ["2026-12-10T09:00:00Z"]


@pytest.mark.parametrize(
    ("zone", "says"),
    [
        ("A" * 5000, "an IANA name of at most 64 characters (such as Europe/Berlin), not one of 5000"),
        ("Europe/" + "B" * 300, "not one of 307"),
        ("localtime", "'localtime' is not a time zone"),
        ("europe/berlin", "not a time zone"),
        ("Europe/Berlin\n", "not a time zone"),
        ("/usr/share/zoneinfo/UTC", "not a time zone"),
    ],
)
def test_a_time_zone_that_is_not_a_known_iana_name_is_refused_in_one_line_whatever_its_length(
    zone: str, says: str
) -> None:
    with pytest.raises(UnknownZone) as refused:
        cron("0 9 * * *", zone)
    said = str(refused.value)
    assert says in said and "\n" not in said and len(said) < 200


MINUTE = every(60)


def test_a_slot_not_due_yet_makes_nothing() -> None:
    assert plan(MINUTE, 120.0, 119.9, CatchUp.LATEST) == Firing((), 0, 120.0)


def test_each_slot_due_within_the_window_makes_a_job_whatever_the_policy() -> None:
    second = every(1)
    for policy in CatchUp:
        assert plan(second, 100.0, 103.5, policy) == Firing((100.0, 101.0, 102.0, 103.0), 0, 104.0)


def test_after_downtime_latest_makes_only_the_latest_missed_slot_and_none_makes_none() -> None:
    now = 600.0 + MISSED_AFTER_SECONDS + 5  # the slot at 600 was missed; the next is at 660
    assert plan(MINUTE, 120.0, now, CatchUp.LATEST) == Firing((600.0,), 8, 660.0)
    assert plan(MINUTE, 120.0, now, CatchUp.NONE) == Firing((), 9, 660.0)


def test_after_downtime_a_slot_due_within_the_window_is_the_latest_and_the_missed_ones_make_nothing() -> None:
    now = 600.5  # 600 has just come due; 120 to 540 were missed
    for policy in CatchUp:
        assert plan(MINUTE, 120.0, now, policy) == Firing((600.0,), 8, 660.0)


def test_a_slot_key_names_the_schedule_and_the_slot_in_utc_to_the_second() -> None:
    assert slot_key("nightly", at("2026-12-05T10:00:00+01:00")) == "schedule:nightly:2026-12-05T09:00:00Z"
