-- The statements the postgresql driver sends, as the database receives them. Written
-- by `python -m outbox_bridge.jobstore.drivers` from the code; do not edit.
-- `(__[POSTCOMPILE_x])` is a list of values, sent with one placeholder per value.

-- name: ADVISORY_LOCK
SELECT pg_advisory_xact_lock(%(space)s, %(key)s);

-- name: CLAIM
WITH taken AS
(UPDATE jobs SET state='running'::VARCHAR, epoch=(jobs.epoch + 1::INTEGER), attempts=(jobs.attempts + 1::INTEGER), lease_owner=%(b_worker)s::VARCHAR, lease_expires_at=%(b_lease_until)s, updated_at=%(b_now)s, started_at=coalesce(jobs.started_at, %(b_now)s), held_by=%(param_3)s::VARCHAR, running_since=%(b_running_since)s WHERE jobs.id IN (__[POSTCOMPILE_b_ids]) AND (jobs.state = 'queued' AND jobs.available_at <= %(b_now)s AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) OR jobs.state = 'running' AND jobs.lease_expires_at <= %(b_now)s AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch)) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = false AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.id, jobs.epoch, jobs.attempts, jobs.kind, jobs.payload, jobs.tenant, jobs.owner, jobs.operation_key, jobs.deadline_at, jobs.lease_expires_at, jobs.checkpoint, jobs.created_at, jobs.traceparent, jobs.concurrency_key),
first_attempts AS
(INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome) SELECT fresh.attempt_id AS attempt_id, taken.id AS id, taken.epoch AS epoch, %(b_worker)s AS anon_1, %(b_now)s AS anon_2, 'running'::VARCHAR AS anon_3
FROM taken JOIN unnest(%(b_attempt_jobs)s::VARCHAR[], %(b_attempt_ids)s::VARCHAR[]) AS fresh(job_id, attempt_id) ON taken.id = fresh.job_id
WHERE taken.epoch = 1::INTEGER)
 SELECT taken.id, taken.epoch, taken.attempts, taken.kind, taken.payload, taken.tenant, taken.owner, taken.operation_key, taken.deadline_at, taken.lease_expires_at, taken.checkpoint, taken.created_at, taken.traceparent, taken.concurrency_key
FROM taken;

-- name: CLAIM_DUE
WITH taken AS
(UPDATE jobs SET state='running'::VARCHAR, epoch=(jobs.epoch + 1::INTEGER), attempts=(jobs.attempts + 1::INTEGER), lease_owner=%(b_worker)s::VARCHAR, lease_expires_at=%(b_lease_until)s, updated_at=%(b_now)s, started_at=coalesce(jobs.started_at, %(b_now)s), held_by=%(param_3)s::VARCHAR, running_since=%(b_running_since)s WHERE jobs.id IN (__[POSTCOMPILE_b_ids]) AND (jobs.state = 'queued' AND jobs.available_at <= %(b_now)s AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) OR jobs.state = 'running' AND jobs.lease_expires_at <= %(b_now)s AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch)) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = false AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.id, jobs.epoch, jobs.attempts, jobs.kind, jobs.payload, jobs.tenant, jobs.owner, jobs.operation_key, jobs.deadline_at, jobs.lease_expires_at, jobs.checkpoint, jobs.created_at, jobs.traceparent, jobs.concurrency_key),
first_attempts AS
(INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome) SELECT fresh.attempt_id AS attempt_id, taken.id AS id, taken.epoch AS epoch, %(b_worker)s AS anon_1, %(b_now)s AS anon_2, 'running'::VARCHAR AS anon_3
FROM taken JOIN unnest(%(b_attempt_jobs)s::VARCHAR[], %(b_attempt_ids)s::VARCHAR[]) AS fresh(job_id, attempt_id) ON taken.id = fresh.job_id
WHERE taken.epoch = 1::INTEGER),
dropped AS
(DELETE FROM outbox WHERE outbox.job_id IN (SELECT taken.id
FROM taken) AND outbox.published_at IS NULL)
 SELECT taken.id, taken.epoch, taken.attempts, taken.kind, taken.payload, taken.tenant, taken.owner, taken.operation_key, taken.deadline_at, taken.lease_expires_at, taken.checkpoint, taken.created_at, taken.traceparent, taken.concurrency_key
FROM taken;

-- name: COMPLETE_MANY
WITH finishing AS
(SELECT finishing.job_id AS job_id, finishing.epoch AS epoch, finishing.attempt_id AS attempt_id, finishing.output AS output
FROM unnest(%(b_jobs)s::VARCHAR[], %(b_epochs)s::INTEGER[], %(b_attempts)s::VARCHAR[], %(b_outputs)s::TEXT[]) AS finishing(job_id, epoch, attempt_id, output)),
completed AS
(UPDATE jobs SET state=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled'::VARCHAR ELSE 'succeeded'::VARCHAR END, lease_owner=%(param_5)s::VARCHAR, lease_expires_at=%(param_6)s, result_attempt_id=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN NULL ELSE (SELECT attempts.id
FROM attempts
WHERE attempts.job_id = jobs.id AND attempts.epoch = jobs.epoch) END, error_code=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled'::VARCHAR ELSE NULL END, error_message=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled before the result was committed'::VARCHAR ELSE NULL END, updated_at=%(b_now)s, finished_at=%(b_now)s FROM finishing WHERE jobs.id = finishing.job_id AND jobs.epoch = finishing.epoch AND jobs.state = 'running' AND jobs.lease_expires_at > %(b_now)s AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.state, jobs.id, jobs.tenant, jobs.kind, jobs.epoch, jobs.attempts, jobs.traceparent),
ended AS
(UPDATE attempts SET ended_at=%(b_now)s, outcome=completed.state, output=finishing.output, error_code=%(param_1)s::VARCHAR, error_message=%(param_2)s::VARCHAR FROM finishing, completed WHERE attempts.id = finishing.attempt_id AND completed.id = finishing.job_id)
 SELECT completed.state, completed.id, completed.tenant, completed.kind, completed.epoch, completed.attempts, completed.traceparent
FROM completed;

-- name: DUE_AT_ONCE
WITH due AS (
    SELECT id, job_id, tenant, priority FROM outbox
    WHERE published_at IS NULL AND available_at <= %(b_now)s
      AND id NOT IN (SELECT unnest(CAST(%(b_exclude)s AS bigint[])))
    ORDER BY priority, id
    LIMIT %(b_walk)s
), walk AS (
    SELECT count(*) <= %(b_limit)s
        OR (SELECT min(tenant) FROM outbox WHERE published_at IS NULL)
            = (SELECT max(tenant) FROM outbox WHERE published_at IS NULL) AS serves
    FROM due
), chosen AS (
    SELECT id, job_id, priority, tenant FROM due WHERE (SELECT serves FROM walk) ORDER BY priority, id
    LIMIT %(b_limit)s
)
SELECT walk.serves,
    (SELECT min(available_at) FROM outbox WHERE published_at IS NULL AND available_at > %(b_now)s) AS next_due,
    chosen.id, chosen.job_id, chosen.priority, chosen.tenant,
    (SELECT traceparent FROM jobs WHERE jobs.id = chosen.job_id) AS traceparent
FROM walk LEFT JOIN chosen ON true
ORDER BY chosen.priority, chosen.id;

-- name: INSERT_JOBS
WITH inserted AS
(INSERT INTO jobs (id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) SELECT accepting.id AS id, accepting.tenant AS tenant, accepting.owner AS owner, accepting.operation_key AS operation_key, accepting.fingerprint AS fingerprint, accepting.kind AS kind, accepting.payload AS payload, accepting.state AS state, accepting.epoch AS epoch, accepting.attempts AS attempts, accepting.max_attempts AS max_attempts, accepting.lease_owner AS lease_owner, accepting.lease_expires_at AS lease_expires_at, accepting.available_at AS available_at, accepting.run_at AS run_at, accepting.priority AS priority, accepting.deadline_at AS deadline_at, accepting.cancel_requested AS cancel_requested, accepting.external_epoch AS external_epoch, accepting.checkpoint AS checkpoint, accepting.checkpoint_epoch AS checkpoint_epoch, accepting.result_attempt_id AS result_attempt_id, accepting.error_code AS error_code, accepting.error_message AS error_message, accepting.created_at AS created_at, accepting.updated_at AS updated_at, accepting.started_at AS started_at, accepting.finished_at AS finished_at, accepting.traceparent AS traceparent, accepting.schedule_name AS schedule_name, accepting.concurrency_key AS concurrency_key, accepting.held_by AS held_by, accepting.running_since AS running_since
FROM unnest(%(b_id)s::VARCHAR[], %(b_tenant)s::VARCHAR[], %(b_owner)s::VARCHAR[], %(b_operation_key)s::VARCHAR[], %(b_fingerprint)s::VARCHAR[], %(b_kind)s::VARCHAR[], %(b_payload)s::VARCHAR[], %(b_state)s::VARCHAR[], %(b_epoch)s::INTEGER[], %(b_attempts)s::INTEGER[], %(b_max_attempts)s::INTEGER[], %(b_lease_owner)s::VARCHAR[], %(b_lease_expires_at)s::FLOAT[], %(b_available_at)s::FLOAT[], %(b_run_at)s::FLOAT[], %(b_priority)s::INTEGER[], %(b_deadline_at)s::FLOAT[], %(b_cancel_requested)s::BOOLEAN[], %(b_external_epoch)s::INTEGER[], %(b_checkpoint)s::VARCHAR[], %(b_checkpoint_epoch)s::INTEGER[], %(b_result_attempt_id)s::VARCHAR[], %(b_error_code)s::VARCHAR[], %(b_error_message)s::VARCHAR[], %(b_created_at)s::FLOAT[], %(b_updated_at)s::FLOAT[], %(b_started_at)s::FLOAT[], %(b_finished_at)s::FLOAT[], %(b_traceparent)s::VARCHAR[], %(b_schedule_name)s::VARCHAR[], %(b_concurrency_key)s::VARCHAR[], %(b_held_by)s::VARCHAR[], %(b_running_since)s::FLOAT[]) AS accepting(id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) ON CONFLICT (tenant, operation_key) DO NOTHING RETURNING jobs.id, jobs.created_at, jobs.available_at, jobs.tenant, jobs.priority),
announced AS
(INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority) SELECT inserted.id AS id, inserted.created_at AS created_at, inserted.available_at AS available_at, 0::INTEGER AS anon_1, inserted.tenant AS tenant, inserted.priority AS priority
FROM inserted)
 SELECT inserted.id
FROM inserted;

-- name: MARK_PUBLISHED
UPDATE outbox SET published_at=%(b_now)s, publish_attempts=(outbox.publish_attempts + 1::INTEGER) WHERE outbox.id = ANY (%(b_ids)s::INTEGER[]) AND outbox.published_at IS NULL AND (EXISTS (SELECT *
FROM relay_role
WHERE relay_role.name = 'relay'::VARCHAR AND relay_role.token = %(b_token)s::VARCHAR AND relay_role.expires_at > %(b_now)s)) RETURNING outbox.job_id, (SELECT jobs.tenant
FROM jobs
WHERE jobs.id = outbox.job_id) AS anon_1, (SELECT jobs.kind
FROM jobs
WHERE jobs.id = outbox.job_id) AS anon_2, (SELECT jobs.traceparent
FROM jobs
WHERE jobs.id = outbox.job_id) AS anon_3;

-- name: ROLE_LOCK
SELECT pg_try_advisory_lock(%(space)s, hashtext(current_schema()));

-- name: ROLE_UNLOCK
SELECT pg_advisory_unlock(%(space)s, hashtext(current_schema()));

-- name: UPKEEP
SELECT relname, maintainable AND n_mod_since_analyze > GREATEST(%(min_changed)s, %(fraction)s * n_live_tup) AND COALESCE(GREATEST(last_analyze, last_autoanalyze), '-infinity') < now() - make_interval(secs => %(stale_after)s), maintainable AND n_dead_tup >= %(min_dead)s AND COALESCE(GREATEST(last_vacuum, last_autovacuum), '-infinity') < now() - make_interval(secs => %(worn_after)s), maintainable FROM (SELECT *, pg_has_role((SELECT relowner FROM pg_class WHERE oid = relid), 'USAGE') OR pg_has_role((SELECT datdba FROM pg_database WHERE datname = current_database()), 'USAGE') OR CASE WHEN current_setting('server_version_num')::int >= 170000 THEN has_table_privilege(relid, 'MAINTAIN') ELSE false END AS maintainable FROM pg_stat_user_tables WHERE relid = ANY(CAST(%(tables)s AS regclass[]))) AS tables;

-- name: _ACCEPTING
unnest(%(b_id)s::VARCHAR[], %(b_tenant)s::VARCHAR[], %(b_owner)s::VARCHAR[], %(b_operation_key)s::VARCHAR[], %(b_fingerprint)s::VARCHAR[], %(b_kind)s::VARCHAR[], %(b_payload)s::VARCHAR[], %(b_state)s::VARCHAR[], %(b_epoch)s::INTEGER[], %(b_attempts)s::INTEGER[], %(b_max_attempts)s::INTEGER[], %(b_lease_owner)s::VARCHAR[], %(b_lease_expires_at)s::FLOAT[], %(b_available_at)s::FLOAT[], %(b_run_at)s::FLOAT[], %(b_priority)s::INTEGER[], %(b_deadline_at)s::FLOAT[], %(b_cancel_requested)s::BOOLEAN[], %(b_external_epoch)s::INTEGER[], %(b_checkpoint)s::VARCHAR[], %(b_checkpoint_epoch)s::INTEGER[], %(b_result_attempt_id)s::VARCHAR[], %(b_error_code)s::VARCHAR[], %(b_error_message)s::VARCHAR[], %(b_created_at)s::FLOAT[], %(b_updated_at)s::FLOAT[], %(b_started_at)s::FLOAT[], %(b_finished_at)s::FLOAT[], %(b_traceparent)s::VARCHAR[], %(b_schedule_name)s::VARCHAR[], %(b_concurrency_key)s::VARCHAR[], %(b_held_by)s::VARCHAR[], %(b_running_since)s::FLOAT[]);

-- name: _ANNOUNCED
WITH inserted AS
(INSERT INTO jobs (id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) SELECT accepting.id AS id, accepting.tenant AS tenant, accepting.owner AS owner, accepting.operation_key AS operation_key, accepting.fingerprint AS fingerprint, accepting.kind AS kind, accepting.payload AS payload, accepting.state AS state, accepting.epoch AS epoch, accepting.attempts AS attempts, accepting.max_attempts AS max_attempts, accepting.lease_owner AS lease_owner, accepting.lease_expires_at AS lease_expires_at, accepting.available_at AS available_at, accepting.run_at AS run_at, accepting.priority AS priority, accepting.deadline_at AS deadline_at, accepting.cancel_requested AS cancel_requested, accepting.external_epoch AS external_epoch, accepting.checkpoint AS checkpoint, accepting.checkpoint_epoch AS checkpoint_epoch, accepting.result_attempt_id AS result_attempt_id, accepting.error_code AS error_code, accepting.error_message AS error_message, accepting.created_at AS created_at, accepting.updated_at AS updated_at, accepting.started_at AS started_at, accepting.finished_at AS finished_at, accepting.traceparent AS traceparent, accepting.schedule_name AS schedule_name, accepting.concurrency_key AS concurrency_key, accepting.held_by AS held_by, accepting.running_since AS running_since
FROM unnest(%(b_id)s::VARCHAR[], %(b_tenant)s::VARCHAR[], %(b_owner)s::VARCHAR[], %(b_operation_key)s::VARCHAR[], %(b_fingerprint)s::VARCHAR[], %(b_kind)s::VARCHAR[], %(b_payload)s::VARCHAR[], %(b_state)s::VARCHAR[], %(b_epoch)s::INTEGER[], %(b_attempts)s::INTEGER[], %(b_max_attempts)s::INTEGER[], %(b_lease_owner)s::VARCHAR[], %(b_lease_expires_at)s::FLOAT[], %(b_available_at)s::FLOAT[], %(b_run_at)s::FLOAT[], %(b_priority)s::INTEGER[], %(b_deadline_at)s::FLOAT[], %(b_cancel_requested)s::BOOLEAN[], %(b_external_epoch)s::INTEGER[], %(b_checkpoint)s::VARCHAR[], %(b_checkpoint_epoch)s::INTEGER[], %(b_result_attempt_id)s::VARCHAR[], %(b_error_code)s::VARCHAR[], %(b_error_message)s::VARCHAR[], %(b_created_at)s::FLOAT[], %(b_updated_at)s::FLOAT[], %(b_started_at)s::FLOAT[], %(b_finished_at)s::FLOAT[], %(b_traceparent)s::VARCHAR[], %(b_schedule_name)s::VARCHAR[], %(b_concurrency_key)s::VARCHAR[], %(b_held_by)s::VARCHAR[], %(b_running_since)s::FLOAT[]) AS accepting(id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) ON CONFLICT (tenant, operation_key) DO NOTHING RETURNING jobs.id, jobs.created_at, jobs.available_at, jobs.tenant, jobs.priority)
 INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority) SELECT inserted.id, inserted.created_at, inserted.available_at, 0::INTEGER AS anon_1, inserted.tenant, inserted.priority
FROM inserted;

-- name: _ATTEMPT_IDS
unnest(%(b_attempt_jobs)s::VARCHAR[], %(b_attempt_ids)s::VARCHAR[]);

-- name: _COMPLETED
WITH finishing AS
(SELECT finishing.job_id AS job_id, finishing.epoch AS epoch, finishing.attempt_id AS attempt_id, finishing.output AS output
FROM unnest(%(b_jobs)s::VARCHAR[], %(b_epochs)s::INTEGER[], %(b_attempts)s::VARCHAR[], %(b_outputs)s::TEXT[]) AS finishing(job_id, epoch, attempt_id, output))
 UPDATE jobs SET state=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled'::VARCHAR ELSE 'succeeded'::VARCHAR END, lease_owner=%(param_3)s::VARCHAR, lease_expires_at=%(param_4)s, result_attempt_id=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN NULL ELSE (SELECT attempts.id
FROM attempts
WHERE attempts.job_id = jobs.id AND attempts.epoch = jobs.epoch) END, error_code=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled'::VARCHAR ELSE NULL END, error_message=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled before the result was committed'::VARCHAR ELSE NULL END, updated_at=%(b_now)s, finished_at=%(b_now)s FROM finishing WHERE jobs.id = finishing.job_id AND jobs.epoch = finishing.epoch AND jobs.state = 'running' AND jobs.lease_expires_at > %(b_now)s AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.state, jobs.id, jobs.tenant, jobs.kind, jobs.epoch, jobs.attempts, jobs.traceparent;

-- name: _ENDED
WITH finishing AS
(SELECT finishing.job_id AS job_id, finishing.epoch AS epoch, finishing.attempt_id AS attempt_id, finishing.output AS output
FROM unnest(%(b_jobs)s::VARCHAR[], %(b_epochs)s::INTEGER[], %(b_attempts)s::VARCHAR[], %(b_outputs)s::TEXT[]) AS finishing(job_id, epoch, attempt_id, output)),
completed AS
(UPDATE jobs SET state=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled'::VARCHAR ELSE 'succeeded'::VARCHAR END, lease_owner=%(param_5)s::VARCHAR, lease_expires_at=%(param_6)s, result_attempt_id=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN NULL ELSE (SELECT attempts.id
FROM attempts
WHERE attempts.job_id = jobs.id AND attempts.epoch = jobs.epoch) END, error_code=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled'::VARCHAR ELSE NULL END, error_message=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN 'cancelled before the result was committed'::VARCHAR ELSE NULL END, updated_at=%(b_now)s, finished_at=%(b_now)s FROM finishing WHERE jobs.id = finishing.job_id AND jobs.epoch = finishing.epoch AND jobs.state = 'running' AND jobs.lease_expires_at > %(b_now)s AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.state, jobs.id, jobs.tenant, jobs.kind, jobs.epoch, jobs.attempts, jobs.traceparent)
 UPDATE attempts SET ended_at=%(b_now)s, outcome=completed.state, output=finishing.output, error_code=%(param_1)s::VARCHAR, error_message=%(param_2)s::VARCHAR FROM finishing, completed WHERE attempts.id = finishing.attempt_id AND completed.id = finishing.job_id;

-- name: _FINISHING
SELECT finishing.job_id, finishing.epoch, finishing.attempt_id, finishing.output
FROM unnest(%(b_jobs)s::VARCHAR[], %(b_epochs)s::INTEGER[], %(b_attempts)s::VARCHAR[], %(b_outputs)s::TEXT[]) AS finishing(job_id, epoch, attempt_id, output);

-- name: _INSERTED
INSERT INTO jobs (id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) SELECT accepting.id, accepting.tenant, accepting.owner, accepting.operation_key, accepting.fingerprint, accepting.kind, accepting.payload, accepting.state, accepting.epoch, accepting.attempts, accepting.max_attempts, accepting.lease_owner, accepting.lease_expires_at, accepting.available_at, accepting.run_at, accepting.priority, accepting.deadline_at, accepting.cancel_requested, accepting.external_epoch, accepting.checkpoint, accepting.checkpoint_epoch, accepting.result_attempt_id, accepting.error_code, accepting.error_message, accepting.created_at, accepting.updated_at, accepting.started_at, accepting.finished_at, accepting.traceparent, accepting.schedule_name, accepting.concurrency_key, accepting.held_by, accepting.running_since
FROM unnest(%(b_id)s::VARCHAR[], %(b_tenant)s::VARCHAR[], %(b_owner)s::VARCHAR[], %(b_operation_key)s::VARCHAR[], %(b_fingerprint)s::VARCHAR[], %(b_kind)s::VARCHAR[], %(b_payload)s::VARCHAR[], %(b_state)s::VARCHAR[], %(b_epoch)s::INTEGER[], %(b_attempts)s::INTEGER[], %(b_max_attempts)s::INTEGER[], %(b_lease_owner)s::VARCHAR[], %(b_lease_expires_at)s::FLOAT[], %(b_available_at)s::FLOAT[], %(b_run_at)s::FLOAT[], %(b_priority)s::INTEGER[], %(b_deadline_at)s::FLOAT[], %(b_cancel_requested)s::BOOLEAN[], %(b_external_epoch)s::INTEGER[], %(b_checkpoint)s::VARCHAR[], %(b_checkpoint_epoch)s::INTEGER[], %(b_result_attempt_id)s::VARCHAR[], %(b_error_code)s::VARCHAR[], %(b_error_message)s::VARCHAR[], %(b_created_at)s::FLOAT[], %(b_updated_at)s::FLOAT[], %(b_started_at)s::FLOAT[], %(b_finished_at)s::FLOAT[], %(b_traceparent)s::VARCHAR[], %(b_schedule_name)s::VARCHAR[], %(b_concurrency_key)s::VARCHAR[], %(b_held_by)s::VARCHAR[], %(b_running_since)s::FLOAT[]) AS accepting(id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) ON CONFLICT (tenant, operation_key) DO NOTHING RETURNING jobs.id, jobs.created_at, jobs.available_at, jobs.tenant, jobs.priority;

-- name: _NOW
%(b_now)s;
