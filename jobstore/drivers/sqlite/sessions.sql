-- The sqlite driver's statements: sessions (named blocks, as jobstore/drivers/sqlfile.py reads them).

-- name: session_prune
-- Sessions that ended or expired more than a day before.
DELETE FROM dashboard_sessions WHERE expires_at < :before;

-- name: session_start
INSERT INTO dashboard_sessions (id, tenant, "user", created_at, expires_at, ended_at)
VALUES (:id, :tenant, :user, :now, :expires_at, NULL);

-- name: session_holder
-- The open session a secret's HMAC names.
SELECT id, tenant, "user", expires_at
FROM dashboard_sessions
WHERE id = :id AND ended_at IS NULL AND expires_at > :now;

-- name: session_end
UPDATE dashboard_sessions SET ended_at = :now
WHERE id = :id AND ended_at IS NULL
RETURNING id;
