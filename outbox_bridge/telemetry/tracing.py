"""Traces: one per job, from the api's accept through each relay publish to each consumer or worker attempt.

A job's trace context travels as a W3C `traceparent` string: the api stores its accept span's with the job,
the relay puts its publish span's in the AMQP headers, and an attempt's `run` span is a child of the
delivery's (or, claimed from the table, of the stored one). Spans are never made current: each names its
parent explicitly, so no context leaks between the jobs a thread serves.

Tracing is on in a process when the `otel` extra is installed and `OTEL_TRACES_EXPORTER` is set and not
`none`; `configure` reads that, with the other standard `OTEL_*` variables, once per process. Otherwise every
span here is a stand-in that records nothing and hands the parent's `traceparent` on unchanged, and
opentelemetry is never imported."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

log = logging.getLogger(__name__)

HEADER = "traceparent"

# version-trace id-parent id-flags; a later version may append fields (W3C Trace Context, section 3.2).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16

Attribute = str | int | float | bool


def parse(traceparent: str | None) -> tuple[int, int, int] | None:
    """(trace id, parent span id, flags) of a valid W3C `traceparent`; None for anything else (absent,
    malformed, version `ff`, an all-zero id, or extra fields on version `00`)."""
    if not traceparent:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return int(trace_id, 16), int(span_id, 16), int(flags, 16)


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a valid `traceparent`, else None: what a job's log events carry."""
    parsed = parse(traceparent)
    return f"{parsed[0]:032x}" if parsed else None


def valid(traceparent: str | None) -> str | None:
    """`traceparent` in its version-00 form if it is valid, else None (a new trace then)."""
    parsed = parse(traceparent)
    return format_traceparent(*parsed) if parsed else None


class Span(Protocol):
    """What the code sees of a span: its own `traceparent` (to store or to send on) and its attributes.
    Never give it a payload or a result."""

    @property
    def traceparent(self) -> str | None: ...

    def set_attribute(self, key: str, value: Attribute) -> None: ...


class _Passthrough:
    """Tracing off: records nothing; its traceparent is its parent's, so the context still travels."""

    def __init__(self, parent: str | None) -> None:
        self.traceparent = valid(parent)

    def set_attribute(self, key: str, value: Attribute) -> None:
        pass


class _Recorded:
    def __init__(self, span: Any) -> None:
        self._span = span
        context = span.get_span_context()
        self.traceparent = (
            format_traceparent(context.trace_id, context.span_id, int(context.trace_flags))
            if context.is_valid
            else None
        )

    def set_attribute(self, key: str, value: Attribute) -> None:
        self._span.set_attribute(key, value)


_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_configured = False
_lock = threading.Lock()


def enabled() -> bool:
    return _tracer is not None


@contextmanager
def span(
    name: str, parent: str | None, kind: str = "internal", attributes: Mapping[str, Attribute] | None = None
) -> Iterator[Span]:
    """A span named `name`, child of `parent` (a `traceparent`; a new trace when it is None or invalid),
    of `kind` (`server`, `producer`, `consumer` or `internal`), ended when the block ends; an exception
    leaving the block marks it as an error. With tracing off, a stand-in (see the module's docstring)."""
    tracer = _tracer
    if tracer is None:
        yield _Passthrough(parent)
        return
    from opentelemetry import trace

    otel_span = tracer.start_span(
        name,
        context=_context_of(parent),
        kind=getattr(trace.SpanKind, kind.upper()),
        attributes=dict(attributes or {}),
    )
    with trace.use_span(otel_span, end_on_exit=True, record_exception=False, set_status_on_exception=True):
        yield _Recorded(otel_span)


def _context_of(parent: str | None) -> Any:
    """An opentelemetry Context holding only `parent` (never the thread's current context)."""
    from opentelemetry import trace
    from opentelemetry.context import Context

    parsed = parse(parent)
    if parsed is None:
        return Context()
    trace_id, span_id, flags = parsed
    remote = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags & 0x01))
    return trace.set_span_in_context(trace.NonRecordingSpan(remote), Context())


def configure(role: str) -> bool:
    """Turn tracing on for this process when the environment asks for it (see the module's docstring):
    the exporters `OTEL_TRACES_EXPORTER` names (`otlp`, `console`, comma-separated), batched as the
    `OTEL_BSP_*` variables say, the sampler `OTEL_TRACES_SAMPLER` names, and the resource `OTEL_SERVICE_NAME`
    and `OTEL_RESOURCE_ATTRIBUTES` describe (the service name defaults to `outbox-bridge-<role>`). Only the
    first call in a process does anything; returns whether tracing is on."""
    global _configured
    with _lock:
        if _configured:
            return enabled()
        _configured = True
        names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
        if not names or "none" in names:
            return False
        try:
            provider = _provider(role, names)
        except ImportError as exc:
            log.warning(
                "OTEL_TRACES_EXPORTER is set but tracing is off: %s (pip install 'outbox-bridge[otel]')", exc
            )
            return False
        except (LookupError, ValueError) as exc:
            log.warning("tracing is off: %s", exc)
            return False
        install(provider)
        log.info("tracing on: exporting spans to %s", ", ".join(names))
        return True


def _provider(role: str, names: list[str]) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"outbox_bridge.role": role})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": f"outbox-bridge-{role}"}))
    provider = TracerProvider(resource=resource)  # exported at exit: it shuts down with the process
    for name in names:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    return provider


def _exporter(name: str) -> Any:
    """The span exporter registered under `name`; `otlp` is OTLP over HTTP (the extra's), or over gRPC when
    `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` is `grpc` and that exporter is installed."""
    from importlib.metadata import entry_points

    if name == "otlp":
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
        )
        name = "otlp_proto_grpc" if protocol == "grpc" else "otlp_proto_http"
    found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
    if not found:
        raise LookupError(f"no span exporter named {name!r} is installed")
    return found[0].load()()


def install(provider: Any) -> Any:
    """Record spans into `provider` (an opentelemetry TracerProvider), or stop recording with None;
    returns the tracer used before. Tests use it with the SDK's in-memory exporter."""
    global _tracer
    previous, _tracer = _tracer, None if provider is None else provider.get_tracer("outbox_bridge")
    return previous


def restore(tracer: Any) -> None:
    """Put back what `install` returned."""
    global _tracer
    _tracer = tracer
