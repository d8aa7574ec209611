-- What each store operation sends to sqlite, recorded as the database receives it from one
-- typical call on an empty store (`jobstore/drivers/recording.py`). Written by
-- `python -m outbox_bridge.jobstore.drivers --record DATABASE_URL`; do not edit.
-- Parameters are sent apart from the text; `executemany` runs a statement once per row.

-- operation: accept a batch (intake.accept_committed)
BEGIN IMMEDIATE;
-- executemany
INSERT INTO jobs (id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) VALUES (:id, :tenant, :owner, :operation_key, :fingerprint, :kind, :payload, :state, :epoch, :attempts, :max_attempts, :lease_owner, :lease_expires_at, :available_at, :run_at, :priority, :deadline_at, :cancel_requested, :external_epoch, :checkpoint, :checkpoint_epoch, :result_attempt_id, :error_code, :error_message, :created_at, :updated_at, :started_at, :finished_at, :traceparent, :schedule_name, :concurrency_key, :held_by, :running_since) ON CONFLICT (tenant, operation_key) DO NOTHING;
-- executemany
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, priority, tenant) VALUES (:job_id, :created_at, :available_at, :publish_attempts, :priority, :tenant);

-- operation: take the relay role (relayrole.take)
BEGIN IMMEDIATE;
INSERT INTO relay_role (name, token, holder, expires_at) VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE
SET token = excluded.token, holder = excluded.holder, expires_at = excluded.expires_at
WHERE relay_role.token = excluded.token OR relay_role.token = ? OR relay_role.expires_at <= ?
RETURNING token;

-- operation: read due outbox rows (relayrole.read)
BEGIN DEFERRED;
SELECT outbox.id, outbox.tenant
FROM outbox INDEXED BY ix_outbox_due_priority_id
WHERE outbox.published_at IS NULL AND outbox.available_at + :available_at_1 <= :b_now ORDER BY outbox.priority, outbox.id
 LIMIT :b_limit OFFSET :param_1;
SELECT outbox.id, outbox.job_id, outbox.priority, outbox.tenant, jobs.traceparent
FROM outbox JOIN jobs ON jobs.id = outbox.job_id
WHERE outbox.id IN (:b_ids_1, :b_ids_2, :b_ids_3, :b_ids_4, :b_ids_5);
SELECT min(outbox.available_at) AS min_1
FROM outbox
WHERE outbox.published_at IS NULL AND outbox.available_at > :b_now;

-- operation: mark published (relayrole.mark_published)
BEGIN IMMEDIATE;
UPDATE outbox NOT INDEXED SET published_at=:b_now, publish_attempts=(outbox.publish_attempts + :publish_attempts_1) WHERE outbox.id IN (:b_ids_1, :b_ids_2, :b_ids_3, :b_ids_4, :b_ids_5) AND outbox.published_at IS NULL AND (EXISTS (SELECT *
FROM relay_role
WHERE relay_role.name = :name_1 AND relay_role.token = :b_token AND relay_role.expires_at > :b_now)) RETURNING job_id;
SELECT jobs.id, jobs.tenant, jobs.kind, jobs.traceparent
FROM jobs
WHERE jobs.id IN (:b_job_ids_1, :b_job_ids_2, :b_job_ids_3, :b_job_ids_4, :b_job_ids_5);

-- operation: claim by ids (claiming.claim_many)
BEGIN IMMEDIATE;
UPDATE jobs INDEXED BY sqlite_autoindex_jobs_1 SET state=:state, epoch=(jobs.epoch + :epoch_1), attempts=(jobs.attempts + :attempts_1), lease_owner=:b_worker, lease_expires_at=:b_lease_until, updated_at=:b_now, started_at=coalesce(jobs.started_at, :b_now), held_by=:held_by, running_since=:b_running_since WHERE jobs.id IN (:b_ids_1, :b_ids_2, :b_ids_3) AND (jobs.state = 'running' OR jobs.concurrency_key IS NULL) AND (jobs.state = 'queued' AND jobs.available_at <= :b_now AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) OR jobs.state = 'running' AND jobs.lease_expires_at <= :b_now AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch)) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = 0 AND (jobs.deadline_at IS NULL OR jobs.deadline_at > :b_now) RETURNING id, epoch, attempts, kind, payload, tenant, owner, operation_key, deadline_at, lease_expires_at, checkpoint, created_at, traceparent, concurrency_key;
-- executemany
INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome) VALUES (:id, :job_id, :epoch, :worker, :started_at, :outcome);

-- operation: claim due (claiming.claim_due)
BEGIN IMMEDIATE;
SELECT jobs.id
FROM jobs
WHERE jobs.state = 'running' AND jobs.lease_expires_at <= ? AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = 0 AND (jobs.deadline_at IS NULL OR jobs.deadline_at > ?) ORDER BY jobs.lease_expires_at
 LIMIT ? OFFSET ?;
SELECT jobs.id
FROM jobs
WHERE jobs.state = 'queued' AND jobs.available_at + ? <= ? AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) AND (jobs.tenant NOT IN (SELECT 1 FROM (SELECT 1) WHERE 1!=1)) AND (jobs.kind NOT IN (SELECT 1 FROM (SELECT 1) WHERE 1!=1)) AND (jobs.concurrency_key IS NULL OR (SELECT count(*) AS count_1
FROM jobs AS running_with_key
WHERE running_with_key.tenant = jobs.tenant AND running_with_key.concurrency_key = jobs.concurrency_key AND running_with_key.state = 'running') < ?) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = 0 AND (jobs.deadline_at IS NULL OR jobs.deadline_at > ?) ORDER BY jobs.priority, jobs.available_at
 LIMIT ? OFFSET ?;
SELECT (SELECT min(jobs.tenant) AS min_1
FROM jobs
WHERE jobs.state = 'queued') AS anon_1, (SELECT max(jobs.tenant) AS max_1
FROM jobs
WHERE jobs.state = 'queued') AS anon_2;
UPDATE jobs INDEXED BY sqlite_autoindex_jobs_1 SET state=:state, epoch=(jobs.epoch + :epoch_1), attempts=(jobs.attempts + :attempts_1), lease_owner=:b_worker, lease_expires_at=:b_lease_until, updated_at=:b_now, started_at=coalesce(jobs.started_at, :b_now), held_by=:held_by, running_since=:b_running_since WHERE jobs.id IN (:b_ids_1) AND (jobs.state = 'running' OR jobs.concurrency_key IS NULL) AND (jobs.state = 'queued' AND jobs.available_at <= :b_now AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) OR jobs.state = 'running' AND jobs.lease_expires_at <= :b_now AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch)) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = 0 AND (jobs.deadline_at IS NULL OR jobs.deadline_at > :b_now) RETURNING id, epoch, attempts, kind, payload, tenant, owner, operation_key, deadline_at, lease_expires_at, checkpoint, created_at, traceparent, concurrency_key;
DELETE FROM outbox INDEXED BY ix_outbox_job_id WHERE outbox.job_id IN (:b_jobs_1) AND outbox.published_at IS NULL;
-- executemany
INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome) VALUES (:id, :job_id, :epoch, :worker, :started_at, :outcome);

-- operation: renew a lease (fenced.renew_lease)
BEGIN IMMEDIATE;
UPDATE jobs SET lease_expires_at=?, updated_at=? WHERE jobs.id = ? AND jobs.epoch = ? AND jobs.state = 'running' AND jobs.lease_expires_at > ? AND (jobs.deadline_at IS NULL OR jobs.deadline_at > ?) RETURNING cancel_requested;

-- operation: complete a round (fenced.complete_many)
BEGIN IMMEDIATE;
UPDATE jobs INDEXED BY sqlite_autoindex_jobs_1 SET state=CASE WHEN (jobs.cancel_requested = 1 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN :param_1 ELSE :param_2 END, lease_owner=:lease_owner, lease_expires_at=:lease_expires_at, result_attempt_id=CASE WHEN (jobs.cancel_requested = 1 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN NULL ELSE (SELECT attempts.id
FROM attempts
WHERE attempts.job_id = jobs.id AND attempts.epoch = jobs.epoch) END, error_code=CASE WHEN (jobs.cancel_requested = 1 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN :param_3 ELSE NULL END, error_message=CASE WHEN (jobs.cancel_requested = 1 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN :param_4 ELSE NULL END, updated_at=:b_now, finished_at=:b_now WHERE jobs.id IN (:b_fence_ids_1) AND (jobs.id, jobs.epoch) IN (VALUES (:b_fences_1_1, :b_fences_1_2)) AND jobs.state = 'running' AND jobs.lease_expires_at > :b_now AND (jobs.deadline_at IS NULL OR jobs.deadline_at > :b_now) RETURNING state, id, tenant, kind, epoch, attempts, traceparent;
-- executemany
UPDATE attempts SET ended_at=:b_now, outcome=:b_outcome, output=:b_output, error_code=:b_code, error_message=:b_message WHERE attempts.id = :b_attempt;

-- operation: fail an attempt (fenced.fail)
BEGIN IMMEDIATE;
SELECT jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload, jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at, jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested, jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code, jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at, jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since
FROM jobs
WHERE jobs.id = ? AND jobs.epoch = ? AND jobs.state = 'running' AND jobs.lease_expires_at > ? AND (jobs.deadline_at IS NULL OR jobs.deadline_at > ?);
UPDATE jobs SET state=?, lease_owner=?, lease_expires_at=?, error_code=?, error_message=?, updated_at=?, finished_at=? WHERE jobs.id = ? AND jobs.epoch = ? AND jobs.state = 'running' AND jobs.lease_expires_at > ? AND (jobs.deadline_at IS NULL OR jobs.deadline_at > ?);
UPDATE attempts SET ended_at=?, outcome=?, output=?, error_code=?, error_message=? WHERE attempts.id = ?;

-- operation: release a job (fenced.release)
BEGIN IMMEDIATE;
UPDATE jobs SET state=CASE WHEN (jobs.cancel_requested = 1) THEN ? ELSE ? END, attempts=(jobs.attempts - ?), lease_owner=?, lease_expires_at=?, available_at=?, error_code=CASE WHEN (jobs.cancel_requested = 1) THEN ? ELSE jobs.error_code END, error_message=CASE WHEN (jobs.cancel_requested = 1) THEN ? ELSE jobs.error_message END, updated_at=?, finished_at=CASE WHEN (jobs.cancel_requested = 1) THEN ? ELSE NULL END WHERE jobs.id = ? AND jobs.epoch = ? AND jobs.state = 'running' AND jobs.lease_expires_at > ? AND (jobs.deadline_at IS NULL OR jobs.deadline_at > ?) AND (jobs.external_epoch IS NULL OR jobs.external_epoch != ?) RETURNING state, id, tenant, kind, epoch, attempts, traceparent;
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, priority, tenant) VALUES (?, ?, ?, ?, (SELECT jobs.priority
FROM jobs
WHERE jobs.id = ?), (SELECT jobs.tenant
FROM jobs
WHERE jobs.id = ?));
UPDATE attempts SET ended_at=?, outcome=?, output=?, error_code=?, error_message=? WHERE attempts.id = ?;

-- operation: sweep expired leases (sweeper.sweep_expired)
BEGIN IMMEDIATE;
SELECT anon_1.id, anon_1.tenant, anon_1.owner, anon_1.operation_key, anon_1.fingerprint, anon_1.kind, anon_1.payload, anon_1.state, anon_1.epoch, anon_1.attempts, anon_1.max_attempts, anon_1.lease_owner, anon_1.lease_expires_at, anon_1.available_at, anon_1.run_at, anon_1.priority, anon_1.deadline_at, anon_1.cancel_requested, anon_1.external_epoch, anon_1.checkpoint, anon_1.checkpoint_epoch, anon_1.result_attempt_id, anon_1.error_code, anon_1.error_message, anon_1.created_at, anon_1.updated_at, anon_1.started_at, anon_1.finished_at, anon_1.traceparent, anon_1.schedule_name, anon_1.concurrency_key, anon_1.held_by, anon_1.running_since
FROM (SELECT jobs.id AS id, jobs.tenant AS tenant, jobs.owner AS owner, jobs.operation_key AS operation_key, jobs.fingerprint AS fingerprint, jobs.kind AS kind, jobs.payload AS payload, jobs.state AS state, jobs.epoch AS epoch, jobs.attempts AS attempts, jobs.max_attempts AS max_attempts, jobs.lease_owner AS lease_owner, jobs.lease_expires_at AS lease_expires_at, jobs.available_at AS available_at, jobs.run_at AS run_at, jobs.priority AS priority, jobs.deadline_at AS deadline_at, jobs.cancel_requested AS cancel_requested, jobs.external_epoch AS external_epoch, jobs.checkpoint AS checkpoint, jobs.checkpoint_epoch AS checkpoint_epoch, jobs.result_attempt_id AS result_attempt_id, jobs.error_code AS error_code, jobs.error_message AS error_message, jobs.created_at AS created_at, jobs.updated_at AS updated_at, jobs.started_at AS started_at, jobs.finished_at AS finished_at, jobs.traceparent AS traceparent, jobs.schedule_name AS schedule_name, jobs.concurrency_key AS concurrency_key, jobs.held_by AS held_by, jobs.running_since AS running_since
FROM jobs
WHERE jobs.state = 'running' AND (jobs.lease_expires_at <= ? OR jobs.deadline_at <= ?) ORDER BY jobs.lease_expires_at
 LIMIT ? OFFSET ?) AS anon_1 UNION ALL SELECT anon_2.id, anon_2.tenant, anon_2.owner, anon_2.operation_key, anon_2.fingerprint, anon_2.kind, anon_2.payload, anon_2.state, anon_2.epoch, anon_2.attempts, anon_2.max_attempts, anon_2.lease_owner, anon_2.lease_expires_at, anon_2.available_at, anon_2.run_at, anon_2.priority, anon_2.deadline_at, anon_2.cancel_requested, anon_2.external_epoch, anon_2.checkpoint, anon_2.checkpoint_epoch, anon_2.result_attempt_id, anon_2.error_code, anon_2.error_message, anon_2.created_at, anon_2.updated_at, anon_2.started_at, anon_2.finished_at, anon_2.traceparent, anon_2.schedule_name, anon_2.concurrency_key, anon_2.held_by, anon_2.running_since
FROM (SELECT jobs.id AS id, jobs.tenant AS tenant, jobs.owner AS owner, jobs.operation_key AS operation_key, jobs.fingerprint AS fingerprint, jobs.kind AS kind, jobs.payload AS payload, jobs.state AS state, jobs.epoch AS epoch, jobs.attempts AS attempts, jobs.max_attempts AS max_attempts, jobs.lease_owner AS lease_owner, jobs.lease_expires_at AS lease_expires_at, jobs.available_at AS available_at, jobs.run_at AS run_at, jobs.priority AS priority, jobs.deadline_at AS deadline_at, jobs.cancel_requested AS cancel_requested, jobs.external_epoch AS external_epoch, jobs.checkpoint AS checkpoint, jobs.checkpoint_epoch AS checkpoint_epoch, jobs.result_attempt_id AS result_attempt_id, jobs.error_code AS error_code, jobs.error_message AS error_message, jobs.created_at AS created_at, jobs.updated_at AS updated_at, jobs.started_at AS started_at, jobs.finished_at AS finished_at, jobs.traceparent AS traceparent, jobs.schedule_name AS schedule_name, jobs.concurrency_key AS concurrency_key, jobs.held_by AS held_by, jobs.running_since AS running_since
FROM jobs
WHERE jobs.state = 'queued' AND jobs.deadline_at <= ? ORDER BY jobs.available_at
 LIMIT ? OFFSET ?) AS anon_2;
UPDATE jobs SET state=?, lease_owner=?, lease_expires_at=?, available_at=?, error_code=?, error_message=?, updated_at=? WHERE jobs.id = ? AND jobs.epoch = ? AND jobs.state = 'running' AND (jobs.lease_expires_at <= ? OR jobs.deadline_at <= ?);
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, priority, tenant) VALUES (?, ?, ?, ?, (SELECT jobs.priority
FROM jobs
WHERE jobs.id = ?), (SELECT jobs.tenant
FROM jobs
WHERE jobs.id = ?));
UPDATE attempts SET ended_at=?, outcome=?, error_code=?, error_message=? WHERE attempts.job_id IN (?) AND attempts.outcome = ?;

-- operation: re-announce queued jobs (sweeper.reannounce_stale)
BEGIN IMMEDIATE;
SELECT jobs.id
FROM jobs
WHERE jobs.state = 'queued' AND jobs.available_at <= ? AND jobs.updated_at <= ? AND NOT (EXISTS (SELECT outbox.id
FROM outbox
WHERE outbox.job_id = jobs.id AND outbox.published_at IS NULL)) AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) AND jobs.held_by IS NULL ORDER BY jobs.available_at
 LIMIT ? OFFSET ?;

-- operation: cancel (operator.cancel)
BEGIN IMMEDIATE;
UPDATE jobs SET state=?, cancel_requested=?, error_code=?, error_message=?, updated_at=?, finished_at=? WHERE jobs.id = ? AND jobs.state = 'queued' RETURNING id, tenant, kind, epoch, attempts, traceparent;
DELETE FROM outbox INDEXED BY ix_outbox_job_id WHERE outbox.job_id = :b_job AND outbox.published_at IS NULL;
INSERT INTO operator_actions (job_id, action, actor, note, at) VALUES (?, ?, ?, ?, ?);
SELECT jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload, jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at, jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested, jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code, jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at, jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since
FROM jobs
WHERE jobs.id = ?;

-- operation: requeue (operator.requeue)
BEGIN IMMEDIATE;
UPDATE jobs SET state=?, attempts=?, lease_owner=?, lease_expires_at=?, available_at=?, cancel_requested=?, external_epoch=?, error_code=?, error_message=?, updated_at=?, finished_at=? WHERE jobs.id = ? AND jobs.state IN ('dead', 'failed', 'unknown') AND jobs.finished_at IS NOT NULL;
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, priority, tenant) VALUES (?, ?, ?, ?, (SELECT jobs.priority
FROM jobs
WHERE jobs.id = ?), (SELECT jobs.tenant
FROM jobs
WHERE jobs.id = ?));
INSERT INTO operator_actions (job_id, action, actor, note, at) VALUES (?, ?, ?, ?, ?);
SELECT jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload, jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at, jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested, jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code, jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at, jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since
FROM jobs
WHERE jobs.id = ?;

-- operation: resolve (operator.resolve)
BEGIN IMMEDIATE;
UPDATE jobs SET state=?, error_code=?, error_message=?, updated_at=?, finished_at=? WHERE jobs.id = ? AND jobs.state = 'unknown' AND jobs.finished_at IS NOT NULL;
INSERT INTO operator_actions (job_id, action, actor, note, at) VALUES (?, ?, ?, ?, ?);
SELECT jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload, jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at, jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested, jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code, jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at, jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since
FROM jobs
WHERE jobs.id = ?;

-- operation: prune (retention.prune)
BEGIN IMMEDIATE;
SELECT jobs.finished_at, jobs.id
FROM jobs
WHERE jobs.state IN ('cancelled', 'dead', 'failed', 'succeeded') AND jobs.finished_at IS NOT NULL AND jobs.finished_at < ? AND NOT (EXISTS (SELECT webhook_deliveries.id
FROM webhook_deliveries
WHERE webhook_deliveries.job_id = jobs.id AND webhook_deliveries.state = ?)) ORDER BY jobs.finished_at, jobs.id
 LIMIT ? OFFSET ?;
DELETE FROM jobs WHERE jobs.id IN (?, ?, ?) AND jobs.state IN ('cancelled', 'dead', 'failed', 'succeeded') AND jobs.finished_at IS NOT NULL AND jobs.finished_at < ? AND NOT (EXISTS (SELECT webhook_deliveries.id
FROM webhook_deliveries
WHERE webhook_deliveries.job_id = jobs.id AND webhook_deliveries.state = ?)) RETURNING id;
