"""The phases of one benchmarked deployment, each returning its figures as a plain dict.

Every phase tags its jobs with a tenant of its own, so its figures come from its own rows; every wait has
a bound (`PhaseTimeout`) and ends early when the run is stopped."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from outbox_bridge.bench import costs, machine
from outbox_bridge.bench.deploy import Deployment
from outbox_bridge.bench.observe import StoreWatch, Timings, cdf_ms, percentiles_ms, throughput
from outbox_bridge.bench.options import Options
from outbox_bridge.bench.submit import HttpSubmitter, StoreSubmitter, Tally, open_loop
from outbox_bridge.bench.tracing import fsync_counts, fsyncs_counted, profile_summary, profiled

WARMUP_JOBS = 50
PROFILE_JOBS = 2000  # enough samples for the shares; the profile reports no rates
SETTLE_SECONDS = 1.0
SNAPSHOT_WAIT = 10.0  # seconds a snapshot waits for every live process's fresh counters


@dataclass
class Run:
    """What the phases of one deployment share."""

    label: str
    options: Options
    deployment: Deployment
    engine: Engine
    watch: StoreWatch
    http: HttpSubmitter
    stop: threading.Event

    @property
    def store(self) -> StoreSubmitter:
        return StoreSubmitter(self.engine, self.deployment.settings.max_attempts)

    def tenant(self, phase: str) -> str:
        return f"{self.label}-{phase}"

    def snapshot(self) -> costs.Snapshot:
        # A process's stats thread writes every second; on a loaded machine it can miss a few beats, and
        # a process left without a fresh sample would drop out of the phase's figures.
        return costs.snapshot(
            self.deployment.stats_dir, self.deployment.names(), after=time.time(), timeout=SNAPSHOT_WAIT
        )

    def finish_timeout(self, jobs: int) -> float:
        """How long `jobs` may take to finish: generous, but bounded (20 jobs/s at the very least)."""
        return 60.0 + jobs / 20.0

    def wait(self, tenant: str, expected: int, timeout: float | None = None) -> dict[str, int]:
        self.deployment.check_alive()
        progress = self.watch.wait_finished(
            tenant, expected, timeout or self.finish_timeout(expected), self.stop
        )
        return {"succeeded": progress.succeeded, "failed_or_dead": progress.other_terminal}


def warmup(run: Run) -> dict[str, Any]:
    """A few jobs through the whole path before anything is measured (imports, connections, caches)."""
    tenant, tally = run.tenant("warmup"), Tally()
    run.store.burst(tenant, WARMUP_JOBS, 10, tally, run.stop)
    return run.wait(tenant, tally.accepted, timeout=60.0) | {"submitted": tally.as_dict()}


def idle(run: Run) -> dict[str, Any]:
    """Store statements per second and CPU per process with no work at all, over `idle_seconds`."""
    run.stop.wait(SETTLE_SECONDS)
    before = run.snapshot()
    if run.stop.wait(run.options.idle_seconds):
        raise KeyboardInterrupt
    spent = costs.delta(before, run.snapshot())
    spent.pop(costs.BENCH, None)  # the benchmark itself only sleeps here
    return {"seconds": run.options.idle_seconds, "per_process": costs.rates(spent)}


Start = tuple[costs.Snapshot, machine.Reading | None]


def start_costs(run: Run) -> Start:
    """The counters at a phase's start: each process's (`costs`) and the whole machine's (`machine`)."""
    return run.snapshot(), machine.read()


def costs_since(run: Run, start: Start, jobs: int) -> dict[str, Any]:
    """What the phase's `jobs` cost since `start`: by process (`costs.per_job`) and the whole machine's
    CPU (`machine.spent`), read first: `run.snapshot` may wait up to a second for fresh counters."""
    before, reading = start
    cpu = machine.spent(reading, machine.read(), jobs)
    return {"cost": costs.per_job(costs.delta(before, run.snapshot()), jobs), "machine": cpu}


def _burst(run: Run, phase: str, submit: Any, how: dict[str, Any]) -> dict[str, Any]:
    tenant, tally = run.tenant(phase), Tally()
    start = start_costs(run)
    submit(tenant, tally)
    finished = run.wait(tenant, tally.accepted)
    cost = costs_since(run, start, tally.accepted)
    timings = run.watch.timings(tenant)
    return (
        how
        | throughput(timings)
        | {"finished": finished, "submitted": tally.as_dict()}
        | cost
        | _latencies(timings, with_cdf=False)
    )


def burst_store(run: Run) -> dict[str, Any]:
    """Accepted-to-succeeded jobs/s for a burst of `jobs`, accepted in this process in batches."""
    o = run.options

    def submit(tenant: str, tally: Tally) -> None:
        run.store.burst(tenant, o.jobs, o.batch, tally, run.stop)

    return _burst(run, "burst-store", submit, {"path": "store", "accepts_per_transaction": o.batch})


def burst_http(run: Run) -> dict[str, Any]:
    """The same burst through POST /jobs from concurrent clients, one job per request."""
    o = run.options

    def submit(tenant: str, tally: Tally) -> None:
        run.http.burst(tenant, o.jobs, o.http_threads, tally, run.stop)

    return _burst(run, "burst-http", submit, {"path": "http", "client_threads": o.http_threads})


def latency(run: Run) -> dict[str, Any]:
    """Open loop at `rate` jobs/s for `duration` seconds, one job per store transaction: accept-to-start
    and accept-to-succeeded percentiles, and the CDFs for the plots."""
    return _open_loop_latency(run, "latency", run.options.rate)


def latency_light(run: Run) -> dict[str, Any]:
    """The same at `light_rate`, a load far below capacity: the pick-up delay without queueing."""
    return _open_loop_latency(run, "latency-light", run.options.light_rate)


def _open_loop_latency(run: Run, phase: str, rate: float) -> dict[str, Any]:
    o = run.options
    tenant, tally = run.tenant(phase), Tally()
    start = start_costs(run)
    schedule = open_loop(lambda: run.store.submit(tenant, 1, tally), rate, o.duration, run.stop)
    finished = run.wait(tenant, tally.accepted)
    cost = costs_since(run, start, tally.accepted)
    timings = run.watch.timings(tenant)
    return {
        "path": "store",
        "offered_rate": rate,
        "seconds": o.duration,
        "due": schedule.due,
        "max_schedule_lag_ms": round(schedule.max_lag_seconds * 1000, 2),
        "finished": finished,
        "submitted": tally.as_dict(),
        **cost,
        "achieved": throughput(timings),
    } | _latencies(timings, with_cdf=True)


def _latencies(t: Timings, *, with_cdf: bool) -> dict[str, Any]:
    to_start, to_success = t.started - t.created, t.finished - t.created
    found: dict[str, Any] = {
        "accept_to_start_ms": percentiles_ms(to_start),
        "accept_to_succeeded_ms": percentiles_ms(to_success),
    }
    if with_cdf:
        found["cdf_ms"] = {"accept_to_start": cdf_ms(to_start), "accept_to_succeeded": cdf_ms(to_success)}
    return found


def fsyncs(run: Run) -> dict[str, Any]:
    """fsync-family calls per job, counted by `strace -c` attached to every process (and this one, the
    submitter) over a store-path burst of `fsync_jobs`. The tracing slows everything: no rates here."""
    o = run.options
    tenant, tally = run.tenant("fsync"), Tally()
    pids = run.deployment.pids() | {costs.BENCH: _own_pid()}
    with fsyncs_counted(pids, run.deployment.workdir) as tracers:
        run.store.burst(tenant, o.fsync_jobs, o.batch, tally, run.stop)
        finished = run.wait(tenant, tally.accepted)
        time.sleep(SETTLE_SECONDS)  # let checkpoints that follow the last commit happen under the trace
    counts = fsync_counts(tracers)
    total = sum(counts.values())
    return {
        "how": "strace -f -c -e trace=fsync,fdatasync,sync_file_range -p <pid>, one per process",
        "path": "store",
        "accepts_per_transaction": o.batch,
        "jobs": tally.accepted,
        "finished": finished,
        "fsyncs_per_job": round(total / tally.accepted, 3) if tally.accepted else None,
        "per_process": counts,
    }


def profile(run: Run) -> dict[str, Any]:
    """Where the time goes during a store-path burst (at most `PROFILE_JOBS`): py-spy on every process,
    top functions by share of samples. Threads sleeping in a bounded retry pause count as samples of the
    function that pauses (`_run` in jobstore/db.py). Sampling slows the processes: no rates here."""
    o = run.options
    jobs = min(o.jobs, PROFILE_JOBS)
    return _profiled_burst(
        run, "profile", lambda t, tally: run.store.burst(t, jobs, o.batch, tally, run.stop)
    )


def profile_http(run: Run) -> dict[str, Any]:
    """The same through POST /jobs: where the API process (and the rest) spend the HTTP path's time."""
    o = run.options
    jobs = min(o.jobs, PROFILE_JOBS)
    return _profiled_burst(
        run, "profile-http", lambda t, tally: run.http.burst(t, jobs, o.http_threads, tally, run.stop)
    )


def _profiled_burst(run: Run, phase: str, submit: Any) -> dict[str, Any]:
    tenant, tally = run.tenant(phase), Tally()
    pids = run.deployment.pids() | {costs.BENCH: _own_pid()}
    with profiled(pids, run.deployment.workdir / phase) as tracers:
        submit(tenant, tally)
        finished = run.wait(tenant, tally.accepted)
    return {
        "how": "py-spy record --nonblocking --rate 100 --format raw, one per process",
        "jobs": tally.accepted,
        "finished": finished,
        "per_process": {name: profile_summary(path) for name, path in tracers.outputs.items()},
    }


def _own_pid() -> int:
    import os

    return os.getpid()
