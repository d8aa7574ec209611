-- What each store operation sends to postgresql, recorded as the database receives it from one
-- typical call on an empty store (`jobstore/drivers/recording.py`). Written by
-- `python -m outbox_bridge.jobstore.drivers --record DATABASE_URL`; do not edit.
-- Parameters are sent apart from the text; `executemany` runs a statement once per row.

-- operation: accept a batch (intake.accept_committed)
WITH inserted AS
(INSERT INTO jobs (id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) SELECT accepting.id AS id, accepting.tenant AS tenant, accepting.owner AS owner, accepting.operation_key AS operation_key, accepting.fingerprint AS fingerprint, accepting.kind AS kind, accepting.payload AS payload, accepting.state AS state, accepting.epoch AS epoch, accepting.attempts AS attempts, accepting.max_attempts AS max_attempts, accepting.lease_owner AS lease_owner, accepting.lease_expires_at AS lease_expires_at, accepting.available_at AS available_at, accepting.run_at AS run_at, accepting.priority AS priority, accepting.deadline_at AS deadline_at, accepting.cancel_requested AS cancel_requested, accepting.external_epoch AS external_epoch, accepting.checkpoint AS checkpoint, accepting.checkpoint_epoch AS checkpoint_epoch, accepting.result_attempt_id AS result_attempt_id, accepting.error_code AS error_code, accepting.error_message AS error_message, accepting.created_at AS created_at, accepting.updated_at AS updated_at, accepting.started_at AS started_at, accepting.finished_at AS finished_at, accepting.traceparent AS traceparent, accepting.schedule_name AS schedule_name, accepting.concurrency_key AS concurrency_key, accepting.held_by AS held_by, accepting.running_since AS running_since
FROM unnest(%(b_id)s::VARCHAR[], %(b_tenant)s::VARCHAR[], %(b_owner)s::VARCHAR[], %(b_operation_key)s::VARCHAR[], %(b_fingerprint)s::VARCHAR[], %(b_kind)s::VARCHAR[], %(b_payload)s::VARCHAR[], %(b_state)s::VARCHAR[], %(b_epoch)s::INTEGER[], %(b_attempts)s::INTEGER[], %(b_max_attempts)s::INTEGER[], %(b_lease_owner)s::VARCHAR[], %(b_lease_expires_at)s::FLOAT[], %(b_available_at)s::FLOAT[], %(b_run_at)s::FLOAT[], %(b_priority)s::INTEGER[], %(b_deadline_at)s::FLOAT[], %(b_cancel_requested)s::BOOLEAN[], %(b_external_epoch)s::INTEGER[], %(b_checkpoint)s::VARCHAR[], %(b_checkpoint_epoch)s::INTEGER[], %(b_result_attempt_id)s::VARCHAR[], %(b_error_code)s::VARCHAR[], %(b_error_message)s::VARCHAR[], %(b_created_at)s::FLOAT[], %(b_updated_at)s::FLOAT[], %(b_started_at)s::FLOAT[], %(b_finished_at)s::FLOAT[], %(b_traceparent)s::VARCHAR[], %(b_schedule_name)s::VARCHAR[], %(b_concurrency_key)s::VARCHAR[], %(b_held_by)s::VARCHAR[], %(b_running_since)s::FLOAT[]) AS accepting(id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts, lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested, external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since) ON CONFLICT (tenant, operation_key) DO NOTHING RETURNING jobs.id, jobs.created_at, jobs.available_at, jobs.tenant, jobs.priority),
announced AS
(INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority) SELECT inserted.id AS id, inserted.created_at AS created_at, inserted.available_at AS available_at, %(param_1)s::INTEGER AS anon_1, inserted.tenant AS tenant, inserted.priority AS priority
FROM inserted)
 SELECT inserted.id
FROM inserted;

-- operation: take the relay role (relayrole.take)
INSERT INTO relay_role (name, token, holder, expires_at) VALUES (%(name)s, %(token)s, %(holder)s, %(until)s)
ON CONFLICT (name) DO UPDATE
SET token = excluded.token, holder = excluded.holder, expires_at = excluded.expires_at
WHERE relay_role.token = excluded.token OR relay_role.token = %(gone)s OR relay_role.expires_at <= %(now)s
RETURNING token;

-- operation: read due outbox rows (relayrole.read)
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

-- operation: mark published (relayrole.mark_published)
UPDATE outbox SET published_at=%(b_now)s, publish_attempts=(outbox.publish_attempts + %(publish_attempts_1)s::INTEGER) WHERE outbox.id = ANY (%(b_ids)s::INTEGER[]) AND outbox.published_at IS NULL AND (EXISTS (SELECT *
FROM relay_role
WHERE relay_role.name = %(name_1)s::VARCHAR AND relay_role.token = %(b_token)s::VARCHAR AND relay_role.expires_at > %(b_now)s)) RETURNING outbox.job_id, (SELECT jobs.tenant
FROM jobs
WHERE jobs.id = outbox.job_id) AS anon_1, (SELECT jobs.kind
FROM jobs
WHERE jobs.id = outbox.job_id) AS anon_2, (SELECT jobs.traceparent
FROM jobs
WHERE jobs.id = outbox.job_id) AS anon_3;

-- operation: claim by ids (claiming.claim_many)
WITH taken AS
(UPDATE jobs SET state=%(param_2)s::VARCHAR, epoch=(jobs.epoch + %(epoch_1)s::INTEGER), attempts=(jobs.attempts + %(attempts_1)s::INTEGER), lease_owner=%(b_worker)s::VARCHAR, lease_expires_at=%(b_lease_until)s, updated_at=%(b_now)s, started_at=coalesce(jobs.started_at, %(b_now)s), held_by=%(param_3)s::VARCHAR, running_since=%(b_running_since)s WHERE jobs.id IN (%(b_ids_1)s::VARCHAR, %(b_ids_2)s::VARCHAR, %(b_ids_3)s::VARCHAR) AND (jobs.state = 'running' OR jobs.concurrency_key IS NULL) AND (jobs.state = 'queued' AND jobs.available_at <= %(b_now)s AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) OR jobs.state = 'running' AND jobs.lease_expires_at <= %(b_now)s AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch)) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = false AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.id, jobs.epoch, jobs.attempts, jobs.kind, jobs.payload, jobs.tenant, jobs.owner, jobs.operation_key, jobs.deadline_at, jobs.lease_expires_at, jobs.checkpoint, jobs.created_at, jobs.traceparent, jobs.concurrency_key),
first_attempts AS
(INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome) SELECT fresh.attempt_id AS attempt_id, taken.id AS id, taken.epoch AS epoch, %(b_worker)s AS anon_1, %(b_now)s AS anon_2, %(param_1)s::VARCHAR AS anon_3
FROM taken JOIN unnest(%(b_attempt_jobs)s::VARCHAR[], %(b_attempt_ids)s::VARCHAR[]) AS fresh(job_id, attempt_id) ON taken.id = fresh.job_id
WHERE taken.epoch = %(epoch_2)s::INTEGER)
 SELECT taken.id, taken.epoch, taken.attempts, taken.kind, taken.payload, taken.tenant, taken.owner, taken.operation_key, taken.deadline_at, taken.lease_expires_at, taken.checkpoint, taken.created_at, taken.traceparent, taken.concurrency_key
FROM taken;

-- operation: claim due (claiming.claim_due)
SELECT jobs.id
FROM jobs
WHERE jobs.state = 'running' AND jobs.lease_expires_at <= %(b_now)s AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = false AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) ORDER BY jobs.lease_expires_at
 LIMIT %(b_limit)s FOR UPDATE SKIP LOCKED;
SELECT jobs.id
FROM jobs
WHERE jobs.state = 'queued' AND jobs.available_at + %(available_at_1)s::INTEGER <= %(b_now)s AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) AND (jobs.tenant NOT IN (NULL) OR (1 = 1)) AND (jobs.kind NOT IN (NULL) OR (1 = 1)) AND (jobs.concurrency_key IS NULL OR (SELECT count(*) AS count_1
FROM jobs AS running_with_key
WHERE running_with_key.tenant = jobs.tenant AND running_with_key.concurrency_key = jobs.concurrency_key AND running_with_key.state = 'running') < %(b_key_max)s::INTEGER) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = false AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) ORDER BY jobs.priority, jobs.available_at
 LIMIT %(b_limit)s FOR UPDATE SKIP LOCKED;
SELECT (SELECT min(jobs.tenant) AS min_1
FROM jobs
WHERE jobs.state = 'queued') AS anon_1, (SELECT max(jobs.tenant) AS max_1
FROM jobs
WHERE jobs.state = 'queued') AS anon_2;
WITH taken AS
(UPDATE jobs SET state=%(param_2)s::VARCHAR, epoch=(jobs.epoch + %(epoch_1)s::INTEGER), attempts=(jobs.attempts + %(attempts_1)s::INTEGER), lease_owner=%(b_worker)s::VARCHAR, lease_expires_at=%(b_lease_until)s, updated_at=%(b_now)s, started_at=coalesce(jobs.started_at, %(b_now)s), held_by=%(param_3)s::VARCHAR, running_since=%(b_running_since)s WHERE jobs.id IN (%(b_ids_1)s::VARCHAR) AND (jobs.state = 'running' OR jobs.concurrency_key IS NULL) AND (jobs.state = 'queued' AND jobs.available_at <= %(b_now)s AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) OR jobs.state = 'running' AND jobs.lease_expires_at <= %(b_now)s AND (jobs.external_epoch IS NULL OR jobs.external_epoch != jobs.epoch)) AND jobs.attempts < jobs.max_attempts AND jobs.cancel_requested = false AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.id, jobs.epoch, jobs.attempts, jobs.kind, jobs.payload, jobs.tenant, jobs.owner, jobs.operation_key, jobs.deadline_at, jobs.lease_expires_at, jobs.checkpoint, jobs.created_at, jobs.traceparent, jobs.concurrency_key),
first_attempts AS
(INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome) SELECT fresh.attempt_id AS attempt_id, taken.id AS id, taken.epoch AS epoch, %(b_worker)s AS anon_1, %(b_now)s AS anon_2, %(param_1)s::VARCHAR AS anon_3
FROM taken JOIN unnest(%(b_attempt_jobs)s::VARCHAR[], %(b_attempt_ids)s::VARCHAR[]) AS fresh(job_id, attempt_id) ON taken.id = fresh.job_id
WHERE taken.epoch = %(epoch_2)s::INTEGER),
dropped AS
(DELETE FROM outbox WHERE outbox.job_id IN (SELECT taken.id
FROM taken) AND outbox.published_at IS NULL)
 SELECT taken.id, taken.epoch, taken.attempts, taken.kind, taken.payload, taken.tenant, taken.owner, taken.operation_key, taken.deadline_at, taken.lease_expires_at, taken.checkpoint, taken.created_at, taken.traceparent, taken.concurrency_key
FROM taken;

-- operation: renew a lease (fenced.renew_lease)
UPDATE jobs SET lease_expires_at=%(b_lease_until)s, updated_at=%(b_now)s WHERE jobs.id = %(b_id)s::VARCHAR AND jobs.epoch = %(b_epoch)s::INTEGER AND jobs.state = 'running' AND jobs.lease_expires_at > %(b_now)s AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.cancel_requested;

-- operation: complete a round (fenced.complete_many)
WITH finishing AS
(SELECT finishing.job_id AS job_id, finishing.epoch AS epoch, finishing.attempt_id AS attempt_id, finishing.output AS output
FROM unnest(%(b_jobs)s::VARCHAR[], %(b_epochs)s::INTEGER[], %(b_attempts)s::VARCHAR[], %(b_outputs)s::TEXT[]) AS finishing(job_id, epoch, attempt_id, output)),
completed AS
(UPDATE jobs SET state=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN %(param_3)s::VARCHAR ELSE %(param_4)s::VARCHAR END, lease_owner=%(param_5)s::VARCHAR, lease_expires_at=%(param_6)s, result_attempt_id=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN NULL ELSE (SELECT attempts.id
FROM attempts
WHERE attempts.job_id = jobs.id AND attempts.epoch = jobs.epoch) END, error_code=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN %(param_7)s::VARCHAR ELSE NULL END, error_message=CASE WHEN (jobs.cancel_requested = true AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)) THEN %(param_8)s::VARCHAR ELSE NULL END, updated_at=%(b_now)s, finished_at=%(b_now)s FROM finishing WHERE jobs.id = finishing.job_id AND jobs.epoch = finishing.epoch AND jobs.state = 'running' AND jobs.lease_expires_at > %(b_now)s AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) RETURNING jobs.state, jobs.id, jobs.tenant, jobs.kind, jobs.epoch, jobs.attempts, jobs.traceparent),
ended AS
(UPDATE attempts SET ended_at=%(b_now)s, outcome=completed.state, output=finishing.output, error_code=%(param_1)s::VARCHAR, error_message=%(param_2)s::VARCHAR FROM finishing, completed WHERE attempts.id = finishing.attempt_id AND completed.id = finishing.job_id)
 SELECT completed.state, completed.id, completed.tenant, completed.kind, completed.epoch, completed.attempts, completed.traceparent
FROM completed;

-- operation: fail an attempt (fenced.fail)
SELECT jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload, jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at, jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested, jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code, jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at, jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since
FROM jobs
WHERE jobs.id = %(b_id)s::VARCHAR AND jobs.epoch = %(b_epoch)s::INTEGER AND jobs.state = 'running' AND jobs.lease_expires_at > %(b_now)s AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(b_now)s) FOR UPDATE;
UPDATE jobs SET state=%(state)s::VARCHAR, lease_owner=%(lease_owner)s::VARCHAR, lease_expires_at=%(lease_expires_at)s, error_code=%(error_code)s::VARCHAR, error_message=%(error_message)s::VARCHAR, updated_at=%(updated_at)s, finished_at=%(finished_at)s WHERE jobs.id = %(id_1)s::VARCHAR AND jobs.epoch = %(epoch_1)s::INTEGER AND jobs.state = 'running' AND jobs.lease_expires_at > %(lease_expires_at_1)s AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(deadline_at_1)s);
UPDATE attempts SET ended_at=%(b_now)s, outcome=%(b_outcome)s::VARCHAR, output=%(b_output)s::VARCHAR, error_code=%(b_code)s::VARCHAR, error_message=%(b_message)s::VARCHAR WHERE attempts.id = %(b_attempt)s::VARCHAR;

-- operation: release a job (fenced.release)
UPDATE jobs SET state=CASE WHEN (jobs.cancel_requested = true) THEN %(param_1)s::VARCHAR ELSE %(param_2)s::VARCHAR END, attempts=(jobs.attempts - %(attempts_1)s::INTEGER), lease_owner=%(lease_owner)s::VARCHAR, lease_expires_at=%(lease_expires_at)s, available_at=%(available_at)s, error_code=CASE WHEN (jobs.cancel_requested = true) THEN %(param_3)s::VARCHAR ELSE jobs.error_code END, error_message=CASE WHEN (jobs.cancel_requested = true) THEN %(param_4)s::VARCHAR ELSE jobs.error_message END, updated_at=%(updated_at)s, finished_at=CASE WHEN (jobs.cancel_requested = true) THEN %(param_5)s ELSE NULL END WHERE jobs.id = %(id_1)s::VARCHAR AND jobs.epoch = %(epoch_1)s::INTEGER AND jobs.state = 'running' AND jobs.lease_expires_at > %(lease_expires_at_1)s AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(deadline_at_1)s) AND (jobs.external_epoch IS NULL OR jobs.external_epoch != %(external_epoch_1)s::INTEGER) RETURNING jobs.state, jobs.id, jobs.tenant, jobs.kind, jobs.epoch, jobs.attempts, jobs.traceparent;
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, priority, tenant) VALUES (%(job_id)s::VARCHAR, %(created_at)s, %(available_at)s, %(publish_attempts)s::INTEGER, (SELECT jobs.priority
FROM jobs
WHERE jobs.id = %(job_id)s::VARCHAR), (SELECT jobs.tenant
FROM jobs
WHERE jobs.id = %(job_id)s::VARCHAR)) RETURNING outbox.id;
UPDATE attempts SET ended_at=%(b_now)s, outcome=%(b_outcome)s::VARCHAR, output=%(b_output)s::VARCHAR, error_code=%(b_code)s::VARCHAR, error_message=%(b_message)s::VARCHAR WHERE attempts.id = %(b_attempt)s::VARCHAR;

-- operation: sweep expired leases (sweeper.sweep_expired)
SELECT anon_1.id, anon_1.tenant, anon_1.owner, anon_1.operation_key, anon_1.fingerprint, anon_1.kind, anon_1.payload, anon_1.state, anon_1.epoch, anon_1.attempts, anon_1.max_attempts, anon_1.lease_owner, anon_1.lease_expires_at, anon_1.available_at, anon_1.run_at, anon_1.priority, anon_1.deadline_at, anon_1.cancel_requested, anon_1.external_epoch, anon_1.checkpoint, anon_1.checkpoint_epoch, anon_1.result_attempt_id, anon_1.error_code, anon_1.error_message, anon_1.created_at, anon_1.updated_at, anon_1.started_at, anon_1.finished_at, anon_1.traceparent, anon_1.schedule_name, anon_1.concurrency_key, anon_1.held_by, anon_1.running_since
FROM (SELECT jobs.id AS id, jobs.tenant AS tenant, jobs.owner AS owner, jobs.operation_key AS operation_key, jobs.fingerprint AS fingerprint, jobs.kind AS kind, jobs.payload AS payload, jobs.state AS state, jobs.epoch AS epoch, jobs.attempts AS attempts, jobs.max_attempts AS max_attempts, jobs.lease_owner AS lease_owner, jobs.lease_expires_at AS lease_expires_at, jobs.available_at AS available_at, jobs.run_at AS run_at, jobs.priority AS priority, jobs.deadline_at AS deadline_at, jobs.cancel_requested AS cancel_requested, jobs.external_epoch AS external_epoch, jobs.checkpoint AS checkpoint, jobs.checkpoint_epoch AS checkpoint_epoch, jobs.result_attempt_id AS result_attempt_id, jobs.error_code AS error_code, jobs.error_message AS error_message, jobs.created_at AS created_at, jobs.updated_at AS updated_at, jobs.started_at AS started_at, jobs.finished_at AS finished_at, jobs.traceparent AS traceparent, jobs.schedule_name AS schedule_name, jobs.concurrency_key AS concurrency_key, jobs.held_by AS held_by, jobs.running_since AS running_since
FROM jobs
WHERE jobs.state = 'running' AND (jobs.lease_expires_at <= %(lease_expires_at_1)s OR jobs.deadline_at <= %(deadline_at_1)s) ORDER BY jobs.lease_expires_at
 LIMIT %(param_1)s::INTEGER) AS anon_1 UNION ALL SELECT anon_2.id, anon_2.tenant, anon_2.owner, anon_2.operation_key, anon_2.fingerprint, anon_2.kind, anon_2.payload, anon_2.state, anon_2.epoch, anon_2.attempts, anon_2.max_attempts, anon_2.lease_owner, anon_2.lease_expires_at, anon_2.available_at, anon_2.run_at, anon_2.priority, anon_2.deadline_at, anon_2.cancel_requested, anon_2.external_epoch, anon_2.checkpoint, anon_2.checkpoint_epoch, anon_2.result_attempt_id, anon_2.error_code, anon_2.error_message, anon_2.created_at, anon_2.updated_at, anon_2.started_at, anon_2.finished_at, anon_2.traceparent, anon_2.schedule_name, anon_2.concurrency_key, anon_2.held_by, anon_2.running_since
FROM (SELECT jobs.id AS id, jobs.tenant AS tenant, jobs.owner AS owner, jobs.operation_key AS operation_key, jobs.fingerprint AS fingerprint, jobs.kind AS kind, jobs.payload AS payload, jobs.state AS state, jobs.epoch AS epoch, jobs.attempts AS attempts, jobs.max_attempts AS max_attempts, jobs.lease_owner AS lease_owner, jobs.lease_expires_at AS lease_expires_at, jobs.available_at AS available_at, jobs.run_at AS run_at, jobs.priority AS priority, jobs.deadline_at AS deadline_at, jobs.cancel_requested AS cancel_requested, jobs.external_epoch AS external_epoch, jobs.checkpoint AS checkpoint, jobs.checkpoint_epoch AS checkpoint_epoch, jobs.result_attempt_id AS result_attempt_id, jobs.error_code AS error_code, jobs.error_message AS error_message, jobs.created_at AS created_at, jobs.updated_at AS updated_at, jobs.started_at AS started_at, jobs.finished_at AS finished_at, jobs.traceparent AS traceparent, jobs.schedule_name AS schedule_name, jobs.concurrency_key AS concurrency_key, jobs.held_by AS held_by, jobs.running_since AS running_since
FROM jobs
WHERE jobs.state = 'queued' AND jobs.deadline_at <= %(deadline_at_2)s ORDER BY jobs.available_at
 LIMIT %(param_2)s::INTEGER) AS anon_2;
UPDATE jobs SET state=%(state)s::VARCHAR, lease_owner=%(lease_owner)s::VARCHAR, lease_expires_at=%(lease_expires_at)s, available_at=%(available_at)s, error_code=%(error_code)s::VARCHAR, error_message=%(error_message)s::VARCHAR, updated_at=%(updated_at)s WHERE jobs.id = %(id_1)s::VARCHAR AND jobs.epoch = %(epoch_1)s::INTEGER AND jobs.state = 'running' AND (jobs.lease_expires_at <= %(lease_expires_at_1)s OR jobs.deadline_at <= %(deadline_at_1)s);
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, priority, tenant) VALUES (%(job_id)s::VARCHAR, %(created_at)s, %(available_at)s, %(publish_attempts)s::INTEGER, (SELECT jobs.priority
FROM jobs
WHERE jobs.id = %(job_id)s::VARCHAR), (SELECT jobs.tenant
FROM jobs
WHERE jobs.id = %(job_id)s::VARCHAR)) RETURNING outbox.id;
UPDATE attempts SET ended_at=%(b_now)s, outcome=%(outcome)s::VARCHAR, error_code=%(b_code)s::VARCHAR, error_message=%(b_message)s::VARCHAR WHERE attempts.job_id IN (%(b_ids_1)s::VARCHAR) AND attempts.outcome = %(outcome_1)s::VARCHAR;

-- operation: re-announce queued jobs (sweeper.reannounce_stale)
SELECT jobs.id
FROM jobs
WHERE jobs.state = 'queued' AND jobs.available_at <= %(available_at_1)s AND jobs.updated_at <= %(updated_at_1)s AND NOT (EXISTS (SELECT outbox.id
FROM outbox
WHERE outbox.job_id = jobs.id AND outbox.published_at IS NULL)) AND (jobs.kind NOT IN (SELECT paused_kinds.kind
FROM paused_kinds)) AND jobs.held_by IS NULL ORDER BY jobs.available_at
 LIMIT %(param_1)s::INTEGER;

-- operation: cancel (operator.cancel)
UPDATE jobs SET state=%(state)s::VARCHAR, cancel_requested=%(cancel_requested)s, error_code=%(error_code)s::VARCHAR, error_message=%(error_message)s::VARCHAR, updated_at=%(updated_at)s, finished_at=%(finished_at)s WHERE jobs.id = %(id_1)s::VARCHAR AND jobs.state = 'queued' RETURNING jobs.id, jobs.tenant, jobs.kind, jobs.epoch, jobs.attempts, jobs.traceparent;
DELETE FROM outbox WHERE outbox.job_id = %(b_job)s::VARCHAR AND outbox.published_at IS NULL;
INSERT INTO operator_actions (job_id, action, actor, note, at) VALUES (%(job_id)s::VARCHAR, %(action)s::VARCHAR, %(actor)s::VARCHAR, %(note)s::VARCHAR, %(at)s) RETURNING operator_actions.id;
SELECT jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload, jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at, jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested, jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code, jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at, jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since
FROM jobs
WHERE jobs.id = %(b_id)s::VARCHAR;

-- operation: requeue (operator.requeue)
UPDATE jobs SET state=%(state)s::VARCHAR, attempts=%(attempts)s::INTEGER, lease_owner=%(lease_owner)s::VARCHAR, lease_expires_at=%(lease_expires_at)s, available_at=%(available_at)s, cancel_requested=%(cancel_requested)s, external_epoch=%(external_epoch)s::INTEGER, error_code=%(error_code)s::VARCHAR, error_message=%(error_message)s::VARCHAR, updated_at=%(updated_at)s, finished_at=%(finished_at)s WHERE jobs.id = %(id_1)s::VARCHAR AND jobs.state IN ('dead', 'failed', 'unknown') AND jobs.finished_at IS NOT NULL;
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, priority, tenant) VALUES (%(job_id)s::VARCHAR, %(created_at)s, %(available_at)s, %(publish_attempts)s::INTEGER, (SELECT jobs.priority
FROM jobs
WHERE jobs.id = %(job_id)s::VARCHAR), (SELECT jobs.tenant
FROM jobs
WHERE jobs.id = %(job_id)s::VARCHAR)) RETURNING outbox.id;
INSERT INTO operator_actions (job_id, action, actor, note, at) VALUES (%(job_id)s::VARCHAR, %(action)s::VARCHAR, %(actor)s::VARCHAR, %(note)s::VARCHAR, %(at)s) RETURNING operator_actions.id;
SELECT jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload, jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at, jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested, jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code, jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at, jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since
FROM jobs
WHERE jobs.id = %(b_id)s::VARCHAR;

-- operation: resolve (operator.resolve)
UPDATE jobs SET state=%(state)s::VARCHAR, error_code=%(error_code)s::VARCHAR, error_message=%(error_message)s::VARCHAR, updated_at=%(updated_at)s, finished_at=%(finished_at)s WHERE jobs.id = %(id_1)s::VARCHAR AND jobs.state = 'unknown' AND jobs.finished_at IS NOT NULL;
INSERT INTO operator_actions (job_id, action, actor, note, at) VALUES (%(job_id)s::VARCHAR, %(action)s::VARCHAR, %(actor)s::VARCHAR, %(note)s::VARCHAR, %(at)s) RETURNING operator_actions.id;
SELECT jobs.id, jobs.tenant, jobs.owner, jobs.operation_key, jobs.fingerprint, jobs.kind, jobs.payload, jobs.state, jobs.epoch, jobs.attempts, jobs.max_attempts, jobs.lease_owner, jobs.lease_expires_at, jobs.available_at, jobs.run_at, jobs.priority, jobs.deadline_at, jobs.cancel_requested, jobs.external_epoch, jobs.checkpoint, jobs.checkpoint_epoch, jobs.result_attempt_id, jobs.error_code, jobs.error_message, jobs.created_at, jobs.updated_at, jobs.started_at, jobs.finished_at, jobs.traceparent, jobs.schedule_name, jobs.concurrency_key, jobs.held_by, jobs.running_since
FROM jobs
WHERE jobs.id = %(b_id)s::VARCHAR;

-- operation: prune (retention.prune)
SELECT jobs.finished_at, jobs.id
FROM jobs
WHERE jobs.state IN ('cancelled', 'dead', 'failed', 'succeeded') AND jobs.finished_at IS NOT NULL AND jobs.finished_at < %(finished_at_1)s AND NOT (EXISTS (SELECT webhook_deliveries.id
FROM webhook_deliveries
WHERE webhook_deliveries.job_id = jobs.id AND webhook_deliveries.state = %(state_1)s::VARCHAR)) ORDER BY jobs.finished_at, jobs.id
 LIMIT %(param_1)s::INTEGER;
DELETE FROM jobs WHERE jobs.id IN (%(id_1_1)s::VARCHAR, %(id_1_2)s::VARCHAR, %(id_1_3)s::VARCHAR) AND jobs.state IN ('cancelled', 'dead', 'failed', 'succeeded') AND jobs.finished_at IS NOT NULL AND jobs.finished_at < %(finished_at_1)s AND NOT (EXISTS (SELECT webhook_deliveries.id
FROM webhook_deliveries
WHERE webhook_deliveries.job_id = jobs.id AND webhook_deliveries.state = %(state_1)s::VARCHAR)) RETURNING jobs.id;
