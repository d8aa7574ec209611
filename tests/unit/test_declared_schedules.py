"""`outbox_bridge.schedule` as a kinds module calls it at import: what it records, and the one-line error for
what `outbox-bridge schedules add` would refuse without the deployment (a name, a cron expression, an
interval, a time zone, a priority), or for a schedule declared twice, naming both places."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import timedelta

import pytest
from pydantic import BaseModel

import outbox_bridge
from outbox_bridge.core.recurrence import Recurrence
from outbox_bridge.handlers.schedules import DECLARED


@pytest.fixture(autouse=True)
def empty_registry() -> Iterator[None]:
    """The process-wide declarations, empty for the test and as they were after it."""
    before = dict(DECLARED)
    DECLARED.clear()
    yield
    DECLARED.clear()
    DECLARED.update(before)


class Export(BaseModel):
    rows: int
    chunk: int


def test_a_declaration_is_recorded_with_its_slots_and_where_it_was_made() -> None:
    line = inspect.stack()[0].lineno + 1
    made = outbox_bridge.schedule("nightly", kind="export", tenant="acme", payload={"r": 3}, cron="0 2 * * *")

    assert DECLARED[("acme", "nightly")] is made
    assert made.recurrence == Recurrence(cron="0 2 * * *", timezone="UTC")
    assert (made.kind, made.payload, made.priority) == ("export", {"r": 3}, None)
    assert (made.declared_in, made.module) == (f"{__name__}:{line}", __name__)
    assert "schedule" in outbox_bridge.__all__


@pytest.mark.parametrize(
    ("every", "seconds"),
    [("10m", 600), ("1h30m", 5400), (90, 90), (5.0, 5), (timedelta(minutes=2), 120), ("45", 45)],
)
def test_every_takes_a_duration_a_number_of_seconds_or_a_timedelta(every: object, seconds: int) -> None:
    made = outbox_bridge.schedule("tick", kind="noop", tenant="acme", payload={}, every=every)  # type: ignore[arg-type]
    assert made.recurrence == Recurrence(every_seconds=seconds)


def test_a_cron_expression_reads_in_its_time_zone_and_a_model_payload_as_its_json() -> None:
    made = outbox_bridge.schedule(
        "morning", kind="export", tenant="acme", payload=Export(rows=10, chunk=5), cron="0 9 * * 1-5",
        timezone="Europe/Berlin", priority="high",
    )  # fmt: skip
    assert made.recurrence == Recurrence(cron="0 9 * * 1-5", timezone="Europe/Berlin")
    assert (made.payload, made.priority) == ({"rows": 10, "chunk": 5}, "high")


def test_the_payload_is_a_copy_of_what_was_given() -> None:
    payload = {"rows": [1, 2]}
    made = outbox_bridge.schedule("tick", kind="noop", tenant="acme", payload=payload, every="1m")
    payload["rows"].append(3)
    assert made.payload == {"rows": [1, 2]}


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"cron": "0 25 * * *"}, "not a cron expression"),
        ({"cron": "0 0 30 2 *"}, "it would never fire"),
        ({"cron": "0 H * * *"}, "random or hashed hour"),
        ({"cron": "0 9 * * *", "timezone": "Europe/Atlantis"}, "not a time zone"),
        ({"every": "10m", "timezone": "Europe/Berlin"}, "a time zone goes with a cron expression"),
        ({"every": "soon"}, "'soon' is not a duration"),
        ({"every": 1.5}, "not a whole number of seconds"),
        ({"every": timedelta(milliseconds=500)}, "not a whole number of seconds"),
        ({"every": 0}, "an interval is at least 1s"),
        ({"every": True}, "not a whole number of seconds"),
        ({}, "not both and not neither"),
        ({"cron": "* * * * *", "every": "1m"}, "not both"),
        ({"every": "1m", "tenant": "a b"}, "the tenant must be 1 to 128 characters"),
        ({"every": "1m", "name": ""}, "the name must be"),
        ({"every": "1m", "priority": "urgent"}, "priority must be 'high', 'normal' or 'low'"),
        ({"every": "1m", "payload": [1]}, "the payload must be a JSON object"),
        ({"every": "1m", "payload": {"at": object()}}, "the payload is not JSON"),
        ({"every": "1m", "payload": {"x": float("nan")}}, "the payload is not JSON"),
    ],
)
def test_what_schedules_add_would_refuse_stops_the_import_in_one_line(options: dict, says: str) -> None:
    values = {"name": "tick", "kind": "noop", "tenant": "acme", "payload": {}} | options
    with pytest.raises(outbox_bridge.KindError) as raised:
        outbox_bridge.schedule(**values)

    said = str(raised.value)
    assert says in said, said
    assert said.startswith(f"schedule {values['tenant']}/{values['name']} (in {__name__}:")
    assert len(said.splitlines()) == 1
    assert DECLARED == {}


def test_a_schedule_declared_twice_is_an_error_naming_both_places() -> None:
    first = outbox_bridge.schedule("tick", kind="noop", tenant="acme", payload={}, every="1m")
    outbox_bridge.schedule("tick", kind="noop", tenant="other", payload={}, every="1m")  # another tenant's
    with pytest.raises(outbox_bridge.KindError) as raised:
        outbox_bridge.schedule("tick", kind="export", tenant="acme", payload={}, every="5m")

    second_line = raised.traceback[0].lineno + 1
    assert str(raised.value) == (
        f"schedule acme/tick is declared twice: in {first.declared_in} and in {__name__}:{second_line}"
    )
    assert DECLARED[("acme", "tick")] is first
