-- The postgresql driver's statements: webhooks (named blocks, as jobstore/drivers/sqlfile.py reads them).

-- Endpoints and what operators do to them (jobstore.webhooks). An endpoint's row is read in the order of
-- the `Endpoint` fields, a delivery's in the order of the `WebhookDelivery` fields.

-- name: webhook_endpoint_add
INSERT INTO webhook_endpoints
    (id, tenant, url, events, secret, previous_secret, previous_secret_until, created_at, created_by)
VALUES (%(id)s, %(tenant)s, %(url)s, %(events)s, %(secret)s, NULL, NULL, %(now)s, %(actor)s);

-- name: webhook_endpoints_all
-- Every endpoint, oldest first.
SELECT id, tenant, url, events, secret, previous_secret, previous_secret_until, created_at, created_by
FROM webhook_endpoints
ORDER BY created_at, id;

-- name: webhook_endpoints_of_tenant
-- A tenant's endpoints, oldest first.
SELECT id, tenant, url, events, secret, previous_secret, previous_secret_until, created_at, created_by
FROM webhook_endpoints
WHERE tenant = %(tenant)s
ORDER BY created_at, id;

-- name: webhook_endpoint
SELECT id, tenant, url, events, secret, previous_secret, previous_secret_until, created_at, created_by
FROM webhook_endpoints
WHERE id = %(id)s;

-- name: webhook_endpoints_of
-- The endpoints among the ids given that still exist.
SELECT id, tenant, url, events, secret, previous_secret, previous_secret_until, created_at, created_by
FROM webhook_endpoints
WHERE id = ANY(%(ids)s::text[]);

-- name: webhook_endpoint_remove_attempts
-- The attempts at the endpoint's deliveries (foreign keys cascade too; said here so no store setting
-- decides it).
DELETE FROM webhook_attempts
WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE endpoint_id = %(id)s);

-- name: webhook_endpoint_remove_deliveries
DELETE FROM webhook_deliveries WHERE endpoint_id = %(id)s;

-- name: webhook_endpoint_remove
DELETE FROM webhook_endpoints WHERE id = %(id)s;

-- name: webhook_endpoint_rotate
-- A new sealed secret for the endpoint. With `keep_previous` the current one moves to `previous_secret`
-- and signs until `previous_until`; without, no previous secret is kept (one still in its grace is
-- dropped either way). Returns the endpoint as it is now; no row when there is none.
UPDATE webhook_endpoints
SET previous_secret = CASE WHEN %(keep_previous)s THEN secret END,
    previous_secret_until = %(previous_until)s,
    secret = %(secret)s
WHERE id = %(id)s
RETURNING id, tenant, url, events, secret, previous_secret, previous_secret_until, created_at, created_by;

-- name: webhook_action_record
-- What an operator did to an endpoint or one of its deliveries, who and when.
INSERT INTO webhook_actions (endpoint_id, delivery_id, action, actor, at)
VALUES (%(endpoint_id)s, %(delivery_id)s, %(action)s, %(actor)s, %(now)s);

-- name: webhook_deliveries_newest
-- The delivery log: the newest deliveries of every endpoint.
SELECT id, endpoint_id, tenant, job_id, event, occurred_at, created_at, state, attempts, next_attempt_at,
    last_status, last_error, delivered_at, replayed_at
FROM webhook_deliveries
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: webhook_deliveries_newest_of_endpoint
SELECT id, endpoint_id, tenant, job_id, event, occurred_at, created_at, state, attempts, next_attempt_at,
    last_status, last_error, delivered_at, replayed_at
FROM webhook_deliveries
WHERE endpoint_id = %(endpoint_id)s
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: webhook_delivery
SELECT id, endpoint_id, tenant, job_id, event, occurred_at, created_at, state, attempts, next_attempt_at,
    last_status, last_error, delivered_at, replayed_at
FROM webhook_deliveries
WHERE id = %(id)s;

-- name: webhook_delivery_replay
-- A delivered or failed delivery pending again, due now, with a fresh retry window. Returns it as it is
-- now; no row when there is none or it is still pending.
UPDATE webhook_deliveries
SET state = 'pending', next_attempt_at = %(now)s, replayed_at = %(now)s, delivered_at = NULL
WHERE id = %(id)s AND state IN ('delivered', 'failed')
RETURNING id, endpoint_id, tenant, job_id, event, occurred_at, created_at, state, attempts, next_attempt_at,
    last_status, last_error, delivered_at, replayed_at;

-- name: webhook_attempts_of
-- The attempts at the deliveries given, each delivery's oldest first.
SELECT delivery_id, attempt, at, status_code, latency_ms, error
FROM webhook_attempts
WHERE delivery_id = ANY(%(ids)s::text[])
ORDER BY delivery_id, attempt;

-- The relay's side (jobstore.webhook_deliveries).

-- name: webhook_deliveries_due
-- Up to `limit` pending deliveries due at `now`, in turns: each endpoint's numbered by when they are due
-- (`turn`), then each tenant's by those turns (`tenant_turn`); at most `per_endpoint` of one endpoint and
-- `per_tenant` of one tenant, none of the endpoints, tenants and deliveries to skip. The condition on the
-- state is written as the partial index of due deliveries (ix_webhook_deliveries_due_next_attempt_at)
-- states it, a literal, so that the index serves the read.
WITH by_endpoint AS (
    SELECT *, row_number() OVER (PARTITION BY endpoint_id ORDER BY next_attempt_at, id) AS turn
    FROM webhook_deliveries
    WHERE state = 'pending'
      AND next_attempt_at <= %(now)s
      AND endpoint_id <> ALL(%(skip_endpoints)s::text[])
      AND tenant <> ALL(%(skip_tenants)s::text[])
      AND id <> ALL(%(skip_ids)s::text[])
), by_tenant AS (
    SELECT *, row_number() OVER (PARTITION BY tenant ORDER BY turn, next_attempt_at, id) AS tenant_turn
    FROM by_endpoint
    WHERE turn <= %(per_endpoint)s
)
SELECT id, endpoint_id, tenant, job_id, event, occurred_at, created_at, state, attempts, next_attempt_at,
    last_status, last_error, delivered_at, replayed_at
FROM by_tenant
WHERE tenant_turn <= %(per_tenant)s
ORDER BY tenant_turn, next_attempt_at, id
LIMIT %(limit)s;

-- name: webhook_delivery_attempted
-- What an attempt got and what was decided, guarded by the delivery still being pending with the attempt
-- count the sender read (`attempts_read`). No row when another writer changed it meanwhile.
UPDATE webhook_deliveries
SET state = %(state)s,
    attempts = %(attempt)s,
    next_attempt_at = %(next_attempt_at)s,
    last_status = %(status_code)s,
    last_error = %(error)s,
    delivered_at = %(delivered_at)s
WHERE id = %(id)s AND state = 'pending' AND attempts = %(attempts_read)s
RETURNING id;

-- name: webhook_attempt_add
-- An attempt's log row.
INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, latency_ms, error)
VALUES (%(id)s, %(attempt)s, %(at)s, %(status_code)s, %(latency_ms)s, %(error)s);

-- name: webhook_pending_ages
-- For each endpoint with pending deliveries, when its oldest one was written or replayed.
SELECT endpoint_id, min(COALESCE(replayed_at, created_at))
FROM webhook_deliveries
WHERE state = 'pending'
GROUP BY endpoint_id;
