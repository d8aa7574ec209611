"""Heartbeats on the real store (SQLite and PostgreSQL): a beat makes a process alive, silence makes it gone,
a long silence deletes its row, a clean stop deletes it at once, and a store that does not answer costs a
log line and not the process."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import pytest
from sqlalchemy import Engine, func, select

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, heartbeats
from outbox_bridge.jobstore import heartbeats as heartbeat_module
from outbox_bridge.jobstore.heartbeats import Heartbeat, this_process
from outbox_bridge.jobstore.schema import processes

WITHIN = 15.0


def _beat(engine: Engine, me: heartbeats.Process, now: float) -> None:
    db.transact(engine, heartbeats.beat, me, now, forget_before=now - 300.0)


def _alive(engine: Engine, now: float) -> list[heartbeats.Process]:
    return db.read(engine, heartbeats.alive, now, WITHIN)


def _rows(engine: Engine) -> int:
    count = select(func.count()).select_from(processes)
    return int(db.read(engine, lambda conn: conn.execute(count).scalar_one()))


def test_a_beat_makes_a_process_alive_until_it_falls_silent(engine: Engine, clock: FakeClock) -> None:
    me = replace(this_process("consumer", clock.now()), detail={"concurrency": 4, "in_flight": 1})
    _beat(engine, me, clock.now())

    [seen] = _alive(engine, clock.now() + WITHIN)
    assert (seen.id, seen.role, seen.pid, seen.detail) == (me.id, "consumer", me.pid, me.detail)
    assert _alive(engine, clock.now() + WITHIN + 0.1) == []


def test_a_second_beat_updates_the_same_row(engine: Engine, clock: FakeClock) -> None:
    me = this_process("relay", clock.now())
    _beat(engine, me, clock.now())
    _beat(engine, replace(me, detail={"broker_connected": True}), clock.now() + 5)

    [seen] = _alive(engine, clock.now() + 5)
    assert (seen.last_seen_at, seen.started_at, seen.detail) == (
        clock.now() + 5,
        clock.now(),
        {"broker_connected": True},
    )
    assert _rows(engine) == 1


def test_a_long_silent_row_is_deleted_by_another_process_beat(engine: Engine, clock: FakeClock) -> None:
    gone = this_process("consumer", clock.now())
    _beat(engine, gone, clock.now())
    other = this_process("relay", clock.now())

    _beat(engine, other, clock.now() + 299)
    assert _rows(engine) == 2, "not silent long enough to be forgotten"
    _beat(engine, other, clock.now() + 301)

    assert [p.id for p in _alive(engine, clock.now() + 301)] == [other.id]
    assert _rows(engine) == 1


def test_the_heartbeat_thread_beats_and_a_clean_stop_deletes_its_row(
    engine: Engine, settings_factory: object
) -> None:
    fast: Settings = settings_factory(heartbeat_seconds=0.05)  # type: ignore[operator]
    beating = Heartbeat(engine, fast, "worker", lambda: {"in_flight": 0}).start()
    first = _wait_for_beat(engine, beating.me.id)
    second = _wait_for_beat(engine, beating.me.id, after=first)
    assert second > first

    beating.stop()

    assert _rows(engine) == 0


def _wait_for_beat(engine: Engine, process_id: str, after: float = 0.0) -> float:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        seen = {p.id: p.last_seen_at for p in db.read(engine, heartbeats.alive, time.time(), 60.0)}
        if seen.get(process_id, 0.0) > after:
            return seen[process_id]
        time.sleep(0.02)
    raise AssertionError(f"no beat of {process_id} after {after}")


def test_a_store_that_does_not_answer_is_logged_once_and_tried_again(
    engine: Engine,
    settings: Settings,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    beating = Heartbeat(engine, settings, "relay")
    real = db.transact

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise db.StoreUnavailable("store busy for 5.0s")

    monkeypatch.setattr(heartbeat_module.db, "transact", unavailable)
    with caplog.at_level(logging.INFO, logger="outbox_bridge.jobstore.heartbeats"):
        assert beating.beat() is False
        assert beating.beat() is False
        monkeypatch.setattr(heartbeat_module.db, "transact", real)
        assert beating.beat() is True

    messages = [r.getMessage() for r in caplog.records]
    assert sum("heartbeat not recorded" in m for m in messages) == 1, messages
    assert any("heartbeat recorded again" in m for m in messages), messages
    assert [p.id for p in _alive(engine, clock.now())] == [beating.me.id]
