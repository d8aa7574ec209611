-- The postgresql driver's statements: accept (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- An accept is one statement (`PostgreSQLDriver.insert_jobs`): `jobs_insert` writes the jobs and their
-- outbox rows at once; `jobs_insert_unique`, for a batch that holds jobs of a kind with a uniqueness window,
-- takes their windows in the same statement.

-- name: jobs_insert
-- :prepared
-- New jobs, one array per column, and an outbox row for each one inserted (with its job's tenant and
-- priority); a job whose tenant + key is taken is skipped. The ids of the jobs inserted. The arrays of
-- strings are `text[]`: an array of `varchar(n)` would cut a longer value short without a word, where the
-- insert into the column itself refuses it.
WITH inserted AS (
    INSERT INTO jobs (
        id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
        lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
        external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
        created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
        held_by, running_since, queue, snoozes
    )
    SELECT * FROM unnest(
        %(id)s::text[], %(tenant)s::text[], %(owner)s::text[], %(operation_key)s::text[],
        %(fingerprint)s::text[], %(kind)s::text[], %(payload)s::text[], %(state)s::text[],
        %(epoch)s::int[], %(attempts)s::int[], %(max_attempts)s::int[], %(lease_owner)s::text[],
        %(lease_expires_at)s::float8[], %(available_at)s::float8[], %(run_at)s::float8[],
        %(priority)s::int[], %(deadline_at)s::float8[], %(cancel_requested)s::boolean[],
        %(external_epoch)s::int[], %(checkpoint)s::text[], %(checkpoint_epoch)s::int[],
        %(result_attempt_id)s::text[], %(error_code)s::text[], %(error_message)s::text[],
        %(created_at)s::float8[], %(updated_at)s::float8[], %(started_at)s::float8[],
        %(finished_at)s::float8[], %(traceparent)s::text[], %(schedule_name)s::text[],
        %(concurrency_key)s::text[], %(held_by)s::text[], %(running_since)s::float8[],
        %(queue)s::text[], %(snoozes)s::int[]
    )
    ON CONFLICT (tenant, operation_key) DO NOTHING
    RETURNING id, created_at, available_at, tenant, priority
), announced AS (
    INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
    SELECT id, created_at, available_at, 0, tenant, priority
    FROM inserted
)
SELECT id FROM inserted;

-- name: jobs_insert_unique
-- `jobs_insert` for a batch with uniqueness windows (`unique_key`, `unique_until`: null for a job of a kind
-- without one), judged at `now`, the batch's latest accept. Only the first request of each tenant + key in
-- the batch is written (the caller answers the others from the key, or accepts them again). A job with a
-- window is inserted only if it takes the window: the first of the batch's jobs of one tenant and window
-- whose key is free in the store takes it with one upsert, unless another job holds it past `now`. A
-- concurrent accept taking the same window holds its row: the upsert waits for it, then takes the window
-- only if that one rolled back. The window row names a job of the same statement, and the foreign key is
-- checked at the statement's end: a job whose key a concurrent accept took meanwhile (its insert skipped
-- it) fails the statement (the driver's `Retry`), and nothing is written. Every batch takes its windows
-- in the order of their keys. The ids of the jobs inserted.
WITH given AS (
    SELECT * FROM unnest(
        %(id)s::text[], %(tenant)s::text[], %(owner)s::text[], %(operation_key)s::text[],
        %(fingerprint)s::text[], %(kind)s::text[], %(payload)s::text[], %(state)s::text[],
        %(epoch)s::int[], %(attempts)s::int[], %(max_attempts)s::int[], %(lease_owner)s::text[],
        %(lease_expires_at)s::float8[], %(available_at)s::float8[], %(run_at)s::float8[],
        %(priority)s::int[], %(deadline_at)s::float8[], %(cancel_requested)s::boolean[],
        %(external_epoch)s::int[], %(checkpoint)s::text[], %(checkpoint_epoch)s::int[],
        %(result_attempt_id)s::text[], %(error_code)s::text[], %(error_message)s::text[],
        %(created_at)s::float8[], %(updated_at)s::float8[], %(started_at)s::float8[],
        %(finished_at)s::float8[], %(traceparent)s::text[], %(schedule_name)s::text[],
        %(concurrency_key)s::text[], %(held_by)s::text[], %(running_since)s::float8[],
        %(queue)s::text[], %(snoozes)s::int[], %(unique_key)s::text[], %(unique_until)s::float8[]
    ) WITH ORDINALITY AS request (
        id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
        lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
        external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
        created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
        held_by, running_since, queue, snoozes, unique_key, unique_until, n
    )
), requests AS (
    SELECT DISTINCT ON (tenant, operation_key) * FROM given ORDER BY tenant, operation_key, n
), windows AS (
    INSERT INTO job_uniques (tenant, unique_key, job_id, expires_at)
    SELECT DISTINCT ON (r.tenant, r.unique_key) r.tenant, r.unique_key, r.id, r.unique_until
    FROM requests AS r
    WHERE r.unique_key IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM jobs WHERE jobs.tenant = r.tenant AND jobs.operation_key = r.operation_key
      )
    ORDER BY r.tenant, r.unique_key, r.n
    ON CONFLICT (tenant, unique_key) DO UPDATE
    SET job_id = excluded.job_id, expires_at = excluded.expires_at
    WHERE job_uniques.expires_at <= %(now)s
    RETURNING job_id
), inserted AS (
    INSERT INTO jobs (
        id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
        lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
        external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
        created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
        held_by, running_since, queue, snoozes
    )
    SELECT
        id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
        lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
        external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
        created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
        held_by, running_since, queue, snoozes
    FROM requests
    WHERE unique_key IS NULL OR id IN (SELECT job_id FROM windows)
    ORDER BY n
    ON CONFLICT (tenant, operation_key) DO NOTHING
    RETURNING id, created_at, available_at, tenant, priority
), announced AS (
    INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
    SELECT id, created_at, available_at, 0, tenant, priority
    FROM inserted
)
SELECT id FROM inserted;

-- name: jobs_by_key
-- The job that holds a tenant + idempotency key, every column.
SELECT
    id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
    lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
    external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message,
    created_at, updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key,
    held_by, running_since, queue, snoozes
FROM jobs
WHERE tenant = %(tenant)s AND operation_key = %(operation_key)s;

-- name: jobs_by_window
-- The job that holds a tenant's uniqueness window at `now`, every column.
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
WHERE job_uniques.tenant = %(tenant)s AND job_uniques.unique_key = %(unique_key)s
  AND job_uniques.expires_at > %(now)s;
