"""Pausing a kind: no claim starts its queued jobs, on the table's path (`claim_due`, `claim_next`: the
baseline and degraded mode) or the consumer's (`claim_many` of delivered ids, refused as `kind_paused` with
nothing written, so the delivery is acked, not dead-lettered), none spends an attempt, a running one
finishes, and resuming announces them again and lets them start in their order. Both pause and resume are
recorded with who did them."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, update

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.schemas import HELD_BY_MEANING, JobView
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.recurrence import CatchUp, Recurrence
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced, overview, pausing, queries, schedules, sweeper
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.schema import jobs, kind_actions, outbox
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry import instruments
from outbox_bridge.worker.producer import REFUSED_AS
from outbox_bridge.worker.rounds import claim_all
from tests.support.store import LEASE, claimed, every_row, job_row, new_job, publish_due

EXPORT = {"rows": 3, "chunk": 3}


def pause(engine: Engine, clock: FakeClock, kind: str = "export", actor: str = "olga") -> bool:
    return db.transact(engine, pausing.pause, kind, clock.now(), actor=actor, note="provider down")


def resume(engine: Engine, clock: FakeClock, kind: str = "export", actor: str = "pat") -> int | None:
    return db.transact(engine, pausing.resume, kind, clock.now(), actor=actor)


def claim_due(engine: Engine, clock: FakeClock, limit: int = 10) -> list[str]:
    claims = db.transact(engine, claiming.claim_due, "w1", clock.now(), LEASE, limit)
    return [c.job_id for c in claims]


def pending(engine: Engine) -> list[str]:
    query = select(outbox.c.job_id).where(outbox.c.published_at.is_(None)).order_by(outbox.c.id)
    return db.read(engine, lambda conn: list(conn.execute(query).scalars()))


def test_the_tables_path_passes_over_a_paused_kind_and_takes_it_in_its_order_after_resume(
    engine: Engine, clock: FakeClock
) -> None:
    low = new_job(engine, "e-low", kind="export", payload=EXPORT, priority=Priority.LOW)
    clock.advance(1)
    first, second = (new_job(engine, f"e-{n}", kind="export", payload=EXPORT) for n in (1, 2))
    other = new_job(engine, "n-1", kind="noop")
    high = new_job(engine, "e-high", kind="export", payload=EXPORT, priority=Priority.HIGH)
    clock.advance(1)
    assert pause(engine, clock)

    assert db.read(engine, claiming.any_due, clock.now())
    assert claim_due(engine, clock) == [other], "only the kind that is not paused starts"
    assert db.transact(engine, claiming.claim_next, "w2", clock.now(), LEASE) is None
    assert not db.read(engine, claiming.any_due, clock.now()), "a poller idles over a paused backlog"
    for job_id in (low, first, second, high):
        assert (job_row(engine, job_id).state, job_row(engine, job_id).attempts) == (State.QUEUED, 0)

    assert resume(engine, clock) is not None
    assert claim_due(engine, clock, limit=4) == [high, first, second, low], "priority, then age"


def test_a_delivery_of_a_paused_kind_is_refused_writing_nothing_and_acked_as_kind_paused(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, "e-1", kind="export", payload=EXPORT)
    publish_due(engine)  # its delivery is on its way to a consumer
    pause(engine, clock)
    before = every_row(engine)

    (result,) = db.transact(engine, claim_all, [job_id], "consumer-1", LEASE)

    assert (result.claim, result.refusal, result.state) == (None, claiming.Refusal.KIND_PAUSED, State.QUEUED)
    assert REFUSED_AS[result.refusal] == instruments.KIND_PAUSED  # acked and counted, never rejected
    assert every_row(engine) == before, "no attempt spent, no delivery written"


def test_resume_announces_each_held_job_once_in_the_order_they_start_and_they_are_claimed(
    engine: Engine, clock: FakeClock
) -> None:
    delivered = new_job(engine, "e-1", kind="export", payload=EXPORT)
    clock.advance(1)
    urgent = new_job(engine, "e-2", kind="export", payload=EXPORT, priority=Priority.HIGH)
    publish_due(engine)
    pause(engine, clock)
    db.transact(engine, claim_all, [delivered, urgent], "consumer-1", LEASE)  # both refused and acked
    waiting = new_job(engine, "e-3", kind="export", payload=EXPORT)  # accepted while paused: a row pending
    assert pending(engine) == [waiting]

    assert resume(engine, clock) == 2
    assert pending(engine) == [waiting, urgent, delivered], "no second row for a job that has one"
    results = db.transact(engine, claim_all, [urgent, delivered, waiting], "consumer-1", LEASE)
    assert [r.claim.attempts if r.claim else r.refusal for r in results] == [1, 1, 1]


def test_a_running_job_of_a_paused_kind_renews_its_lease_and_finishes(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, "e-1", kind="export", payload=EXPORT)
    held = claimed(engine, job_id)
    pause(engine, clock)
    clock.advance(5)
    cancel_requested = db.transact(engine, fenced.renew_lease, job_id, held.epoch, clock.now(), LEASE)
    assert not cancel_requested and job_row(engine, job_id).lease_expires_at == clock.now() + LEASE
    db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {"ok": True}, clock.now())

    assert (job_row(engine, job_id).state, job_row(engine, job_id).attempts) == (State.SUCCEEDED, 1)


def test_the_sweeper_does_not_announce_a_paused_kinds_jobs_again(
    engine: Engine, clock: FakeClock, settings: Settings
) -> None:
    job_id = new_job(engine, "e-1", kind="export", payload=EXPORT)
    publish_due(engine)
    pause(engine, clock)
    clock.advance(settings.reannounce_after_seconds + 1)

    assert db.transact(engine, sweeper.reannounce_stale, clock.now(), older_than=clock.now() - 1) == 0
    resume(engine, clock)
    assert pending(engine) == [job_id]


def test_pause_and_resume_are_recorded_once_each_and_shown_with_the_jobs_they_hold(
    engine: Engine, clock: FakeClock, settings: Settings
) -> None:
    new_job(engine, "e-1", kind="export", payload=EXPORT)
    new_job(engine, "n-1", kind="noop")
    publish_due(engine)
    assert pause(engine, clock) and not pause(engine, clock, actor="someone-else")
    at = clock.now()
    clock.advance(30)

    view = db.read(engine, overview.overview, clock.now(), overview.Liveness.of(settings))
    figures = db.read(engine, overview.store_figures, clock.now(), settings.alive_within_seconds)
    due = db.read(engine, queries.due_queue, clock.now())

    assert [(p.kind, p.paused_at, p.paused_by, p.note, p.queued) for p in view.paused_kinds] == [
        ("export", at, "olga", "provider down", 1)
    ]
    assert figures.paused_kinds == {"export": at}
    assert due.jobs == 1, "a paused kind's jobs wait on purpose: not counted as due"
    assert resume(engine, clock) == 1 and resume(engine, clock) is None
    actions = db.read(
        engine, lambda conn: [(r.kind, r.action, r.actor) for r in conn.execute(select(kind_actions))]
    )
    assert actions == [("export", "pause", "olga"), ("export", "resume", "pat")]


def test_the_dashboard_shows_the_paused_kinds_since_when_and_the_schedules_due(
    engine: Engine, clock: FakeClock, settings: Settings
) -> None:
    new_job(engine, "e-1", kind="export", payload=EXPORT)
    pause(engine, clock)
    recurrence = Recurrence.of(cron=None, timezone=None, every_seconds=60)
    db.transact(
        engine, schedules.add, tenant="acme", name="tick", kind="noop", payload={}, priority=Priority.NORMAL,
        recurrence=recurrence, catch_up=CatchUp.LATEST, now=clock.now(), actor="olga",
    )  # fmt: skip
    clock.advance(185)  # the first slot, within a minute, has been due for two minutes and more
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)
    with TestClient(create_app(settings)) as client:
        page = client.get("/ui", headers={"Authorization": f"Bearer {token}"})

    assert page.status_code == 200, page.text
    line = re.search(r'<p data-figure="paused-kinds">(.*?)</p>', page.text, re.S)
    assert line is not None
    text = " ".join(re.sub(r"<[^>]+>", " ", line.group(1)).split())
    assert text.startswith("Paused kinds: export since 3m ago by olga (1 queued)"), text
    row = re.search(r'<tr data-schedule="acme/tick">(.*?)</tr>', page.text, re.S)
    assert row is not None and "every 1m" in row.group(1) and "2m" in row.group(1), page.text


def test_a_queued_job_of_a_paused_kind_is_held_by_the_pause_in_every_view_of_it(
    engine: Engine, clock: FakeClock, settings: Settings
) -> None:
    queued, limited, running = (new_job(engine, key, kind="export", payload=EXPORT) for key in "qlr")
    other = new_job(engine, "o", kind="noop")
    claimed(engine, running)
    db.transact(
        engine, lambda conn: conn.execute(update(jobs).where(jobs.c.id == limited).values(held_by="kind"))
    )
    auth = {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant='acme', user='alice')}"}

    def held_by(client: TestClient) -> dict[str, str | None]:
        """Each job's `held_by` in the tenant's list, checked against its own view and its CLI view."""
        listed = {job["id"]: job["held_by"] for job in client.get("/jobs", headers=auth).json()["items"]}
        for job_id, held in listed.items():
            assert client.get(f"/jobs/{job_id}", headers=auth).json()["held_by"] == held
            assert JobView.of(job_row(engine, job_id)).held_by == held
        return listed

    with TestClient(create_app(settings)) as client:
        pause(engine, clock)
        assert held_by(client) == {queued: "paused", limited: "paused", running: None, other: None}
        resume(engine, clock)
        assert held_by(client) == {queued: None, limited: "kind", running: None, other: None}
    assert "kinds resume" in HELD_BY_MEANING["paused"]
