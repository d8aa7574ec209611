-- The sqlite driver's statements: accept (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- An accept is a few statements in one transaction (`SQLiteDriver.insert_jobs`): the jobs, one row at a
-- time in one call into sqlite3 (`db.execute_many`), then an outbox row for each job inserted.

-- name: jobs_insert
-- A new job, unless its tenant + key is taken.
INSERT INTO jobs (
    id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
    lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
    external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
    created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
    held_by, running_since, queue, snoozes
)
VALUES (
    :id, :tenant, :owner, :operation_key, :fingerprint, :kind, :payload, :state, :epoch, :attempts,
    :max_attempts, :lease_owner, :lease_expires_at, :available_at, :run_at, :priority, :deadline_at,
    :cancel_requested, :external_epoch, :checkpoint, :checkpoint_epoch, :result_attempt_id, :error_code,
    :error_message, :created_at, :updated_at, :started_at, :finished_at, :traceparent, :schedule_name,
    :concurrency_key, :held_by, :running_since, :queue, :snoozes
)
ON CONFLICT (tenant, operation_key) DO NOTHING;

-- name: jobs_present
-- Which of the ids given are jobs (a batch whose inserts the driver did not all count).
SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: outbox_add_accepted
-- The outbox row of a job just inserted, read from the job's own row (its id, times, tenant and priority):
-- the relay reads the due rows by tenant and priority.
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
VALUES (:id, :created_at, :available_at, 0, :tenant, :priority);

-- name: jobs_by_key
-- The job that holds a tenant + idempotency key, every column.
SELECT
    id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
    lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
    external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
    created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
    held_by, running_since, queue, snoozes
FROM jobs
WHERE tenant = :tenant AND operation_key = :operation_key;
