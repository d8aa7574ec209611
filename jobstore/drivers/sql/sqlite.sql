-- The statements the sqlite driver sends, as the database receives them. Written
-- by `python -m outbox_bridge.jobstore.drivers` from the code; do not edit.
-- `(__[POSTCOMPILE_x])` is a list of values, sent with one placeholder per value.

-- name: CLAIM
UPDATE jobs INDEXED BY sqlite_autoindex_jobs_1 SET state='running', epoch=(jobs.epoch + 1), attempts=(jobs.attempts + 1), lease_owner=:b_worker, lease_expires_at=:b_lease_until, updated_at=:b_now, started_at=coalesce(jobs.started_at, :b_now), held_by=:held_by, running_since=:b_running_since WHERE jobs.id IN (__[POSTCOMPILE_b_ids]) AND (jobs.state = 'queued' AND jobs.available_at <= :b_now AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) OR jobs.state = 'running' AND jobs.lease_expires_at <= :b_now AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch)) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = 0 AND (jobs.deadline_at IS NULL OR jobs.deadline_at > :b_now) RETURNING id, epoch, attempts, kind, payload, tenant, owner, operation_key, deadline_at, lease_expires_at, checkpoint, created_at, traceparent, concurrency_key;

-- name: COMPLETE_MANY
UPDATE jobs INDEXED BY sqlite_autoindex_jobs_1 SET state=CASE WHEN (jobs.cancel_requested = 1 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled' ELSE 'succeeded' END, lease_owner=:lease_owner, lease_expires_at=:lease_expires_at, result_attempt_id=CASE WHEN (jobs.cancel_requested = 1 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN NULL ELSE (SELECT attempts.id
FROM attempts
WHERE attempts.job_id = jobs.id AND attempts.epoch = jobs.epoch) END, error_code=CASE WHEN (jobs.cancel_requested = 1 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled' ELSE NULL END, error_message=CASE WHEN (jobs.cancel_requested = 1 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled before the result was committed' ELSE NULL END, updated_at=:b_now, finished_at=:b_now WHERE jobs.id IN (__[POSTCOMPILE_b_fence_ids]) AND (jobs.id, jobs.epoch) IN (__[POSTCOMPILE_b_fences]) AND jobs.state = 'running' AND jobs.lease_expires_at > :b_now AND (jobs.deadline_at IS NULL OR jobs.deadline_at > :b_now) RETURNING state, id, tenant, kind, epoch, attempts, traceparent;

-- name: DROP_PENDING
DELETE FROM outbox INDEXED BY ix_outbox_job_id WHERE outbox.job_id = :b_job AND outbox.published_at IS NULL;

-- name: DROP_PENDING_MANY
DELETE FROM outbox INDEXED BY ix_outbox_job_id WHERE outbox.job_id IN (__[POSTCOMPILE_b_jobs]) AND outbox.published_at IS NULL;

-- name: DUE_IN_ORDER
SELECT outbox.id, outbox.tenant
FROM outbox INDEXED BY ix_outbox_due_priority_id
WHERE outbox.published_at IS NULL AND outbox.available_at + 0 <= :b_now ORDER BY outbox.priority, outbox.id
 LIMIT :b_limit OFFSET 0;

-- name: END_ATTEMPT
UPDATE attempts SET ended_at=:b_now, outcome=:b_outcome, output=:b_output, error_code=:b_code, error_message=:b_message WHERE attempts.id = :b_attempt;

-- name: INSERT_ATTEMPT
INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome) VALUES (:id, :job_id, :epoch, :worker, :started_at, :outcome);

-- name: INSERT_JOB
INSERT INTO jobs (id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) VALUES (:id, :tenant, :owner, :operation_key, :fingerprint, :kind, :payload, :state, :epoch, :attempts, :max_attempts, :lease_owner, :lease_expires_at, :available_at, :run_at, :priority, :deadline_at, :cancel_requested, :external_epoch, :checkpoint, :checkpoint_epoch, :result_attempt_id, :error_code, :error_message, :created_at, :updated_at, :started_at, :finished_at, :traceparent, :schedule_name, :concurrency_key, :held_by, :running_since) ON CONFLICT (tenant, operation_key) DO NOTHING;

-- name: INSERT_OUTBOX_ROW
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, priority, tenant) VALUES (:job_id, :created_at, :available_at, 0, :priority, :tenant);

-- name: JOBS_PRESENT
SELECT jobs.id
FROM jobs
WHERE jobs.id IN (__[POSTCOMPILE_b_ids]);

-- name: MARK_PUBLISHED
UPDATE outbox NOT INDEXED SET published_at=:b_now, publish_attempts=(outbox.publish_attempts + 1) WHERE outbox.id IN (__[POSTCOMPILE_b_ids]) AND outbox.published_at IS NULL AND (EXISTS (SELECT *
FROM relay_role
WHERE relay_role.name = 'relay' AND relay_role.token = :b_token AND relay_role.expires_at > :b_now)) RETURNING job_id;

-- name: RELAY_READ_ROWS
SELECT outbox.id, outbox.job_id, outbox.priority, outbox.tenant, jobs.traceparent
FROM outbox JOIN jobs ON jobs.id = outbox.job_id
WHERE outbox.id IN (__[POSTCOMPILE_b_ids]);

-- name: TENANT_RANGE
SELECT (SELECT min(outbox.tenant) AS min_1
FROM outbox INDEXED BY ix_outbox_due_tenant
WHERE outbox.published_at IS NULL) AS anon_1, (SELECT max(outbox.tenant) AS max_1
FROM outbox INDEXED BY ix_outbox_due_tenant
WHERE outbox.published_at IS NULL) AS anon_2;
