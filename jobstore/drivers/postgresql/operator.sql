-- The postgresql driver's statements: operator (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- Each move is one guarded UPDATE on the job's state (`jobstore.operator`). A move that logs an event
-- returns its columns (`events.COLUMNS`: id, tenant, kind, epoch, attempts, traceparent), or the whole job
-- (every column, in the table's order) when the caller hands the job back.

-- name: job_cancel_queued
-- Cancel a queued job at once (of one tenant only when a tenant is given).
UPDATE jobs
SET state = 'cancelled', cancel_requested = TRUE, error_code = 'cancelled',
    error_message = 'cancelled before it started', updated_at = %(now)s, finished_at = %(now)s
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND state = 'queued'
RETURNING id, tenant, kind, epoch, attempts, traceparent;

-- name: job_request_cancel_running
-- Flag a running job's cancel (no state change): its worker sees it, and the job ends at its next write.
UPDATE jobs
SET cancel_requested = TRUE, updated_at = %(now)s
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND state = 'running'
RETURNING id;

-- name: job_exists
SELECT id FROM jobs WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s);

-- name: job_requeue
-- A job back in the queue from one of the states given (finished ones): a fresh attempt budget, due now,
-- and no error, lease or effect mark. The epoch is kept, so nothing from an older attempt can write.
UPDATE jobs
SET state = 'queued', attempts = 0, available_at = %(now)s, cancel_requested = FALSE, external_epoch = NULL,
    error_code = NULL, error_message = NULL, lease_owner = NULL, lease_expires_at = NULL,
    finished_at = NULL, updated_at = %(now)s
WHERE id = %(id)s
  AND state = ANY(%(states)s::text[]) AND finished_at IS NOT NULL
RETURNING id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
          lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
          external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
          created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
          held_by, running_since, queue, snoozes;

-- name: jobs_requeue_finished
-- `job_requeue` of every job a filter names (`filters.JobFilter`, as the listing reads it: a field the
-- filter leaves out is NULL): jobs in the finished states given, from their index.
UPDATE jobs
SET state = 'queued', attempts = 0, available_at = %(now)s, cancel_requested = FALSE, external_epoch = NULL,
    error_code = NULL, error_message = NULL, lease_owner = NULL, lease_expires_at = NULL,
    finished_at = NULL, updated_at = %(now)s
WHERE state = ANY(%(states)s::text[]) AND finished_at IS NOT NULL
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(id_prefix)s::text IS NULL OR id LIKE %(id_prefix)s)
  AND (%(since)s::float8 IS NULL OR updated_at >= %(since)s)
  AND (%(lease_owner)s::text IS NULL OR lease_owner = %(lease_owner)s)
RETURNING id, tenant, kind, epoch, attempts, traceparent;

-- name: jobs_requeue_ids
-- `jobs_requeue_finished` of a filter that names jobs by id (an operator ticked them): each looked up by id.
UPDATE jobs
SET state = 'queued', attempts = 0, available_at = %(now)s, cancel_requested = FALSE, external_epoch = NULL,
    error_code = NULL, error_message = NULL, lease_owner = NULL, lease_expires_at = NULL,
    finished_at = NULL, updated_at = %(now)s
WHERE id = ANY(%(ids)s::text[])
  AND state = ANY(%(states)s::text[]) AND finished_at IS NOT NULL
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(id_prefix)s::text IS NULL OR id LIKE %(id_prefix)s)
  AND (%(since)s::float8 IS NULL OR updated_at >= %(since)s)
  AND (%(lease_owner)s::text IS NULL OR lease_owner = %(lease_owner)s)
RETURNING id, tenant, kind, epoch, attempts, traceparent;

-- name: job_resolve
-- Settle an unknown job as succeeded or failed (with the error given, or none).
UPDATE jobs
SET state = %(state)s, error_code = %(error_code)s, error_message = %(error_message)s, updated_at = %(now)s,
    finished_at = %(now)s
WHERE id = %(id)s
  AND state = 'unknown' AND finished_at IS NOT NULL
RETURNING id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
          lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
          external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
          created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
          held_by, running_since, queue, snoozes;

-- name: operator_action_add
-- Who did what to a job, when and why: written in the transaction of the move it records.
INSERT INTO operator_actions (job_id, action, actor, note, at)
VALUES (%(job_id)s, %(action)s, %(actor)s, %(note)s, %(at)s);
