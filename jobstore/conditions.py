"""Each process's condition as an operator reads it, and whether a running job's worker is still there.

A process whose heartbeat row is still there (`heartbeats.FORGET_AFTER_BEATS`) is
- `alive` while seen within `LATE_AFTER_BEATS` beats,
- `late` once it missed a beat but is still seen within the alive window (`ALIVE_BEATS` beats),
- `lost` once not seen within the alive window, and at once when it ran on the reader's own host and its
  pid no longer exists there (a killed process writes nothing more, so only its host can tell sooner).
Alive and late processes are live: they are what `alive` counts (the alerts, `/metrics`); a lost one never is.

What a process holds is counted from the store (the running jobs by lease owner), never taken from what it
reports. Consumers and workers report the name their leases carry (`detail["worker"]`), so a lease is
matched to its process by that name alone. A running job whose lease owner is a lost process, or no live
process, has lost its worker. The sweeper settles it once its lease runs out, or sooner when its owner's
process is lost (`gone_owners`) and the job has gone unrenewed for a while (`jobstore.sweeper`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from sqlalchemy import Connection

from outbox_bridge.core.durations import format_age
from outbox_bridge.core.settings import ALIVE_BEATS
from outbox_bridge.jobstore import heartbeats
from outbox_bridge.jobstore.heartbeats import FORGET_AFTER_BEATS, Process
from outbox_bridge.jobstore.queries import Leases

# A process not seen for this many beats has missed one: a beat comes every beat, plus the time to write it.
LATE_AFTER_BEATS = 1.5
# The roles whose processes hold job leases, and report the name they hold them under.
RUNNERS = frozenset({"consumer", "worker"})
WORKER_KEY = "worker"


NO_LEASES = Leases()
NO_HOLDINGS: Mapping[str, Leases] = MappingProxyType({})


class Condition(StrEnum):
    ALIVE = "alive"
    LATE = "late"
    LOST = "lost"


LIVE = frozenset({Condition.ALIVE, Condition.LATE})


def condition(seen_ago: float, heartbeat: float, *, pid_gone: bool = False) -> Condition:
    """The condition of a process last seen `seen_ago` seconds ago, for processes that beat every
    `heartbeat` seconds; `pid_gone` (its host says its pid no longer exists) makes it lost at once."""
    if pid_gone or seen_ago > ALIVE_BEATS * heartbeat:
        return Condition.LOST
    if seen_ago > LATE_AFTER_BEATS * heartbeat:
        return Condition.LATE
    return Condition.ALIVE


def pid_gone(process: Process, here: str) -> bool:
    """True when `process` ran on this host (named `here`) and its pid no longer exists. A pid that exists
    but is not ours to signal still exists; on another host nothing can be told."""
    if process.host != here or process.pid <= 0:
        return False
    try:
        os.kill(process.pid, 0)  # signal 0: only asks whether the pid exists
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, and belongs to another user
        return False
    return False


def this_host() -> str:
    """The reader's host name, as `heartbeats.this_process` records a process's."""
    return socket.gethostname()


@dataclass(frozen=True)
class ProcessStatus:
    """A process, its condition as of the read, whether its pid was found gone, and the leases it holds."""

    process: Process
    condition: Condition
    pid_gone: bool = False
    leases: Leases = NO_LEASES

    @property
    def live(self) -> bool:
        return self.condition in LIVE

    @property
    def worker(self) -> str | None:
        """The name the process's leases carry, as it reported it (None: it holds none, or did not say)."""
        return worker_of(self.process)


def worker_of(process: Process) -> str | None:
    """The lease owner's name `process` reported (consumers and workers do), else None."""
    name = process.detail.get(WORKER_KEY)
    return name if isinstance(name, str) else None


def judge(
    processes: Sequence[Process],
    held: Mapping[str, Leases],
    now: float,
    heartbeat: float,
    here: str,
) -> list[ProcessStatus]:
    """Each of `processes` with its condition at `now` and its leases from `held` (by lease owner)."""
    found = []
    for p in processes:
        gone = pid_gone(p, here)
        name = worker_of(p)
        leases = NO_LEASES if name is None else held.get(name, NO_LEASES)
        judged = condition(now - p.last_seen_at, heartbeat, pid_gone=gone)
        found.append(ProcessStatus(p, judged, gone, leases))
    return found


def statuses(
    conn: Connection,
    now: float,
    heartbeat: float,
    *,
    held: Mapping[str, Leases] = NO_HOLDINGS,
    here: str | None = None,
) -> list[ProcessStatus]:
    """Every process whose row is still there (seen within `FORGET_AFTER_BEATS` beats), judged at `now`
    by a reader on host `here` (default: this one), with the leases `held` names for it (by lease owner)."""
    seen = heartbeats.seen_since(conn, now - FORGET_AFTER_BEATS * heartbeat)
    return judge(seen, held, now, heartbeat, this_host() if here is None else here)


def live(found: Sequence[ProcessStatus]) -> list[Process]:
    """The processes of `found` that are live (alive or late): what `alive` counts."""
    return [s.process for s in found if s.live]


@dataclass(frozen=True)
class LeaseOwners:
    """Which lease owners belong to a live process and which to a lost one. `all_named` is false while a
    live consumer or worker does not report its lease owner's name (one of an earlier version): its jobs
    cannot be told apart from those of a worker that is gone, so only the names of lost processes count."""

    live: frozenset[str]
    lost: frozenset[str]
    all_named: bool = True

    @classmethod
    def of(cls, found: Sequence[ProcessStatus]) -> LeaseOwners:
        live_runners = [s for s in found if s.live and s.process.role in RUNNERS]
        return cls(
            live=frozenset(s.worker for s in found if s.live and s.worker is not None),
            lost=frozenset(s.worker for s in found if not s.live and s.worker is not None),
            all_named=all(s.worker is not None for s in live_runners),
        )

    def worker_lost(self, owner: str | None) -> bool:
        """True when the lease owner `owner` is a lost process, or (when every live one said its name) no
        live process at all."""
        if owner is None or owner in self.live:
            return False
        return owner in self.lost or self.all_named


def lease_owners(conn: Connection, now: float, heartbeat: float, *, here: str | None = None) -> LeaseOwners:
    """The lease owners of the processes whose rows are there, live or lost, judged at `now`."""
    return LeaseOwners.of(statuses(conn, now, heartbeat, here=here))


def gone_owners(conn: Connection, now: float, heartbeat: float, *, here: str | None = None) -> frozenset[str]:
    """The lease owners whose process is lost at `now` (its row, still there, not written for `ALIVE_BEATS`
    beats, or its pid gone from the reader's host `here`) and that no live process reports as its own."""
    owners = lease_owners(conn, now, heartbeat, here=here)
    return owners.lost - owners.live


def lease_note(expires_at: float | None, now: float, *, worker_lost: bool = False) -> str:
    """A running job's lease as a person reads it: `expires in 12s`, or `expired 3s ago`. With
    `worker_lost`: `worker lost, lease expires in 12s`, or `worker lost, lease expired 3s ago, the sweeper
    will retry or settle it`. Empty for a job without a lease."""
    if expires_at is None:
        return ""
    left = expires_at - now
    lease = f"expires in {format_age(left)}" if left >= 0 else f"expired {format_age(-left)} ago"
    if not worker_lost:
        return lease
    settles = "" if left >= 0 else ", the sweeper will retry or settle it"
    return f"worker lost, lease {lease}{settles}"
