-- The postgresql driver's statements: accept (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- An accept is one statement (`PostgreSQLDriver.insert_jobs`): `jobs_insert` writes the jobs and their
-- outbox rows at once. `jobs_present` and `outbox_add_accepted` are the steps SQLite takes for it, written
-- here for the same reads and writes on this database.

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
