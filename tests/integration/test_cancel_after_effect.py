"""Cancellation tells the truth about effects: once an attempt has started an external effect (an e-mail may
have gone out), a later cancel request cannot turn its completion into `cancelled`, which would claim the
effect never happened. Without an external effect, the committed cancel request still wins."""

from __future__ import annotations

from sqlalchemy import Engine

from outbox_bridge.jobstore import db, fenced, operator, queries
from outbox_bridge.jobstore.decisions import decide_completion
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from tests.support.store import claimed, new_job

NOW = 1_700_000_000.0


def claimed_notify(engine: Engine, key: str) -> Claim:
    """A notify job accepted at NOW and claimed by w a second later."""
    payload = {"to": "ops@example.com", "message": "hi"}
    job_id = new_job(engine, key, owner="ana", kind="notify", payload=payload, now=NOW)
    return claimed(engine, job_id, "w", now=NOW + 1)


def complete(engine: Engine, claim: Claim) -> State:
    output = {"id": 1}
    return db.transact(engine, fenced.complete, claim.job_id, claim.epoch, claim.attempt_id, output, NOW + 4)


def test_a_completion_after_a_started_effect_stands_even_when_a_cancel_was_requested(engine: Engine) -> None:
    claim = claimed_notify(engine, "sent")
    db.transact(engine, fenced.mark_external_started, claim.job_id, claim.epoch, claim.attempt_id, NOW + 2)
    outcome = db.transact(engine, operator.request_cancel, claim.job_id, NOW + 3)
    assert outcome is operator.CancelOutcome.REQUESTED
    state = complete(engine, claim)
    assert state is State.SUCCEEDED
    job = db.read(engine, queries.get_job, claim.job_id)
    assert job is not None and job.result_attempt_id == claim.attempt_id and job.cancel_requested


def test_without_a_started_effect_the_committed_cancel_request_wins(engine: Engine) -> None:
    claim = claimed_notify(engine, "not-sent")
    db.transact(engine, operator.request_cancel, claim.job_id, NOW + 3)
    state = complete(engine, claim)
    assert state is State.CANCELLED
    job = db.read(engine, queries.get_job, claim.job_id)
    assert job is not None and job.result_attempt_id is None


def test_the_pure_rule_matches_the_store() -> None:
    assert decide_completion(cancel_requested=True, external_started=True) is State.SUCCEEDED
    assert decide_completion(cancel_requested=True, external_started=False) is State.CANCELLED
    assert decide_completion(cancel_requested=False, external_started=False) is State.SUCCEEDED


def test_the_completion_statement_applies_the_pure_rule_in_every_case(engine: Engine) -> None:
    """Each driver writes the rule out in its completion statement (`complete_many`): for every case of its
    inputs, the state a completion commits is the one `decide_completion` gives."""
    for cancel_requested in (False, True):
        for external_started in (False, True):
            claim = claimed_notify(engine, f"case-{cancel_requested}-{external_started}")
            if external_started:
                db.transact(
                    engine, fenced.mark_external_started, claim.job_id, claim.epoch, claim.attempt_id, NOW + 2
                )
            if cancel_requested:
                db.transact(engine, operator.request_cancel, claim.job_id, NOW + 3)
            expected = decide_completion(cancel_requested=cancel_requested, external_started=external_started)
            assert complete(engine, claim) is expected, (cancel_requested, external_started)
