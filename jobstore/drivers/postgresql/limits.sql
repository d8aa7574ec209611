-- The postgresql driver's statements: limits (named blocks, as jobstore/drivers/sqlfile.py reads them).
-- The flow limits (jobstore/limits.py), TENANT_MAX_RUNNING and the tenants' turns (jobstore/tenantcap.py),
-- paused kinds (jobstore/pausing.py), and the transaction-scoped advisory locks that make their counts exact.

-- name: advisory_lock
-- :prepared
-- This transaction's advisory lock on each (space, key), taken in the order of the arrays and held until
-- the transaction ends (unnest reads an array out in its order).
SELECT pg_advisory_xact_lock(lock.space, lock.key)
FROM unnest(%(spaces)s::int4[], %(keys)s::int4[]) AS lock(space, key);

-- --- flow limits: KIND_MAX_RUNNING, KIND_RATE_LIMITS, concurrency keys ------------------------------------

-- name: limit_candidates
-- Those of the ids that a claim could start now but for the flow limits: the claim's own condition for
-- a queued job (due, of a kind not paused, within its attempts, not cancelled, before its deadline).
SELECT id, tenant, kind, concurrency_key
FROM jobs
WHERE id = ANY(%(ids)s::text[])
  AND state = 'queued'
  AND available_at <= %(now)s
  AND kind NOT IN (SELECT kind FROM paused_kinds)
  AND attempts < max_attempts
  AND cancel_requested = false
  AND (deadline_at IS NULL OR deadline_at > %(now)s);

-- name: limit_running_by_kind
-- How many jobs of each of the kinds are running.
SELECT kind, count(*)
FROM jobs
WHERE state = 'running' AND kind = ANY(%(kinds)s::text[])
GROUP BY kind;

-- name: limit_running_by_key
-- How many jobs run under each concurrency key of the tenants (the caller keeps the pairs it asked for).
SELECT tenant, concurrency_key, count(*)
FROM jobs
WHERE tenant = ANY(%(tenants)s::text[])
  AND concurrency_key = ANY(%(keys)s::text[])
  AND state = 'running'
GROUP BY tenant, concurrency_key;

-- name: limit_next_starts
-- When a job of each of the rate-limited kinds may start next.
SELECT kind, next_start_at
FROM kind_rates
WHERE kind = ANY(%(kinds)s::text[]);

-- name: limit_rate_started
-- A job of a rate-limited kind started: the next may start at next_start_at.
INSERT INTO kind_rates (kind, next_start_at)
VALUES (%(kind)s, %(next_start_at)s)
ON CONFLICT (kind) DO UPDATE SET next_start_at = excluded.next_start_at;

-- name: limit_hold
-- The queued jobs of the ids held back by one limit (held_by: kind, key or rate).
UPDATE jobs
SET held_by = %(held_by)s, updated_at = %(now)s
WHERE id = ANY(%(ids)s::text[]) AND state = 'queued';

-- name: limit_first_without_turn
-- The first of a rate-limited kind's held jobs, in the order jobs start in, unless one of them has its
-- turn already: an outbox row still to be published.
SELECT id
FROM jobs
WHERE held_by = 'rate' AND kind = %(kind)s AND state = 'queued'
  AND NOT EXISTS (
    SELECT 1
    FROM jobs AS turn
    JOIN outbox ON outbox.job_id = turn.id
    WHERE turn.held_by = 'rate' AND turn.kind = %(kind)s AND turn.state = 'queued'
      AND outbox.published_at IS NULL
  )
ORDER BY priority, available_at, id
LIMIT 1;

-- name: limit_held_of_kind
-- The first of a kind's jobs held by its cap, in the order jobs start in.
SELECT id
FROM jobs
WHERE held_by = 'kind' AND kind = %(kind)s AND state = 'queued'
ORDER BY priority, available_at, id
LIMIT %(limit)s;

-- name: limit_held_of_key
-- The first of a tenant's jobs held by the cap of their concurrency key, in the order jobs start in.
SELECT id
FROM jobs
WHERE held_by = 'key' AND tenant = %(tenant)s AND concurrency_key = %(key)s AND state = 'queued'
ORDER BY priority, available_at, id
LIMIT %(limit)s;

-- name: limit_held_of_rates
-- The jobs held back by the rates of the kinds (whose rates were removed).
SELECT id
FROM jobs
WHERE held_by = 'rate' AND kind = ANY(%(kinds)s::text[]) AND state = 'queued';

-- name: limit_forget_unqueued
-- held_by is kept for queued jobs only: forget it on jobs that left the queue otherwise than by a claim.
UPDATE jobs
SET held_by = NULL
WHERE held_by IS NOT NULL AND state <> 'queued';

-- name: limit_held_groups
-- The held jobs by limit, kind, tenant and concurrency key.
SELECT held_by, kind, tenant, concurrency_key, count(*)
FROM jobs
WHERE held_by IS NOT NULL AND state = 'queued'
GROUP BY held_by, kind, tenant, concurrency_key;

-- name: limit_release
-- The jobs of the ids are held no more (their outbox rows are written next, in the same transaction).
UPDATE jobs
SET held_by = NULL, updated_at = %(now)s
WHERE id = ANY(%(ids)s::text[]);

-- name: limit_held_counts
-- The held jobs by kind and limit.
SELECT kind, held_by, count(*)
FROM jobs
WHERE held_by IS NOT NULL AND state = 'queued'
GROUP BY kind, held_by
ORDER BY kind, held_by;

-- --- TENANT_MAX_RUNNING and the tenants' turns --------------------------------------------------------

-- name: tenant_running
-- How many jobs of each of the tenants are running (the running jobs' tenant index).
SELECT tenant, count(*)
FROM jobs
WHERE state = 'running' AND tenant = ANY(%(tenants)s::text[])
GROUP BY tenant;

-- name: tenant_running_all
-- How many jobs of each tenant are running.
SELECT tenant, count(*)
FROM jobs
WHERE state = 'running'
GROUP BY tenant;

-- name: tenant_first_queued
-- The lowest name of a tenant with queued jobs: one seek of the queued jobs' tenant index.
SELECT min(tenant)
FROM jobs
WHERE state = 'queued';

-- name: tenant_next_queued
-- The next tenant with queued jobs, by name.
SELECT min(tenant)
FROM jobs
WHERE state = 'queued' AND tenant > %(after)s;

-- name: tenant_due
-- Whether the tenant has a queued job a claim could start now (due, held back by no flow limit, of a kind
-- not paused): its queued jobs, up to the first such one.
SELECT id
FROM jobs
WHERE state = 'queued'
  AND tenant = %(tenant)s
  AND available_at <= %(now)s
  AND held_by IS NULL
  AND kind NOT IN (SELECT kind FROM paused_kinds)
LIMIT 1;

-- --- paused kinds --------------------------------------------------------------------------------------

-- name: kind_pause
-- Pause a kind, unless it is paused already (then nothing is returned).
INSERT INTO paused_kinds (kind, paused_at, paused_by, note)
VALUES (%(kind)s, %(now)s, %(actor)s, %(note)s)
ON CONFLICT (kind) DO NOTHING
RETURNING kind;

-- name: kind_resume
-- Resume a kind; nothing is returned when it was not paused.
DELETE FROM paused_kinds
WHERE kind = %(kind)s
RETURNING kind;

-- name: kind_is_paused
SELECT kind
FROM paused_kinds
WHERE kind = %(kind)s;

-- name: kind_paused
-- The paused kinds, the longest paused first, each with its count of queued jobs.
SELECT
  kind,
  paused_at,
  paused_by,
  note,
  (SELECT count(*) FROM jobs WHERE jobs.state = 'queued' AND jobs.kind = paused_kinds.kind) AS queued
FROM paused_kinds
ORDER BY paused_at, kind;

-- name: kind_paused_since
SELECT kind, paused_at
FROM paused_kinds;

-- name: kind_announce_queued
-- A new outbox row for each queued job of the kind with none waiting to be published, due when the job is,
-- written in the order jobs start in; a job that waits for others gets its row when it becomes due.
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
SELECT
  jobs.id,
  %(now)s,
  CASE WHEN jobs.available_at > %(now)s THEN jobs.available_at ELSE %(now)s END,
  0,
  jobs.tenant,
  jobs.priority
FROM jobs
WHERE jobs.state = 'queued'
  AND jobs.kind = %(kind)s
  AND NOT EXISTS (SELECT 1 FROM outbox WHERE outbox.job_id = jobs.id AND outbox.published_at IS NULL)
  AND jobs.available_at < 1e15  -- not one that waits for other jobs (`schema.WAITING_AT`)
ORDER BY jobs.priority, jobs.available_at, jobs.id
RETURNING id;

-- name: kind_action_record
-- A pause or resume of a kind, who did it and when.
INSERT INTO kind_actions (kind, action, actor, note, at)
VALUES (%(kind)s, %(action)s, %(actor)s, %(note)s, %(now)s);
