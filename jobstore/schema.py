"""The tables: jobs, attempts, outbox, operator actions and webhooks. Portable SQLAlchemy Core; times are
float epoch seconds."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    ColumnElement,
    Float,
    ForeignKey,
    FromClause,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    false,
    literal_column,
    text,
)

from outbox_bridge.jobstore.states import TERMINAL, State

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _only(condition: str) -> dict[str, Any]:
    """A partial index's condition, the same on both databases."""
    return {"postgresql_where": text(condition), "sqlite_where": text(condition)}


_ONLY_QUEUED = _only("state = 'queued'")
_ONLY_RUNNING = _only("state = 'running'")
_ONLY_FINISHED = _only("finished_at IS NOT NULL")

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("tenant", String(255), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("operation_key", String(255), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    Column("state", String(16), nullable=False),
    # Grows on every claim; every worker write is fenced by it.
    Column("epoch", Integer, nullable=False, default=0),
    Column("attempts", Integer, nullable=False, default=0),
    Column("max_attempts", Integer, nullable=False),
    Column("lease_owner", String(255)),
    Column("lease_expires_at", Float),
    Column("available_at", Float, nullable=False),
    # When the request asked the job to start, not before (`delay_seconds` or `run_at`); null: at once.
    Column("run_at", Float),
    # `jobstore.priorities.Priority`: 0 high, 1 normal, 2 low.
    Column("priority", Integer, nullable=False, default=1, server_default="1"),
    Column("deadline_at", Float),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    # The epoch whose attempt announced an external effect; a lost lease after it means `unknown`.
    Column("external_epoch", Integer),
    Column("checkpoint", Text),
    Column("checkpoint_epoch", Integer),
    # The result pointer: the attempt whose output is the committed result.
    Column("result_attempt_id", String(36)),
    Column("error_code", String(64)),
    Column("error_message", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    # The W3C traceparent of the api's accept span (`telemetry.tracing`); null without tracing.
    Column("traceparent", String(55)),
    # The name of the schedule (in the job's tenant) that made the job for one of its slots; null otherwise.
    Column("schedule_name", String(128)),
    # At most `CONCURRENCY_KEY_MAX_RUNNING` running jobs of a tenant share one (`jobstore.limits`).
    Column("concurrency_key", String(128)),
    # Which limit (`jobstore.limits.HoldReason`) held the queued job back at its last claim; null once
    # claimed.
    Column("held_by", String(16)),
    # A running job: when a worker's thread began running its attempt. Null while the worker that claimed
    # it holds it waiting for a thread (it claimed ahead of its threads, `worker.budget`). Written by the
    # claim, or for a job that waited, once its thread has run it a moment (`claiming.mark_running`); not
    # read in any other state.
    Column("running_since", Float),
    # The named queue its kind runs on (`@kind(queue=...)`): the broker queue the relay publishes it to,
    # and the queues a consumer or worker started with `--queues` claim from.
    Column("queue", String(64), nullable=False, default="default", server_default="default"),
    # How often its kind snoozed it (`outbox_bridge.Snooze`): a snooze spends no attempt, up to MAX_SNOOZES.
    Column("snoozes", Integer, nullable=False, default=0, server_default="0"),
    UniqueConstraint("tenant", "operation_key", name="uq_jobs_tenant_operation_key"),
    Index("ix_jobs_tenant_created_at", "tenant", "created_at", "id"),
    # The indexes below hold the jobs of one state only (migration 0018 says why): a state change writes
    # into the indexes of the state it enters, not into all of them. A query they serve names the state as
    # a literal (`state_in`), so that its text implies the index's condition on both databases.
    # The queued jobs by when they are due (the sweeper, the claim of due jobs).
    Index("ix_jobs_queued_available_at", "available_at", **_ONLY_QUEUED),
    # The baseline's claim: queued jobs by priority, then age, walked in order.
    Index("ix_jobs_queued_priority_available_at", "priority", "available_at", **_ONLY_QUEUED),
    # Whether more than one tenant has queued jobs (the lowest and the highest name): two index seeks.
    Index("ix_jobs_queued_tenant", "tenant", **_ONLY_QUEUED),
    # The running jobs by when their lease runs out (the sweeper), and by tenant (`TENANT_MAX_RUNNING`).
    Index("ix_jobs_running_lease_expires_at", "lease_expires_at", **_ONLY_RUNNING),
    Index("ix_jobs_running_tenant", "tenant", **_ONLY_RUNNING),
    # The finished jobs by state, then finish time: the job retention's search (`jobstore.retention`), the
    # dead and unknown jobs an operator reads, counts by state. Only a finished job has a `finished_at`:
    # `state_in` of finished states adds the index's condition to the query.
    Index("ix_jobs_finished_state_finished_at", "state", "finished_at", **_ONLY_FINISHED),
    # The jobs a limit holds back, in the order they start in (`jobstore.limits.release`): few, or none.
    Index(
        "ix_jobs_held_kind_priority",
        "kind",
        "priority",
        "available_at",
        **_only("held_by IS NOT NULL"),
    ),
    # The running jobs of one concurrency key (`jobstore.limits`): only keyed jobs are in it.
    Index(
        "ix_jobs_key_state",
        "tenant",
        "concurrency_key",
        "state",
        **_only("concurrency_key IS NOT NULL"),
    ),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("worker", String(255), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float),
    # running | succeeded | failed | retry | dead | cancelled | unknown | lost | released
    Column("outcome", String(16), nullable=False),
    Column("external_started_at", Float),
    Column("output", Text),
    Column("error_code", String(64)),
    Column("error_message", Text),
    UniqueConstraint("job_id", "epoch", name="uq_attempts_job_id_epoch"),
)

_UNPUBLISHED_ONLY = _only("published_at IS NULL")

outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("available_at", Float, nullable=False),
    Column("published_at", Float),
    Column("publish_attempts", Integer, nullable=False, default=0),
    # The job's priority and tenant, copied when the row is written: the relay reads the due rows by them.
    Column("priority", Integer, nullable=False, default=1, server_default="1"),
    Column("tenant", String(255), nullable=False, default="", server_default=""),
    Index("ix_outbox_published_at_available_at", "published_at", "available_at"),
    Index("ix_outbox_job_id", "job_id"),
    # The unpublished rows only, in the orders the relays walk them (migration 0010 says why).
    Index("ix_outbox_due_priority_id", "priority", "id", **_UNPUBLISHED_ONLY),
    Index("ix_outbox_due_tenant", "tenant", **_UNPUBLISHED_ONLY),
    Index("ix_outbox_due_available_at", "available_at", **_UNPUBLISHED_ONLY),
    sqlite_autoincrement=True,
)


# What an operator did to a job, who did it (the operator token's `sub` on the dashboard, the OS user for the
# command line) and when, with their note. Written in the transaction of the move it records.
operator_actions = Table(
    "operator_actions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    # cancel | request_cancel | requeue | resolve_succeeded | resolve_failed
    Column("action", String(32), nullable=False),
    Column("actor", String(255), nullable=False),
    Column("note", Text),
    Column("at", Float, nullable=False),
    Index("ix_operator_actions_job_id_at", "job_id", "at"),
    sqlite_autoincrement=True,
)

# One row per running relay, consumer, worker (or api) process, written by its heartbeat every few seconds
# (`jobstore.heartbeats`): who is alive is whose row was seen lately. A process picks a fresh id each start.
processes = Table(
    "processes",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("role", String(16), nullable=False),  # api | relay | consumer | worker
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("version", String(64), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("last_seen_at", Float, nullable=False),
    # A small JSON object the process reports about itself (its concurrency, the jobs it holds).
    Column("detail", Text, nullable=False),
    Index("ix_processes_last_seen_at", "last_seen_at"),
)


# Who publishes the outbox on SQLite: one relay at a time holds the role under a token it renews
# (`jobstore.leader`); the others stand by. A fresh token each time the role is taken: marks written under
# an older one change nothing.
relay_role = Table(
    "relay_role",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("token", String(36), nullable=False),
    Column("holder", String(300), nullable=False),  # host:pid
    Column("expires_at", Float, nullable=False),
)

# A dashboard sign-in: an operator's session, behind a random secret the browser holds in its cookie; the row
# keeps only the secret's SHA-256, so a read of the database signs no one in. Sign-out ends it.
dashboard_sessions = Table(
    "dashboard_sessions",
    metadata,
    Column("id", String(64), primary_key=True),  # hex SHA-256 of the cookie's secret
    Column("tenant", String(128), nullable=False),
    Column("user", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("ended_at", Float),
)

# Completion webhooks (`jobstore.webhooks`): the endpoints an operator registered for a tenant, one delivery
# per matching endpoint for each job that moved into a terminal state (written by a trigger on `jobs`, in the
# transition's own transaction: migration 0014), and each attempt the relay made at a delivery.
webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("tenant", String(255), nullable=False),
    Column("url", Text, nullable=False),
    # The event names, joined by commas: `job.succeeded,job.dead`.
    Column("events", Text, nullable=False),
    # The signing secret sealed under a key derived from AUTH_SECRET (`core.sealing`); after a rotation the
    # previous one, which still signs until `previous_secret_until`.
    Column("secret", Text, nullable=False),
    Column("previous_secret", Text),
    Column("previous_secret_until", Float),
    Column("created_at", Float, nullable=False),
    Column("created_by", String(255), nullable=False),
    Index("ix_webhook_endpoints_tenant", "tenant"),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", String(36), primary_key=True),  # the `webhook-id`, the same on every attempt
    Column("endpoint_id", String(36), ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False),
    Column("tenant", String(255), nullable=False),
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("event", String(32), nullable=False),  # job.succeeded | job.failed | ...
    Column("occurred_at", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("state", String(16), nullable=False),  # pending | delivered | failed
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", Float, nullable=False),
    Column("last_status", Integer),
    Column("last_error", Text),
    Column("delivered_at", Float),
    # When an operator last replayed it: its retries run for WEBHOOK_RETRY_SECONDS from here (else from
    # `created_at`).
    Column("replayed_at", Float),
    # The relay's read: pending deliveries by when they are due.
    Index(
        "ix_webhook_deliveries_due_next_attempt_at",
        "next_attempt_at",
        postgresql_where=text("state = 'pending'"),
        sqlite_where=text("state = 'pending'"),
    ),
    # The delivery log: an endpoint's deliveries, newest first.
    Index("ix_webhook_deliveries_endpoint_id_created_at", "endpoint_id", "created_at"),
    Index("ix_webhook_deliveries_job_id", "job_id"),
)

webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column(
        "delivery_id",
        String(36),
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("attempt", Integer, primary_key=True),
    Column("at", Float, nullable=False),
    Column("status_code", Integer),  # null: no answer
    Column("latency_ms", Float, nullable=False),
    Column("error", Text),
)

# What an operator did to an endpoint (add, remove, rotate) or a delivery (replay), who and when; kept after
# the endpoint is removed, so no foreign key.
webhook_actions = Table(
    "webhook_actions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("endpoint_id", String(36), nullable=False),
    Column("delivery_id", String(36)),
    Column("action", String(32), nullable=False),  # add | remove | rotate | replay
    Column("actor", String(255), nullable=False),
    Column("at", Float, nullable=False),
    Index("ix_webhook_actions_endpoint_id_at", "endpoint_id", "at"),
    sqlite_autoincrement=True,
)

# Schedules (`jobstore.schedules`): a job of `kind` for every slot of a cron expression in a time zone or of a
# fixed interval, made by the relay that holds the relay role under the key `schedule:<name>:<slot>` in the
# schedule's tenant, so that one slot never makes two jobs. `next_slot_at` is the first slot not fired yet.
schedules = Table(
    "schedules",
    metadata,
    Column("tenant", String(255), primary_key=True),
    Column("name", String(128), primary_key=True),
    Column("kind", String(64), nullable=False),
    Column("payload", Text, nullable=False),  # as the kind read it when the schedule was added
    Column("priority", Integer, nullable=False),
    Column("cron", String(255)),  # a cron expression, read in `timezone`; or else
    Column("timezone", String(64)),
    Column("every_seconds", Integer),  # a fixed interval, counted from the Unix epoch
    Column("catch_up", String(8), nullable=False),  # latest | none
    Column("concurrency_key", String(128)),  # carried by every job it makes (jobs.concurrency_key)
    Column("next_slot_at", Float, nullable=False),
    Column("last_slot_at", Float),  # the last slot fired, and its job
    Column("last_job_id", String(36)),
    Column("paused_at", Float),
    Column("paused_by", String(255)),
    Column("created_at", Float, nullable=False),
    Column("created_by", String(255), nullable=False),
    # Declared in code (`outbox_bridge.schedule`) and kept in line with the declaration by the leader.
    Column("declared", Boolean, nullable=False, default=False, server_default=false()),
)

# The job that holds a kind's uniqueness window (`@kind(unique_for_seconds=...)`): one row per tenant and
# unique key (a digest of the kind and its validated payload), taken over by a new job once `expires_at`
# has passed.
job_uniques = Table(
    "job_uniques",
    metadata,
    Column("tenant", String(255), primary_key=True),
    Column("unique_key", String(64), primary_key=True),
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("expires_at", Float, nullable=False),
    # A job deleted (retention) takes its window with it: the cascade finds the row by its job.
    Index("ix_job_uniques_job_id", "job_id"),
)

# Kinds an operator paused (`jobstore.pausing`): no claim starts a queued job of one of them.
paused_kinds = Table(
    "paused_kinds",
    metadata,
    Column("kind", String(64), primary_key=True),
    Column("paused_at", Float, nullable=False),
    Column("paused_by", String(255), nullable=False),
    Column("note", Text),
)

# The next time a job of each rate-limited kind may start (`KIND_RATE_LIMITS`, `jobstore.limits`): starts of
# one kind are spaced by its rate's interval across the deployment.
kind_rates = Table(
    "kind_rates",
    metadata,
    Column("kind", String(64), primary_key=True),
    Column("next_start_at", Float, nullable=False),
)

# What an operator did to a schedule or a kind, who did it (the OS user for the command line) and when,
# written in the transaction of the change it records.
schedule_actions = Table(
    "schedule_actions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant", String(255), nullable=False),
    Column("name", String(128), nullable=False),
    # add | pause | resume | remove; for a schedule declared in code: update | declare | undeclare
    Column("action", String(16), nullable=False),
    Column("actor", String(255), nullable=False),
    Column("at", Float, nullable=False),
    sqlite_autoincrement=True,
)

kind_actions = Table(
    "kind_actions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(64), nullable=False),
    Column("action", String(16), nullable=False),  # pause | resume
    Column("actor", String(255), nullable=False),
    Column("note", Text),
    Column("at", Float, nullable=False),
    sqlite_autoincrement=True,
)

# The jobs table's column names in table order: the order of a row a statement returns with `*jobs.c`.
JOB_COLUMNS = tuple(column.name for column in jobs.c)


def state_in(states: Collection[State], of: FromClause = jobs) -> ColumnElement[bool]:
    """The job's state is one of `states` (a `Move`'s sources), written as literals: plain equality when
    there is one, so the statement reads, and is planned, as a hand-written `state = 'queued'` would be. A
    bound state would hide from the planner that the query only wants, say, queued jobs, and the indexes
    of one state (`ix_jobs_queued_*`, `ix_jobs_running_*`) serve only a query whose text says so. `of`: the
    jobs table, or an alias of it."""
    values: list[ColumnElement[str]] = [literal_column(f"'{v}'") for v in sorted(s.value for s in states)]
    named = of.c.state == values[0] if len(values) == 1 else of.c.state.in_(values)
    finished = all(state in TERMINAL for state in states)
    return and_(named, of.c.finished_at.is_not(None)) if finished else named


def state_is(state: State, of: FromClause = jobs) -> ColumnElement[bool]:
    """The job is in `state`, a literal in the statement's text (`state_in`)."""
    return state_in((state,), of)


# Workflows (migration 0021 says how a job's ending moves them, in a trigger on `jobs`). A job that waits for
# others has one edge to each (`job_dependencies`, resolved once the one it waits for has ended) and a count
# of the edges not yet resolved (`job_waits`); while it waits its `available_at` is `WAITING_AT`.
WAITING_AT = 1e15

job_dependencies = Table(
    "job_dependencies",
    metadata,
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("depends_on", String(36), primary_key=True),
    Column("resolved", Boolean, nullable=False, default=False, server_default=false()),
    Index("ix_job_dependencies_depends_on", "depends_on"),
)

job_waits = Table(
    "job_waits",
    metadata,
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("waiting", Integer, nullable=False),
    Column("on_failure", String(16), nullable=False),  # `cancel` or `run`
    Column("released", Boolean, nullable=False, default=False, server_default=false()),
)

# A batch: its members (`batch_members`, in the request's order), the count of those not yet ended, and
# the callback job its request named (`batch_callbacks`, inserted as a job when the count reaches zero).
batches = Table(
    "batches",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("tenant", String(255), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("operation_key", String(255), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("state", String(16), nullable=False),  # `running` or `done`
    Column("total", Integer, nullable=False),
    Column("remaining", Integer, nullable=False),
    Column("callback_job_id", String(36)),
    Column("created_at", Float, nullable=False),
    Column("done_at", Float),
    UniqueConstraint("tenant", "operation_key", name="uq_batches_tenant_operation_key"),
    Index("ix_batches_tenant_created_at", "tenant", "created_at", "id"),
    Index("ix_batches_created_at", "created_at", "id"),
    Index("ix_batches_callback_job_id", "callback_job_id"),
    # The counts by state (`/metrics`) and the retention's deletes of batches done long ago.
    Index("ix_batches_state_done_at", "state", "done_at"),
)

batch_members = Table(
    "batch_members",
    metadata,
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("batch_id", String(36), ForeignKey("batches.id", ondelete="CASCADE"), nullable=False),
    Column("position", Integer, nullable=False),
    Index("ix_batch_members_batch_id", "batch_id", "position"),
)

batch_callbacks = Table(
    "batch_callbacks",
    metadata,
    Column("batch_id", String(36), ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True),
    Column("id", String(36), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("operation_key", String(255), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("deadline_seconds", Float),
    Column("traceparent", String(55)),
    Column("queue", String(64), nullable=False),
)
