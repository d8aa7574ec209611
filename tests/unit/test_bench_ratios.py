"""The benchmark's ratios between the runs of one invocation: measured on one machine in one run, they are
the figures worth comparing (absolute ones are noisy on a shared machine)."""

from __future__ import annotations

from typing import Any

from outbox_bridge.bench.targets import ratios


def run(mode: str, synchronous: str, store: float, http: float | None) -> dict[str, Any]:
    phases: dict[str, Any] = {"burst_store": {"jobs_per_second": store}}
    phases["burst_http"] = {"jobs_per_second": http} if http is not None else {"error": "refused"}
    return {"mode": mode, "synchronous": synchronous, "phases": phases}


def test_both_modes_at_one_level_give_broker_over_sqlite_and_each_run_http_over_store() -> None:
    found = ratios([run("broker", "FULL", 3000, 1500), run("sqlite", "FULL", 2000, 1000)])

    assert found == {
        "broker/sqlite store throughput at FULL": 1.5,
        "broker/sqlite http throughput at FULL": 1.5,
        "broker FULL HTTP/store throughput": 0.5,
        "sqlite FULL HTTP/store throughput": 0.5,
    }


def test_two_levels_of_one_mode_give_normal_over_full() -> None:
    found = ratios([run("sqlite", "FULL", 1000, 800), run("sqlite", "NORMAL", 3000, 900)])

    assert found["sqlite NORMAL/FULL store throughput"] == 3.0
    assert not [key for key in found if key.startswith("broker/sqlite")]


def test_a_phase_that_failed_gives_no_ratio_rather_than_a_wrong_one() -> None:
    found = ratios([run("broker", "FULL", 3000, None), run("sqlite", "FULL", 2000, 1000)])

    assert found["broker/sqlite http throughput at FULL"] is None
    assert found["broker FULL HTTP/store throughput"] is None
    assert found["broker/sqlite store throughput at FULL"] == 1.5
