"""`jobs cancel`, `jobs requeue` (one job, or every job a filter names, with `--dry-run` first) and
`jobs show` as an operator runs them: each move is recorded with the OS user, and `jobs show` lists the
record. Every refusal is one line and exit 1."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, intake, operator, queries, sweeper
from outbox_bridge.jobstore.states import State
from tests.support import procs
from tests.support.store import LEASE, claimed, every_row, job_row, new_job

OPERATOR = "olga"


def run(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as the OS user `OPERATOR` runs it."""
    return procs.run(list(args), settings, LOGNAME=OPERATOR, USER=OPERATOR)


def done(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def refused(result: subprocess.CompletedProcess[str]) -> str:
    said = (result.stdout + result.stderr).strip()
    assert result.returncode == 1, said
    assert len(said.splitlines()) == 1 and "Traceback" not in said, said
    assert said.startswith("outbox-bridge: "), said
    return said


def ended(engine: Engine, clock: FakeClock, *, permanent: bool, **fields: object) -> str:
    """A job whose only attempt failed: `failed` when `permanent`, else `dead` (a budget of one)."""
    job_id = new_job(engine, intake.new_id(), max_attempts=1, **fields)
    held = claimed(engine, job_id)
    db.transact(
        engine, fenced.fail, job_id, held.epoch, held.attempt_id, code="boom", message="it broke",
        permanent=permanent, now=clock.now(), backoff=Backoff(1.0, 1.0),
    )  # fmt: skip
    return job_id


def recorded(engine: Engine, job_id: str) -> list[tuple[str, str, str | None]]:
    return [(a.action, a.actor, a.note) for a in db.read(engine, queries.actions_of, job_id)]


def test_cancel_of_a_queued_job_by_prefix_cancels_it_and_records_the_os_user(
    settings: Settings, engine: Engine
) -> None:
    job_id = new_job(engine, intake.new_id())

    said = done(run(settings, "jobs", "cancel", job_id[:10], "--note", "sent twice"))

    assert f"cancelled: job {job_id} is now cancelled" in said
    assert job_row(engine, job_id).state is State.CANCELLED
    assert recorded(engine, job_id) == [("cancel", OPERATOR, "sent twice")]


def test_cancel_of_a_running_job_requests_it(settings: Settings, engine: Engine) -> None:
    job_id = new_job(engine, intake.new_id())
    claimed(engine, job_id)

    said = done(run(settings, "jobs", "cancel", job_id))

    assert "cancel requested" in said and job_row(engine, job_id).cancel_requested
    assert recorded(engine, job_id) == [("request_cancel", OPERATOR, None)]


def test_cancel_of_a_finished_job_is_one_line_and_changes_nothing(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    job_id = ended(engine, clock, permanent=True)
    before = every_row(engine)

    said = refused(run(settings, "jobs", "cancel", job_id))

    assert f"job {job_id} is failed: cannot cancel" in said
    assert every_row(engine) == before


def test_requeue_of_one_failed_job_records_who_and_why(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    job_id = ended(engine, clock, permanent=True)
    before = every_row(engine)

    counted = done(run(settings, "jobs", "requeue", job_id[:12], "--dry-run"))
    assert f"dry run: job {job_id} (failed) would be requeued; nothing was changed" in counted
    assert every_row(engine) == before
    said = done(run(settings, "jobs", "requeue", job_id[:12], "--note", "bucket fixed"))

    assert f"requeued: job {job_id} is now queued" in said
    assert recorded(engine, job_id) == [("requeue", OPERATOR, "bucket fixed")]


def test_requeue_by_filter_lists_them_first_then_requeues_exactly_those(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    clock.set(time.time())  # the command reads the system clock: --since 1h must cover these jobs
    dead = [
        ended(engine, clock, permanent=False, kind="export", payload={"rows": 1, "chunk": 1})
        for _ in range(3)
    ]
    other_kind = ended(engine, clock, permanent=False)
    other_tenant = ended(engine, clock, permanent=False, tenant="globex", kind="export")
    failed = ended(engine, clock, permanent=True, kind="export")
    bulk = ["jobs", "requeue", "--state", "dead", "--kind", "export", "--tenant", "acme", "--since", "1h"]
    before = every_row(engine)

    counted = done(run(settings, *bulk, "--dry-run"))

    assert "dry run: 3 jobs would be requeued; nothing was changed" in counted
    listed = [line.split() for line in counted.splitlines()[1:]]
    assert sorted(listed) == sorted([job_id, "dead", "export", "acme"] for job_id in dead)
    document = json.loads(done(run(settings, *bulk, "--dry-run", "--json")))
    assert (document["dry_run"], document["count"]) == (True, 3)
    assert sorted(job["id"] for job in document["jobs"]) == sorted(dead)
    assert every_row(engine) == before
    said = done(run(settings, *bulk, "--note", "provider back"))
    assert said.splitlines()[0] == "requeued 3 jobs"
    assert sorted(said.split()[3:]) == sorted(dead)
    for job_id in dead:
        assert job_row(engine, job_id).state is State.QUEUED
        assert recorded(engine, job_id) == [("requeue", OPERATOR, "provider back")]
    for job_id, state in ((other_kind, State.DEAD), (other_tenant, State.DEAD), (failed, State.FAILED)):
        assert job_row(engine, job_id).state is state and recorded(engine, job_id) == []
    assert "dry run: 0 jobs would be requeued" in done(run(settings, *bulk, "--dry-run"))


def test_requeue_since_leaves_jobs_that_changed_before_the_span(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    clock.set(time.time() - 7200)  # two hours before the command's own clock
    old = ended(engine, clock, permanent=False)

    said = done(run(settings, "jobs", "requeue", "--state", "dead", "--since", "30m", "--dry-run"))

    assert "dry run: 0 jobs would be requeued" in said
    assert job_row(engine, old).state is State.DEAD


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["jobs", "requeue"], "give a job ID, or --state"),
        (["jobs", "requeue", "--kind", "export"], "give a job ID, or --state"),
        (["jobs", "requeue", "--state", "queued"], "--state queued: only dead, failed, unknown"),
        (
            ["jobs", "requeue", "--state", "dead", "--since", "yesterday"],
            "--since 'yesterday' is not a duration",
        ),
        (["jobs", "requeue", "8a26491b", "--state", "dead"], "not both"),
        (["jobs", "cancel", "zz"], "no job id starts with 'zz'"),
    ],
    ids=["nothing", "no-state", "bad-state", "bad-since", "both", "no-such-job"],
)
def test_requeue_and_cancel_misuse_is_one_line(
    settings: Settings, engine: Engine, args: list[str], phrase: str
) -> None:
    assert phrase in refused(run(settings, *args))


def test_jobs_show_lists_operator_actions_and_a_resolved_success_reads_as_one(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, intake.new_id(), kind="notify")
    held = claimed(engine, job_id)
    db.transact(engine, fenced.mark_external_started, job_id, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE)
    db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=Backoff(1.0, 1.0))
    assert job_row(engine, job_id).state is State.UNKNOWN
    db.transact(engine, operator.resolve, job_id, State.SUCCEEDED, "provider msg-7", clock.now(), actor="ana")

    shown = done(run(settings, "jobs", "show", job_id))
    document = json.loads(done(run(settings, "jobs", "show", job_id, "--json")))

    assert "resolved by ana: provider msg-7" in shown
    fields = [line.strip() for line in shown.splitlines()]
    assert "state: succeeded" in fields and not any(f.startswith("error:") for f in fields), shown
    assert "resolve_succeeded" in shown
    assert document["job"]["state"] == "succeeded" and document["job"]["error"] is None
    [action] = document["operator_actions"]
    assert (action["action"], action["actor"], action["note"]) == (
        "resolve_succeeded",
        "ana",
        "provider msg-7",
    )
    assert action["at"].endswith("Z")
