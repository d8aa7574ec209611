"""`jobs show`, `jobs requeue` and `jobs resolve` take a job id or enough of its start: a prefix that names
one job works, one that names several or none is one clear line (exit 1), whatever tenant the jobs have."""

from __future__ import annotations

import subprocess
from collections import Counter

from sqlalchemy import Engine

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, queries, sweeper
from outbox_bridge.jobstore.states import State
from tests.support import procs
from tests.support.store import LEASE, claimed, job_row, new_job, new_jobs


def refused(result: subprocess.CompletedProcess[str]) -> str:
    said = (result.stdout + result.stderr).strip()
    assert result.returncode == 1, said
    assert len(said.splitlines()) == 1 and "Traceback" not in said, said
    return said


def test_a_unique_prefix_shows_the_job_of_any_tenant(settings: Settings, engine: Engine) -> None:
    job_id = new_job(engine, "k", tenant="globex")

    shown = procs.run(["jobs", "show", job_id[:8].upper()], settings)

    assert shown.returncode == 0, shown.stderr
    assert job_id in shown.stdout.split()


def test_an_ambiguous_prefix_says_how_many_jobs_it_matches(settings: Settings, engine: Engine) -> None:
    ids = new_jobs(engine, 17)  # 17 ids, 16 hex digits: at least two start alike
    first, count = Counter(job_id[0] for job_id in ids).most_common(1)[0]

    said = refused(procs.run(["jobs", "show", first], settings))

    assert f"{count} jobs have ids starting with '{first}'" in said
    assert "give more of the id" in said


def test_a_prefix_no_id_starts_with_says_so(settings: Settings, engine: Engine) -> None:
    new_jobs(engine, 2)

    for text in ("zz", "%", "_"):  # not hex, and LIKE's wildcards match nothing either
        said = refused(procs.run(["jobs", "show", text], settings))
        assert f"no job id starts with '{text}'" in said, said


def test_requeue_and_resolve_take_a_prefix(settings: Settings, engine: Engine, clock: FakeClock) -> None:
    lost = new_job(engine, "lost", kind="notify")
    held = claimed(engine, lost)
    db.transact(engine, fenced.mark_external_started, lost, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE)
    db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=Backoff(1.0, 1.0))
    assert job_row(engine, lost).state is State.UNKNOWN
    waiting = new_job(engine, "waiting")

    resolved = procs.run(["jobs", "resolve", lost[:13], "--outcome", "failed"], settings)
    requeued = procs.run(["jobs", "requeue", waiting[:13]], settings)

    assert resolved.returncode == 0, resolved.stderr
    assert f"job {lost} is now failed" in resolved.stdout
    assert f"job {waiting} is queued: cannot requeue" in refused(requeued)


def test_the_store_read_counts_matches_across_tenants(engine: Engine) -> None:
    a = new_job(engine, "k1", tenant="acme")
    new_job(engine, "k2", tenant="globex")

    whole = db.read(engine, queries.match_id_prefix, a)
    everything = db.read(engine, queries.match_id_prefix, "")

    assert whole.count == 1 and whole.job is not None and whole.job.id == a
    assert (everything.count, everything.job) == (0, None), "an empty prefix names nothing"
