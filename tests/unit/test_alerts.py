"""The alerts rule: who must be alive for waiting work to move, and when a wait is too long."""

from __future__ import annotations

from outbox_bridge.jobstore.alerts import alerts

NOBODY = {"relay": 0, "consumer": 0, "worker": 0}


def codes(**figures: object) -> list[str]:
    values: dict[str, object] = {
        "due": 0,
        "oldest_due_age": 0.0,
        "outbox_pending": 0,
        "alive": NOBODY,
        "queued_age_limit": 60.0,
    }
    values.update(figures)
    return [a.code for a in alerts(**values)]  # type: ignore[arg-type]


def test_an_idle_system_with_nobody_alive_is_not_an_alert() -> None:
    assert codes() == []


def test_waiting_jobs_need_a_consumer_or_a_baseline_worker() -> None:
    assert codes(due=3, alive=NOBODY | {"relay": 1}) == ["no-consumer"]
    assert codes(due=3, alive=NOBODY | {"relay": 1, "consumer": 2}) == []
    assert codes(due=3, alive=NOBODY | {"worker": 1}) == []


def test_a_due_outbox_needs_a_relay_unless_a_baseline_worker_claims_from_the_table() -> None:
    assert codes(outbox_pending=5, alive=NOBODY | {"consumer": 1}) == ["no-relay"]
    assert codes(outbox_pending=5, alive=NOBODY | {"worker": 1}) == []
    assert codes(outbox_pending=5, due=5) == ["no-consumer", "no-relay"]


def test_a_wait_past_the_threshold_is_an_alert_and_a_zero_threshold_says_nothing() -> None:
    everyone = {"relay": 1, "consumer": 1, "worker": 0}
    assert codes(due=1, oldest_due_age=60.0, alive=everyone) == []
    assert codes(due=1, oldest_due_age=61.0, alive=everyone) == ["queued-too-long"]
    assert codes(due=1, oldest_due_age=1e6, alive=everyone, queued_age_limit=0.0) == []


def test_running_jobs_held_by_a_lost_worker_are_an_alert_whoever_else_is_alive() -> None:
    everyone = {"relay": 1, "consumer": 1, "worker": 0}
    assert codes(worker_lost=4, alive=everyone) == ["worker-lost"]
    assert codes(worker_lost=0, alive=everyone) == []
    most_urgent_first = ["no-consumer", "worker-lost", "queued-too-long"]
    assert codes(worker_lost=1, due=2, oldest_due_age=61.0) == most_urgent_first
