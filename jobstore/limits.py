"""Flow limits across the deployment: `KIND_MAX_RUNNING` (at most N running jobs of a kind),
`KIND_RATE_LIMITS` (starts of a kind spaced by its rate's interval) and concurrency keys (at most
`CONCURRENCY_KEY_MAX_RUNNING` running jobs of a tenant share a job's `concurrency_key`).

Where it is decided: in the claim's transaction (`claiming`), so any number of consumers and workers
together respect them. A claim first takes what no limit concerns (a guard in its statement: no key, a kind
without a limit); the queued jobs it left for a limit come here (`candidates`), are admitted in the claim's
order while their kind's and key's room lasts (`admit`), and only the admitted are claimed. Counting is
exact: SQLite has one writer at a time, and on PostgreSQL a claim first takes a transaction-scoped advisory
lock on each kind and key it decides on, in one sorted order (after any tenant locks, `tenantcap`), so the
second of two concurrent claims counts the first one's jobs. A running job whose lease expired still counts:
its worker may be stalled, not dead, until the sweeper ends the attempt.

What happens to a job a limit holds back: it stays `queued`, spends no attempt, and `held_by` says which
limit held it. A consumer acks its delivery (`claiming.Refusal.HELD`) and nothing delivers it again in a loop:

- held by a cap (`kind`, `key`): when a running job of its kind or key ends, the transaction that ends it
  announces the first held jobs there is room for (`release`, from the completer), in the order jobs start in
  (priority, then age); the relay role's housekeeping does the same for every held job each sweep
  (`release_held`), for room that opened otherwise (a lease swept, a job cancelled, a cap raised);
- held by a rate (`rate`): the kind's held jobs take turns, one at a time: the first has an outbox row due at
  the kind's next start, and the claim that starts a job of the kind gives the next one its turn
  (`_next_turn`): one delivery per start, whatever the backlog.

The baseline's claim (the table's path) passes over the kinds at their cap or not yet due to start again
(`full_kinds`) and the keys at their cap (a condition of its statement), then admits as above; it holds
nothing back, since it walks the table again at its next claim."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from outbox_bridge.jobstore import db, drivers, outbox

if TYPE_CHECKING:
    from outbox_bridge.core.settings import Settings


class HoldReason(StrEnum):
    """Which limit held a queued job back (`jobs.held_by`)."""

    KIND = "kind"  # KIND_MAX_RUNNING
    KEY = "key"  # CONCURRENCY_KEY_MAX_RUNNING
    RATE = "rate"  # KIND_RATE_LIMITS


@dataclass(frozen=True)
class Limits:
    """The deployment's limits: a cap per kind, the seconds between two starts per kind, and the most
    running jobs of one tenant's concurrency key."""

    kind_max_running: Mapping[str, int] = field(default_factory=dict)
    kind_intervals: Mapping[str, float] = field(default_factory=dict)
    key_max_running: int = 1

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        from outbox_bridge.core.settings import parse_rate

        intervals = {kind: parse_rate(kind, rate) for kind, rate in settings.kind_rate_limits.items()}
        return cls(dict(settings.kind_max_running), intervals, settings.concurrency_key_max_running)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds a limit concerns, sorted (a claim's guard leaves their queued jobs to `admit`)."""
        return tuple(sorted({*self.kind_max_running, *self.kind_intervals}))


NONE = Limits()


@dataclass(frozen=True)
class Candidate:
    job_id: str
    tenant: str
    kind: str
    key: str | None


@dataclass
class Admission:
    """What `admit` decided about a claim's candidates: those the limits let start, in the claim's order,
    and why each of the others is held back."""

    admitted: list[Candidate] = field(default_factory=list)
    held: dict[str, HoldReason] = field(default_factory=dict)


# Advisory lock spaces: apart from the tenants' (`tenantcap`) and from each other.
_KIND_SPACE, _KEY_SPACE = 0x6B69, 0x6B65


def candidates(conn: Connection, job_ids: Sequence[str], now: float) -> list[Candidate]:
    """Those of `job_ids` that a claim could start at `now` but for the flow limits (the claim's own
    condition for a queued job), in the order of `job_ids`: the jobs a claim's guard left to the limits."""
    if not job_ids:
        return []
    found = db.execute(conn, "limit_candidates", {"ids": _array(conn, job_ids), "now": now})
    by_id = {row[0]: Candidate(*row) for row in found}
    return [by_id[job_id] for job_id in dict.fromkeys(job_ids) if job_id in by_id]


def admit(conn: Connection, limits: Limits, found: Sequence[Candidate], now: float) -> Admission:
    """Split `found`, in order, into the jobs the limits let start now and those they hold back (and why),
    counting what runs now under the locks that make the count exact."""
    capped = sorted({c.kind for c in found if c.kind in limits.kind_max_running})
    rated = sorted({c.kind for c in found if c.kind in limits.kind_intervals})
    keys = sorted({(c.tenant, c.key) for c in found if c.key is not None})
    kind_locks = [(_KIND_SPACE, kind) for kind in sorted({*capped, *rated})]
    _lock(conn, kind_locks + [(_KEY_SPACE, f"{tenant}\x00{key}") for tenant, key in keys])
    kinds_running = _running_kinds(conn, capped)
    keys_running = _running_keys(conn, keys)
    next_starts = _next_starts(conn, rated)
    admission = Admission()
    started: Counter[str] = Counter()
    keyed: Counter[tuple[str, str]] = Counter()
    for c in found:
        cap = limits.kind_max_running.get(c.kind)
        if cap is not None and kinds_running[c.kind] + started[c.kind] >= cap:
            admission.held[c.job_id] = HoldReason.KIND
        elif c.key is not None and keys_running[(c.tenant, c.key)] + keyed[(c.tenant, c.key)] >= (
            limits.key_max_running
        ):
            admission.held[c.job_id] = HoldReason.KEY
        elif c.kind in limits.kind_intervals and (started[c.kind] or next_starts.get(c.kind, now) > now):
            admission.held[c.job_id] = HoldReason.RATE
        else:
            admission.admitted.append(c)
            started[c.kind] += 1
            if c.key is not None:
                keyed[(c.tenant, c.key)] += 1
    return admission


def started(conn: Connection, limits: Limits, kinds: Iterable[str], now: float) -> None:
    """Note that a job of each of `kinds` started now: a rate-limited kind's next start is one interval
    later (the caller holds the kind's lock: `admit`), and the next of its held jobs is given its turn
    then (`_next_turn`)."""
    rated = sorted(set(kinds) & set(limits.kind_intervals))
    if rated:
        due = [{"kind": kind, "next_start_at": now + limits.kind_intervals[kind]} for kind in rated]
        db.execute_many(conn, "limit_rate_started", due)
        _next_turn(conn, rated, now)


def hold(conn: Connection, admission: Admission, found: Sequence[Candidate], now: float) -> None:
    """Mark the jobs `admission` held back (of `found`, what it was decided on) as held; a rate-limited kind
    with no held job waiting for its turn gives the first one its turn (`_next_turn`)."""
    if not admission.held:
        return
    for why in HoldReason:
        ids = [job_id for job_id, held in admission.held.items() if held is why]
        if ids:
            db.execute(conn, "limit_hold", {"ids": _array(conn, ids), "held_by": why.value, "now": now})
    rated = sorted({c.kind for c in found if admission.held.get(c.job_id) is HoldReason.RATE})
    if rated:
        _next_turn(conn, rated, now)


# A rate-limited kind's held jobs wait for their turn one at a time: the first of them (in the order jobs
# start in) has an outbox row due at the kind's next start, the others none. When it starts, the claim gives
# the next one its turn; when a job that arrived meanwhile took the start, it is refused again and keeps
# the turn. One delivery per start, whatever the backlog.
def _next_turn(conn: Connection, kinds: Sequence[str], now: float) -> int:
    """For each of `kinds` whose held jobs have none waiting for its turn, the first one's turn: an outbox
    row due at the kind's next start. Returns how many turns were given."""
    given = 0
    next_starts = _next_starts(conn, kinds)
    for kind in kinds:
        first = db.execute(conn, "limit_first_without_turn", {"kind": kind})
        if first:
            outbox.add(conn, str(first[0][0]), available_at=max(next_starts.get(kind, now), now), now=now)
            given += 1
    return given


@dataclass(frozen=True)
class Ended:
    """A job that stopped running: what its end may give room to."""

    tenant: str
    kind: str
    key: str | None


def release(conn: Connection, limits: Limits, ended: Iterable[Ended], now: float) -> int:
    """In the transaction that ended `ended` (running jobs that finished or went back to wait), announce
    the held jobs their room lets start: per capped kind and per key, the first held ones, as many as it
    has room for now. Costs nothing for jobs no cap concerns. Returns how many were announced."""
    ended = list(ended)
    kinds = sorted({e.kind for e in ended if e.kind in limits.kind_max_running})
    keys = sorted({(e.tenant, e.key) for e in ended if e.key is not None})
    if not kinds and not keys:
        return 0
    return _announce(conn, _with_room(conn, limits, kinds, keys), now)


# A kind no cap names any more (KIND_MAX_RUNNING changed): room for every held job of it.
_NO_CAP = 10**9


def _with_room(
    conn: Connection, limits: Limits, kinds: Sequence[str], keys: Sequence[tuple[str, str]]
) -> list[str]:
    """The held jobs there is room for now, in the order jobs start in: of each of `kinds`, its cap less
    its running jobs (all of them for a kind no cap names); of each of `keys` (tenant, key),
    `CONCURRENCY_KEY_MAX_RUNNING` less its running jobs."""
    chosen: list[str] = []
    running = _running_kinds(conn, kinds)
    for kind in kinds:
        room = limits.kind_max_running.get(kind, _NO_CAP) - running[kind]
        if room > 0:
            rows = db.execute(conn, "limit_held_of_kind", {"kind": kind, "limit": room})
            chosen += [row[0] for row in rows]
    keys_running = _running_keys(conn, keys)
    for tenant, key in keys:
        room = limits.key_max_running - keys_running[(tenant, key)]
        if room > 0:
            rows = db.execute(conn, "limit_held_of_key", {"tenant": tenant, "key": key, "limit": room})
            chosen += [row[0] for row in rows]
    return list(dict.fromkeys(chosen))


def release_held(conn: Connection, limits: Limits, now: float) -> int:
    """The relay role's sweep: announce every held job there is room for now (a cap whose room opened
    without a completion to announce it: a lease swept, a job cancelled, a race of a hold with an end on
    PostgreSQL, a limit raised or removed), and give a rate-limited kind's held jobs their turn again
    when none has it (its delivery went missing); forget `held_by` of jobs no longer queued. One read of
    the (empty, mostly) held jobs' index when nothing is held. Returns how many jobs were announced."""
    db.execute(conn, "limit_forget_unqueued")
    groups = db.execute(conn, "limit_held_groups")
    if not groups:
        return 0
    kinds = sorted({kind for why, kind, _, _, _ in groups if why == HoldReason.KIND.value})
    keys = sorted({(tenant, key) for why, _, tenant, key, _ in groups if why == HoldReason.KEY.value})
    announced = _announce(conn, _with_room(conn, limits, kinds, keys), now)
    rated = sorted({kind for why, kind, _, _, _ in groups if why == HoldReason.RATE.value})
    if rated:
        unlimited = [kind for kind in rated if kind not in limits.kind_intervals]
        announced += _announce(conn, _held_of(conn, unlimited), now)
        announced += _next_turn(conn, [kind for kind in rated if kind in limits.kind_intervals], now)
    return announced


def _held_of(conn: Connection, kinds: Sequence[str]) -> list[str]:
    """The rate-held jobs of `kinds` (whose rate was removed)."""
    if not kinds:
        return []
    return [row[0] for row in db.execute(conn, "limit_held_of_rates", {"kinds": _array(conn, kinds)})]


def _announce(conn: Connection, job_ids: list[str], now: float) -> int:
    """Each of `job_ids` is held no more and gets an outbox row, due now, in this order."""
    if not job_ids:
        return 0
    db.execute(conn, "limit_release", {"ids": _array(conn, job_ids), "now": now})
    outbox.add_many(conn, [(job_id, now, now) for job_id in job_ids])
    return len(job_ids)


def full_kinds(conn: Connection, limits: Limits, now: float) -> list[str]:
    """The kinds none of whose queued jobs a claim may start now: at their cap, or not yet due to start
    again. Reads nothing when no kind has a limit."""
    if not limits.kinds:
        return []
    capped = sorted(limits.kind_max_running)
    running = _running_kinds(conn, capped)
    full = {kind for kind in capped if running[kind] >= limits.kind_max_running[kind]}
    rated = sorted(limits.kind_intervals)
    full |= {kind for kind, at in _next_starts(conn, rated).items() if at > now}
    return sorted(full)


@dataclass(frozen=True)
class HeldCount:
    """How many queued jobs of a kind one limit holds back."""

    kind: str
    held_by: str  # `HoldReason`
    queued: int


def held_counts(conn: Connection) -> list[HeldCount]:
    """The jobs the limits hold back now, by kind and limit (a read of the held jobs' index)."""
    return [HeldCount(str(kind), str(why), int(n)) for kind, why, n in db.execute(conn, "limit_held_counts")]


def _lock(conn: Connection, keys: Sequence[tuple[int, str]]) -> None:
    """Take this transaction's lock on each (space, name), in the order given (`Driver.lock_keys`)."""
    drivers.of(conn).lock_keys(conn, ((space, zlib.crc32(name.encode()) - 2**31) for space, name in keys))


def _array(conn: Connection, values: Collection[str]) -> Any:
    return drivers.of(conn).array(list(values))


def _running_kinds(conn: Connection, kinds: Collection[str]) -> Counter[str]:
    if not kinds:
        return Counter()
    rows = db.execute(conn, "limit_running_by_kind", {"kinds": _array(conn, sorted(kinds))})
    return Counter({str(kind): int(count) for kind, count in rows})


def _running_keys(conn: Connection, keys: Collection[tuple[str, str]]) -> Counter[tuple[str, str]]:
    if not keys:
        return Counter()
    tenants, names = sorted({t for t, _ in keys}), sorted({k for _, k in keys})
    rows = db.execute(
        conn, "limit_running_by_key", {"tenants": _array(conn, tenants), "keys": _array(conn, names)}
    )
    wanted = set(keys)
    counts: Counter[tuple[str, str]] = Counter()
    for tenant, key, count in rows:
        if (tenant, key) in wanted:
            counts[(str(tenant), str(key))] = int(count)
    return counts


def _next_starts(conn: Connection, kinds: Collection[str]) -> dict[str, float]:
    if not kinds:
        return {}
    rows = db.execute(conn, "limit_next_starts", {"kinds": _array(conn, sorted(kinds))})
    return {str(kind): float(at) for kind, at in rows}
