"""`TENANT_SHARE` end to end, with its default: one tenant's long jobs, submitted while another tenant is
submitting short ones, do not keep that tenant's short jobs from starting; once the other tenant has had
nothing for a moment, the long jobs take every thread. Through a relay and a consumer on a real RabbitMQ, and
through a baseline worker, each a real process of four threads: tenant `light` submits a no-op job every
`EVERY` seconds, each finishing within `BOUND` seconds while tenant `heavy`'s six jobs of `LONG` seconds run
three at a time (without the share they take all four threads and a light job waits for one to end); when
`light` stops, a fourth heavy job starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate
from outbox_bridge.jobstore.states import State
from tests.conftest import make_settings
from tests.support import procs
from tests.support.store import job_row, new_jobs

pytestmark = [pytest.mark.slow]

LONG = 60.0
BOUND = 10.0
EVERY = 0.25
THREADS = 4


def test_a_consumers_long_jobs_of_one_tenant_leave_a_thread_to_another(
    tmp_path: Path, rabbitmq_url: str, started: list[procs.Proc]
) -> None:
    settings = make_settings(tmp_path, rabbitmq_url=rabbitmq_url, relay_poll_seconds=0.02)
    engine = _store(settings)
    start = [("relay", ["relay"]), ("consumer", ["consumer", "--concurrency", str(THREADS)])]
    for name, args in start:
        started.append(procs.start(args, settings, tmp_path / "logs", name))
    _light_waits_not_for_heavy(engine, started)


@pytest.mark.databases("sqlite")
def test_a_workers_long_jobs_of_one_tenant_leave_a_thread_to_another(
    tmp_path: Path, started: list[procs.Proc]
) -> None:
    settings = make_settings(tmp_path)
    engine = _store(settings)
    args = ["worker", "--concurrency", str(THREADS)]
    started.append(procs.start(args, settings, tmp_path / "logs", "worker"))
    _light_waits_not_for_heavy(engine, started)


def _store(settings: Settings) -> Engine:
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    return engine


def _light_waits_not_for_heavy(engine: Engine, started: list[procs.Proc]) -> None:
    light: list[str] = []

    def submit_light(count: int) -> None:
        for _ in range(count):
            light.extend(new_jobs(engine, 1, tenant="light"))
            time.sleep(EVERY)

    submit_light(4)  # `light` is submitting when `heavy`'s burst comes
    heavy = new_jobs(engine, 6, tenant="heavy", kind="sleep", payload={"seconds": LONG})
    procs.wait_for(lambda: _count(engine, heavy, State.RUNNING) >= 3, 30, what="heavy jobs running")
    submit_light(10)
    _wait(engine, light, started, BOUND)
    assert _count(engine, heavy, State.RUNNING) == 3, "a quarter of the threads stayed free of `heavy`"

    # `light` has stopped: after a moment with nothing of it, `heavy` gets the fourth thread.
    procs.wait_for(lambda: _count(engine, heavy, State.RUNNING) == 4, 15, what="a fourth heavy job running")


def _wait(engine: Engine, ids: list[str], started: list[procs.Proc], timeout: float) -> None:
    def done() -> bool:
        assert all(proc.alive() for proc in started), [proc.output() for proc in started]
        return _count(engine, ids, State.SUCCEEDED) == len(ids)

    procs.wait_for(done, timeout, what=f"{len(ids)} jobs succeeded")


def _count(engine: Engine, ids: list[str], state: State) -> int:
    return sum(job_row(engine, job_id).state is state for job_id in ids)
