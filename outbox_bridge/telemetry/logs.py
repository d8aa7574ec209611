"""Logs: how every process writes them (`configure`: `LOG_FORMAT=text` for a terminal, `json` for a log
pipeline, one object per line), and the one event per job state transition (`JobEvent`, `emit`), written
by the `outbox_bridge.events` logger only after the transaction that made the move committed.

An event carries the job's identity and where it is (id, tenant, kind, epoch, attempt, trace id), never its
payload or its result: those belong to the tenant, and a log line travels further than the store."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]

EVENTS = logging.getLogger("outbox_bridge.events")
ACCESS = logging.getLogger("outbox_bridge.access")

# The moves an operator should hear about; every other transition is INFO.
WARNING_EVENTS = frozenset({"failed", "dead", "unknown"})

# What every LogRecord has; anything else on a record came in through `extra=` and is a field of the line.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False, separators=(",", ":"))


class _Seconds:
    """The seconds part of a time (by default `2026-12-01T08:10:00`, UTC), formatted once per second, not
    once per line: `fmt` for `time.strftime` of what `convert` (`time.gmtime`, `time.localtime`) makes."""

    def __init__(self, fmt: str = "%Y-%m-%dT%H:%M:%S", convert: Callable[[float], Any] = time.gmtime) -> None:
        self.fmt, self.convert = fmt, convert
        self.last = (-1, "")  # one attribute, so a thread never sees one second with another's text

    def __call__(self, created: float) -> str:
        second = int(created)
        last_second, text = self.last
        if second != last_second:
            text = time.strftime(self.fmt, self.convert(second))
            self.last = (second, text)
        return text


def rfc3339(created: float, seconds: _Seconds | None = None) -> str:
    """`2026-12-01T08:10:00.123Z`: UTC, milliseconds."""
    text = (seconds or _Seconds())(created)
    return f"{text}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: `ts` (RFC 3339, UTC), `level`, `logger`, `message`, the
    process's `role` and `pid`, every field the record was given (`extra=`), and `exc` (the traceback as
    text) when it carries an exception. A value JSON cannot encode is written as its `str`."""

    def __init__(self, role: str | None = None) -> None:
        super().__init__()
        self.role = role
        self._seconds = _Seconds()

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": rfc3339(record.created, self._seconds),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.role is not None:
            line["role"] = self.role
        line["pid"] = record.process
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line.setdefault(key, value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return _ENCODER.encode(line)


class _TextFormatter(logging.Formatter):
    """`logging.Formatter` whose default time text is made once per second (`_Seconds`), not once per line."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._seconds = _Seconds(self.default_time_format, self.converter)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or not self.default_msec_format:
            return super().formatTime(record, datefmt)
        return self.default_msec_format % (self._seconds(record.created), record.msecs)


def text_formatter(role: str) -> logging.Formatter:
    """The terminal's format: time, role and pid, level, logger, message."""
    return _TextFormatter(f"%(asctime)s {role}[%(process)d] %(levelname)s %(name)s: %(message)s")


class _Handler(logging.StreamHandler):
    """The handler `configure` installs (so a second call replaces it, and leaves any other alone)."""

    def emit_all(self, records: list[logging.LogRecord]) -> None:
        """`emit` each record, in one write and one flush of the stream."""
        lines = []
        for record in records:
            try:
                lines.append(self.format(record) + self.terminator)
            except Exception:
                self.handleError(record)
        if not lines:
            return
        with self.lock:  # type: ignore[union-attr]
            try:
                self.stream.write("".join(lines))
                self.flush()
            except Exception:
                self.handleError(records[-1])


def configure(
    role: str, log_format: LogFormat = "text", *, stream: TextIO | None = None, job_events: bool = True
) -> None:
    """Send every logger's INFO and above to `stream` (stderr) in `log_format`, as the process `role`: a
    process configures its logging here, once (a second call replaces what the first installed). Without
    `job_events`, only the job events at WARNING (failed, dead, unknown) are logged, and the others are not
    even formatted."""
    handler = _Handler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter(role) if log_format == "json" else text_formatter(role))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    EVENTS.setLevel(logging.NOTSET if job_events else logging.WARNING)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One committed state transition of one job. `event` names the move (`accepted`, `published`,
    `claimed`, `checkpointed`, `succeeded`, `failed`, `dead`, `unknown`, `cancelled`, `requeued`,
    `snoozed`, `resolved`); `attempt` is the job's attempt count after it; `more` holds what only some
    moves say (an `error_code`, the `worker` that claimed, the `reason` of a requeue, the `state` a resolve
    chose, the `seconds` of a snooze).
    Build it from values the store already has: never the payload, never the result."""

    event: str
    job_id: str
    tenant: str | None
    kind: str | None
    epoch: int | None = None
    attempt: int | None = None
    trace_id: str | None = None
    more: tuple[tuple[str, Any], ...] = ()

    @property
    def level(self) -> int:
        return logging.WARNING if self.event in WARNING_EVENTS else logging.INFO

    def fields(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "job_id": self.job_id,
            "tenant": self.tenant,
            "kind": self.kind,
            "epoch": self.epoch,
            "attempt": self.attempt,
            "trace_id": self.trace_id,
            **dict(self.more),
        }


def job_event(
    event: str,
    job_id: str,
    *,
    tenant: str | None,
    kind: str | None,
    epoch: int | None = None,
    attempt: int | None = None,
    trace_id: str | None = None,
    **more: Any,
) -> JobEvent:
    """A `JobEvent`; `more` are the move's own fields (those that are None are left out)."""
    extra = tuple((key, value) for key, value in more.items() if value is not None)
    return JobEvent(event, job_id, tenant, kind, epoch, attempt, trace_id, extra)


def emit(events: Iterable[JobEvent]) -> None:
    """Log each event on `outbox_bridge.events`, one record each, its text `<event> job_id=<id> tenant=...`
    and its fields as the record's own. Call it only once the transaction that made the moves committed:
    the events of one transaction share its moment (one record is made, the others are copies of it), and
    when `configure`'s handler is the only one they reach, they are written in one write."""
    enabled = [e for e in events if EVENTS.isEnabledFor(e.level)]
    if not enabled:
        return
    # Made here rather than by `EVENTS.log`, which would walk the stack for a caller: it is this.
    first = EVENTS.makeRecord(EVENTS.name, logging.INFO, __file__, 0, "", (), None, "emit")
    records = [_record_of(first, e) for e in enabled]
    handler = _sole_handler()
    if handler is None:
        for record in records:
            EVENTS.handle(record)
    else:
        handler.emit_all([r for r in records if r.levelno >= handler.level and EVENTS.filter(r)])


def _record_of(first: logging.LogRecord, event: JobEvent) -> logging.LogRecord:
    """`first` (its time, process and thread) as the record of `event`."""
    fields = event.fields()
    names = tuple(fields)
    record = first.__class__.__new__(first.__class__)
    record.__dict__.update(first.__dict__)
    record.__dict__.update(fields)
    record.msg = _texts.get(names) or _text(names)
    record.args = tuple(fields.values())
    record.levelno, record.levelname = event.level, logging.getLevelName(event.level)
    return record


def _sole_handler() -> _Handler | None:
    """`configure`'s handler when it is the only one an event reaches and no filter stands on the way,
    else None (each record then takes logging's own path)."""
    if EVENTS.disabled or EVENTS.handlers or not EVENTS.propagate:
        return None
    found: list[logging.Handler] = []
    logger: logging.Logger | None = EVENTS.parent
    while logger is not None:
        found += logger.handlers
        logger = logger.parent if logger.propagate else None
    if len(found) != 1 or not isinstance(found[0], _Handler) or found[0].filters:
        return None
    return found[0]


# The text of an event, `%s job_id=%s tenant=%s ...`, by the names of its fields, in order (a few shapes).
_texts: dict[tuple[str, ...], str] = {}


def _text(names: tuple[str, ...]) -> str:
    text = _texts[names] = "%s " + " ".join(f"{key}=%s" for key in names[1:])
    return text
