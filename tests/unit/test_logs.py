"""The log format every process writes (`telemetry.logs`): JSON lines a log pipeline can parse, the text a
terminal reads, and the job events' fields and levels."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from outbox_bridge.telemetry import logs


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """What the root logger writes after `configure`, as JSON; the previous setup is put back after."""
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    out = io.StringIO()
    logs.configure("consumer", "json", stream=out)
    yield out
    for handler in root.handlers[:]:
        if handler not in before:
            root.removeHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_has_the_time_level_logger_message_and_process(stream: io.StringIO) -> None:
    logging.getLogger("relay").info("published %d rows", 3)
    [line] = lines(stream)
    assert line["level"] == "INFO"
    assert line["logger"] == "relay"
    assert line["message"] == "published 3 rows"
    assert line["role"] == "consumer"
    assert isinstance(line["pid"], int)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])
    at = datetime.fromisoformat(line["ts"])
    assert at.tzinfo is not None and at.utcoffset() == UTC.utcoffset(None)
    assert abs((datetime.now(UTC) - at).total_seconds()) < 600


def test_extra_fields_become_fields_of_the_line_and_odd_values_their_text(stream: io.StringIO) -> None:
    logging.getLogger("x").warning("odd", extra={"job_id": "j1", "count": 2, "where": object()})
    [line] = lines(stream)
    assert line["job_id"] == "j1"
    assert line["count"] == 2
    assert line["where"].startswith("<object object")


def test_an_exception_is_one_string_field_on_the_same_line(stream: io.StringIO) -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        logging.getLogger("x").exception("it failed")
    [line] = lines(stream)  # the traceback's newlines are escaped: still one line
    assert line["level"] == "ERROR"
    assert "ValueError: boom" in line["exc"]
    assert line["exc"].startswith("Traceback")


def test_configure_again_replaces_its_own_handler_only() -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    first, second = io.StringIO(), io.StringIO()
    try:
        logs.configure("api", "json", stream=first)
        logs.configure("api", "text", stream=second)
        logging.getLogger("x").info("hello")
        assert first.getvalue() == ""
        assert re.search(r" api\[\d+\] INFO x: hello$", second.getvalue().strip())
        assert foreign in root.handlers
    finally:
        for handler in root.handlers[:]:
            if isinstance(handler, logging.StreamHandler) and handler.stream in (first, second):
                root.removeHandler(handler)
        root.removeHandler(foreign)


def test_a_job_event_carries_the_jobs_identity_and_its_own_fields(stream: io.StringIO) -> None:
    event = logs.job_event(
        "claimed", "j1", tenant="acme", kind="noop", epoch=2, attempt=2, worker="w1", reason=None
    )
    logs.emit([event])
    [line] = lines(stream)
    assert line["logger"] == "outbox_bridge.events"
    assert {k: line[k] for k in ("event", "job_id", "tenant", "kind", "epoch", "attempt", "trace_id")} == {
        "event": "claimed", "job_id": "j1", "tenant": "acme", "kind": "noop", "epoch": 2, "attempt": 2,
        "trace_id": None,
    }  # fmt: skip
    assert line["worker"] == "w1"
    assert "reason" not in line  # a field a move does not have is left out
    text = "claimed job_id=j1 tenant=acme kind=noop epoch=2 attempt=2 trace_id=None worker=w1"
    assert line["message"] == text


def test_a_trace_id_given_to_the_builder_is_logged(stream: io.StringIO) -> None:
    logs.emit([logs.job_event("accepted", "j1", tenant="t", kind="k", trace_id="4bf92f3577b34da6")])
    assert lines(stream)[0]["trace_id"] == "4bf92f3577b34da6"


@pytest.mark.parametrize(
    ("event", "level"),
    [("failed", "WARNING"), ("dead", "WARNING"), ("unknown", "WARNING"), ("succeeded", "INFO"),
     ("accepted", "INFO"), ("requeued", "INFO"), ("cancelled", "INFO"), ("resolved", "INFO")],
)  # fmt: skip
def test_failed_dead_and_unknown_are_warnings_the_rest_info(
    stream: io.StringIO, event: str, level: str
) -> None:
    logs.emit([logs.job_event(event, "j1", tenant="t", kind="k")])
    assert lines(stream)[0]["level"] == level


def test_events_below_the_events_loggers_level_are_not_written(stream: io.StringIO) -> None:
    logs.EVENTS.setLevel(logging.WARNING)
    try:
        logs.emit([logs.job_event(e, "j1", tenant="t", kind="k") for e in ("claimed", "dead")])
    finally:
        logs.EVENTS.setLevel(logging.NOTSET)
    assert [line["event"] for line in lines(stream)] == ["dead"]


def test_times_are_utc_with_milliseconds_also_across_a_second_boundary() -> None:
    formatter = logs.JsonFormatter()
    record = logging.LogRecord("x", logging.INFO, "", 0, "m", None, None)
    stamps = []
    for created in (1764576000.25, 1764576000.999, 1764576001.0, 0.5):
        record.created = created
        stamps.append(json.loads(formatter.format(record))["ts"])
    assert stamps == [
        "2025-12-01T08:00:00.250Z",
        "2025-12-01T08:00:00.999Z",
        "2025-12-01T08:00:01.000Z",
        "1970-01-01T00:00:00.500Z",
    ]


def test_without_job_events_only_the_warning_ones_are_logged() -> None:
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    out = io.StringIO()
    try:
        logs.configure("worker", "json", stream=out, job_events=False)
        logs.emit([logs.job_event("succeeded", "job-1", tenant="t", kind="noop", epoch=1, attempt=1)])
        logs.emit([logs.job_event("dead", "job-2", tenant="t", kind="noop", epoch=3, attempt=3)])
        assert [(line["event"], line["job_id"]) for line in lines(out)] == [("dead", "job-2")]
    finally:
        for handler in root.handlers[:]:
            if handler not in before:
                root.removeHandler(handler)
        root.setLevel(level)
        logs.EVENTS.setLevel(logging.NOTSET)


class _Writes(io.StringIO):
    """A stream that counts the writes it takes."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@contextmanager
def alone() -> Iterator[logging.Logger]:
    """The root logger with no handler at all (pytest's own, added as each test runs, are set aside), put
    back as it was after."""
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    root.handlers = []
    try:
        yield root
    finally:
        root.handlers = before
        root.setLevel(level)


MOVES = [
    logs.job_event("claimed", "j1", tenant="acme", kind="noop", epoch=1, attempt=1, worker="w1"),
    logs.job_event("succeeded", "j2", tenant="acme", kind="noop", epoch=1, attempt=1),
    logs.job_event("dead", "j3", tenant="beta", kind="sleep", epoch=3, attempt=3, error_code="boom"),
]


def _without_time(text: str, log_format: str) -> list[Any]:
    if log_format == "json":
        return [{k: v for k, v in json.loads(line).items() if k != "ts"} for line in text.splitlines()]
    return [line.split(" ", 2)[2] for line in text.splitlines()]  # after the date and the time


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_transactions_events_are_one_write_with_the_lines_logging_would_write(
    log_format: logs.LogFormat,
) -> None:
    out = _Writes()
    with alone() as root:
        logs.configure("consumer", log_format, stream=out)
        logs.emit(MOVES)
        assert out.writes == 1
        batched = out.getvalue()
        # A second handler anywhere on the way: each record takes logging's own path, one write each.
        root.addHandler(logging.NullHandler())
        out.seek(0), out.truncate(0)
        out.writes = 0
        logs.emit(MOVES)
    assert out.writes == len(MOVES)
    assert _without_time(batched, log_format) == _without_time(out.getvalue(), log_format)
    assert len(batched.splitlines()) == len(MOVES)


def test_a_filter_on_the_handler_is_honoured() -> None:
    out = io.StringIO()
    with alone() as root:
        logs.configure("consumer", "json", stream=out)
        [handler] = root.handlers
        handler.addFilter(lambda record: getattr(record, "job_id", None) != "j2")
        logs.emit(MOVES)
    assert [line["job_id"] for line in lines(out)] == ["j1", "j3"]


def test_the_text_time_is_loggings_own_also_across_a_second_boundary() -> None:
    ours, theirs = logs.text_formatter("relay"), logging.Formatter("%(asctime)s")
    record = logging.LogRecord("x", logging.INFO, "", 0, "m", None, None)
    for created in (1764576000.25, 1764576000.999, 1764576001.0, 1764576001.5, 0.5):
        record.created, record.msecs = created, int(created % 1 * 1000)
        assert ours.formatTime(record) == theirs.formatTime(record)
