"""Workflows in the store: jobs that run after other jobs, and batches whose callback runs once every member
has ended.

What a job's ending moves (its dependents due or cancelled, its batch's count, the batch's callback) is done
by the store itself, in the transaction of the ending (the trigger of migration 0021), whichever writer ends
the job; nothing here polls. This module writes what an accept adds (the edges of a job to the jobs it waits
for, a batch and its members) and reads what the views show.

A job that waits is `queued` with `available_at` at `WAITING_AT`, so that no read of due jobs takes it, and
without an outbox row: the ending that resolves its last edge makes it due and writes its outbox row."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sqlalchemy import Connection

from outbox_bridge.jobstore import db, drivers
from outbox_bridge.jobstore.errors import IdempotencyConflict
from outbox_bridge.jobstore.intake import Accepted, Prepared, accept_prepared, new_id
from outbox_bridge.jobstore.schema import WAITING_AT
from outbox_bridge.jobstore.states import TERMINAL, State

OnFailure = Literal["cancel", "run"]
MAX_AFTER = 100  # jobs one job may wait for
MAX_MEMBERS = 1000  # jobs in one batch
DEPENDENCY_FAILED = "dependency_failed"
# The keys of a batch's members (`batch:<id>:<position>`) and callback (`batch:<id>:callback`): a request's
# own key may not begin so, or it could take the key the ending of a batch's last member inserts its callback
# under.
RESERVED_KEY_PREFIX = "batch:"


class UnknownDependencies(ValueError):
    """Ids in `after` that name no job of the tenant (unknown, or another tenant's): nothing was written."""

    def __init__(self, ids: Sequence[str]) -> None:
        super().__init__(f"after names no job of this tenant: {', '.join(ids)}")
        self.ids = list(ids)


@dataclass(frozen=True)
class After:
    """What a new job waits for: the ids of earlier jobs of its tenant, and what it does when one of them
    ends otherwise than `succeeded` (`cancel`: it ends `cancelled`, `dependency_failed`; `run`: it runs
    once they have all ended)."""

    ids: tuple[str, ...]
    on_failure: OnFailure = "cancel"

    def __post_init__(self) -> None:
        if not 1 <= len(self.ids) <= MAX_AFTER:
            raise ValueError(f"after names 1 to {MAX_AFTER} jobs, not {len(self.ids)}")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("after names a job twice")
        if self.on_failure not in ("cancel", "run"):
            raise ValueError(f"on_dependency_failure is cancel or run, not {self.on_failure!r}")

    def fingerprint(self, of_job: str) -> str:
        """The request's identity with what it waits for: a request under the same key that waits for other
        jobs, or fails otherwise, is another request."""
        text = f"{of_job}|after:{','.join(sorted(self.ids))}|on_failure:{self.on_failure}"
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Plan:
    """How a new job that waits starts: the edges (resolved or not), and its row as written."""

    row: dict[str, Any]
    edges: list[dict[str, Any]]
    waiting: int


def _plan(conn: Connection, p: Prepared, after: After) -> _Plan:
    """Read the states of the jobs `after` names (locked on PostgreSQL until the edges are committed) and
    decide how the new job starts: cancelled at once when one of them did not succeed and it asked so,
    waiting while one of them has not ended, else due as any job."""
    tenant = p.row["tenant"]
    rows = db.execute(conn, "dependencies_read", {"tenant": tenant, "ids": drivers.of(conn).array(after.ids)})
    states = {str(job_id): State(state) for job_id, state in rows}
    unknown = [job_id for job_id in after.ids if job_id not in states]
    if unknown:
        raise UnknownDependencies(unknown)
    failed = [
        job_id for job_id, state in states.items() if state in TERMINAL and state is not State.SUCCEEDED
    ]
    pending = [job_id for job_id, state in states.items() if state not in TERMINAL]
    row = dict(p.row, fingerprint=after.fingerprint(p.row["fingerprint"]))
    if failed and after.on_failure == "cancel":
        now = row["created_at"]
        row |= {
            "state": State.CANCELLED.value, "error_code": DEPENDENCY_FAILED, "finished_at": now,
            "error_message": f"a job it waits for ended {states[failed[0]].value}: {failed[0]}",
        }  # fmt: skip
        pending = []
    elif pending:
        row["available_at"] = WAITING_AT
    edges = [
        {"job_id": row["id"], "depends_on": job_id, "resolved": job_id not in pending} for job_id in after.ids
    ]
    return _Plan(row, edges, len(pending))


def accept_after(conn: Connection, p: Prepared, after: After) -> Accepted:
    """Accept the `prepare`d job that waits for the jobs `after` names, in the caller's transaction: its row,
    its edges and its count of jobs it still waits for, and its outbox row only when it is due at once.
    The same key again returns the job it accepted (`created=False`); `IdempotencyConflict` for another
    request; `UnknownDependencies` when `after` names a job its tenant does not have. A kind's uniqueness
    window does not apply to a job that waits (nor to a batch's member): each is a request of its own."""
    p = replace(
        p, window=None
    )  # a job that waits is its own request: no kind's uniqueness window makes it another
    plan = _plan(conn, p, after)
    job = replace(
        p.accepted.job, fingerprint=plan.row["fingerprint"], state=State(plan.row["state"]),
        available_at=plan.row["available_at"], error_code=plan.row["error_code"],
        error_message=plan.row["error_message"], finished_at=plan.row["finished_at"],
    )  # fmt: skip
    request = replace(p, row=plan.row, accepted=Accepted(job, created=True))
    (outcome,) = accept_prepared(conn, [request])
    if isinstance(outcome, IdempotencyConflict):
        raise outcome
    if outcome.created:
        _write_edges(conn, plan, after.on_failure)
    return outcome


def _write_edges(conn: Connection, plan: _Plan, on_failure: OnFailure) -> None:
    job_id = plan.row["id"]
    if plan.row["state"] != State.QUEUED.value or plan.waiting:
        db.execute(conn, "outbox_drop_pending", {"job_id": job_id})
    db.execute_many(conn, "dependencies_add", plan.edges)
    released = plan.waiting == 0
    db.execute(
        conn, "waits_add",
        {"job_id": job_id, "waiting": plan.waiting, "on_failure": on_failure, "released": released},
    )  # fmt: skip


@dataclass(frozen=True)
class Batch:
    """A batch as its view shows it: its members in the request's order with their states, the count of
    each state, and its callback job once every member has ended (`done`)."""

    id: str
    tenant: str
    owner: str
    state: Literal["running", "done"]
    jobs: dict[str, State]  # member id -> state, in the request's order
    callback_job_id: str | None
    created_at: float
    done_at: float | None
    fingerprint: str = ""

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in self.jobs.values():
            counts[state.value] = counts.get(state.value, 0) + 1
        return counts


@dataclass(frozen=True)
class BatchAccepted:
    batch: Batch
    created: bool
    members: list[Accepted] = field(default_factory=list)


@dataclass(frozen=True)
class Member:
    """One member of a batch to accept: the job `prepare`d, and what it waits for (None: nothing)."""

    prepared: Prepared
    after: After | None = None


def batch_fingerprint(members: Sequence[Member], callback: Prepared | None) -> str:
    """A batch request's identity: its members' and its callback's, in order."""
    parts = [m.prepared.row["fingerprint"] for m in members]
    parts = [
        part if m.after is None else m.after.fingerprint(part) for part, m in zip(parts, members, strict=True)
    ]
    parts.append("callback:" + ("" if callback is None else callback.row["fingerprint"]))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def accept_batch(
    conn: Connection,
    *,
    tenant: str,
    owner: str,
    operation_key: str,
    members: Sequence[Member],
    callback: Prepared | None,
    now: float,
) -> BatchAccepted:
    """Accept a batch in the caller's transaction: the batch, each member (under the key
    `batch:<id>:<position>`; a member may wait for earlier jobs), and the callback job it runs once every
    member has ended (its id chosen now, inserted as a job then). The same tenant + key with the same request
    returns the batch (`created=False`); with another, `IdempotencyConflict`."""
    if not 1 <= len(members) <= MAX_MEMBERS:
        raise ValueError(f"a batch has 1 to {MAX_MEMBERS} jobs, not {len(members)}")
    fingerprint = batch_fingerprint(members, callback)
    batch_id = new_id()
    params = {"id": batch_id, "tenant": tenant, "owner": owner, "operation_key": operation_key,
              "fingerprint": fingerprint, "total": len(members), "created_at": now}  # fmt: skip
    if not db.execute(conn, "batch_insert", params):
        existing = _batch_by_key(conn, tenant, operation_key)
        if existing is None:  # the winner's row went away (retention): not expected within one key's life
            raise IdempotencyConflict("")
        if existing.fingerprint != fingerprint:
            raise IdempotencyConflict(existing.id)
        return BatchAccepted(existing, created=False)
    if callback is not None:
        row = callback.row
        db.execute(conn, "batch_callback_add", {
            "batch_id": batch_id, "id": row["id"], "owner": row["owner"],
            "operation_key": f"batch:{batch_id}:callback", "fingerprint": row["fingerprint"],
            "kind": row["kind"], "payload": row["payload"], "max_attempts": row["max_attempts"],
            "priority": row["priority"], "traceparent": row["traceparent"], "queue": row["queue"],
            "deadline_seconds": None if row["deadline_at"] is None else row["deadline_at"] - now,
        })  # fmt: skip
    accepted: list[Accepted] = []
    for position, member in enumerate(members):
        p = member.prepared
        # A member is a job of its own, whatever its kind's uniqueness window holds.
        keyed = replace(p, row=dict(p.row, operation_key=f"batch:{batch_id}:{position}"), window=None)
        if member.after is None:
            (outcome,) = accept_prepared(conn, [keyed])
            if isinstance(outcome, IdempotencyConflict):  # a fresh key: not expected
                raise outcome
        else:
            outcome = accept_after(conn, keyed, member.after)
        accepted.append(outcome)
    db.execute_many(
        conn, "batch_members_add",
        [{"job_id": a.job.id, "batch_id": batch_id, "position": i} for i, a in enumerate(accepted)],
    )  # fmt: skip
    ended = sum(1 for a in accepted if a.job.state in TERMINAL)
    if ended:
        db.execute(conn, "batch_count_ended", {"id": batch_id, "ended": ended})
    if ended == len(accepted):
        _done_at_accept(conn, batch_id, callback, now)
    batch = get_batch(conn, batch_id)
    assert batch is not None
    return BatchAccepted(batch, created=True, members=accepted)


def _done_at_accept(conn: Connection, batch_id: str, callback: Prepared | None, now: float) -> None:
    """A batch whose members all ended at its accept (a job they waited for had failed): done now, its
    callback accepted now."""
    callback_id = None
    if callback is not None:
        keyed = replace(callback, row=dict(callback.row, operation_key=f"batch:{batch_id}:callback"))
        (outcome,) = accept_prepared(conn, [keyed])
        if isinstance(outcome, IdempotencyConflict):
            raise outcome
        callback_id = outcome.job.id
    db.execute(conn, "batch_mark_done", {"id": batch_id, "now": now, "callback_job_id": callback_id})


_BATCH_COLUMNS = ("id", "tenant", "owner", "operation_key", "fingerprint", "state", "total", "remaining",
                  "callback_job_id", "created_at", "done_at")  # fmt: skip


def _batch(conn: Connection, rows: list[tuple[Any, ...]]) -> Batch | None:
    found = _batches(conn, rows[:1])
    return found[0] if found else None


def _batches(conn: Connection, rows: list[tuple[Any, ...]]) -> list[Batch]:
    """The batches of `rows` (`_BATCH_COLUMNS`), their members read in one statement for all of them."""
    if not rows:
        return []
    batches = [dict(zip(_BATCH_COLUMNS, row, strict=True)) for row in rows]
    ids = [str(values["id"]) for values in batches]
    members: dict[str, dict[str, State]] = {batch_id: {} for batch_id in ids}
    for batch_id, job_id, state in db.execute(
        conn, "batch_member_states", {"ids": drivers.of(conn).array(ids)}
    ):
        members[str(batch_id)][str(job_id)] = State(state)
    return [
        Batch(
            id=str(values["id"]),
            tenant=values["tenant"],
            owner=values["owner"],
            state=values["state"],
            jobs=members[str(values["id"])],
            callback_job_id=values["callback_job_id"],
            created_at=values["created_at"],
            done_at=values["done_at"],
            fingerprint=values["fingerprint"],
        )
        for values in batches
    ]


def _batch_by_key(conn: Connection, tenant: str, operation_key: str) -> Batch | None:
    return _batch(conn, db.execute(conn, "batch_by_key", {"tenant": tenant, "operation_key": operation_key}))


def get_batch(conn: Connection, batch_id: str, tenant: str | None = None) -> Batch | None:
    """A batch by id; None when there is none (of that tenant, when one is given)."""
    return _batch(conn, db.execute(conn, "batch_get", {"id": batch_id, "tenant": tenant}))


def list_batches(
    conn: Connection,
    *,
    tenant: str | None = None,
    state: str | None = None,
    limit: int = 50,
    before: tuple[float, str] | None = None,
) -> list[Batch]:
    """Batches newest first (of one tenant, in one state, when given), after the cursor `before`
    (`(created_at, id)` of the last one of the previous page)."""
    params = {"tenant": tenant, "state": state, "limit": limit,
              "before_at": None if before is None else before[0],
              "before_id": None if before is None else before[1]}  # fmt: skip
    return _batches(conn, db.execute(conn, "batches_list", params))


def unfinished_members(batch: Batch) -> list[str]:
    """The members of `batch` not yet ended, in order (what its cancel cancels)."""
    return [job_id for job_id, state in batch.jobs.items() if state not in TERMINAL]


def batches_by_state(conn: Connection) -> dict[str, int]:
    """How many batches are `running` and `done`."""
    counts = {"running": 0, "done": 0}
    counts.update({str(state): int(n) for state, n in db.execute(conn, "batches_by_state")})
    return counts


def waiting_for(conn: Connection, job_ids: Sequence[str]) -> dict[str, list[str]]:
    """For each of `job_ids` that waits, the jobs it still waits for."""
    return _pairs(conn, "waiting_for", job_ids)


def dependencies_of(conn: Connection, job_ids: Sequence[str]) -> dict[str, list[str]]:
    """For each of `job_ids` that waits or waited, every job it named in `after`."""
    return _pairs(conn, "dependencies_of", job_ids)


def dependents_of(conn: Connection, job_id: str) -> list[str]:
    """The jobs that wait or waited for `job_id`."""
    return [str(row[0]) for row in db.execute(conn, "dependents_of", {"id": job_id})]


def callbacks_of(conn: Connection, job_ids: Sequence[str]) -> dict[str, str]:
    """For each of `job_ids` that is a batch's callback, the batch's id."""
    if not job_ids:
        return {}
    rows = db.execute(conn, "callbacks_of", {"ids": drivers.of(conn).array(list(job_ids))})
    return {str(job_id): str(batch_id) for job_id, batch_id in rows}


def batch_of_member(conn: Connection, job_id: str) -> str | None:
    rows = db.execute(conn, "batch_of_member", {"id": job_id})
    return str(rows[0][0]) if rows else None


def _pairs(conn: Connection, statement: str, job_ids: Sequence[str]) -> dict[str, list[str]]:
    if not job_ids:
        return {}
    found: dict[str, list[str]] = {}
    for job_id, other in db.execute(conn, statement, {"ids": drivers.of(conn).array(list(job_ids))}):
        found.setdefault(str(job_id), []).append(str(other))
    return found


def outcomes(batch: Batch) -> Mapping[str, Any]:
    """What a callback's kind reads of its batch (`ctx.batch`): its id, counts and members' states."""
    return {
        "id": batch.id,
        "counts": batch.counts,
        "jobs": {job_id: s.value for job_id, s in batch.jobs.items()},
    }
