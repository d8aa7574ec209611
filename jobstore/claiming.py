"""Claiming: a worker takes a job for one attempt (epoch + 1, attempts + 1, a lease and an attempt row), or
is told why it cannot. One guarded UPDATE decides; a job is never taken twice."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection

from outbox_bridge.jobstore import db, drivers, events, fenced, outbox, pausing, queries, tenantcap
from outbox_bridge.jobstore import limits as flow
from outbox_bridge.jobstore.intake import new_attempt_id
from outbox_bridge.jobstore.limits import NONE as NO_LIMITS
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import TERMINAL, State

# A queued job delivered by another named queue's way is announced again no sooner than this: a relay that
# still publishes it the old way (during an upgrade) cannot make it go round and round at once.
REROUTE_SECONDS = 1.0


class Refusal(StrEnum):
    """Why a claim took nothing."""

    NOT_FOUND = "not_found"
    TERMINAL = "terminal"  # finished already: a duplicate delivery
    LEASED = "leased"  # another live worker holds it
    NOT_AVAILABLE = "not_available"  # waiting out a retry backoff; its own outbox row will deliver it
    NEEDS_SWEEP = "needs_sweep"  # expired with an external effect, out of budget or past its deadline
    TENANT_BUSY = "tenant_busy"  # its tenant runs TENANT_MAX_RUNNING jobs: delivered again a little later
    KIND_PAUSED = "kind_paused"  # queued, of a paused kind: announced again when the kind is resumed
    HELD = "held"  # queued, held back by a flow limit: announced again when it has room (`limits`)
    OTHER_QUEUE = "other_queue"  # of a named queue the claimer does not run: announced again, for its own


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim | None = None
    refusal: Refusal | None = None
    state: State | None = None


def _attempt_row(claim: Claim, now: float) -> dict[str, Any]:
    return {"id": claim.attempt_id, "job_id": claim.job_id, "epoch": claim.epoch, "worker": claim.worker,
            "started_at": now}  # fmt: skip


def claim(conn: Connection, job_id: str, worker: str, now: float, lease_seconds: float) -> ClaimResult:
    """Take `job_id` for `worker`: epoch + 1, attempts + 1, a new lease and a new attempt row (`claim_many`
    of one job).

    Only a queued, available job of a kind not paused (or a running one whose lease expired with no external
    effect started) within its budget and deadline is taken; otherwise the result says why not."""
    [result] = claim_many(conn, [job_id], worker, now, lease_seconds)
    return result


def claim_many(
    conn: Connection,
    job_ids: Sequence[str],
    worker: str,
    now: float,
    lease_seconds: float,
    *,
    tenant_cap: int = 0,
    limits: Limits = NO_LIMITS,
    ahead: bool = False,
    queues: Collection[str] | None = None,
) -> list[ClaimResult]:
    """`claim` for each of `job_ids`, with the same guard, as if one after another in this order, but in a
    few statements whatever their number. A job named twice is taken once and refused as leased after.
    With `ahead`, the claiming worker has no thread free for them yet: they read as claimed, waiting for a
    thread (`mark_running`), else as started. With `queues`, only jobs of these named queues are taken: one
    of another is refused as `OTHER_QUEUE` (a queued one gets its outbox row again, to be published to its
    own queue).

    With a `tenant_cap` (`TENANT_MAX_RUNNING`), a queued job whose tenant runs that many is refused as
    `TENANT_BUSY` and its outbox row written again, due `tenantcap.RETRY_SECONDS` from `now`. A queued job
    the flow `limits` hold back is refused as `HELD` and held (`limits.hold`)."""
    distinct = list(dict.fromkeys(job_ids))
    busy = set(_over_cap(conn, distinct, tenant_cap, now)) if tenant_cap else set()
    free = [job_id for job_id in distinct if job_id not in busy]
    taken, held = _take_within(
        conn, free, worker, now, lease_seconds, limits, hold=True, ahead=ahead, queues=queues
    )
    results = []
    for job_id in job_ids:
        if job_id in busy:
            results.append(ClaimResult(refusal=Refusal.TENANT_BUSY, state=State.QUEUED))
        elif job_id in held:
            results.append(ClaimResult(refusal=Refusal.HELD, state=State.QUEUED))
        elif job_id not in taken:
            results.append(_refusal(conn, job_id, now, queues))
        elif (claimed := taken[job_id]) is not None:
            results.append(ClaimResult(claim=claimed, state=State.RUNNING))
            taken[job_id] = None  # a second delivery of it finds it leased, by this very claim
        else:
            results.append(ClaimResult(refusal=Refusal.LEASED, state=State.RUNNING))
    return results


def _take_within(
    conn: Connection,
    job_ids: list[str],
    worker: str,
    now: float,
    lease_seconds: float,
    limits: Limits,
    *,
    hold: bool,
    drop_pending: bool = False,
    ahead: bool = False,
    queues: Collection[str] | None = None,
) -> tuple[dict[str, Claim | None], set[str]]:
    """Take what no flow limit concerns of `job_ids` (the claim's guard), then, of the queued jobs the
    guard left, those the limits admit (`limits.admit`); with `hold`, the others are held. Returns the
    claims by job id, and the ids of the jobs held back."""
    taken = _take_many(
        conn, job_ids, worker, now, lease_seconds, guard=limits.kinds, drop_pending=drop_pending, ahead=ahead,
        queues=queues,
    )  # fmt: skip
    left = [job_id for job_id in job_ids if job_id not in taken]
    found = flow.candidates(conn, left, now) if left else []
    if not found:
        return taken, set()
    admission = flow.admit(conn, limits, found, now)
    admitted = [c.job_id for c in admission.admitted]
    more = _take_many(
        conn, admitted, worker, now, lease_seconds, guard=None, drop_pending=drop_pending, ahead=ahead,
        queues=queues,
    )  # fmt: skip
    flow.started(conn, limits, {claim.kind for claim in more.values() if claim is not None}, now)
    if hold:
        flow.hold(conn, admission, found, now)
    return taken | more, set(admission.held)


def _take_many(
    conn: Connection,
    job_ids: list[str],
    worker: str,
    now: float,
    lease_seconds: float,
    *,
    guard: tuple[str, ...] | None,
    drop_pending: bool = False,
    ahead: bool = False,
    queues: Collection[str] | None = None,
) -> dict[str, Claim | None]:
    """The claims of those of `job_ids` that were claimable (and, but for a `guard` of None, that no flow
    limit concerns: no concurrency key, and a kind not of `guard`; with `queues`, of these named queues), by
    job id; with `drop_pending`, the pending outbox rows of the jobs taken are dropped. With `ahead`, the
    jobs are claimed ahead of a free thread: they read as waiting for one (`running_since` null) until
    `mark_running`."""
    if not job_ids:
        return {}
    params = {
        "now": now,
        "worker": worker,
        "lease_until": now + lease_seconds,
        "running_since": None if ahead else now,
    }
    attempt_ids = {job_id: new_attempt_id() for job_id in job_ids}
    rows, written = drivers.of(conn).claim(
        conn, params, attempt_ids, limited=guard, drop_pending=drop_pending, queues=queues
    )
    taken = [_claim_of(row, attempt_ids[row[0]], worker) for row in rows]
    _lose_previous(conn, taken, now)
    events.note(conn, (events.of_claim("claimed", claim) for claim in taken))
    unwritten = [claim for claim in taken if claim.job_id not in written]
    if unwritten:
        db.execute_many(conn, "insert_attempt", [_attempt_row(claim, now) for claim in unwritten])
    return {claim.job_id: claim for claim in taken}


def _lose_previous(conn: Connection, taken: Sequence[Claim], now: float) -> None:
    """The previous attempt, if its worker vanished, ends as lost when the job is claimed again. A first
    claim (epoch 1) has no previous attempt, so it costs no statement."""
    again = [claim.job_id for claim in taken if claim.epoch > 1]
    if again:
        fenced.lose_running_attempts(conn, again, now)


def _claim_of(row: Sequence[Any], attempt_id: str, worker: str) -> Claim:
    """The `Claim` of a job a claim returned (a row of `claim_by_ids`, its columns in this order)."""
    (job_id, epoch, attempts, kind, payload, tenant, owner, operation_key, deadline_at, lease_expires_at,
     checkpoint, created_at, traceparent, concurrency_key, queue) = row  # fmt: skip
    return Claim(
        job_id=job_id,
        attempt_id=attempt_id,
        epoch=epoch,
        attempts=attempts,
        worker=worker,
        kind=kind,
        payload=json.loads(payload),
        tenant=tenant,
        owner=owner,
        operation_key=operation_key,
        deadline_at=deadline_at,
        lease_expires_at=lease_expires_at,
        checkpoint=json.loads(checkpoint) if checkpoint else None,
        created_at=created_at,
        traceparent=traceparent,
        concurrency_key=concurrency_key,
        queue=queue,
    )


def _refusal(conn: Connection, job_id: str, now: float, queues: Collection[str] | None) -> ClaimResult:
    """Why a claim did not take `job_id`. A queued job of a named queue not among `queues` (its delivery
    came by another queue's way) gets an outbox row again, due when it is and `REROUTE_SECONDS` from now
    at the soonest: the relay publishes it to its own queue."""
    job = queries.get_job(conn, job_id)
    if job is None:
        return ClaimResult(refusal=Refusal.NOT_FOUND)
    if job.state in TERMINAL:
        return ClaimResult(refusal=Refusal.TERMINAL, state=job.state)
    if job.state is State.RUNNING and (job.lease_expires_at or 0) > now:
        return ClaimResult(refusal=Refusal.LEASED, state=job.state)
    if queues is not None and job.queue not in queues:
        if job.state is State.QUEUED:
            outbox.add(conn, job_id, available_at=max(job.available_at, now + REROUTE_SECONDS), now=now)
        return ClaimResult(refusal=Refusal.OTHER_QUEUE, state=job.state)
    if job.state is State.QUEUED and job.available_at > now:
        return ClaimResult(refusal=Refusal.NOT_AVAILABLE, state=job.state)
    if job.state is State.QUEUED and pausing.is_paused(conn, job.kind):
        return ClaimResult(refusal=Refusal.KIND_PAUSED, state=job.state)
    return ClaimResult(refusal=Refusal.NEEDS_SWEEP, state=job.state)


# The walks of `claim_due` (`claims.sql`): expired leases, then queued jobs, in two statements, not one
# with an OR: each walks its own index in order and stops at the limit, where the OR would gather and sort
# every due row (the whole backlog, in a burst) to take a few.
def _due_ids(
    conn: Connection,
    now: float,
    limit: int,
    passed_over: dict[str, Any] | None = None,
    queues: Collection[str] | None = None,
) -> list[str]:
    """The jobs a claim of `limit` takes (of the named `queues`, or of every queue), in order: expired
    leases first (oldest lease first), then queued jobs (but for those `passed_over`: `_passed_over`): all
    of them when no more are due than fit; else by priority, a turn per tenant, then age. Rows another
    claimer has locked are skipped (where the database locks rows); a job ranked here that another claimer
    takes meanwhile is refused by the claim's guard."""
    locking = drivers.of(conn).locking
    of_queues = drivers.of(conn).queues(queues)
    expired = db.execute(conn, locking("expired_leases_due"), {"now": now, "limit": limit, **of_queues})
    job_ids = [str(row[0]) for row in expired]
    room = limit - len(job_ids)
    if room <= 0:
        return job_ids
    passed_over = passed_over or _passed_over_params(conn, [], [], 1)
    params = {"now": now, "limit": room + 1, **passed_over, **of_queues}
    queued = [str(row[0]) for row in db.execute(conn, locking("queued_due"), params)]
    if len(queued) > room and _several_tenants(conn):
        ranked = [str(row[0]) for row in db.execute(conn, "queued_due_fair", {**params, "limit": 2 * room})]
        queued = _unlocked(conn, ranked, queued)[:room]
    return job_ids + queued[:room]


def _passed_over_params(
    conn: Connection, capped: Sequence[str], full_kinds: Sequence[str], key_max: int
) -> dict[str, Any]:
    """The walks' parameters of what they pass over (`_passed_over`), each list one parameter."""
    array = drivers.of(conn).array
    return {"capped": array(capped), "full_kinds": array(full_kinds), "key_max": key_max}


def _several_tenants(conn: Connection) -> bool:
    [(lowest, highest)] = db.execute(conn, "queued_tenant_range")
    return bool(lowest != highest)


def _unlocked(conn: Connection, ranked: list[str], walked: list[str]) -> list[str]:
    """Those of `ranked` no other transaction holds locked, locked now, in the same order, then those of
    `walked` (locked by this transaction's walk) not among them. The ranking query cannot lock, and
    concurrent claimers all rank the same jobs first: each takes what it can, and its own walk's."""
    rows = db.execute(conn, "lock_ranked_jobs", {"ids": drivers.of(conn).array(ranked)})
    free = {str(row[0]) for row in rows}
    taken = [job_id for job_id in ranked if job_id in free]
    return taken + [job_id for job_id in walked if job_id not in free]


def claim_due(
    conn: Connection,
    worker: str,
    now: float,
    lease_seconds: float,
    limit: int,
    *,
    tenant_cap: int = 0,
    share: tenantcap.Share | None = None,
    limits: Limits = NO_LIMITS,
    ahead: bool = False,
    queues: Collection[str] | None = None,
) -> list[Claim]:
    """The table's path (the baseline, and a consumer while the broker is down): claim up to `limit` of
    the claimable jobs (of the named `queues` only, when given), in a few statements whatever their number:
    expired leases first, then queued jobs by priority, then fairly across tenants, then oldest first; none
    when none is due.

    With a `tenant_cap` (`TENANT_MAX_RUNNING`), the queued jobs of tenants that run that many are passed
    over (they stay queued for a later claim); with a `share` (`TENANT_SHARE`), so are those of tenants the
    claiming process holds its most of. The queued jobs of a paused kind are always passed over, and so
    are those the flow `limits` hold back (`limits`: they wait for a later claim).

    Pending outbox rows of the claimed jobs are dropped: the jobs are already in a worker's hands. With
    `ahead`, they read as waiting for a thread (`claim_many`)."""
    job_ids = _due_ids(conn, now, limit, _passed_over(conn, now, tenant_cap, share, limits), queues)
    if tenant_cap or share:
        job_ids = _within_cap(conn, job_ids, tenant_cap, share)
    taken, _ = _take_within(
        conn, job_ids, worker, now, lease_seconds, limits, hold=False, drop_pending=True, ahead=ahead,
        queues=queues,
    )  # fmt: skip
    return [claim for job_id in job_ids if (claim := taken.get(job_id)) is not None]


def any_due(
    conn: Connection,
    now: float,
    *,
    tenant_cap: int = 0,
    share: tenantcap.Share | None = None,
    limits: Limits = NO_LIMITS,
    queues: Collection[str] | None = None,
) -> bool:
    """Whether `claim_due` (of the same `queues`) might take a job now: False only when it would take none
    (neither of its walks finds a row). It only reads, so an idle poller asks it in a read transaction
    before it takes the write lock for a claim."""
    of_queues = drivers.of(conn).queues(queues)
    if db.execute(conn, "expired_leases_due", {"now": now, "limit": 1, **of_queues}):
        return True
    passed_over = _passed_over(conn, now, tenant_cap, share, limits)
    return bool(db.execute(conn, "queued_due", {"now": now, "limit": 1, **passed_over, **of_queues}))


def _passed_over(
    conn: Connection, now: float, tenant_cap: int, share: tenantcap.Share | None, limits: Limits
) -> dict[str, Any]:
    """The walk's parameters of what it passes over: the tenants none of whose queued jobs a claim may take
    (at the deployment's cap, or at the claiming process's share), the kinds at their cap or not yet due to
    start again, and the most running jobs of one key."""
    capped = sorted({*tenantcap.at_cap(conn, tenant_cap), *(share.full() if share else ())})
    return _passed_over_params(conn, capped, flow.full_kinds(conn, limits, now), limits.key_max_running)


def claim_next(
    conn: Connection,
    worker: str,
    now: float,
    lease_seconds: float,
    *,
    tenant_cap: int = 0,
    share: tenantcap.Share | None = None,
    limits: Limits = NO_LIMITS,
) -> Claim | None:
    """`claim_due` for one job: the job it would take first (an expired lease, else the first queued job in
    `claim_due`'s order), or None when there is none."""
    claims = claim_due(conn, worker, now, lease_seconds, 1, tenant_cap=tenant_cap, share=share, limits=limits)
    return claims[0] if claims else None


def _refused(
    conn: Connection, job_ids: list[str], cap: int, share: tenantcap.Share | None = None
) -> list[str]:
    """The queued jobs of `job_ids`, in order, that the cap (or the `share`) refuses (locking, on
    PostgreSQL, the tenants concerned first when there is a cap: `tenantcap.lock`)."""
    if not job_ids:
        return []
    rows = db.execute(conn, "queued_tenants_of", {"ids": drivers.of(conn).array(job_ids)})
    queued = {str(job_id): str(tenant) for job_id, tenant in rows}
    candidates = [(job_id, queued[job_id]) for job_id in job_ids if job_id in queued]
    refused: list[str] = []
    if cap:
        tenants = set(queued.values())
        tenantcap.lock(conn, tenants)
        admitted, refused = tenantcap.admit(candidates, tenantcap.running(conn, tenants), cap)
        candidates = [(job_id, queued[job_id]) for job_id in admitted]
    if share:
        refused += tenantcap.admit(candidates, share.held, share.most)[1]
    return refused


def _within_cap(
    conn: Connection, job_ids: list[str], cap: int, share: tenantcap.Share | None = None
) -> list[str]:
    """`job_ids` without the queued jobs the cap or the share refuses (jobs already running, with an
    expired lease, stay: taking one over adds nothing to its tenant's count)."""
    refused = set(_refused(conn, job_ids, cap, share))
    return [job_id for job_id in job_ids if job_id not in refused]


def _over_cap(conn: Connection, job_ids: list[str], cap: int, now: float) -> list[str]:
    """The queued jobs of `job_ids` the cap refuses; each gets its outbox row again, due a little later."""
    refused = _refused(conn, job_ids, cap)
    if refused:
        outbox.add_many(conn, [(job_id, now + tenantcap.RETRY_SECONDS, now) for job_id in refused])
    return refused


def mark_running(conn: Connection, began: Sequence[tuple[str, int, float]]) -> None:
    """Each (job id, epoch, when its thread began running it) of jobs a claim took `ahead`: the job reads
    as started from then on. A job that has ended, or that another epoch holds, is left as it is."""
    if began:
        rows = [{"job": job, "epoch": epoch, "since": since} for job, epoch, since in began]
        db.execute_many(conn, "mark_running", rows)
