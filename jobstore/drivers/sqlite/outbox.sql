-- The sqlite driver's statements: outbox (named blocks, as jobstore/drivers/sqlfile.py reads them).
--
-- Without planner statistics SQLite takes `published_at IS NULL` on an indexed column for more selective
-- than a list of ids, so the statements by id name how to look their rows up (`NOT INDEXED`: by rowid), and
-- the relay's walks the index they walk in order (`INDEXED BY`): the module docstring of the driver says
-- why, and `tests/integration/test_sqlite_plans.py` checks each plan.

-- name: outbox_add
-- A delivery of a job written earlier, due at `available_at`; its tenant and priority come from the job's
-- row (the relay reads the due rows by them).
INSERT INTO outbox (job_id, created_at, available_at, publish_attempts, tenant, priority)
VALUES (
    :job_id, :created_at, :available_at, 0,
    (SELECT tenant FROM jobs WHERE id = :job_id),
    (SELECT priority FROM jobs WHERE id = :job_id)
);

-- name: outbox_drop_pending
-- The unpublished rows of a job that no longer needs a delivery (claimed directly, or cancelled).
DELETE FROM outbox INDEXED BY ix_outbox_job_id
WHERE job_id = :job_id AND published_at IS NULL;

-- name: outbox_read_due
-- The relay's read in one statement (`leader.due_at_once`): the walk of `outbox_due_in_order`, leaving
-- out the rows given (published, not yet written back), each row's trace context, queue and kind, and the
-- next due time. It reads nothing (`serves` false) when more rows are due than the read takes and they
-- belong to several tenants: that read needs the ranking of `outbox_due_by_turns`. (The relay reads in steps
-- on SQLite, in a read transaction that takes no write lock: `Driver.reads_due_in_one_statement`.)
WITH due AS (
    SELECT id, job_id, tenant, priority
    FROM outbox INDEXED BY ix_outbox_due_priority_id
    WHERE published_at IS NULL AND available_at + 0 <= :now
      AND id NOT IN (SELECT value FROM json_each(:exclude))
    ORDER BY priority, id
    LIMIT :walk
), walk AS (
    SELECT count(*) <= :limit
        OR (SELECT min(tenant) FROM outbox INDEXED BY ix_outbox_due_tenant WHERE published_at IS NULL)
            = (SELECT max(tenant) FROM outbox INDEXED BY ix_outbox_due_tenant WHERE published_at IS NULL)
        AS serves
    FROM due
), chosen AS (
    SELECT id, job_id, priority, tenant FROM due WHERE (SELECT serves FROM walk) ORDER BY priority, id
    LIMIT :limit
)
SELECT walk.serves,
    (SELECT min(available_at) FROM outbox WHERE published_at IS NULL AND available_at > :now) AS next_due,
    chosen.id, chosen.job_id, chosen.priority, chosen.tenant,
    (SELECT traceparent FROM jobs WHERE jobs.id = chosen.job_id) AS traceparent,
    (SELECT queue FROM jobs WHERE jobs.id = chosen.job_id) AS queue,
    (SELECT kind FROM jobs WHERE jobs.id = chosen.job_id) AS kind
FROM walk LEFT JOIN chosen ON true
ORDER BY chosen.priority, chosen.id;

-- name: outbox_due_in_order
-- The due rows in the order a read takes them while no more are due than it takes: the oldest walk of the
-- unpublished rows' (priority, id) index. (`available_at + 0`: so that SQLite walks that index in order,
-- not the range of the (published_at, available_at) one followed by a sort of what it finds.)
SELECT id, tenant
FROM outbox INDEXED BY ix_outbox_due_priority_id
WHERE published_at IS NULL AND available_at + 0 <= :now
ORDER BY priority, id
LIMIT :limit;

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
    WHERE outbox.published_at IS NULL AND outbox.available_at <= :now
) AS ranked
ORDER BY ranked.priority, ranked.turn, ranked.id
LIMIT :limit;

-- name: outbox_tenant_range
-- The lowest and the highest tenant of the unpublished rows: two seeks of their tenant index (one tenant's
-- backlog has no turns to rank).
SELECT
    (SELECT min(tenant) FROM outbox INDEXED BY ix_outbox_due_tenant WHERE published_at IS NULL),
    (SELECT max(tenant) FROM outbox INDEXED BY ix_outbox_due_tenant WHERE published_at IS NULL);

-- name: outbox_rows_chosen
-- The rows a read in steps chose, by id, with their job's trace context, queue and kind.
SELECT outbox.id, outbox.job_id, outbox.priority, outbox.tenant, jobs.traceparent, jobs.queue, jobs.kind
FROM outbox
JOIN jobs ON jobs.id = outbox.job_id
WHERE outbox.id IN (SELECT value FROM json_each(:ids));

-- name: outbox_mark_published
-- Confirmed rows marked published while the leader's token holds the role, by their rowids; each marked
-- row's job id (its event's facts are read after it by job id: a correlated subquery in SQLite's RETURNING
-- cannot use an index, and 3.40 scans `jobs` for every row returned).
UPDATE outbox NOT INDEXED
SET published_at = :now, publish_attempts = publish_attempts + 1
WHERE id IN (SELECT value FROM json_each(:ids))
  AND published_at IS NULL
  AND EXISTS (SELECT 1 FROM relay_role WHERE name = :name AND token = :token AND expires_at > :now)
RETURNING job_id;

-- name: outbox_event_facts
-- The tenant, kind and trace context of each job given, for its `published` event.
SELECT id, tenant, kind, traceparent
FROM jobs
WHERE id IN (SELECT value FROM json_each(:job_ids));

-- name: outbox_hold_back
-- Rows the broker refused come due again later, while the leader's token holds the role, by their rowids.
UPDATE outbox NOT INDEXED
SET available_at = :retry_at, publish_attempts = publish_attempts + 1
WHERE id IN (SELECT value FROM json_each(:ids))
  AND published_at IS NULL
  AND EXISTS (SELECT 1 FROM relay_role WHERE name = :name AND token = :token AND expires_at > :now)
RETURNING id;

-- name: outbox_prune_published
-- Rows published before a time, up to a number of them.
DELETE FROM outbox
WHERE id IN (SELECT id FROM outbox WHERE published_at < :older_than LIMIT :limit)
RETURNING id;

-- name: outbox_earliest_unpublished
SELECT min(available_at) FROM outbox WHERE published_at IS NULL;

-- name: outbox_next_due
-- When the earliest unpublished row not due yet comes due.
SELECT min(available_at) FROM outbox WHERE published_at IS NULL AND available_at > :now;

-- name: outbox_backlog
-- The unpublished rows that are due: how many, and when the oldest came due.
SELECT count(*), min(available_at) FROM outbox WHERE published_at IS NULL AND available_at <= :now;
