-- The postgresql driver's statements: outbox (named blocks, as jobstore/drivers/sqlfile.py reads them).

-- name: outbox_add
-- A delivery of a job written earlier, due at `available_at`; its tenant and priority come from the job's
-- row (the relay reads the due rows by them). The job's id is one parameter in three places, of one type.
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
VALUES (
    %(job_id)s::varchar, %(created_at)s, %(available_at)s, 0,
    (SELECT tenant FROM jobs WHERE id = %(job_id)s::varchar),
    (SELECT priority FROM jobs WHERE id = %(job_id)s::varchar)
);

-- name: outbox_drop_pending
-- The unpublished rows of a job that no longer needs a delivery (claimed directly, or cancelled).
DELETE FROM outbox
WHERE job_id = %(job_id)s AND published_at IS NULL;

-- name: outbox_read_due
-- :prepared
-- The relay's read in one statement (`leader.due_at_once`), committed by itself: the walk of
-- `outbox_due_in_order` (locking nothing, leaving out the rows the leader has published and not yet
-- written back), the rows' trace context, queue and kind, and the next due time. It reads nothing
-- (`serves` false) when more rows are due than the read takes and they belong to several tenants: that read
-- needs the ranking of `outbox_due_by_turns` (`leader.due`). The rows left out are a hashed `NOT IN`:
-- `id <> ALL(...)` compared each row walked with every one of them (a relay's window holds up to 1,000), a
-- cost that grew with the backlog and more once the prepared statement's generic plan took over. Each
-- row's job is looked up once, by its primary key, for all three of its columns rather than by a subquery
-- per column (`LIMIT 1` keeps that lookup an index probe per row: a plain join may be planned as a hash
-- join that reads the whole jobs table).
WITH due AS (
    SELECT id, job_id, tenant, priority FROM outbox
    WHERE published_at IS NULL AND available_at <= %(now)s
      AND id NOT IN (SELECT unnest(CAST(%(exclude)s AS bigint[])))
    ORDER BY priority, id
    LIMIT %(walk)s
), walk AS (
    SELECT count(*) <= %(limit)s
        OR (SELECT min(tenant) FROM outbox WHERE published_at IS NULL)
            = (SELECT max(tenant) FROM outbox WHERE published_at IS NULL) AS serves
    FROM due
), chosen AS (
    SELECT id, job_id, priority, tenant FROM due WHERE (SELECT serves FROM walk) ORDER BY priority, id
    LIMIT %(limit)s
)
SELECT walk.serves,
    (SELECT min(available_at) FROM outbox WHERE published_at IS NULL AND available_at > %(now)s) AS next_due,
    chosen.id, chosen.job_id, chosen.priority, chosen.tenant,
    job.traceparent, job.queue, job.kind
FROM walk LEFT JOIN chosen ON true
LEFT JOIN LATERAL (
    SELECT traceparent, queue, kind FROM jobs WHERE jobs.id = chosen.job_id LIMIT 1
) AS job ON true
ORDER BY chosen.priority, chosen.id;

-- name: outbox_due_in_order
-- The due rows in the order a read takes them while no more are due than it takes: the oldest walk of the
-- unpublished rows' (priority, id) index. Planned at every run, for its values: behind a backlog the best
-- plan depends on them (`docs/scaling.md`).
SELECT id, tenant
FROM outbox
WHERE published_at IS NULL AND available_at + 0 <= %(now)s
ORDER BY priority, id
LIMIT %(limit)s;

-- name: outbox_due_by_turns
-- The due rows behind a backlog, by priority, then a turn per tenant, then age. A row's turn is its rank
-- among its tenant's due rows of that priority, plus the jobs its tenant runs now (ranks alone start over
-- at every read: the tenant whose first row is oldest would win every small one).
SELECT ranked.id, ranked.tenant
FROM (
    SELECT outbox.id, outbox.tenant, outbox.priority,
        row_number() OVER (PARTITION BY outbox.priority, outbox.tenant ORDER BY outbox.id)
            + coalesce(running.running, 0) AS turn
    FROM outbox
    LEFT JOIN (
        SELECT tenant, count(*) AS running FROM jobs WHERE state = 'running' GROUP BY tenant
    ) AS running ON running.tenant = outbox.tenant
    WHERE outbox.published_at IS NULL AND outbox.available_at <= %(now)s
) AS ranked
ORDER BY ranked.priority, ranked.turn, ranked.id
LIMIT %(limit)s;

-- name: outbox_tenant_range
-- The lowest and the highest tenant of the unpublished rows: two seeks of their tenant index (one tenant's
-- backlog has no turns to rank).
SELECT
    (SELECT min(tenant) FROM outbox WHERE published_at IS NULL),
    (SELECT max(tenant) FROM outbox WHERE published_at IS NULL);

-- name: outbox_rows_chosen
-- The rows a read in steps chose, by id, with their job's trace context, queue and kind.
SELECT outbox.id, outbox.job_id, outbox.priority, outbox.tenant, jobs.traceparent, jobs.queue, jobs.kind
FROM outbox
JOIN jobs ON jobs.id = outbox.job_id
WHERE outbox.id = ANY(%(ids)s::int[]);

-- name: outbox_mark_published
-- Confirmed rows marked published while the leader's token holds the role, returning each job's id,
-- tenant, kind and trace context for its `published` event. Planned at every run: its generic plan walks
-- the unpublished rows (`docs/scaling.md`).
UPDATE outbox
SET published_at = %(now)s, publish_attempts = publish_attempts + 1
WHERE id = ANY(%(ids)s::int[])
  AND published_at IS NULL
  AND EXISTS (
      SELECT 1 FROM relay_role WHERE name = %(name)s AND token = %(token)s AND expires_at > %(now)s
  )
RETURNING job_id,
    (SELECT tenant FROM jobs WHERE jobs.id = outbox.job_id),
    (SELECT kind FROM jobs WHERE jobs.id = outbox.job_id),
    (SELECT traceparent FROM jobs WHERE jobs.id = outbox.job_id);

-- name: outbox_hold_back
-- Rows the broker refused come due again later, while the leader's token holds the role.
UPDATE outbox
SET available_at = %(retry_at)s, publish_attempts = publish_attempts + 1
WHERE id = ANY(%(ids)s::int[])
  AND published_at IS NULL
  AND EXISTS (
      SELECT 1 FROM relay_role WHERE name = %(name)s AND token = %(token)s AND expires_at > %(now)s
  )
RETURNING id;

-- name: outbox_prune_published
-- Rows published before a time, up to a number of them.
DELETE FROM outbox
WHERE id IN (SELECT id FROM outbox WHERE published_at < %(older_than)s LIMIT %(limit)s)
RETURNING id;

-- name: outbox_earliest_unpublished
SELECT min(available_at) FROM outbox WHERE published_at IS NULL;

-- name: outbox_next_due
-- When the earliest unpublished row not due yet comes due.
SELECT min(available_at) FROM outbox WHERE published_at IS NULL AND available_at > %(now)s;

-- name: outbox_backlog
-- The unpublished rows that are due: how many, and when the oldest came due.
SELECT count(*), min(available_at) FROM outbox WHERE published_at IS NULL AND available_at <= %(now)s;
