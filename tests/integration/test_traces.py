"""One trace per job, recorded with the SDK's in-memory exporter: the api's accept span, a relay `publish`
span per message and a `run` span per attempt, all in the trace the client's `traceparent` named (or a new
one), each a child of the span before it; a retried attempt is a second run span in the same trace. The
api, a relay and a consumer run in this process, against the real RabbitMQ on this test's own queues."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry import tracing
from tests.conftest import make_settings
from tests.support import kinds
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, running_consumer, running_relay
from tests.support.store import accept

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
CLIENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
# Every attribute a span of ours may carry: never a payload, a result or an error message.
ATTRIBUTES = {
    "job.id", "job.kind", "job.created", "job.epoch", "job.attempt", "job.outcome", "job.error_code",
    "messaging.message.id",
}  # fmt: skip


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing.install(provider)
    yield exporter
    tracing.restore(previous)
    provider.shutdown()


@pytest.fixture
def settings(tmp_path: Path, rabbitmq_url: str) -> Settings:
    return make_settings(tmp_path, rabbitmq_url=rabbitmq_url, lease_seconds=5.0, shutdown_grace_seconds=5.0)


@pytest.fixture
def submit(settings: Settings, engine: Engine) -> Iterator[Callable[..., Any]]:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")

    with TestClient(create_app(settings)) as client:

        def post(key: str, payload: dict[str, Any], kind: str = "noop", **headers: str) -> Any:
            answer = client.post(
                "/jobs",
                json={"kind": kind, "payload": payload},
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key, **headers},
            )
            assert answer.status_code == 202, answer.text
            return answer.json()

        yield post


def hex_ids(span: ReadableSpan) -> tuple[str, str, str | None]:
    """(trace id, span id, parent span id) as in a traceparent."""
    assert span.context is not None
    parent = f"{span.parent.span_id:016x}" if span.parent is not None else None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}", parent


def of_job(spans: InMemorySpanExporter, job_id: str) -> list[ReadableSpan]:
    return sorted(
        (s for s in spans.get_finished_spans() if (s.attributes or {}).get("job.id") == job_id),
        key=lambda s: s.start_time or 0,
    )


@pytest.mark.broker
@pytest.mark.databases("sqlite")  # the store's part runs on both stores in test_outbox and below
def test_one_job_is_one_trace_from_the_api_through_the_relay_to_each_attempt(
    settings: Settings, engine: Engine, rabbitmq_url: str, spans: InMemorySpanExporter, submit: Any
) -> None:
    broker = Broker(rabbitmq_url, settings)
    try:
        with running_relay(settings, engine), running_consumer(settings, engine, concurrency=2):
            retried = submit("retried", {"fail_until_attempt": 1}, kind="flaky", traceparent=CLIENT)
            fresh = submit("fresh", {}, traceparent="not-a-trace-context")
            for job_id in (retried["id"], fresh["id"]):
                wait_for(lambda j=job_id: state(engine, j) is State.SUCCEEDED, 30, what="the jobs succeeded")
            wait_for(lambda: len(of_job(spans, retried["id"])) == 5, 10, what="the retried job's spans")
    finally:
        broker.cleanup()

    accept, publish_1, run_1, publish_2, run_2 = of_job(spans, retried["id"])
    assert [s.name for s in (accept, publish_1, run_1, publish_2, run_2)] == [
        "accept", "publish", "run", "publish", "run",
    ]  # fmt: skip
    assert {hex_ids(s)[0] for s in (accept, publish_1, run_1, publish_2, run_2)} == {TRACE_ID}
    assert hex_ids(accept)[2] == CLIENT_SPAN
    assert hex_ids(publish_1)[2] == hex_ids(publish_2)[2] == hex_ids(accept)[1], "each publish: the job's"
    assert hex_ids(run_1)[2] == hex_ids(publish_1)[1] and hex_ids(run_2)[2] == hex_ids(publish_2)[1]
    assert [(s.attributes or {}).get("job.attempt") for s in (run_1, run_2)] == [1, 2]
    assert [(s.attributes or {}).get("job.kind") for s in (accept, publish_1, publish_2)] == ["flaky"] * 3
    assert [(s.attributes or {}).get("job.outcome") for s in (run_1, run_2)] == ["failed", "succeeded"]
    assert dict(run_2.attributes or {}) == {
        "job.id": retried["id"], "job.kind": "flaky", "job.epoch": 2, "job.attempt": 2,
        "job.outcome": "succeeded",
    }  # fmt: skip
    stored = db.read(engine, queries.get_job, retried["id"])
    assert stored is not None and stored.traceparent is not None
    assert stored.traceparent.split("-")[1:3] == [TRACE_ID, hex_ids(accept)[1]]

    fresh_spans = of_job(spans, fresh["id"])
    assert [s.name for s in fresh_spans] == ["accept", "publish", "run"]
    assert hex_ids(fresh_spans[0])[2] is None, "a bad traceparent starts a new trace"
    assert len({hex_ids(s)[0] for s in fresh_spans} | {TRACE_ID}) == 2
    for span in spans.get_finished_spans():
        assert set(span.attributes or {}) <= ATTRIBUTES, span.name


def state(engine: Engine, job_id: str) -> State | None:
    job = db.read(engine, queries.get_job, job_id)
    return job.state if job is not None else None


def test_an_attempt_claimed_from_the_table_continues_the_stored_trace(
    settings: Settings, engine: Engine, spans: InMemorySpanExporter
) -> None:
    job = accept(engine, "baseline", traceparent=CLIENT).job
    assert kinds.run(engine, settings, kinds.claim(engine, settings, job.id)) is State.SUCCEEDED
    (run,) = of_job(spans, job.id)
    assert (run.name, hex_ids(run)[0], hex_ids(run)[2]) == ("run", TRACE_ID, CLIENT_SPAN)


def test_with_tracing_off_the_api_stores_a_valid_client_trace_context_as_it_came(
    engine: Engine, submit: Any
) -> None:
    assert not tracing.enabled()
    traced = submit("traced", {}, traceparent=CLIENT)
    untraced = submit("bad", {}, traceparent="00-zz")
    assert db.read(engine, queries.get_job, traced["id"]).traceparent == CLIENT  # type: ignore[union-attr]
    assert db.read(engine, queries.get_job, untraced["id"]).traceparent is None  # type: ignore[union-attr]
    again = submit("traced", {}, traceparent=f"00-{'1' * 32}-{'2' * 16}-01")
    assert again["id"] == traced["id"], "a retry under another trace is the same request"
    assert db.read(engine, queries.get_job, traced["id"]).traceparent == CLIENT  # type: ignore[union-attr]
