-- The sqlite driver's statements: upkeep (named blocks, as jobstore/drivers/sqlfile.py reads them).

-- Heartbeats (`jobstore.heartbeats`): one row per live process, written every few seconds.

-- name: process_beat
UPDATE processes SET last_seen_at = :now, detail = :detail
WHERE id = :id
RETURNING id;

-- name: process_add
INSERT INTO processes (id, role, host, pid, version, started_at, last_seen_at, detail)
VALUES (:id, :role, :host, :pid, :version, :started_at, :last_seen_at, :detail);

-- name: processes_forget
-- The rows of processes gone quiet for long (killed, not stopped).
DELETE FROM processes WHERE last_seen_at < :before;

-- name: process_remove
DELETE FROM processes WHERE id = :id RETURNING id;

-- name: processes_seen_since
SELECT id, role, host, pid, version, started_at, last_seen_at, detail
FROM processes
WHERE last_seen_at >= :since
ORDER BY role, host, pid, started_at;

-- The job retention (`jobstore.retention`). A job it deletes is in a finished state other than `unknown`
-- (`PRUNABLE`), finished before the cutoff, and has no completion webhook still pending; each of these
-- statements holds the whole rule, read from the finished jobs' index.

-- name: jobs_expired
-- (finish time, id) of the first jobs the retention deletes, oldest first.
SELECT finished_at, id
FROM jobs
WHERE state IN ('cancelled', 'dead', 'failed', 'succeeded') AND finished_at IS NOT NULL
  AND finished_at < :cutoff
  AND NOT EXISTS (
    SELECT 1 FROM webhook_deliveries
    WHERE webhook_deliveries.job_id = jobs.id AND webhook_deliveries.state = 'pending'
  )
  AND NOT EXISTS (
    SELECT 1 FROM batch_members JOIN batches ON batches.id = batch_members.batch_id
    WHERE batch_members.job_id = jobs.id AND batches.state = 'running'
  )
ORDER BY finished_at, id
LIMIT :limit;

-- name: jobs_expired_after
-- `jobs_expired` after the job (finish time, id) given, in that order.
SELECT finished_at, id
FROM jobs
WHERE state IN ('cancelled', 'dead', 'failed', 'succeeded') AND finished_at IS NOT NULL
  AND finished_at < :cutoff
  AND NOT EXISTS (
    SELECT 1 FROM webhook_deliveries
    WHERE webhook_deliveries.job_id = jobs.id AND webhook_deliveries.state = 'pending'
  )
  AND NOT EXISTS (
    SELECT 1 FROM batch_members JOIN batches ON batches.id = batch_members.batch_id
    WHERE batch_members.job_id = jobs.id AND batches.state = 'running'
  )
  AND (finished_at, id) > (:after_finished_at, :after_id)
ORDER BY finished_at, id
LIMIT :limit;

-- name: jobs_delete_expired
-- Those of the jobs given that the retention still deletes, with their attempts and outbox rows (ON DELETE
-- CASCADE); the ids deleted.
DELETE FROM jobs INDEXED BY sqlite_autoindex_jobs_1
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN ('cancelled', 'dead', 'failed', 'succeeded') AND finished_at IS NOT NULL
  AND finished_at < :cutoff
  AND NOT EXISTS (
    SELECT 1 FROM webhook_deliveries
    WHERE webhook_deliveries.job_id = jobs.id AND webhook_deliveries.state = 'pending'
  )
  AND NOT EXISTS (
    SELECT 1 FROM batch_members JOIN batches ON batches.id = batch_members.batch_id
    WHERE batch_members.job_id = jobs.id AND batches.state = 'running'
  )
RETURNING id;

-- name: jobs_result_attempts
-- Each of the jobs given that exists, and the attempt its result pointer names.
SELECT id, result_attempt_id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: jobs_attempt_outcomes
-- Every attempt of the jobs given, and its outcome.
SELECT job_id, id, outcome FROM attempts WHERE job_id IN (SELECT value FROM json_each(:ids));

-- The sweeper (`jobstore.sweeper`). A job it settles is moved by its own guarded UPDATE, under the job's
-- epoch and the condition it was read under, so a worker that renewed in between wins. The move applies the
-- sweeper's decision (`fenced.decided`): `state` with its error; a retry (`available_at` given) comes
-- due then and gives back `refund` attempts of the budget, any other state is finished at `finished_at`.

-- name: jobs_overdue
-- The running jobs whose lease ran out or whose deadline passed, then the queued jobs whose deadline
-- passed, each read from its state's index in that index's order: up to `limit` of each.
SELECT * FROM (
  SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
         lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
         external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
         created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
         held_by, running_since, queue, snoozes
  FROM jobs
  WHERE state = 'running' AND (lease_expires_at <= :now OR deadline_at <= :now)
  ORDER BY lease_expires_at
  LIMIT :limit
) AS running
UNION ALL
SELECT * FROM (
  SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
         lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
         external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
         created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
         held_by, running_since, queue, snoozes
  FROM jobs
  WHERE state = 'queued' AND deadline_at <= :now
  ORDER BY available_at
  LIMIT :limit
) AS queued;

-- name: job_settle_overdue_running
UPDATE jobs
SET state = :state,
    error_code = :code,
    error_message = :message,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = :now,
    available_at = COALESCE(:available_at, available_at),
    attempts = attempts - :refund,
    finished_at = COALESCE(:finished_at, finished_at)
WHERE id = :id AND epoch = :epoch
  AND state = 'running' AND (lease_expires_at <= :now OR deadline_at <= :now)
RETURNING id;

-- name: job_settle_overdue_queued
UPDATE jobs
SET state = :state,
    error_code = :code,
    error_message = :message,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = :now,
    available_at = COALESCE(:available_at, available_at),
    attempts = attempts - :refund,
    finished_at = COALESCE(:finished_at, finished_at)
WHERE id = :id AND epoch = :epoch
  AND state = 'queued' AND deadline_at <= :now
RETURNING id;

-- name: jobs_abandoned
-- The running jobs whose lease one of the gone owners holds and that have gone unrenewed since
-- `quiet_since`, the longest unrenewed first.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
         lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
         external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
         created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
         held_by, running_since, queue, snoozes
FROM jobs
WHERE state = 'running'
  AND lease_owner IN (SELECT value FROM json_each(:owners))
  AND updated_at <= :quiet_since
ORDER BY updated_at
LIMIT :limit;

-- name: job_settle_abandoned
UPDATE jobs
SET state = :state,
    error_code = :code,
    error_message = :message,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = :now,
    available_at = COALESCE(:available_at, available_at),
    attempts = attempts - :refund,
    finished_at = COALESCE(:finished_at, finished_at)
WHERE id = :id AND epoch = :epoch
  AND state = 'running'
  AND lease_owner IN (SELECT value FROM json_each(:owners))
  AND updated_at <= :quiet_since
RETURNING id;

-- name: jobs_stale_queued
-- Queued jobs due since before `older_than` and unchanged since then, with no outbox row waiting to be
-- published, not of a paused kind, and held back by no limit (a limit's own sweep announces those).
SELECT id
FROM jobs
WHERE state = 'queued'
  AND available_at <= :older_than
  AND updated_at <= :older_than
  AND NOT EXISTS (SELECT 1 FROM outbox WHERE outbox.job_id = jobs.id AND outbox.published_at IS NULL)
  AND kind NOT IN (SELECT kind FROM paused_kinds)
  AND held_by IS NULL
ORDER BY available_at
LIMIT :limit;

-- name: jobs_touch_queued
-- Those of the jobs given still queued, changed now (announced again).
UPDATE jobs SET updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued';

-- name: jobs_dead_lettered
-- Each of the jobs given: its state, when it is due, and whether an outbox row waits to be published.
SELECT id, state, available_at,
       EXISTS (SELECT 1 FROM outbox WHERE outbox.job_id = jobs.id AND outbox.published_at IS NULL)
FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids));

-- The schema's revision (`jobstore.migrate`): whether the store has the table Alembic keeps it in, and the
-- revision it holds.

-- name: schema_revision_table
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version';

-- name: schema_revision
SELECT version_num FROM alembic_version;

-- The upkeep of a table (`Driver.analyze`, `Driver.vacuum`): one statement per table, the tables being
-- those a job's moves leave dead row versions in (`statistics.TABLES`).

-- name: analyze_attempts
ANALYZE attempts;

-- name: analyze_jobs
ANALYZE jobs;

-- name: analyze_outbox
ANALYZE outbox;
