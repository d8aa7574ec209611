-- The postgresql driver's statements: claims (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- A claim takes a job for one attempt: epoch + 1, attempts + 1, a new lease, and an attempt row. It takes a
-- job that is queued, due and of a kind not paused, or running under a lease that expired with no external
-- effect started; within its attempt budget, with no cancel requested, before its deadline. The same guard
-- is written in each statement below that picks jobs a claim may take.

-- name: claim_by_ids
-- :prepared
-- The claim of the jobs `ids` names, with the first attempt row (id from `attempt_ids`, parallel to `ids`)
-- of each job it takes at epoch 1, in one statement; a job taken again gets its attempt row after its
-- previous one ends as lost (insert_attempt). With `limited`, a queued job a flow limit concerns (a
-- concurrency key, or a kind of `limited_kinds`) is left to the limits. Unless `every_queue`, only jobs of
-- the named queues `queues` are taken. With `drop_pending`, the pending
-- outbox rows of the jobs taken are dropped too (the table's path: the jobs are in a worker's hands).
-- Prepared: its generic plan looks each id up by the primary key.
WITH taken AS (
    UPDATE jobs
    SET state = 'running',
        epoch = epoch + 1,
        attempts = attempts + 1,
        lease_owner = %(worker)s::text,
        lease_expires_at = %(lease_until)s::float8,
        updated_at = %(now)s::float8,
        started_at = COALESCE(started_at, %(now)s::float8),
        held_by = NULL,
        running_since = %(running_since)s::float8
    WHERE id = ANY(%(ids)s::text[])
      AND (NOT %(limited)s::boolean
           OR state = 'running'
           OR (concurrency_key IS NULL AND kind <> ALL(%(limited_kinds)s::text[])))
      AND (%(every_queue)s::boolean OR queue = ANY(%(queues)s::text[]))
      AND (
          (state = 'queued'
           AND available_at <= %(now)s::float8
           AND kind NOT IN (SELECT kind FROM paused_kinds))
          OR (state = 'running'
              AND lease_expires_at <= %(now)s::float8
              AND (external_epoch IS NULL OR external_epoch <> epoch))
      )
      AND attempts < max_attempts
      AND cancel_requested = false
      AND (deadline_at IS NULL OR deadline_at > %(now)s::float8)
    RETURNING id, epoch, attempts, kind, payload, tenant, owner, operation_key, deadline_at, lease_expires_at,
        checkpoint, created_at, traceparent, concurrency_key, queue
), first_attempts AS (
    INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome)
    SELECT fresh.attempt_id, taken.id, taken.epoch, %(worker)s::text, %(now)s::float8, 'running'
    FROM taken
    JOIN unnest(%(ids)s::text[], %(attempt_ids)s::text[]) AS fresh (job_id, attempt_id)
        ON fresh.job_id = taken.id
    WHERE taken.epoch = 1
), dropped AS (
    DELETE FROM outbox
    WHERE %(drop_pending)s::boolean
      AND job_id IN (SELECT id FROM taken)
      AND published_at IS NULL
)
SELECT id, epoch, attempts, kind, payload, tenant, owner, operation_key, deadline_at, lease_expires_at,
    checkpoint, created_at, traceparent, concurrency_key, queue
FROM taken;

-- name: insert_attempt
-- An attempt begun: the attempt row of a job a claim took.
INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome)
VALUES (%(id)s, %(job_id)s, %(epoch)s, %(worker)s, %(started_at)s, 'running');

-- name: expired_leases_due
-- Whether a claim of the table would take over an expired lease (the running jobs whose lease ran out with
-- no external effect started, within budget and deadline, of the named `queues` unless `every_queue`),
-- oldest lease first; locks nothing.
SELECT id
FROM jobs
WHERE state = 'running'
  AND lease_expires_at <= %(now)s
  AND (%(every_queue)s::boolean OR queue = ANY(%(queues)s::text[]))
  AND (external_epoch IS NULL OR external_epoch <> epoch)
  AND attempts < max_attempts
  AND cancel_requested = false
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
ORDER BY lease_expires_at
LIMIT %(limit)s;

-- name: expired_leases_due_locking
-- expired_leases_due for a claim: it locks the rows it returns and skips those another claimer holds.
SELECT id
FROM jobs
WHERE state = 'running'
  AND lease_expires_at <= %(now)s
  AND (%(every_queue)s::boolean OR queue = ANY(%(queues)s::text[]))
  AND (external_epoch IS NULL OR external_epoch <> epoch)
  AND attempts < max_attempts
  AND cancel_requested = false
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: queued_due
-- The queued jobs a claim of the table may start, by priority, then age: a walk of the (state, priority,
-- available_at) index in order (the due time is compared as `available_at + 0`, so that the walk is not of
-- the (state, available_at) index's range and a sort of what it finds). Passed over: the tenants at their
-- cap or share (`capped`), the kinds at their cap or not due to start again (`full_kinds`), and the jobs
-- whose concurrency key runs `key_max` jobs of its tenant. Unless `every_queue`, only jobs of the named
-- `queues` (a filter on the walk: a process runs a few queues). Locks nothing.
SELECT id
FROM jobs
WHERE state = 'queued'
  AND available_at + 0 <= %(now)s
  AND (%(every_queue)s::boolean OR queue = ANY(%(queues)s::text[]))
  AND kind NOT IN (SELECT kind FROM paused_kinds)
  AND tenant <> ALL(%(capped)s::text[])
  AND kind <> ALL(%(full_kinds)s::text[])
  AND (concurrency_key IS NULL
       OR (SELECT count(*)
           FROM jobs AS running_with_key
           WHERE running_with_key.tenant = jobs.tenant
             AND running_with_key.concurrency_key = jobs.concurrency_key
             AND running_with_key.state = 'running') < %(key_max)s)
  AND attempts < max_attempts
  AND cancel_requested = false
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
ORDER BY jobs.priority, jobs.available_at
LIMIT %(limit)s;

-- name: queued_due_locking
-- queued_due for a claim: it locks the rows it returns and skips those another claimer holds.
SELECT id
FROM jobs
WHERE state = 'queued'
  AND available_at + 0 <= %(now)s
  AND (%(every_queue)s::boolean OR queue = ANY(%(queues)s::text[]))
  AND kind NOT IN (SELECT kind FROM paused_kinds)
  AND tenant <> ALL(%(capped)s::text[])
  AND kind <> ALL(%(full_kinds)s::text[])
  AND (concurrency_key IS NULL
       OR (SELECT count(*)
           FROM jobs AS running_with_key
           WHERE running_with_key.tenant = jobs.tenant
             AND running_with_key.concurrency_key = jobs.concurrency_key
             AND running_with_key.state = 'running') < %(key_max)s)
  AND attempts < max_attempts
  AND cancel_requested = false
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
ORDER BY jobs.priority, jobs.available_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: queued_due_fair
-- When more are queued than a claim takes: the same jobs as queued_due, by priority, then round-robin over
-- tenants, then age. A job's turn is its rank among its tenant's due jobs of that priority plus the jobs
-- its tenant runs now: ranks alone would start over at every claim. It ranks every due job, so it runs
-- only when there is a backlog of several tenants to order. It cannot lock (a window function):
-- lock_ranked_jobs locks what it ranked first.
SELECT ranked.id
FROM (
    SELECT jobs.id,
        jobs.priority,
        jobs.available_at,
        row_number() OVER (PARTITION BY jobs.priority, jobs.tenant ORDER BY jobs.available_at, jobs.id)
            + COALESCE(running.running, 0) AS turn
    FROM jobs
    LEFT JOIN (
        SELECT tenant, count(*) AS running
        FROM jobs
        WHERE state = 'running'
        GROUP BY tenant
    ) AS running ON running.tenant = jobs.tenant
    WHERE jobs.state = 'queued'
      AND jobs.available_at <= %(now)s
      AND (%(every_queue)s::boolean OR jobs.queue = ANY(%(queues)s::text[]))
      AND jobs.kind NOT IN (SELECT kind FROM paused_kinds)
      AND jobs.attempts < jobs.max_attempts
      AND jobs.cancel_requested = false
      AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(now)s)
      AND jobs.tenant <> ALL(%(capped)s::text[])
      AND jobs.kind <> ALL(%(full_kinds)s::text[])
      AND (jobs.concurrency_key IS NULL
           OR (SELECT count(*)
               FROM jobs AS running_with_key
               WHERE running_with_key.tenant = jobs.tenant
                 AND running_with_key.concurrency_key = jobs.concurrency_key
                 AND running_with_key.state = 'running') < %(key_max)s)
) AS ranked
ORDER BY ranked.priority, ranked.turn, ranked.available_at
LIMIT %(limit)s;

-- name: lock_ranked_jobs
-- Those of the jobs `ids` names that no other transaction holds locked, locked now.
SELECT id
FROM jobs
WHERE id = ANY(%(ids)s::text[])
FOR UPDATE SKIP LOCKED;

-- name: queued_tenant_range
-- The lowest and the highest tenant with a queued job: two seeks of the (state, tenant) index (one
-- tenant's backlog has no turns to rank).
SELECT (SELECT min(tenant) FROM jobs WHERE state = 'queued'),
    (SELECT max(tenant) FROM jobs WHERE state = 'queued');

-- name: queued_tenants_of
-- The tenant of each queued job among `ids` (what the tenant cap and share count).
SELECT id, tenant
FROM jobs
WHERE id = ANY(%(ids)s::text[])
  AND state = 'queued';

-- name: mark_running
-- A job claimed ahead of a free thread has begun running on one, under its fence of id, epoch and state
-- alone: the lease and the deadline are for the writes of its attempt, and a job whose lease ran out while
-- it waited reads as started all the same until it is taken again.
UPDATE jobs
SET running_since = %(since)s
WHERE id = %(job)s
  AND epoch = %(epoch)s
  AND state = 'running';
