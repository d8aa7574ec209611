"""The benchmark's watch on a phase's jobs: it waits until all of them are finished, counting only the
unfinished ones while there are any, and says how many finished when they do not in time."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine, update

from outbox_bridge.bench.observe import PhaseTimeout, StoreWatch
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import jobs
from outbox_bridge.jobstore.states import State
from tests.support.store import new_jobs


def _finish(engine: Engine, job_ids: list[str], state: State) -> None:
    db.transact(
        engine, lambda conn: conn.execute(update(jobs).where(jobs.c.id.in_(job_ids)).values(state=state))
    )


def test_the_watch_waits_for_every_job_of_the_phase(settings: Settings, engine: Engine) -> None:
    job_ids = new_jobs(engine, 6, tenant="phase")
    new_jobs(engine, 2, tenant="another")  # another phase's unfinished jobs are not waited for
    watch = StoreWatch(settings.database_url)
    try:
        assert (watch.unfinished("phase"), watch.unfinished("nobody")) == (6, 0)
        _finish(engine, job_ids[:5], State.SUCCEEDED)
        assert watch.unfinished("phase") == 1
        later = threading.Timer(0.3, _finish, (engine, job_ids[5:], State.DEAD))
        later.start()
        progress = watch.wait_finished("phase", 6, timeout=10, stop=threading.Event())
        later.join()
        assert (progress.succeeded, progress.other_terminal) == (5, 1)
        assert (watch.unfinished("phase"), watch.unfinished("another")) == (0, 2)
    finally:
        watch.close()


def test_the_watch_says_how_many_finished_when_the_rest_do_not(settings: Settings, engine: Engine) -> None:
    job_ids = new_jobs(engine, 3, tenant="phase")
    _finish(engine, job_ids[:2], State.SUCCEEDED)
    watch = StoreWatch(settings.database_url)
    try:
        with pytest.raises(PhaseTimeout, match="2 of 3 jobs finished"):
            watch.wait_finished("phase", 3, timeout=0.3, stop=threading.Event())
        _finish(engine, job_ids[2:], State.SUCCEEDED)
        with pytest.raises(PhaseTimeout, match="3 of 4 jobs finished"):  # one more expected than stored
            watch.wait_finished("phase", 4, timeout=0.3, stop=threading.Event())
    finally:
        watch.close()
