"""Cost figures from the store counters each process writes to STATS_DIR (jobstore/db.py
`start_stats_writer`), plus the benchmark's own process, which accepts jobs in the store-direct phases.

A process rewrites its file every second, so a snapshot waits until every live process has written after
the instant it is taken for; a phase's figures therefore include at most about a second of idle tail."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from outbox_bridge.jobstore import db

COUNTERS = (
    "write_transactions",
    "read_transactions",
    "statements",
    "retries",
    "slow_lock_waits",
    "lock_wait_seconds",
    "write_seconds",
)
BENCH = "bench"


@dataclass(frozen=True)
class Sample:
    name: str
    at: float  # when the process wrote it (epoch seconds)
    values: dict[str, float]  # the counters and cpu_seconds


Snapshot = dict[int, Sample]  # by pid


def own_sample() -> Sample:
    """This process's counters: the store-direct submitter (and the HTTP client threads' CPU)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    counts = db.stats.snapshot()
    values = {k: float(counts.get(k, 0.0)) for k in COUNTERS}
    return Sample(BENCH, time.time(), values | {"cpu_seconds": usage.ru_utime + usage.ru_stime})


def _read(path: Path) -> dict[str, float] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def snapshot(stats_dir: Path, names: Mapping[int, str], *, after: float, timeout: float = 3.0) -> Snapshot:
    """Every process's counters as written at or after `after` (epoch seconds); a process that has
    exited counts with its last (exit-time) file. Waits at most `timeout` seconds for fresh files."""
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        for path in stats_dir.glob("*.json"):
            data = _read(path)
            if data is not None:
                found[int(data["pid"])] = data
        stale = [pid for pid, d in found.items() if d["at"] < after and _alive(pid)]
        if not stale or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    samples = {pid: _sample(d, names.get(pid, f"{d['name']}-{pid}")) for pid, d in found.items()}
    samples[os.getpid()] = own_sample()
    return samples


def _sample(data: Mapping[str, float], name: str) -> Sample:
    values = {k: float(data.get(k, 0.0)) for k in COUNTERS}
    cpu = float(data["cpu_user"]) + float(data["cpu_system"])
    return Sample(name, float(data["at"]), values | {"cpu_seconds": cpu})


def delta(before: Snapshot, after: Snapshot) -> dict[str, dict[str, float]]:
    """What each process spent between two snapshots, by process name, with the seconds between its two
    samples as `elapsed`. A process that started in between counts from zero; one that did nothing in
    between (e.g. exited before) is left out."""
    spent: dict[str, dict[str, float]] = {}
    for pid, end in after.items():
        start = before.get(pid)
        base = start.values if start is not None else dict.fromkeys(end.values, 0.0)
        used = {k: v - base.get(k, 0.0) for k, v in end.values.items()}
        if start is not None and end.at == start.at:
            continue
        used["elapsed"] = end.at - start.at if start is not None else 0.0
        spent[end.name] = used
    return spent


def per_job(spent: Mapping[str, Mapping[str, float]], jobs: int) -> dict[str, object]:
    """Store work per job summed over every process (with the time spent writing), CPU seconds per 1,000
    jobs per process, and the slow lock waits (> 5 ms) counted."""
    total = {k: sum(p[k] for p in spent.values()) for k in COUNTERS}
    return {
        "jobs": jobs,
        "write_transactions_per_job": _ratio(total["write_transactions"], jobs),
        "read_transactions_per_job": _ratio(total["read_transactions"], jobs),
        "statements_per_job": _ratio(total["statements"], jobs),
        "retries": int(total["retries"]),
        "slow_lock_waits": int(total["slow_lock_waits"]),
        "lock_wait_seconds": round(total["lock_wait_seconds"], 4),
        # How long the store's one writer slot was taken per job, all processes together: at N jobs/s,
        # N times this (in seconds) is the share of every second in which some process was writing.
        "write_ms_per_job": _ratio(total["write_seconds"] * 1000, jobs),
        "write_ms_per_job_by_process": {
            name: _ratio(p["write_seconds"] * 1000, jobs) for name, p in sorted(spent.items())
        },
        "cpu_seconds_per_1000_jobs": {
            name: _ratio(p["cpu_seconds"] * 1000, jobs) for name, p in sorted(spent.items())
        },
        "per_process": {name: _rounded(p) for name, p in sorted(spent.items())},
    }


def rates(spent: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per process, over the seconds between its own two samples: statements, write and read
    transactions per second, and its CPU share in percent."""
    return {
        name: {
            "seconds": round(p["elapsed"], 2),
            "statements_per_second": round(p["statements"] / p["elapsed"], 2),
            "write_transactions_per_second": round(p["write_transactions"] / p["elapsed"], 2),
            "read_transactions_per_second": round(p["read_transactions"] / p["elapsed"], 2),
            "cpu_percent": round(100 * p["cpu_seconds"] / p["elapsed"], 2),
        }
        for name, p in sorted(spent.items())
        if p["elapsed"] > 0
    }


def _ratio(value: float, jobs: int) -> float | None:
    return round(value / jobs, 3) if jobs else None


def _rounded(values: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in values.items()}
