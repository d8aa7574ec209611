-- The sqlite driver's statements: reads (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- A job is read with every column of the jobs table, in the table's order (`schema.JOB_COLUMNS`).
-- The reads a job's view is made from (`job_get`, `jobs_find_*`) say `paused` for `held_by` of a queued job
-- of a paused kind (`pausing`): what holds it back, whatever flow limit held it before; `paused_kinds` is
-- looked up only for a queued job.

-- name: job_get
-- A job by id; of one tenant only when a tenant is given.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
       lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
       external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
       created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
       CASE WHEN state = 'queued' AND kind IN (SELECT kind FROM paused_kinds) THEN 'paused' ELSE held_by END
           AS held_by, running_since, queue, snoozes
FROM jobs
WHERE id = :id
  AND (:tenant IS NULL OR tenant = :tenant);

-- name: job_attempts
SELECT id, job_id, epoch, worker, started_at, ended_at, outcome, external_started_at, output, error_code,
       error_message
FROM attempts
WHERE job_id = :job_id
ORDER BY epoch;

-- name: job_operator_actions
-- What operators did to a job, oldest first.
SELECT id, job_id, action, actor, note, at
FROM operator_actions
WHERE job_id = :job_id
ORDER BY at, id;

-- name: job_committed_result
-- The attempt a succeeded job's result pointer names; of one tenant only when a tenant is given.
SELECT attempts.id, attempts.job_id, attempts.epoch, attempts.worker, attempts.started_at,
       attempts.ended_at, attempts.outcome, attempts.external_started_at, attempts.output,
       attempts.error_code, attempts.error_message
FROM attempts
JOIN jobs ON jobs.result_attempt_id = attempts.id
WHERE jobs.id = :job_id
  AND jobs.state = 'succeeded' AND jobs.finished_at IS NOT NULL
  AND (:tenant IS NULL OR jobs.tenant = :tenant);

-- name: job_counts_by_state
-- The queued and the running jobs counted in their own indexes, the finished ones in theirs.
SELECT 'queued', count(*) FROM jobs
WHERE state = 'queued' AND (:tenant IS NULL OR tenant = :tenant)
UNION ALL
SELECT 'running', count(*) FROM jobs
WHERE state = 'running' AND (:tenant IS NULL OR tenant = :tenant)
UNION ALL
SELECT state, count(*) FROM jobs
WHERE finished_at IS NOT NULL AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY state;

-- name: jobs_finished_per_bucket
-- Jobs finished per time bucket since a time: the bucket's number from it, and how many.
SELECT floor((finished_at - :since) / :bucket_seconds) AS bucket, count(*)
FROM jobs
WHERE finished_at >= :since
GROUP BY bucket
ORDER BY bucket;

-- name: jobs_due_queue
-- The queued jobs due now but for those of a paused kind: how many, and the earliest due time.
SELECT count(*), min(available_at)
FROM jobs
WHERE state = 'queued'
  AND available_at <= :now
  AND kind NOT IN (SELECT kind FROM paused_kinds);

-- name: jobs_by_queue
-- Each queue's due queued jobs but for those of a paused kind (how many, the earliest due time) and its
-- running jobs: one walk of the queued jobs' due range and one of the running jobs, each on its state's own
-- index, never a finished job.
SELECT queue, sum(waiting), min(due_at), sum(running)
FROM (
  SELECT queue, count(*) AS waiting, min(available_at) AS due_at, 0 AS running
  FROM jobs
  WHERE state = 'queued'
    AND available_at <= :now
    AND kind NOT IN (SELECT kind FROM paused_kinds)
  GROUP BY queue
  UNION ALL
  SELECT queue, 0, NULL, count(*)
  FROM jobs
  WHERE state = 'running'
  GROUP BY queue
) AS by_state
GROUP BY queue
ORDER BY queue;

-- name: leases_by_owner
-- The running jobs' leases by owner: how many, and the soonest expiry.
SELECT lease_owner, count(*), min(lease_expires_at)
FROM jobs
WHERE state = 'running' AND lease_owner IS NOT NULL
GROUP BY lease_owner;

-- name: jobs_running_of
-- The running jobs whose lease one of the owners holds, the soonest lease expiry first.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
       lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
       external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
       created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
       held_by, running_since, queue, snoozes
FROM jobs
WHERE state = 'running'
  AND lease_owner IN (SELECT value FROM json_each(:owners))
ORDER BY lease_expires_at, id
LIMIT :limit;

-- name: jobs_last_workers
-- The worker of each job's latest attempt (the one its epoch names).
SELECT attempts.job_id, attempts.worker
FROM attempts
JOIN jobs ON jobs.id = attempts.job_id AND jobs.epoch = attempts.epoch
WHERE jobs.id IN (SELECT value FROM json_each(:ids));

-- The job listing (`filters.JobFilter`), newest first after a cursor, and its count: one statement per
-- index a filter is read from (`JobFilter.shape`). A field the filter leaves out is NULL, and its condition
-- lets every job through; the cursor too (the first page). A field a shape's index is chosen by is no such
-- condition there (SQLite plans a statement before it sees its values).

-- name: jobs_find_ids
-- Jobs among the ids given (an operator ticked them), each looked up by id.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
       lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
       external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
       created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
       CASE WHEN state = 'queued' AND kind IN (SELECT kind FROM paused_kinds) THEN 'paused' ELSE held_by END
           AS held_by, running_since, queue, snoozes
FROM jobs INDEXED BY sqlite_autoindex_jobs_1
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner)
  AND (:after_created_at IS NULL OR created_at < :after_created_at
       OR (created_at = :after_created_at AND id < :after_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: jobs_find_finished
-- Jobs in finished states, from the finished jobs' index.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
       lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
       external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
       created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
       CASE WHEN state = 'queued' AND kind IN (SELECT kind FROM paused_kinds) THEN 'paused' ELSE held_by END
           AS held_by, running_since, queue, snoozes
FROM jobs
WHERE state IN (SELECT value FROM json_each(:states)) AND finished_at IS NOT NULL
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner)
  AND (:after_created_at IS NULL OR created_at < :after_created_at
       OR (created_at = :after_created_at AND id < :after_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: jobs_find_queued
-- Queued jobs, from the queued jobs' index.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
       lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
       external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
       created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
       CASE WHEN state = 'queued' AND kind IN (SELECT kind FROM paused_kinds) THEN 'paused' ELSE held_by END
           AS held_by, running_since, queue, snoozes
FROM jobs
WHERE state = 'queued'
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner)
  AND (:after_created_at IS NULL OR created_at < :after_created_at
       OR (created_at = :after_created_at AND id < :after_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: jobs_find_running
-- Running jobs, from the running jobs' index.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
       lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
       external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
       created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
       CASE WHEN state = 'queued' AND kind IN (SELECT kind FROM paused_kinds) THEN 'paused' ELSE held_by END
           AS held_by, running_since, queue, snoozes
FROM jobs
WHERE state = 'running'
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner)
  AND (:after_created_at IS NULL OR created_at < :after_created_at
       OR (created_at = :after_created_at AND id < :after_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: jobs_find_of_tenant
-- A tenant's jobs in any states, from its jobs' index, newest first.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
       lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
       external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
       created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
       CASE WHEN state = 'queued' AND kind IN (SELECT kind FROM paused_kinds) THEN 'paused' ELSE held_by END
           AS held_by, running_since, queue, snoozes
FROM jobs
WHERE tenant = :tenant
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner)
  AND (:after_created_at IS NULL OR created_at < :after_created_at
       OR (created_at = :after_created_at AND id < :after_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: jobs_find_any
-- Jobs in any states, of every tenant.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
       lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
       external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
       created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
       CASE WHEN state = 'queued' AND kind IN (SELECT kind FROM paused_kinds) THEN 'paused' ELSE held_by END
           AS held_by, running_since, queue, snoozes
FROM jobs
WHERE (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner)
  AND (:after_created_at IS NULL OR created_at < :after_created_at
       OR (created_at = :after_created_at AND id < :after_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: jobs_count_ids
SELECT count(*)
FROM jobs INDEXED BY sqlite_autoindex_jobs_1
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner);

-- name: jobs_count_finished
SELECT count(*)
FROM jobs
WHERE state IN (SELECT value FROM json_each(:states)) AND finished_at IS NOT NULL
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner);

-- name: jobs_count_queued
SELECT count(*)
FROM jobs
WHERE state = 'queued'
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner);

-- name: jobs_count_running
SELECT count(*)
FROM jobs
WHERE state = 'running'
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner);

-- name: jobs_count_of_tenant
SELECT count(*)
FROM jobs
WHERE tenant = :tenant
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner);

-- name: jobs_count_any
SELECT count(*)
FROM jobs
WHERE (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:id_prefix IS NULL OR id LIKE :id_prefix)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner);
