"""A fault of the worker's own storage (RESULTS_DIR unusable) is not the job's fault: the attempt does not
spend the job's budget but one of its own, with a longer backoff; the tenant sees a stable code and a
message that names no server path, the operator the detail on the attempt's record."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import replace

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import FILE_KEY
from outbox_bridge.handlers.registry import KINDS
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.decisions import STORAGE_FAULT, STORAGE_RETRY_BUDGET, storage_retry_in
from outbox_bridge.jobstore.states import State
from tests.support.kinds import claim, run
from tests.support.store import job_row, new_job


def broken_storage(settings: Settings) -> None:
    """RESULTS_DIR is a file, not a directory: nothing can be written under it (whoever runs the test)."""
    shutil.rmtree(settings.results_dir, ignore_errors=True)
    settings.results_dir.parent.mkdir(parents=True, exist_ok=True)
    settings.results_dir.write_text("not a directory")


def test_a_storage_fault_refunds_the_attempt_and_tells_the_tenant_no_path(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    broken_storage(settings)
    job_id = new_job(engine, str(uuid.uuid4()), kind="export", payload={"rows": 10, "chunk": 5})
    assert run(engine, settings, claim(engine, settings, job_id)) is State.QUEUED

    job = job_row(engine, job_id)
    assert job.attempts == 0, "the attempt was counted against the job"
    assert job.error_code == STORAGE_FAULT
    assert str(settings.results_dir) not in (job.error_message or "")
    assert job.available_at >= clock.now() + storage_retry_in(1) - 0.01
    [attempt] = db.read(engine, queries.attempts_of, job_id)
    assert attempt.error_code == STORAGE_FAULT and str(settings.results_dir) in (attempt.error_message or "")


def test_storage_faults_have_a_budget_of_their_own_then_the_job_is_dead(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    broken_storage(settings)
    job_id = new_job(engine, str(uuid.uuid4()), kind="export", payload={"rows": 10, "chunk": 5})
    states = []
    for fault in range(1, STORAGE_RETRY_BUDGET + 1):
        clock.advance(storage_retry_in(fault))
        states.append(run(engine, settings, claim(engine, settings, job_id)))
    assert states == [State.QUEUED] * (STORAGE_RETRY_BUDGET - 1) + [State.DEAD]
    job = job_row(engine, job_id)
    assert job.error_code == STORAGE_FAULT and job.attempts == 1


def test_once_the_storage_is_back_the_job_succeeds_with_its_whole_budget(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    broken_storage(settings)
    job_id = new_job(engine, str(uuid.uuid4()), kind="export", payload={"rows": 10, "chunk": 5})
    assert run(engine, settings, claim(engine, settings, job_id)) is State.QUEUED
    settings.results_dir.unlink()
    clock.advance(storage_retry_in(1))
    assert run(engine, settings, claim(engine, settings, job_id)) is State.SUCCEEDED
    assert job_row(engine, job_id).attempts == 1


def test_a_bug_in_a_kind_shows_the_tenant_its_type_and_the_operator_its_text(
    engine: Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def buggy(ctx: object, payload: object) -> dict[str, object]:
        raise KeyError("/srv/secret/path")

    monkeypatch.setitem(KINDS, "noop", replace(KINDS["noop"], run=buggy))
    job_id = new_job(engine, str(uuid.uuid4()), kind="noop", payload={})
    assert run(engine, settings, claim(engine, settings, job_id)) is State.QUEUED
    job = job_row(engine, job_id)
    assert (job.error_code, job.error_message) == ("handler_error", "The job raised KeyError.")
    [attempt] = db.read(engine, queries.attempts_of, job_id)
    assert attempt.error_message == "KeyError: '/srv/secret/path'"


def test_a_kind_returning_the_reserved_file_key_of_its_own_fails_permanently(
    engine: Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forged(ctx: object, payload: object) -> dict[str, object]:
        return {FILE_KEY: {"path": "../../etc/passwd", "media_type": "text/csv"}}

    monkeypatch.setitem(KINDS, "noop", replace(KINDS["noop"], run=forged))
    job_id = new_job(engine, str(uuid.uuid4()), kind="noop", payload={})
    assert run(engine, settings, claim(engine, settings, job_id)) is State.FAILED
    assert job_row(engine, job_id).error_code == "reserved_key"
