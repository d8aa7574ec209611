-- The sqlite driver's statements: claims (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- A claim takes a job for one attempt: epoch + 1, attempts + 1, a new lease, and an attempt row. It takes a
-- job that is queued, due and of a kind not paused, or running under a lease that expired with no external
-- effect started; within its attempt budget, with no cancel requested, before its deadline. The same guard
-- is written in each statement below that picks jobs a claim may take. A write transaction holds the whole
-- database: nothing here locks rows, and a claim sends the plain reads (`Driver.locking`).

-- name: claim_by_ids
-- The claim of the jobs `ids` names (a JSON array), each looked up by the primary key's index (without
-- statistics SQLite walked every queued job through a state index). With `limited`, a queued job a flow
-- limit concerns (a concurrency key, or a kind of `limited_kinds`) is left to the limits. Unless
-- `every_queue`, only jobs of the named queues `queues` (a JSON array) are taken. A statement writes one
-- table: the attempt rows follow (insert_attempt), and on the table's path the jobs' pending
-- outbox rows are dropped (claim_drop_pending).
UPDATE jobs INDEXED BY sqlite_autoindex_jobs_1
SET state = 'running',
    epoch = epoch + 1,
    attempts = attempts + 1,
    lease_owner = :worker,
    lease_expires_at = :lease_until,
    updated_at = :now,
    started_at = COALESCE(started_at, :now),
    held_by = NULL,
    running_since = :running_since
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (NOT :limited
       OR state = 'running'
       OR (concurrency_key IS NULL AND kind NOT IN (SELECT value FROM json_each(:limited_kinds))))
  AND (:every_queue OR queue IN (SELECT value FROM json_each(:queues)))
  AND (
      (state = 'queued'
       AND available_at <= :now
       AND kind NOT IN (SELECT kind FROM paused_kinds))
      OR (state = 'running'
          AND lease_expires_at <= :now
          AND (external_epoch IS NULL OR external_epoch <> epoch))
  )
  AND attempts < max_attempts
  AND cancel_requested = 0
  AND (deadline_at IS NULL OR deadline_at > :now)
RETURNING id, epoch, attempts, kind, payload, tenant, owner, operation_key, deadline_at, lease_expires_at,
    checkpoint, created_at, traceparent, concurrency_key, queue;

-- name: claim_drop_pending
-- The pending outbox rows of the jobs `jobs` (a JSON array) a claim took, looked up by the job id index.
DELETE FROM outbox INDEXED BY ix_outbox_job_id
WHERE job_id IN (SELECT value FROM json_each(:jobs))
  AND published_at IS NULL;

-- name: insert_attempt
-- An attempt begun: the attempt row of a job a claim took.
INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome)
VALUES (:id, :job_id, :epoch, :worker, :started_at, 'running');

-- name: expired_leases_due
-- The running jobs whose lease ran out with no external effect started, within budget and deadline, oldest
-- lease first: those a claim of the table takes over first (of the named `queues`, unless `every_queue`).
SELECT id
FROM jobs
WHERE state = 'running'
  AND lease_expires_at <= :now
  AND (:every_queue OR queue IN (SELECT value FROM json_each(:queues)))
  AND (external_epoch IS NULL OR external_epoch <> epoch)
  AND attempts < max_attempts
  AND cancel_requested = 0
  AND (deadline_at IS NULL OR deadline_at > :now)
ORDER BY lease_expires_at
LIMIT :limit;

-- name: queued_due
-- The queued jobs a claim of the table may start, by priority, then age: a walk of the (state, priority,
-- available_at) index in order (the due time is compared as `available_at + 0`, so that the planner does
-- not take the (state, available_at) index's range and sort what it finds). Passed over: the tenants at
-- their cap or share (`capped`), the kinds at their cap or not due to start again (`full_kinds`), and the
-- jobs whose concurrency key runs `key_max` jobs of its tenant. Unless `every_queue`, only jobs of the
-- named `queues` (a filter on the walk: a process runs a few queues).
SELECT id
FROM jobs
WHERE state = 'queued'
  AND available_at + 0 <= :now
  AND (:every_queue OR queue IN (SELECT value FROM json_each(:queues)))
  AND kind NOT IN (SELECT kind FROM paused_kinds)
  AND tenant NOT IN (SELECT value FROM json_each(:capped))
  AND kind NOT IN (SELECT value FROM json_each(:full_kinds))
  AND (concurrency_key IS NULL
       OR (SELECT count(*)
           FROM jobs AS running_with_key
           WHERE running_with_key.tenant = jobs.tenant
             AND running_with_key.concurrency_key = jobs.concurrency_key
             AND running_with_key.state = 'running') < :key_max)
  AND attempts < max_attempts
  AND cancel_requested = 0
  AND (deadline_at IS NULL OR deadline_at > :now)
ORDER BY jobs.priority, jobs.available_at
LIMIT :limit;

-- name: queued_due_fair
-- When more are queued than a claim takes: the same jobs as queued_due, by priority, then round-robin over
-- tenants, then age. A job's turn is its rank among its tenant's due jobs of that priority plus the jobs
-- its tenant runs now: ranks alone would start over at every claim. It ranks every due job, so it runs
-- only when there is a backlog of several tenants to order.
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
      AND jobs.available_at <= :now
      AND (:every_queue OR jobs.queue IN (SELECT value FROM json_each(:queues)))
      AND jobs.kind NOT IN (SELECT kind FROM paused_kinds)
      AND jobs.attempts < jobs.max_attempts
      AND jobs.cancel_requested = 0
      AND (jobs.deadline_at IS NULL OR jobs.deadline_at > :now)
      AND jobs.tenant NOT IN (SELECT value FROM json_each(:capped))
      AND jobs.kind NOT IN (SELECT value FROM json_each(:full_kinds))
      AND (jobs.concurrency_key IS NULL
           OR (SELECT count(*)
               FROM jobs AS running_with_key
               WHERE running_with_key.tenant = jobs.tenant
                 AND running_with_key.concurrency_key = jobs.concurrency_key
                 AND running_with_key.state = 'running') < :key_max)
) AS ranked
ORDER BY ranked.priority, ranked.turn, ranked.available_at
LIMIT :limit;

-- name: lock_ranked_jobs
-- Those of the jobs `ids` names that are still there (PostgreSQL locks them, skipping those another
-- claimer holds; a write transaction here holds them all already).
SELECT id
FROM jobs INDEXED BY sqlite_autoindex_jobs_1
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: queued_tenant_range
-- The lowest and the highest tenant with a queued job: two seeks of the (state, tenant) index (one
-- tenant's backlog has no turns to rank).
SELECT (SELECT min(tenant) FROM jobs WHERE state = 'queued'),
    (SELECT max(tenant) FROM jobs WHERE state = 'queued');

-- name: queued_tenants_of
-- The tenant of each queued job among `ids` (what the tenant cap and share count).
SELECT id, tenant
FROM jobs INDEXED BY sqlite_autoindex_jobs_1
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state = 'queued';

-- name: mark_running
-- A job claimed ahead of a free thread has begun running on one, under its fence of id, epoch and state
-- alone: the lease and the deadline are for the writes of its attempt, and a job whose lease ran out while
-- it waited reads as started all the same until it is taken again.
UPDATE jobs
SET running_since = :since
WHERE id = :job
  AND epoch = :epoch
  AND state = 'running';
