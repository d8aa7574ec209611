"""The document workflow through the real runner and a real store: rejected proposals are recorded, the
job ends with the allowed steps, and a new attempt resumes from the durable checkpoint of a killed one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any

from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.states import State
from tests.support.kinds import claim, committed_output, run
from tests.support.procs import settings_env
from tests.support.store import job_row, new_job

INVOICE = "Invoice 2024-17\nCustomer: Acme Corp\nTotal: 1,200.00 EUR\nDue date: 2024-07-01\n\nPay in 30 days."

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


def submit(engine: Engine, payload: dict[str, Any], *, deadline_seconds: float | None = None) -> str:
    return new_job(engine, str(uuid.uuid4()), kind="document", payload=payload, deadline=deadline_seconds)


def executed_steps(settings: Settings) -> list[tuple[int, int, str]]:
    assert settings.execution_log is not None
    lines = [json.loads(line) for line in settings.execution_log.read_text().splitlines()]
    return [(e["epoch"], e["index"], e["step"]) for e in lines if e["event"] == "document_step"]


def test_a_job_asked_to_email_succeeds_with_send_email_rejected_and_its_reason_recorded(
    engine: Engine, settings: Settings
) -> None:
    job_id = submit(
        engine, {"document": INVOICE, "instructions": "Summarise it and e-mail it to cfo@example.com"}
    )
    assert run(engine, settings, claim(engine, settings, job_id)) is State.SUCCEEDED

    output = committed_output(engine, job_id)
    assert [s["name"] for s in output["steps"]] == ["extract", "validate", "draft"]
    assert output["rejected"] == [
        {
            "name": "send_email",
            "reason": "not_allowed: 'send_email' is not an allowed step (allowed: draft, extract, validate)",
        }
    ]
    assert output["draft"].startswith("Invoice 2024-17 Customer: Acme Corp")
    assert output["resumed_from_step"] is None
    job = job_row(engine, job_id)
    assert job.error_code is None and job.checkpoint is not None
    assert job.checkpoint["rejected"] == output["rejected"]


def test_a_step_reaching_into_another_tenant_is_rejected(engine: Engine, settings: Settings) -> None:
    job_id = submit(engine, {"document": INVOICE, "instructions": "merge with the records of tenant globex"})
    assert run(engine, settings, claim(engine, settings, job_id)) is State.SUCCEEDED
    output = committed_output(engine, job_id)
    assert output["rejected"] == [
        {
            "name": "extract",
            "reason": "tenant_scope: the step is scoped to tenant 'globex', the job to 'acme'",
        }
    ]
    assert len(output["steps"]) == 3


def test_steps_that_do_not_fit_before_the_deadline_are_rejected(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = submit(engine, {"document": INVOICE}, deadline_seconds=0.9)
    assert run(engine, settings, claim(engine, settings, job_id)) is State.SUCCEEDED
    output = committed_output(engine, job_id)
    assert [s["name"] for s in output["steps"]] == ["extract", "validate"]
    assert output["rejected"] == [{"name": "draft", "reason": "time: needs about 1.0s, 0.9s left"}]
    assert output["draft"] is None


def test_a_second_attempt_resumes_from_the_checkpoint_without_redoing_finished_steps(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = submit(engine, {"document": INVOICE, "instructions": "bullets"})
    killed = subprocess.run(
        [sys.executable, "-c", WORKER, job_id],
        env=settings_env(settings, OUTBOX_BRIDGE_FAULTS="document.after_checkpoint:KILL"),
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    first = job_row(engine, job_id)
    assert (first.state, first.epoch, first.checkpoint_epoch) == (State.RUNNING, 1, 1)
    assert first.checkpoint is not None and first.checkpoint["step_index"] == 0

    clock.set(time.time() + settings.lease_seconds + 1)  # the killed worker's lease has run out
    second = claim(engine, settings, job_id)
    assert (second.epoch, second.checkpoint) == (2, first.checkpoint)
    assert run(engine, settings, second) is State.SUCCEEDED

    assert executed_steps(settings) == [(1, 0, "extract"), (2, 1, "validate"), (2, 2, "draft")]
    output = committed_output(engine, job_id)
    assert output["resumed_from_step"] == 0
    assert output["steps"][0] == first.checkpoint["outputs"][0]
    assert [s["name"] for s in output["steps"]] == ["extract", "validate", "draft"]
    assert output["draft"] == "- customer: Acme Corp\n- total: 1,200.00 EUR\n- due date: 2024-07-01"
