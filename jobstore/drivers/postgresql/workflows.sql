-- The postgresql driver's statements: workflows, jobs after jobs and batches (named blocks, as
-- jobstore/drivers/sqlfile.py reads them). What a job's ending moves is in the trigger of migration 0021.

-- name: dependencies_read
-- The jobs of one tenant among the ids a new job names in `after`, with their states, each locked against
-- an ending until the new job's edges are committed: an ending that comes first is read here as ended, one
-- that comes after finds the edges.
SELECT id, state FROM jobs WHERE tenant = %(tenant)s::text AND id = ANY(%(ids)s::text[]) FOR SHARE;

-- name: dependencies_add
-- One edge of a new job to a job it waits for; resolved when that one has already ended.
INSERT INTO job_dependencies (job_id, depends_on, resolved)
VALUES (%(job_id)s::text, %(depends_on)s::text, %(resolved)s::boolean);

-- name: waits_add
-- How many jobs a new job still waits for, and what it does when one of them does not succeed.
INSERT INTO job_waits (job_id, waiting, on_failure, released)
VALUES (%(job_id)s::text, %(waiting)s::int, %(on_failure)s::text, %(released)s::boolean);

-- name: waiting_for
-- The jobs each of the jobs given still waits for (edges not yet resolved).
SELECT job_id, depends_on FROM job_dependencies
WHERE job_id = ANY(%(ids)s::text[]) AND NOT resolved
ORDER BY job_id, depends_on;

-- name: dependencies_of
-- Every job each of the jobs given waits or waited for.
SELECT job_id, depends_on FROM job_dependencies
WHERE job_id = ANY(%(ids)s::text[])
ORDER BY job_id, depends_on;

-- name: dependents_of
-- The jobs that wait or waited for the job given.
SELECT job_id FROM job_dependencies WHERE depends_on = %(id)s::text ORDER BY job_id;

-- name: callbacks_of
-- The batch each of the jobs given is the callback of.
SELECT callback_job_id, id FROM batches WHERE callback_job_id = ANY(%(ids)s::text[]);

-- name: batch_insert
-- A new batch, unless its tenant + key is taken; its id if inserted. A concurrent accept of the same key
-- waits for the first one's commit, then inserts nothing (the caller reads the winner's batch).
INSERT INTO batches (id, tenant, owner, operation_key, fingerprint, state, total, remaining, callback_job_id,
    created_at, done_at)
VALUES (%(id)s::text, %(tenant)s::text, %(owner)s::text, %(operation_key)s::text, %(fingerprint)s::text,
    'running', %(total)s::int, %(total)s::int, NULL, %(created_at)s::float8, NULL)
ON CONFLICT (tenant, operation_key) DO NOTHING
RETURNING id;

-- name: batch_members_add
-- A member of a batch, at its place in the request.
INSERT INTO batch_members (job_id, batch_id, position)
VALUES (%(job_id)s::text, %(batch_id)s::text, %(position)s::int);

-- name: batch_callback_add
-- The callback job a batch's request named, inserted as a job once every member has ended.
INSERT INTO batch_callbacks (batch_id, id, owner, operation_key, fingerprint, kind, payload, max_attempts,
    priority, deadline_seconds, traceparent, queue)
VALUES (%(batch_id)s::text, %(id)s::text, %(owner)s::text, %(operation_key)s::text, %(fingerprint)s::text,
    %(kind)s::text, %(payload)s::text, %(max_attempts)s::int, %(priority)s::int, %(deadline_seconds)s::float8,
    %(traceparent)s::text, %(queue)s::text);

-- name: batch_count_ended
-- A new batch whose members ended at its accept (a dependency had failed): counted as ended.
UPDATE batches SET remaining = remaining - %(ended)s::int WHERE id = %(id)s::text;

-- name: batch_mark_done
-- A batch whose every member had ended at its accept: done at once, with its callback accepted beside it.
UPDATE batches SET state = 'done', done_at = %(now)s::float8, callback_job_id = %(callback_job_id)s::text
WHERE id = %(id)s::text AND state = 'running';

-- name: batch_get
-- A batch by id; of one tenant only when a tenant is given.
SELECT id, tenant, owner, operation_key, fingerprint, state, total, remaining, callback_job_id, created_at,
    done_at
FROM batches WHERE id = %(id)s::text AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text);

-- name: batch_by_key
-- The batch that holds a tenant + idempotency key.
SELECT id, tenant, owner, operation_key, fingerprint, state, total, remaining, callback_job_id, created_at,
    done_at
FROM batches WHERE tenant = %(tenant)s::text AND operation_key = %(operation_key)s::text;

-- name: batch_member_states
-- The members of the batches given, each batch's in the request's order, with their states.
SELECT m.batch_id, m.job_id, j.state FROM batch_members AS m JOIN jobs AS j ON j.id = m.job_id
WHERE m.batch_id = ANY(%(ids)s::text[]) ORDER BY m.batch_id, m.position;

-- name: batches_list
-- Batches newest first, of one tenant or all, in one state or any, after a cursor (created_at, id).
SELECT id, tenant, owner, operation_key, fingerprint, state, total, remaining, callback_job_id, created_at,
    done_at
FROM batches
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(before_at)s::float8 IS NULL OR created_at < %(before_at)s::float8
       OR (created_at = %(before_at)s::float8 AND id < %(before_id)s::text))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s::int;

-- name: batches_by_state
-- How many batches are in each state.
SELECT state, count(*) FROM batches GROUP BY state;

-- name: batch_of_member
-- The batch a job is a member of.
SELECT batch_id FROM batch_members WHERE job_id = %(id)s::text;

-- name: batches_delete_expired
-- The batches done before the retention's cutoff (their member rows with them; the member jobs go by their
-- own finish times). A member of a running batch is kept by the retention until the batch is done.
DELETE FROM batches WHERE state = 'done' AND done_at < %(cutoff)s::float8;
