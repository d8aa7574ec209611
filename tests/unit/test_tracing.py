"""The trace context rules (`telemetry.tracing`): which `traceparent` is valid, that an invalid one starts a
new trace while a valid one is continued, that spans are stand-ins with tracing off, and that the worker side
imports and runs without opentelemetry at all."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outbox_bridge.broker.message import trace_headers, traceparent_of
from outbox_bridge.telemetry import tracing

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"

INVALID = {
    "empty": "",
    "garbage": "not-a-traceparent",
    "upper case": PARENT.upper(),
    "short trace id": f"00-{TRACE_ID[:-1]}-b7ad6b7169203331-01",
    "zero trace id": f"00-{'0' * 32}-b7ad6b7169203331-01",
    "zero span id": f"00-{TRACE_ID}-{'0' * 16}-01",
    "version ff": f"ff-{TRACE_ID}-b7ad6b7169203331-01",
    "extra field on version 00": f"{PARENT}-00",
}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing.install(provider)
    yield exporter
    tracing.restore(previous)
    provider.shutdown()


@pytest.mark.parametrize("value", INVALID.values(), ids=INVALID.keys())
def test_an_invalid_traceparent_is_no_trace_context(value: str) -> None:
    assert tracing.valid(value) is None


def test_a_valid_traceparent_is_kept_and_a_later_version_is_read_as_version_00() -> None:
    assert tracing.valid(PARENT) == PARENT
    assert tracing.valid(f"01-{TRACE_ID}-b7ad6b7169203331-01-future") == PARENT


def test_a_log_event_takes_the_trace_id_of_a_valid_traceparent_only() -> None:
    assert tracing.trace_id_of(PARENT) == TRACE_ID
    assert tracing.trace_id_of(None) is None and tracing.trace_id_of(INVALID["zero trace id"]) is None


@pytest.mark.parametrize("value", INVALID.values(), ids=INVALID.keys())
def test_with_tracing_on_a_bad_traceparent_starts_a_new_trace(
    spans: InMemorySpanExporter, value: str
) -> None:
    with tracing.span("accept", value, "server") as span:
        pass
    (finished,) = spans.get_finished_spans()
    assert finished.parent is None
    assert finished.context is not None and f"{finished.context.trace_id:032x}" != TRACE_ID
    assert span.traceparent == tracing.format_traceparent(
        finished.context.trace_id, finished.context.span_id, int(finished.context.trace_flags)
    )


def test_with_tracing_on_a_valid_traceparent_is_continued(spans: InMemorySpanExporter) -> None:
    with tracing.span("accept", PARENT, "server", {"job.kind": "noop"}) as span:
        span.set_attribute("job.id", "j-1")
    (finished,) = spans.get_finished_spans()
    assert finished.parent is not None and f"{finished.parent.span_id:016x}" == "b7ad6b7169203331"
    assert finished.context is not None and f"{finished.context.trace_id:032x}" == TRACE_ID
    assert dict(finished.attributes or {}) == {"job.kind": "noop", "job.id": "j-1"}
    assert span.traceparent is not None and span.traceparent.startswith(f"00-{TRACE_ID}-")
    assert span.traceparent != PARENT


def test_an_error_leaving_a_span_marks_it_failed(spans: InMemorySpanExporter) -> None:
    with pytest.raises(RuntimeError), tracing.span("publish", PARENT, "producer"):
        raise RuntimeError("channel closed")
    (finished,) = spans.get_finished_spans()
    assert not finished.status.is_ok


def test_with_tracing_off_a_span_records_nothing_and_hands_the_parent_on() -> None:
    assert not tracing.enabled()
    with tracing.span("run", PARENT, "consumer") as span:
        span.set_attribute("job.id", "j-1")
    assert span.traceparent == PARENT
    with tracing.span("run", "garbage") as span:
        pass
    assert span.traceparent is None


def test_the_message_headers_carry_a_traceparent_only_when_there_is_one() -> None:
    assert trace_headers(None) is None
    assert traceparent_of(trace_headers(PARENT)) == PARENT
    assert traceparent_of({"traceparent": PARENT.encode()}) == PARENT
    assert traceparent_of(None) is None and traceparent_of({"other": 1}) is None


# Run in a fresh interpreter: opentelemetry (every part of it) cannot be imported there.
WITHOUT_OPENTELEMETRY = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Blocked())
import outbox_bridge.baseline.worker, outbox_bridge.consumer.main
import outbox_bridge.relay.main, outbox_bridge.worker.attempt
from outbox_bridge.telemetry import tracing
assert not tracing.configure("consumer"), "OTEL_TRACES_EXPORTER is set, but the extra is missing"
with tracing.span("run", "PARENT", "consumer", {"job.id": "j"}) as span:
    span.set_attribute("job.outcome", "succeeded")
assert span.traceparent == "PARENT", span.traceparent
assert not any(name.split(".")[0] == "opentelemetry" for name in sys.modules)
print("ran without opentelemetry")
""".replace("PARENT", PARENT)


def test_the_worker_side_imports_and_runs_without_opentelemetry() -> None:
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console"}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENTELEMETRY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "ran without opentelemetry" in done.stdout
    assert "tracing is off" in done.stderr


def test_tracing_stays_off_unless_an_exporter_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_configured", False)
    for value in ("", "none", "console,none"):
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", value)
        monkeypatch.setattr(tracing, "_configured", False)
        assert not tracing.configure("api")
        assert not tracing.enabled()


def test_the_standard_variables_choose_the_exporters_and_name_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert isinstance(tracing._exporter("otlp"), OTLPSpanExporter)
    assert isinstance(tracing._exporter("console"), ConsoleSpanExporter)
    with pytest.raises(LookupError):
        tracing._exporter("zipkin-that-is-not-installed")
    for service, expected in ((None, "outbox-bridge-relay"), ("jobs-eu", "jobs-eu")):
        if service is not None:
            monkeypatch.setenv("OTEL_SERVICE_NAME", service)
        provider = tracing._provider("relay", ["console"])
        try:
            assert provider.resource.attributes["service.name"] == expected
            assert provider.resource.attributes["outbox_bridge.role"] == "relay"
        finally:
            provider.shutdown()
