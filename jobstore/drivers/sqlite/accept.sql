-- The sqlite driver's statements: accept (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- An accept is a few statements in one transaction (`SQLiteDriver.insert_jobs`): the jobs, one row at a
-- time in one call into sqlite3 (`db.execute_many`), then an outbox row for each job inserted. A batch that
-- holds jobs of a kind with a uniqueness window writes its jobs one at a time: a job with a window takes it
-- once the job is in (the foreign key), and is withdrawn if another job holds it (`job_uniques_take`,
-- `job_withdraw`).

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

-- name: job_uniques_take
-- The window of a job just inserted, taken unless another job holds it past :now; the job id if taken.
INSERT INTO job_uniques (tenant, unique_key, job_id, expires_at)
VALUES (:tenant, :unique_key, :job_id, :expires_at)
ON CONFLICT (tenant, unique_key) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at
WHERE job_uniques.expires_at <= :now
RETURNING job_id;

-- name: job_withdraw
-- A job just inserted whose window another job holds: nothing else refers to it yet (its outbox row is
-- written once it holds the window).
DELETE FROM jobs WHERE id = :id;

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

-- name: jobs_by_window
-- The job that holds a tenant's uniqueness window at :now, every column.
SELECT
    jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload,
    jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at,
    jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested,
    jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code,
    jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at,
    jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since,
    jobs.queue, jobs.snoozes
FROM job_uniques
JOIN jobs ON jobs.id = job_uniques.job_id
WHERE job_uniques.tenant = :tenant AND job_uniques.unique_key = :unique_key
  AND job_uniques.expires_at > :now;
