"""The CPU the whole machine spends in a phase, read from `/proc`: all of it, and the part of the store's and
the broker's servers when they run on the same host (PostgreSQL's backends, RabbitMQ's Erlang VM), which
the processes' own counters (`bench.costs`) do not see.

With it a phase says how busy the cores were and what a job costs the machine in all: at N jobs/s a job
cannot cost more than `cores / N` seconds of CPU, so a burst whose cores are full is bound by that cost,
not by a wait. Linux only; elsewhere (or without `/proc`) the figures are absent, not zero. A server
process that exits during the phase takes its CPU with it (PostgreSQL's backends live as long as the
deployment's pooled connections, so a phase loses little)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
# Process names (`/proc/PID/stat`'s second field) of the servers a deployment uses on this host.
SERVERS = {"postgresql": ("postgres",), "rabbitmq": ("beam.smp",)}


@dataclass(frozen=True)
class Reading:
    at: float  # time.monotonic() when `/proc/stat` was read
    busy: float  # CPU seconds all cores spent busy since boot (user, nice, system, irq, softirq)
    servers: dict[str, float]  # CPU seconds of each server's live processes
    # CPU seconds of all cores since boot, busy or not (the busy, idle, iowait and steal ticks): the share
    # of the cores' time that was busy is taken from these counters alone, not from the clock, which is
    # read a moment apart from them (a share over 100 % once).
    total: float


def read(proc: Path = PROC) -> Reading | None:
    """The machine's CPU counters now; None where `/proc` cannot be read."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        first = (proc / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    at = time.monotonic()
    user, nice, system, idle, iowait, irq, softirq = (int(v) for v in first[1:8])
    steal = int(first[8]) if len(first) > 8 else 0
    busy = user + nice + system + irq + softirq
    servers = dict.fromkeys(SERVERS, 0.0)
    for stat in proc.glob("[0-9]*/stat"):
        name, ticks = _process(stat)
        for server, names in SERVERS.items():
            if name in names:
                servers[server] += ticks / tick
    return Reading(at, busy / tick, servers, (busy + idle + iowait + steal) / tick)


def _process(stat: Path) -> tuple[str | None, int]:
    """A process's name and its user + system CPU ticks (0 for one that is gone)."""
    try:
        text = stat.read_text()
    except OSError:
        return None, 0
    name = text[text.find("(") + 1 : text.rfind(")")]
    fields = text[text.rfind(")") + 2 :].split()  # from the third field, `state`, on
    return name, int(fields[11]) + int(fields[12])  # utime and stime, fields 14 and 15


def spent(before: Reading | None, after: Reading | None, jobs: int) -> dict[str, object] | None:
    """What the machine spent between two readings: CPU seconds per 1,000 jobs in all and by server, and
    the share of the cores' time that was busy."""
    if before is None or after is None or not jobs or after.total <= before.total:
        return None
    busy = after.busy - before.busy
    per_server = {name: after.servers[name] - before.servers[name] for name in SERVERS}
    return {
        "seconds": round(after.at - before.at, 3),
        "cores": os.cpu_count() or 1,
        "busy_percent": round(100 * busy / (after.total - before.total), 1),
        "cpu_seconds_per_1000_jobs": {"all": round(busy * 1000 / jobs, 3)}
        | {name: round(max(0.0, seconds) * 1000 / jobs, 3) for name, seconds in per_server.items()},
    }
