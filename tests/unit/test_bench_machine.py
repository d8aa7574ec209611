"""The benchmark's whole-machine CPU figures: read from a `/proc`, split by server, per 1,000 jobs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from outbox_bridge.bench import machine

TICK = os.sysconf("SC_CLK_TCK")


def _proc(root: Path, busy: tuple[int, ...], processes: dict[int, tuple[str, int, int]]) -> Path:
    """A `/proc` with a `stat` whose first line holds `busy` (user, nice, system, idle, iowait, irq,
    softirq, in ticks) and one `PID/stat` per process: (name, utime, stime)."""
    root.mkdir(exist_ok=True)
    (root / "stat").write_text("cpu  " + " ".join(map(str, busy)) + " 0 0 0\ncpu0 1 2 3\n")
    for pid, (name, utime, stime) in processes.items():
        (root / str(pid)).mkdir(exist_ok=True)
        fields = ["S", *["0"] * 10, str(utime), str(stime), *["0"] * 30]
        (root / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    return root


def test_a_reading_sums_the_busy_ticks_and_each_servers_processes(tmp_path: Path) -> None:
    proc = _proc(
        tmp_path / "proc",
        (100, 5, 50, 9000, 7, 3, 2),
        {
            10: ("postgres", 40, 10),
            11: ("postgres", 5, 5),
            20: ("beam.smp", 30, 0),
            30: ("python3 (bench)", 70, 0),  # a name holding a parenthesis is not misread
        },
    )
    reading = machine.read(proc)
    assert reading is not None
    assert reading.busy == pytest.approx((100 + 5 + 50 + 3 + 2) / TICK)  # idle and iowait left out
    assert reading.servers == pytest.approx({"postgresql": 60 / TICK, "rabbitmq": 30 / TICK})
    assert reading.total == pytest.approx((100 + 5 + 50 + 9000 + 7 + 3 + 2) / TICK)  # steal 0 here


def test_the_busy_share_comes_from_the_counters_not_the_clock() -> None:
    # The clock says 1.9 s passed where the counters saw 2 s of both cores: the share is still at most all.
    before = machine.Reading(at=10.0, busy=100.0, servers=dict.fromkeys(machine.SERVERS, 0.0), total=500.0)
    after = machine.Reading(at=11.9, busy=103.0, servers=before.servers, total=504.0)
    found = machine.spent(before, after, jobs=100)
    assert found is not None and found["busy_percent"] == 75.0
    saturated = machine.Reading(at=11.9, busy=104.0, servers=before.servers, total=504.0)
    found = machine.spent(before, saturated, jobs=100)
    assert found is not None and found["busy_percent"] == 100.0


def test_what_a_phase_spent_is_per_1000_jobs_and_a_share_of_the_cores() -> None:
    cores = os.cpu_count() or 1
    before = machine.Reading(at=10.0, busy=100.0, servers={"postgresql": 5.0, "rabbitmq": 1.0}, total=900.0)
    half_busy = 100.0 + 2.0 * cores * 0.5  # 2 s, every core half busy
    after = machine.Reading(
        at=12.0, busy=half_busy, servers={"postgresql": 5.5, "rabbitmq": 1.2}, total=900.0 + 2.0 * cores
    )
    found = machine.spent(before, after, jobs=2000)
    assert found is not None
    assert found["busy_percent"] == 50.0 and found["cores"] == cores and found["seconds"] == 2.0
    assert found["cpu_seconds_per_1000_jobs"] == {
        "all": pytest.approx(cores * 0.5),
        "postgresql": pytest.approx(0.25),
        "rabbitmq": pytest.approx(0.1),
    }


def test_without_a_reading_or_a_job_there_is_no_figure(tmp_path: Path) -> None:
    reading = machine.Reading(at=1.0, busy=1.0, servers=dict.fromkeys(machine.SERVERS, 0.0), total=10.0)
    assert machine.read(tmp_path / "missing") is None
    assert machine.spent(None, reading, jobs=10) is None
    assert machine.spent(reading, reading, jobs=10) is None
    assert machine.spent(reading, machine.Reading(2.0, 2.0, reading.servers, 12.0), jobs=0) is None
