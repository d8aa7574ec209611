"""The client's side of workflows, against a stand-in transport: what `submit(after=...)` and `submit_batch`
send (a key made once per call and kept on its retries, each job as a `POST /jobs` body), and the job and
batch records read from views that have the new fields or not."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest

import outbox_bridge
from outbox_bridge.client import http as client_module
from tests.unit.test_client import VIEW

BATCH = {
    "id": "b-1", "state": "running", "jobs": ["j-1", "j-2"], "counts": {"queued": 2}, "callback_job_id": None,
    "created_at": "2026-12-04T10:00:00.000Z", "done_at": None, "tenant_note": "ignored",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "FIRST_PAUSE_SECONDS", 0.001)


class Recorder:
    """Answers 503 `failures` times, then 202 with `answer`; keeps every request."""

    def __init__(self, answer: dict, failures: int = 0) -> None:
        self.answer, self.failures = answer, failures
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if len(self.requests) <= self.failures:
            return httpx.Response(503, json={"title": "busy", "status": 503})
        return httpx.Response(202, json=self.answer)

    def body(self, index: int = -1) -> dict:
        return json.loads(self.requests[index].content)


def test_a_job_view_without_the_workflow_fields_waits_for_none_and_is_no_callback() -> None:
    job = outbox_bridge.Job.from_view(VIEW)
    assert (job.waiting_for, job.callback_of) == ([], None)
    read = outbox_bridge.Job.from_view({**VIEW, "waiting_for": ["j-0"], "callback_of": "b-1"})
    assert (read.waiting_for, read.callback_of) == (["j-0"], "b-1")


def test_a_batch_view_is_read_into_a_batch_ignoring_fields_it_does_not_know() -> None:
    batch = outbox_bridge.Batch.from_view(BATCH)
    assert (batch.id, batch.state, batch.jobs, batch.counts, batch.done) == (
        "b-1",
        "running",
        ["j-1", "j-2"],
        {"queued": 2},
        False,
    )
    assert batch.created_at == datetime(2026, 12, 4, 10, tzinfo=UTC) and batch.done_at is None
    done = outbox_bridge.Batch.from_view(
        {**BATCH, "state": "done", "callback_job_id": "j-3", "done_at": "2026-12-04T10:01:00Z"}
    )
    assert (done.done, done.callback_job_id, done.done_at) == (
        True,
        "j-3",
        datetime(2026, 12, 4, 10, 1, tzinfo=UTC),
    )


def test_submit_sends_after_as_a_list_and_on_dependency_failure_only_when_given() -> None:
    recorder = Recorder(VIEW)
    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(recorder)) as api:
        api.submit("export", {}, after=("j-0", "j-1"), on_dependency_failure="run")
        api.submit("export", {})
    assert recorder.body(0) == {
        "kind": "export",
        "payload": {},
        "after": ["j-0", "j-1"],
        "on_dependency_failure": "run",
    }
    assert recorder.body(1) == {"kind": "export", "payload": {}}


def test_a_batch_without_a_key_keeps_the_key_it_made_on_its_retries() -> None:
    recorder = Recorder(BATCH, failures=2)
    start = datetime(2026, 12, 5, 7, tzinfo=UTC)
    jobs = [
        {"kind": "export", "payload": {"rows": 1}, "run_at": start, "priority": None},
        {"kind": "export", "payload": {}, "after": ("j-0",)},
    ]
    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(recorder)) as api:
        batch = api.submit_batch(iter(jobs), callback={"kind": "notify", "payload": {}})
    keys = {request.headers["idempotency-key"] for request in recorder.requests}
    assert len(recorder.requests) == 3 and len(keys) == 1 and batch.id == "b-1"
    assert recorder.requests[0].url.path == "/batches" and recorder.requests[0].method == "POST"
    assert recorder.body() == {
        "jobs": [
            {"kind": "export", "payload": {"rows": 1}, "run_at": "2026-12-05T07:00:00+00:00"},
            {"kind": "export", "payload": {}, "after": ["j-0"]},
        ],
        "callback": {"kind": "notify", "payload": {}},
    }


def test_a_batch_with_a_key_sends_it_and_get_batch_reads_one() -> None:
    recorder = Recorder(BATCH)
    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(recorder)) as api:
        api.submit_batch([{"kind": "export", "payload": {}}], key="order-7")
        assert api.get_batch("b-1") == outbox_bridge.Batch.from_view(BATCH)
    assert recorder.requests[0].headers["idempotency-key"] == "order-7"
    assert (recorder.requests[1].method, recorder.requests[1].url.path) == ("GET", "/batches/b-1")


@pytest.mark.parametrize(
    "jobs",
    [
        ["export"],
        [{"kind": "export", "payload": {}, "after": "j-0"}],
        [{"kind": "export", "run_at": datetime(2026, 1, 1)}],
        [{"kind": "export", "payload": {}, "key": "mine"}],
    ],
)
def test_a_job_of_a_batch_the_client_cannot_send_is_refused_before_any_request(jobs: list) -> None:
    recorder = Recorder(BATCH)
    with outbox_bridge.Client("http://api", token="t", transport=httpx.MockTransport(recorder)) as api:
        with pytest.raises((TypeError, ValueError)):
            api.submit_batch(jobs)
    assert recorder.requests == []
