"""The notify kind through the real runner, a real store and real processes killed at its fault points: the
external effect is durably marked before the provider sees the call, a fenced worker never calls, and a
call repeated under the same operation key is reported as a duplicate by the provider."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock, now
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.notify import StubProvider
from outbox_bridge.jobstore import claiming, db, operator, queries, sweeper
from outbox_bridge.jobstore.records import Attempt
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.commit import backoff_of
from tests.support.kinds import claim, run
from tests.support.procs import settings_env
from tests.support.store import job_row, new_job

PAYLOAD = {"to": "ops@example.com", "message": "disk almost full on db-2"}

# Claims one job and runs it with the real runner, in a process of its own (killed by an armed fault point).
WORKER = """
import sys
from outbox_bridge.jobstore import claiming, db
from outbox_bridge.worker.lease import LeaseKeeper
from tests.support.kinds import execute
from outbox_bridge.jobstore import db
from outbox_bridge.core import clock, settings
cfg = settings.load()
engine = db.make_engine(cfg)
taken = db.transact(engine, claiming.claim, sys.argv[1], "doomed-worker", clock.now(), cfg.lease_seconds)
claimed = taken.claim
print(execute(engine, cfg, LeaseKeeper(engine, cfg).start(), claimed))
"""


def submit(engine: Engine, key: str = "notify-key-1", tenant: str = "acme") -> str:
    return new_job(engine, key, tenant=tenant, kind="notify", payload=PAYLOAD)


def run_until_killed(settings: Settings, job_id: str, fault_point: str) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", WORKER, job_id],
        env=settings_env(settings, OUTBOX_BRIDGE_FAULTS=f"{fault_point}:KILL"),
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]


def attempts_of(engine: Engine, job_id: str) -> list[Attempt]:
    return db.read(engine, queries.attempts_of, job_id)


def provider_lines(settings: Settings) -> list[dict[str, Any]]:
    if not settings.notify_log.exists():
        return []
    return [json.loads(line) for line in settings.notify_log.read_text().splitlines()]


def expire_leases_and_sweep(engine: Engine, settings: Settings, clock: FakeClock) -> None:
    clock.set(time.time() + settings.lease_seconds + 1)
    db.transact(engine, sweeper.sweep_expired, now(), backoff=backoff_of(settings))


def test_a_notification_is_sent_once_with_the_jobs_operation_key(engine: Engine, settings: Settings) -> None:
    job_id = submit(engine)
    claimed = claim(engine, settings, job_id)
    assert run(engine, settings, claimed) is State.SUCCEEDED

    (line,) = provider_lines(settings)
    assert {k: line[k] for k in ("tenant", "operation_key", "job_id", "epoch", "to", "message")} == {
        "tenant": "acme",
        "operation_key": "notify-key-1",
        "job_id": job_id,
        "epoch": 1,
        **PAYLOAD,
    }
    attempt = db.read(engine, queries.committed_result, job_id)
    assert attempt is not None and attempt.id == claimed.attempt_id
    assert attempt.output == {
        "provider_message_id": line["provider_message_id"],
        "operation_key": "notify-key-1",
        "duplicate": False,
    }
    assert attempt.external_started_at is not None
    assert job_row(engine, job_id).external_epoch == 1


def test_a_worker_killed_after_marking_has_marked_the_effect_and_not_called_the_provider(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = submit(engine)
    run_until_killed(settings, job_id, "notify.after_external_started")

    job = job_row(engine, job_id)
    (attempt,) = attempts_of(engine, job_id)
    assert (job.state, job.epoch, job.external_epoch) == (State.RUNNING, 1, 1)
    assert attempt.external_started_at is not None
    assert provider_lines(settings) == []

    expire_leases_and_sweep(engine, settings, clock)
    job = job_row(engine, job_id)
    assert (job.state, job.error_code) == (State.UNKNOWN, "outcome_unknown")


def test_a_worker_killed_after_the_call_ends_unknown_and_a_requeued_run_is_a_duplicate(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = submit(engine)
    run_until_killed(settings, job_id, "notify.after_call")
    (first,) = provider_lines(settings)
    assert (first["job_id"], first["epoch"], first["duplicate"]) == (job_id, 1, False)

    expire_leases_and_sweep(engine, settings, clock)
    assert job_row(engine, job_id).state is State.UNKNOWN
    assert db.transact(engine, claiming.claim, job_id, "worker-1", now(), 30.0).claim is None

    db.transact(engine, operator.requeue, job_id, now(), actor="tester")  # the operator decides to try again
    assert run(engine, settings, claim(engine, settings, job_id)) is State.SUCCEEDED

    attempt = db.read(engine, queries.committed_result, job_id)
    assert attempt is not None and attempt.output == {
        "provider_message_id": first["provider_message_id"],
        "operation_key": "notify-key-1",
        "duplicate": True,
    }
    assert [(line["epoch"], line["duplicate"]) for line in provider_lines(settings)] == [
        (1, False),
        (2, True),
    ]


def test_a_fenced_worker_never_calls_the_provider(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = submit(engine)
    claimed = claim(engine, settings, job_id)
    clock.advance(settings.lease_seconds + 1)  # the worker stalled past its lease

    assert run(engine, settings, claimed) is None
    job = job_row(engine, job_id)
    assert (job.state, job.external_epoch) == (State.RUNNING, None)
    assert provider_lines(settings) == []


def test_the_same_operation_key_in_two_tenants_is_not_a_duplicate(engine: Engine, settings: Settings) -> None:
    for tenant in ("acme", "globex"):
        assert run(engine, settings, claim(engine, settings, submit(engine, "shared-key", tenant))) is (
            State.SUCCEEDED
        )
    assert [(line["tenant"], line["duplicate"]) for line in provider_lines(settings)] == [
        ("acme", False),
        ("globex", False),
    ]


def test_the_stub_provider_returns_the_original_message_id_for_a_repeated_key(tmp_path: Path) -> None:
    provider = StubProvider(tmp_path / "provider" / "log.jsonl")
    call: dict[str, Any] = {"tenant": "acme", "job_id": "j", "epoch": 1, "to": "a@b.example", "message": "hi"}
    first = provider.send(operation_key="k1", **call)
    again = provider.send(operation_key="k1", **call)
    other = provider.send(operation_key="k2", **call)
    assert (first.duplicate, again.duplicate, other.duplicate) == (False, True, False)
    assert again.provider_message_id == first.provider_message_id != other.provider_message_id


@pytest.mark.parametrize("ending", ["", "\n"])
def test_a_torn_provider_line_is_not_taken_for_a_call_and_later_calls_stay_readable(
    tmp_path: Path, ending: str
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text('{"tenant": "acme", "operation_key": "k1", "provid' + ending)
    provider = StubProvider(log)
    call: dict[str, Any] = {
        "tenant": "acme",
        "operation_key": "k1",
        "job_id": "j",
        "epoch": 1,
        "to": "a@b.example",
    }
    assert not provider.send(message="first", **call).duplicate
    assert provider.send(message="again", **call).duplicate
    assert json.loads(log.read_text().splitlines()[1])["message"] == "first"
