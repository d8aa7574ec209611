-- The postgresql driver's statements: completion (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- Every write of the worker holding a job is one guarded UPDATE under the fence: the job id, its epoch, the
-- job still running, its lease alive and its deadline not passed. No row changed means the writer lost.

-- name: complete_many
-- :prepared
-- Completions, one array per column (a job, its epoch, its attempt, its output): each job under its own
-- fence, and the attempt it ends, in one statement. The job ends `succeeded` with the result pointer bound
-- to the attempt of its epoch, unless a cancel request was committed first and no external effect of this
-- epoch had started: then it ends `cancelled`, with no result (decisions.decide_completion). A row per job
-- completed: its new state, then the facts of its event.
WITH finishing AS (
    SELECT job_id, epoch, attempt_id, output
    FROM unnest(%(jobs)s::text[], %(epochs)s::integer[], %(attempts)s::text[], %(outputs)s::text[])
        AS finishing (job_id, epoch, attempt_id, output)
), completed AS (
    UPDATE jobs
    SET state = CASE
            WHEN jobs.cancel_requested = true
                 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)
            THEN 'cancelled' ELSE 'succeeded' END,
        result_attempt_id = CASE
            WHEN jobs.cancel_requested = true
                 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)
            THEN NULL
            ELSE (SELECT attempts.id FROM attempts
                  WHERE attempts.job_id = jobs.id AND attempts.epoch = jobs.epoch) END,
        error_code = CASE
            WHEN jobs.cancel_requested = true
                 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)
            THEN 'cancelled' ELSE NULL END,
        error_message = CASE
            WHEN jobs.cancel_requested = true
                 AND NOT (jobs.external_epoch IS NOT NULL AND jobs.external_epoch = jobs.epoch)
            THEN 'cancelled before the result was committed' ELSE NULL END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        updated_at = %(now)s::float8,
        finished_at = %(now)s::float8
    FROM finishing
    WHERE jobs.id = finishing.job_id
      AND jobs.epoch = finishing.epoch
      AND jobs.state = 'running'
      AND jobs.lease_expires_at > %(now)s::float8
      AND (jobs.deadline_at IS NULL OR jobs.deadline_at > %(now)s::float8)
    RETURNING jobs.state, jobs.id, jobs.tenant, jobs.kind, jobs.epoch, jobs.attempts, jobs.traceparent
), ended AS (
    UPDATE attempts
    SET outcome = completed.state,
        ended_at = %(now)s::float8,
        output = finishing.output,
        error_code = NULL,
        error_message = NULL
    FROM finishing, completed
    WHERE attempts.id = finishing.attempt_id
      AND completed.id = finishing.job_id
)
SELECT state, id, tenant, kind, epoch, attempts, traceparent
FROM completed;

-- name: renew_lease
-- The lease extended to `lease_until`; returns whether a cancel has been requested.
UPDATE jobs
SET lease_expires_at = %(lease_until)s, updated_at = %(now)s
WHERE id = %(id)s
  AND epoch = %(epoch)s
  AND state = 'running'
  AND lease_expires_at > %(now)s
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
RETURNING cancel_requested;

-- name: mark_external_started
-- Before an external call: its effect may happen from here on (a lost lease then ends the job `unknown`).
UPDATE jobs
SET external_epoch = epoch, updated_at = %(now)s
WHERE id = %(id)s
  AND epoch = %(epoch)s
  AND state = 'running'
  AND lease_expires_at > %(now)s
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
RETURNING id;

-- name: mark_attempt_external
UPDATE attempts
SET external_started_at = %(now)s
WHERE id = %(attempt)s;

-- name: save_checkpoint
-- The latest safe progress (JSON text); returns the facts of the job's event.
UPDATE jobs
SET checkpoint = %(checkpoint)s, checkpoint_epoch = epoch, updated_at = %(now)s
WHERE id = %(id)s
  AND epoch = %(epoch)s
  AND state = 'running'
  AND lease_expires_at > %(now)s
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
RETURNING id, tenant, kind, epoch, attempts, traceparent;

-- name: fenced_job
-- The whole job row under its fence, locked until the transaction ends: an attempt that raised reads what
-- its failure is decided from, and no other write moves the job meanwhile.
SELECT id, tenant, owner, operation_key, fingerprint, kind, payload, state, epoch, attempts, max_attempts,
    lease_owner, lease_expires_at, available_at, run_at, priority, deadline_at, cancel_requested,
    external_epoch, checkpoint, checkpoint_epoch, result_attempt_id, error_code, error_message, created_at,
    updated_at, started_at, finished_at, traceparent, schedule_name, concurrency_key, held_by, running_since,
    queue, snoozes
FROM jobs
WHERE id = %(id)s
  AND epoch = %(epoch)s
  AND state = 'running'
  AND lease_expires_at > %(now)s
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
FOR UPDATE;

-- name: storage_faults
-- How many of a job's ended attempts met a fault of the worker's storage (`code`).
SELECT count(*)
FROM attempts
WHERE job_id = %(job)s
  AND error_code = %(code)s;

-- name: fail_job
-- A failed attempt's decision applied under the fence: `state` with its error; a retry (`available_at`
-- given) comes due then and gives back `refund` attempts of the budget, any other state is finished at
-- `finished_at`.
UPDATE jobs
SET state = %(state)s,
    error_code = %(code)s,
    error_message = %(message)s,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = %(now)s,
    available_at = COALESCE(%(available_at)s::float8, available_at),
    attempts = attempts - %(refund)s,
    finished_at = COALESCE(%(finished_at)s::float8, finished_at)
WHERE id = %(id)s
  AND epoch = %(epoch)s
  AND state = 'running'
  AND lease_expires_at > %(now)s
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
RETURNING id;

-- name: snooze_job
-- The kind snoozed its job (`outbox_bridge.Snooze`), under the fence: `queued`, due at `available_at`, the
-- attempt given back to the budget and the snooze counted. (A snooze past MAX_SNOOZES, or one with a cancel
-- request waiting, is a failed attempt instead: `fail_job`.) Returns the facts of the job's event.
UPDATE jobs
SET state = 'queued',
    available_at = %(available_at)s::float8,
    attempts = attempts - 1,
    snoozes = snoozes + 1,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = %(now)s
WHERE id = %(id)s
  AND epoch = %(epoch)s
  AND state = 'running'
  AND lease_expires_at > %(now)s
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
RETURNING id, tenant, kind, epoch, attempts, traceparent;

-- name: release_job
-- A job given back unfinished on a clean shutdown: `queued`, due now, its attempt not counted; `cancelled`
-- instead when a cancel request was committed. Refused once an external effect of this epoch started.
-- Returns the new state, then the facts of the job's event.
UPDATE jobs
SET state = CASE WHEN cancel_requested = true THEN 'cancelled' ELSE 'queued' END,
    attempts = attempts - 1,
    available_at = %(now)s,
    error_code = CASE WHEN cancel_requested = true THEN 'cancelled' ELSE error_code END,
    error_message = CASE
        WHEN cancel_requested = true THEN 'cancelled before it could finish' ELSE error_message END,
    finished_at = CASE WHEN cancel_requested = true THEN %(now)s::float8 ELSE NULL END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = %(now)s
WHERE id = %(id)s
  AND epoch = %(epoch)s
  AND state = 'running'
  AND lease_expires_at > %(now)s
  AND (deadline_at IS NULL OR deadline_at > %(now)s)
  AND (external_epoch IS NULL OR external_epoch <> %(epoch)s)
RETURNING state, id, tenant, kind, epoch, attempts, traceparent;

-- name: end_attempt
-- An attempt ended, once, with the outcome of the write that ended it.
UPDATE attempts
SET outcome = %(outcome)s,
    ended_at = %(now)s,
    output = %(output)s,
    error_code = %(code)s,
    error_message = %(message)s
WHERE id = %(attempt)s;

-- name: lose_running_attempts
-- The running attempt of each job `jobs` names ends `lost`: its worker let the lease run out, and the job
-- was claimed again or settled by the sweeper (then `code` and `message` say why).
UPDATE attempts
SET outcome = 'lost',
    ended_at = %(now)s,
    error_code = %(code)s,
    error_message = %(message)s
WHERE job_id = ANY(%(jobs)s::text[])
  AND outcome = 'running';
